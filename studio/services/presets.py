"""Ready-made runs a new user launches in one click (Launch page) or by name (the CLI).

`quick-start` is the demo world, the 3 -> 2 -> 0 exemplar curriculum and settings
chosen by experiment (bench/icrl_effect.py; the tries and their figures in docs/engine.md,
"The ICRL effect") so that on the embedded default (2 CPU cores, SmolLM2-135M) the run
ends in about half an hour with its zero-shot evaluation, base against trained, on the
demo pack's held-out questions, which training never sees. Rollouts sample at
temperature 0.5, not method.md's 1.0: at 1.0 the small model writes noise after the
first search result. Everything else keeps method.md's defaults (the reward included).

`search-tour` is the same on the demo's short-span questions (one passage holds a date, a
count or a name), with the curriculum and learning rate that formed the calculator habit;
it is judged on the held-out span questions and the demo's held-out ones. Each preset says
beside it what it did when it was measured (`EXPECTATIONS`).
"""

from __future__ import annotations

import copy

from studio.services import demo
from studio.services.access import Actor
from studio.services.errors import InvalidInput
from studio.settings import Settings

QUICK_START = "quick-start"
SEARCH_TOUR = "search-tour"

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
    **copy.deepcopy(RUN_PRESETS[QUICK_START]), "name": SEARCH_TOUR, "tools": ["search"],
    "data": {"corpus": demo.DEMO_NAME, "train": demo.SPAN_NAME,
             "eval": [demo.SPAN_HELDOUT_NAME, demo.HELDOUT_NAME], "exemplars": demo.DEMO_NAME},
    "curriculum": {"stages": [{"exemplars": 3, "steps": 6}, {"exemplars": 2, "steps": 6},
                              {"exemplars": 0, "steps": 10}]}}
"""quick-start on the short-span questions, with the curriculum and learning rate of the
calculator world's runs (docs/engine.md, "The calculator world")."""
RUN_PRESETS[SEARCH_TOUR]["grpo"]["lr"] = 2.0e-4


def _steps(name: str) -> int:
    return sum(stage["steps"] for stage in RUN_PRESETS[name]["curriculum"]["stages"])


DESCRIPTIONS = {
    QUICK_START: f"the demo world, 3 -> 2 -> 0 exemplars, {_steps(QUICK_START)} small steps "
                 "with LoRA; ends with base against trained on the demo pack's held-out questions",
    SEARCH_TOUR: f"search on the demo world's short-span questions (a date, a count or a name "
                 f"in one passage), 3 -> 2 -> 0 exemplars, {_steps(SEARCH_TOUR)} small steps with "
                 "LoRA; ends with base against trained on the held-out span and demo questions",
}

EXPECTATIONS = {
    QUICK_START: "the bundled 135M model learns the reply's format and searches while "
                 "exemplars are in its prompt, but in most runs (4 seeds of 5) it stops "
                 "searching once they go, and it does not yet answer from what it finds; "
                 "teaching the tool itself takes a larger model (docs/engine.md, "
                 "\"The ICRL effect\").",
    SEARCH_TOUR: "with 3 exemplars the bundled model searches in 90-96% of rollouts, but it "
                 "cannot read what it finds: 4-12% of them close an answer, almost none "
                 "right; as the exemplars go it stops searching, and zero-shot it searched on "
                 "no held-out question on any of 3 seeds (EM 0). It shows the exemplars' "
                 "effect while they are in the prompt, not a learned habit (docs/engine.md, "
                 "\"The search ICRL effect\").",
}
"""What each preset did when it was measured (3 seeds, bench/icrl_effect.py), shown beside it:
a user learns what a laptop run can show before spending half an hour on it."""


def preset_config(name: str, settings: Settings) -> dict:
    """Preset `name`'s run config (a dict the run schema takes) for the studio's default model
    (the bundled SmolLM2 unless `STUDIO_DEFAULT_MODEL` names another)."""
    if name not in RUN_PRESETS:
        raise InvalidInput(f"preset: '{name}' is not one of {', '.join(RUN_PRESETS)}")
    return {**copy.deepcopy(RUN_PRESETS[name]), "model": settings.default_model}


def data_ready(settings: Settings) -> bool:
    """Whether the data the presets name (the demo pack) is stored."""
    return demo.demo_pack_stored(settings)


def prepare_preset(settings: Settings, actor: Actor, name: str) -> dict:
    """The preset's config, with the data it names stored (the demo pack, indexed now, the
    actor's where it stores it)."""
    config = preset_config(name, settings)
    demo.load_demo_pack(settings, actor, index_now=True)
    return config
