"""Ready-made runs a new user launches in one click (Launch page) or by name (the CLI).

`quick-start` is the demo world, the 3 -> 2 -> 0 exemplar curriculum and settings
chosen by experiment (bench/icrl_effect.py; the tries and their figures in docs/engine.md,
"The ICRL effect") so that on the embedded default (2 CPU cores, SmolLM2-135M) the run is
short, with its zero-shot evaluation, base against trained, on the demo pack's held-out
questions, which training never sees (how long it takes: the Launch page's estimate; no
result of it with these settings is stored). Rollouts sample at
temperature 0.5, not method.md's 1.0: at 1.0 the small model writes noise after the
first search result. Everything else keeps method.md's defaults (the reward included).

`search-tour` is the same on the demo's short-span questions (one passage holds a date, a
count or a name), with the curriculum and learning rate that formed the calculator habit;
it is judged on the held-out span questions and the demo's held-out ones. `calculator` is
guided ICRL on the arithmetic pack, the quick start the README and the Home page recommend
(`RECOMMENDED`); `math` is the same on the math pack with the python tool. Each preset says
beside it what it did when it was measured (`expectation`, from its stored results), and
the Launch page sets its time estimate beside the time it took then (`time_beside_measured`):
the step expected with answers as long as the measured ones (`expected_time`), beside the
measured step.
"""

from __future__ import annotations

import copy
import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from studio import demo as demo_files
from studio.method.tags import CALCULATOR_TOOL, PYTHON_TOOL, SEARCH_TOOL
from studio.method.tools import DEFAULT_TOOL_NAMES, using_words
from studio.run_config import RunConfig
from studio.services import calibrations, demo
from studio.services.access import Actor
from studio.services.errors import InvalidInput
from studio.services.estimates import TypicalResponse, duration_words, estimate_run
from studio.settings import Settings

QUICK_START = "quick-start"
SEARCH_TOUR = "search-tour"
CALCULATOR = "calculator"
MATH = "math"
RECOMMENDED = CALCULATOR
"""The ready-made run the README and the Home page call the quick start, and the one the
Launch page offers first: measured on 3 seeds, and the clearest of them to learn its tool."""

RUN_PRESETS: dict[str, dict] = {
    QUICK_START: {
        "name": "quick-start",
        "data": {"corpus": demo.DEMO_NAME, "train": demo.DEMO_NAME,
                 "eval": [demo.HELDOUT_NAME], "exemplars": demo.DEMO_NAME},
        "curriculum": {"stages": [{"exemplars": 3, "steps": 6}, {"exemplars": 2, "steps": 6},
                                  {"exemplars": 0, "steps": 8}]},
        "prompt": {"layout": "chat", "assistant_prefix": "<think>"},
        "grpo": {"batch_size": 2, "group_size": 4, "lr": 5.0e-4, "warmup_ratio": 0.1,
                 "temperature": 0.5,
                 "max_turns": 2, "max_turn_tokens": 64, "max_response_tokens": 640,
                 "max_obs_tokens": 200},
        "lora": {"rank": 16, "alpha": 32},
        "engine": {"checkpoint_every": 8, "evaluate_at_end": True},
        "seed": 0,
    },
}
RUN_PRESETS[SEARCH_TOUR] = {
    **copy.deepcopy(RUN_PRESETS[QUICK_START]), "name": SEARCH_TOUR,
    "tools": [SEARCH_TOOL.name],
    "data": {"corpus": demo.DEMO_NAME, "train": demo.SPAN_NAME,
             "eval": [demo.SPAN_HELDOUT_NAME, demo.HELDOUT_NAME], "exemplars": demo.DEMO_NAME},
    "curriculum": {"stages": [{"exemplars": 3, "steps": 6}, {"exemplars": 2, "steps": 6},
                              {"exemplars": 1, "steps": 10}]},
    "guidance": {"mode": "mixed", "share": 0.5, "when": "all-failed"}}
"""quick-start on the short-span questions with the calculator preset's guided ICRL: half of
each group sampled with the stage's exemplars as a hint for a question the model gets wrong
without them, every answer learning on the prompt without exemplars (docs/engine.md,
"Guided ICRL on the search span pack")."""
RUN_PRESETS[SEARCH_TOUR]["grpo"]["lr"] = 2.0e-4
RUN_PRESETS[CALCULATOR] = {
    "name": CALCULATOR, "tools": [CALCULATOR_TOOL.name],
    "data": {"train": demo.CALC_NAME, "eval": [demo.CALC_HELDOUT_NAME],
             "exemplars": demo.CALC_NAME},
    "curriculum": {"stages": [{"exemplars": 3, "steps": 6}, {"exemplars": 2, "steps": 6},
                              {"exemplars": 1, "steps": 10}]},
    "guidance": {"mode": "mixed", "share": 0.5, "when": "all-failed"},
    "prompt": {"layout": "chat", "assistant_prefix": "<think>"},
    "grpo": {"batch_size": 2, "group_size": 4, "lr": 2.0e-4, "warmup_ratio": 0.1,
             "temperature": 0.5, "max_turns": 2, "max_turn_tokens": 48,
             "max_response_tokens": 256, "max_obs_tokens": 200},
    "reward": {"answer_match": "numeric"},
    "lora": {"rank": 16, "alpha": 32},
    "engine": {"checkpoint_every": 8, "evaluate_at_end": True},
    "seed": 0,
}
"""Arithmetic with the calculator (the arithmetic pack, `studio demo --calc`): guided ICRL
(studio.method.guidance), half of each group sampled with the stage's exemplars as a hint
for the questions the model gets wrong without them, every answer learning on the prompt
without exemplars."""

RUN_PRESETS[MATH] = {
    **copy.deepcopy(RUN_PRESETS[CALCULATOR]), "name": MATH, "tools": [PYTHON_TOOL.name],
    "data": {"train": demo.MATH_NAME, "eval": [demo.MATH_HELDOUT_NAME],
             "exemplars": demo.MATH_NAME}}
"""Word problems with the python tool (the math pack, `studio demo --math`): the calculator
preset's guided ICRL with room for a short program in a turn (160 tokens, as the math pack's
bench run had: docs/engine.md, "The python tool on the math pack"). Not measured with these
settings yet."""
RUN_PRESETS[MATH]["grpo"].update(max_turn_tokens=160, max_response_tokens=512)


@dataclass(frozen=True)
class Pack:
    """A demo pack a preset trains on (`studio.services.demo`), stored when it launches."""

    needs: str  # what it is, in words, and anything else its preset needs
    stored: Callable[[Settings], bool]
    load: Callable[[Settings, Actor], dict]  # stores what is missing of it


PACK_DATA = {
    "demo": Pack("the demo pack (a corpus of made-up documents, indexed as the run launches, "
                 "its QA sets and 3 exemplars)", demo.demo_pack_stored,
                 lambda settings, actor: demo.load_demo_pack(settings, actor, index_now=True)),
    "calc": Pack("the arithmetic pack (QA sets calc and calc-heldout, 3 exemplars; no corpus)",
                 demo.calc_pack_stored, demo.load_calc_pack),
    "math": Pack("the math pack (QA sets math and math-heldout, 3 exemplars; no corpus) and "
                 "the python tool's sandbox, which needs bubblewrap on the worker's machine "
                 "(docs/sandbox.md)", demo.math_pack_stored, demo.load_math_pack),
}
PACKS = {QUICK_START: "demo", SEARCH_TOUR: "demo", CALCULATOR: "calc", MATH: "math"}
"""The demo pack each preset trains on (`PACK_DATA`), stored when it launches."""


def preset_steps(name: str) -> int:
    """How many training steps preset `name` takes."""
    return sum(stage["steps"] for stage in RUN_PRESETS[name]["curriculum"]["stages"])


DESCRIPTIONS = {
    QUICK_START: f"the demo world, 3 -> 2 -> 0 exemplars, {preset_steps(QUICK_START)} small "
                 "steps with LoRA; ends with base against trained on the demo pack's held-out "
                 "questions",
    SEARCH_TOUR: f"search on the demo world's short-span questions (a date, a count or a name "
                 f"in one passage), exemplars 3 -> 2 -> 1 shown as a hint to half the answers "
                 f"of a question the model gets wrong, {preset_steps(SEARCH_TOUR)} small steps "
                 "with LoRA; ends with base against trained on the held-out span and demo "
                 "questions",
    CALCULATOR: f"arithmetic with a calculator (the arithmetic pack), exemplars 3 -> 2 -> 1 "
                f"shown as a hint to half the answers of a question the model gets wrong, "
                f"{preset_steps(CALCULATOR)} small steps with LoRA; ends with base against "
                "trained on the pack's held-out questions",
    MATH: f"word problems with short Python programs run in a sandbox (the math pack), "
          f"exemplars 3 -> 2 -> 1 shown as a hint as in calculator, {preset_steps(MATH)} small "
          "steps with LoRA; ends with base against trained on the pack's held-out questions",
}


def preset_config(name: str, settings: Settings) -> dict:
    """Preset `name`'s run config (a dict the run schema takes) for the studio's default model
    (the bundled SmolLM2 unless `STUDIO_DEFAULT_MODEL` names another)."""
    if name not in RUN_PRESETS:
        raise InvalidInput(f"preset: '{name}' is not one of {', '.join(RUN_PRESETS)}")
    return {**copy.deepcopy(RUN_PRESETS[name]), "model": settings.default_model}


def data_ready(settings: Settings, name: str = QUICK_START) -> bool:
    """Whether the data preset `name` trains on is stored."""
    return PACK_DATA[PACKS[name]].stored(settings)


def needs(name: str) -> str:
    """What preset `name` needs, in words: its pack (stored when it launches) and what its
    tools need."""
    return f"{PACK_DATA[PACKS[name]].needs}; the pack is stored when the run launches"


def prepare_preset(settings: Settings, actor: Actor, name: str) -> dict:
    """The preset's config, with the data it names stored (its demo pack, a corpus indexed
    now, the actor's where it stores it)."""
    config = preset_config(name, settings)
    PACK_DATA[PACKS[name]].load(settings, actor)
    return config


# --- what each preset did when it was measured --------------------------------------------

MEASURED = Path(demo_files.__file__).parent / "measured"
"""`bench/icrl_effect.py` results of the presets, one folder a preset, one JSON a seed (the
bench's OUT.json): the one source of what a preset is said to do."""

QUIET = "2 CPU cores, nothing else running"
"""What a stored result's `machine` says when it does not say (the bench's own setting)."""


def same_run(measured: dict, preset: dict) -> bool:
    """Whether a measured arm's config is the preset's (whatever the bench set apart from
    the run itself: its name, seed, model and the end-of-run evaluation the bench does on
    its own), every omitted key at its default."""
    def canonical(config: dict) -> dict:
        parsed = RunConfig.model_validate({**config, "name": "x", "seed": 0,
                                           "model": "m"}).model_dump(mode="json")
        parsed["engine"].pop("evaluate_at_end")
        return parsed
    return canonical(measured) == canonical(preset)


def _stored_arms(name: str) -> Iterator[tuple[dict, str]]:
    """Each stored result of preset `name` with its arm whose config is the preset's."""
    for path in sorted((MEASURED / name).glob("*.json")):
        stored = json.loads(path.read_text())
        arm = next((arm for arm, config in stored["configs"].items()
                    if arm in stored["results"] and same_run(config, RUN_PRESETS[name])), None)
        if arm is not None:
            yield stored, arm


def measured_runs(name: str) -> list[dict]:
    """Per seed (in seed order), what preset `name` did when measured: `seed`, `results`
    (per held-out QA set the preset's zero-shot evaluation, and the untrained model's where
    measured), `minutes`, `command` and `steps` (each training step's figures: `stage`,
    `time_step`, `model_tokens`, `response_length`...). Only a measured arm whose config is
    the preset's counts; [] when none is stored."""
    out = [{"seed": int(stored["args"]["seed"]), "arm": stored["results"][arm],
            "base": stored["results"].get("base"), "held_out": stored["held_out"],
            "minutes": stored["minutes"]["all"],
            "training_minutes": stored["minutes"].get("training"),
            "model": stored["configs"][arm].get("model"), "command": stored["command"],
            "date": stored.get("date"), "machine": stored.get("machine", QUIET),
            "steps": stored.get("curves", {}).get(arm, [])}
           for stored, arm in _stored_arms(name)]
    return sorted(out, key=lambda run: run["seed"])


def typical_responses(steps: list[dict], stages: int) -> list[TypicalResponse] | None:
    """Per curriculum stage, the mean response of measured `steps` (the bench's per-step
    figures: a step's `model_tokens` and `response_length` are its rollouts' means); None
    when a stage has no measured step."""
    typical = []
    for stage in range(stages):
        measured = [s for s in steps if s["stage"] == stage]
        if not measured:
            return None
        model = statistics.fmean(s["model_tokens"] for s in measured)
        typical.append(TypicalResponse(model, statistics.fmean(
            s["response_length"] for s in measured) - model))
    return typical


def measured_step_seconds(runs: list[dict]) -> float | None:
    """A measured step's seconds: each run's training steps' mean, the median over the runs
    whose steps are stored; None when none is."""
    means = [statistics.fmean(s["time_step"] for s in run["steps"]) for run in runs
             if run["steps"]]
    return statistics.median(means) if means else None


def expected_time(settings: Settings, name: str, timing: dict, stages: list[dict],
                  runs: list[dict] | None = None) -> dict | None:
    """Preset `name`'s expected time (`estimates.estimate_run` with its measured runs'
    response lengths) from the calibration its launch estimate (`timing`,
    `calibrations.time_estimate`'s) used, over the launch check's `stages`; None before
    the estimate is ready or without measured steps."""
    runs = measured_runs(name) if runs is None else runs
    typical = typical_responses([s for run in runs for s in run["steps"]], len(stages))
    if timing.get("state") != "ready" or typical is None:
        return None
    figures = calibrations.get_calibration(settings, timing["calibration"])["figures"]
    config = RunConfig.model_validate(preset_config(name, settings))
    return estimate_run(figures, config, stages, typical)


def _percents(values: list[float]) -> str:
    return ", ".join(f"{v:.0%}" for v in values)


def _span(minutes: list[float]) -> str:
    """Minutes as a whole number or a range of them: "72-75"."""
    rounded = [round(m) for m in minutes]
    low, high = min(rounded), max(rounded)
    return f"{low}" if low == high else f"{low}-{high}"


def _machines(runs: list[dict]) -> str:
    return "; ".join(sorted({r["machine"] for r in runs}))


def took(runs: list[dict]) -> str:
    """How long the measured runs took and on what (each stored result's `machine`): the
    README, the Home page and the Launch page quote this sentence."""
    return (f"A run took {_span([r['minutes'] for r in runs])} minutes with its evaluation "
            f"({_machines(runs)})")


def expectation(name: str, runs: list[dict] | None = None) -> str:
    """What preset `name` did when measured, in words, from its stored results (`runs`:
    `measured_runs(name)`, read here when not given): never typed by hand."""
    runs = measured_runs(name) if runs is None else runs
    if not runs:
        return ("not measured with these settings yet: bench/icrl_effect.py's results for "
                "it are not stored (docs/engine.md has what earlier settings did).")
    tools = using_words(RUN_PRESETS[name].get("tools", DEFAULT_TOOL_NAMES))
    first = runs[0]
    held_out = f"{first['arm']['questions']} held-out questions ({first['held_out']})"
    words = (f"measured on {len(runs)} seed{'s' * (len(runs) > 1)} "
             f"(bench/icrl_effect.py): zero-shot on {held_out}, the trained model used its "
             f"tool ({tools}) on {_percents([r['arm']['valid_search_rate'] for r in runs])} "
             f"of them and answered {_percents([r['arm']['em'] for r in runs])} right (EM)")
    bases = [r["base"] for r in runs if r["base"]]
    if bases:
        words += (f"; the untrained model used it on "
                  f"{_percents([b['valid_search_rate'] for b in bases])} and answered "
                  f"{_percents([b['em'] for b in bases])} right")
    return f"{words}. {took(runs)}; docs/engine.md, \"Guided ICRL\"."


SPREAD = 1.5
"""How many times the launch estimate and the measured time may differ, either way, before
the Launch page says why."""


def time_beside_measured(name: str, timing: dict, model: str,
                         runs: list[dict] | None = None, expected: dict | None = None) -> str:
    """Preset `name`'s launch estimate beside the time it took when measured, in plain text
    (a worker's name is in it): the expected step (`expected`, `expected_time`'s) and the
    measured one side by side with their ratio, else the worst case (`timing`,
    `calibrations.time_estimate`'s, for `model`) beside the training time; where one is over
    `SPREAD` times the other, why (a worst case; the stored figures name the machine, its
    load and the model that ran them)."""
    runs = measured_runs(name) if runs is None else runs
    if not runs:
        return "Measured: not yet with these settings; the estimate is all there is."
    trained = [r["training_minutes"] or r["minutes"] for r in runs]
    step = measured_step_seconds(runs)
    line = (f"Measured: {_span(trained)} minutes of training"
            f"{'' if step is None else f' ({step:,.0f} s per step)'}, "
            f"{_span([r['minutes'] for r in runs])} with its evaluation, on {len(runs)} "
            f"seed{'s' * (len(runs) > 1)} ({_machines(runs)}).")
    if timing.get("state") != "ready":
        return line
    worst = expected is None or step is None
    if worst:
        ratio = timing["total_seconds"] / 60 / statistics.median(trained)
    else:
        about = expected["total_seconds"] / expected["total_steps"]
        ratio = about / step
        line = (f"Estimate: about {about:,.0f} s per step "
                f"({duration_words(expected['total_seconds'])} for the run), measured: "
                f"{step:,.0f} s per step on {_machines(runs)} (estimate / measured: "
                f"{ratio:.2f}), the answers as long as the measured ones.\n\n{line}")
    if ratio > SPREAD and worst:
        reasons = ["the estimate is the most a run can take, every answer using its whole "
                   "token budget, and the measured answers were shorter"]
    elif ratio > SPREAD or ratio * SPREAD < 1:
        reasons = [f"the stored figures came from {_machines(runs)}, the estimate from the "
                   f"speed this studio's worker measured ({timing['device']} on "
                   f"{timing['worker']})"]
    else:
        return line
    measured_models = sorted({r["model"] for r in runs if r["model"]})
    if measured_models and measured_models != [model]:
        reasons.append(f"the runs were measured with {', '.join(measured_models)}, the "
                       f"estimate is for {model}")
    return (f"{line}\n\nWhy the two differ by over {SPREAD:g} times: "
            f"{'; '.join(reasons)}.")


def listing(settings: Settings) -> list[dict]:
    """Every ready-made run: its name, tools, what it is, what it needs (its pack is stored
    when it launches), its config and what it did when measured."""
    listed = []
    for name, config in RUN_PRESETS.items():
        runs = measured_runs(name)
        listed.append({"name": name, "tools": config.get("tools", list(DEFAULT_TOOL_NAMES)),
                       "description": DESCRIPTIONS[name], "pack": PACKS[name],
                       "needs": needs(name), "data_ready": data_ready(settings, name),
                       "config": preset_config(name, settings),
                       "expectation": expectation(name, runs), "measured": runs})
    return listed
