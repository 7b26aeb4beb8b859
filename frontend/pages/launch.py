"""The Launch page: model, data, curriculum and hyper-parameters, then one button.

The form edits a run config (the same schema as the run YAML and the API): a
base config (the defaults, or an uploaded YAML, so keys the form does not show
are kept) with the form's values laid over it. The curriculum comes from the
Curriculum page through the shared state; the guidance fields beside it go the other way
(the Curriculum page puts them in words).
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args, get_origin

import gradio as gr

from frontend import model_shelf
from frontend.components import (
    PAPER,
    acting,
    choices,
    dataframe,
    error_markdown,
    ok_markdown,
    plain,
    signed_in,
    table,
)
from frontend.pages.curriculum import GUIDANCE_PATHS, GUIDANCE_SHOWN, default_design
from frontend.shared import current, on_show, switch_to
from studio.escaping import code_span, markdown_text
from studio.jobs.engines import ENGINES
from studio.method.sentinel import ACTIONS, SIGNALS
from studio.method.tools import TOOLS, corpus_tools
from studio.models.base_models import DEFAULT_MODEL, packaged_model
from studio.run_config import (
    GRPO_VARIANTS,
    GrpoSpec,
    LoraSpec,
    RunConfig,
    RunConfigError,
    config_field,
    parse_run_config,
)
from studio.services import corpora, exemplar_sets, presets, qa_sets, run_validation, runs
from studio.services.access import Actor, Forbidden, require_member
from studio.services.errors import InvalidInput, UserError
from studio.services.uploads import check_ui_upload_reader
from studio.settings import Settings

TITLE = "Launch"

INTRO = f"""
## Launch a run
Choose the model and the data, check the settings (each says what it does; the
defaults follow the paper, {PAPER}, scaled to the small bundled model), and launch. The
curriculum is the one on the **Curriculum** page.
"""

QUICK_START_WORDS = """
### Quick start: a whole run, end to end
One click launches a ready-made run on one of the demo packs. Their settings were chosen
by experiment for the bundled model on two CPU cores (docs/engine.md). Nothing else is
needed: the run stores its pack if it is missing.
"""


def preset_expectation(name: str) -> str:
    """What a ready-made run needs and what it did when it was measured, beside its choice
    (`presets.expectation`: from its stored results)."""
    return (f"**What it needs:** {presets.needs(name)}.\n\n"
            f"**What to expect:** {presets.expectation(name)}")

MODEL_SOURCES = {
    "shelf": "A model on the shelf: the bundled SmolLM2-135M-Instruct (small, runs on a CPU) "
             "or an installed model package (see the model shelf above)",
    "hub": "A Hugging Face model id (e.g. Qwen/Qwen2.5-0.5B-Instruct)",
    "folder": "A model folder on the studio's machine",
}
NO_EXEMPLARS = ""
NAME_MISSING = "Give the run a name: type one in the Run name box"
NOTHING_TO_TRAIN_ON = ("*Nothing to train on yet:* upload a QA set on the **Data** page (and a "
                       "corpus for a run that searches), or load a pack there: the demo pack "
                       "for search, the math pack for python, the arithmetic pack for the "
                       "calculator.")
LORA_WORDS = ("**LoRA**: train small low-rank adapters beside frozen weights instead of every "
              "weight: cheaper updates and a small checkpoint, for bigger models or smaller "
              "GPUs; it needs a higher learning rate (1e-4). Rank: the adapters' size "
              "(8-64); alpha: their scale (twice the rank is usual).")
TOOL_CHOICES = tuple(TOOLS)
"""The tools a run may call: every registered one (`studio.method.tools`)."""
#: The learning rates the form switches between when LoRA is ticked or unticked.
FULL_LR, LORA_LR = GrpoSpec().lr, 1.0e-4
STAGE_COLUMNS = [("stage", "Stage"), ("exemplars", "Exemplars"), ("steps", "Steps"),
                 ("tokens", "Prompt tokens (longest sampled question)"), ("fits", "Fits?"),
                 ("seconds", "Seconds per step, at most")]


@dataclass(frozen=True)
class Setting:
    """A config key the form shows, in words a newcomer can act on."""

    path: str
    label: str
    explain: str
    choices: tuple[str, ...] = ()  # a setting with choices is picked among them
    optional: bool = False  # an empty box leaves it unset


FORM_SETTINGS = ("grpo.batch_size", "grpo.group_size", "grpo.lr", "grpo.temperature",
                 "grpo.max_turns", "grpo.top_k", "grpo.max_response_tokens",
                 "reward.answer_match")
"""The config keys the form shows; their labels and help are the fields' own (run_config)."""
ADVANCED_SETTINGS = ("grpo.kl_coef", "grpo.clip", "grpo.max_obs_tokens",
                     "grpo.max_prompt_tokens", "reward.acc_weight", "reward.format_weight",
                     "engine.checkpoint_every", "engine.dtype", "seed", "mirror.tensorboard")
"""The keys a first run leaves at their defaults, folded away under *Advanced settings*."""
SENTINEL_SETTINGS = [Setting(f"sentinel.{name}.action", signal.title,
                             f"{signal.meaning[0].upper()}{signal.meaning[1:]}. Try: "
                             f"{signal.advice}.", ACTIONS)
                     for name, signal in SIGNALS.items()]
"""What the collapse sentinel does at each signal (its windows and thresholds: YAML)."""
GRPO_OPTIONS = tuple(f"grpo.{name}" for name in GRPO_VARIANTS)
"""The GRPO family's options (Dr. GRPO, DAPO, GSPO, ...), folded away: the defaults are the
paper's update."""
GRPO_OPTION_WORDS = ("**GRPO variants**: the options of Dr. GRPO, DAPO and GSPO. Leave them "
                     "as they are to train as the paper does; docs/engine.md has a table of "
                     "what each changes and its veRL key.")


def _form_setting(path: str) -> Setting:
    """A config field as the form shows it: a choice among a Literal's values, or a box."""
    field = config_field(path)
    values = get_args(field.annotation) if get_origin(field.annotation) is Literal else ()
    return Setting(path, field.title, field.description, tuple(values),
                   optional=type(None) in get_args(field.annotation))


GUIDANCE_SETTINGS = [_form_setting(path) for path in GUIDANCE_PATHS]
"""How the exemplars teach, beside the curriculum; its options (after `GUIDANCE_SHOWN`) and
the call bonus folded away."""
GUIDANCE_WORDS = ("**Guidance**: how each stage's exemplars teach (the curriculum above says "
                  "how many a stage shows).")
SETTINGS = ([_form_setting(path) for path in FORM_SETTINGS + ADVANCED_SETTINGS + GRPO_OPTIONS]
            + SENTINEL_SETTINGS + GUIDANCE_SETTINGS)
SENTINEL_WORDS = ("The **collapse sentinel** watches signs that training is breaking down "
                  "before the reward shows it. *warn* marks the step on the curves; *pause* "
                  "also stops the run at a checkpoint, and *Resume* continues it. Windows and "
                  "thresholds: in the YAML (`sentinel:`).")


def default_config() -> dict:
    """Every key of a run config at its default (the data names are filled by the form)."""
    placeholder = {"corpus": "corpus", "train": "train"}
    return RunConfig(name="run", data=placeholder).model_dump(mode="json")


def get_path(config: dict, path: str):
    for key in path.split("."):
        config = config[key]
    return config


def set_path(config: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config[key]
    config[last] = value


def model_ref(source: str, typed: str) -> str:
    """The config's `model`: a shelf model by its name (the bundled one when none is typed),
    a Hub id or a folder."""
    typed = (typed or "").strip()
    return typed or DEFAULT_MODEL if source == "shelf" else typed


def model_fields(ref: str) -> tuple[str, str]:
    """The model source and text box for a model reference."""
    if packaged_model(ref) is not None:
        return "shelf", ref
    return ("folder" if ref.startswith(("/", ".", "~")) else "hub"), ref


def run_name(name: str | None) -> str:
    """The typed run name; InvalidInput saying what to do when the box is empty."""
    typed = (name or "").strip()
    if not typed:
        raise InvalidInput(NAME_MISSING)
    return typed


def name_base(train: str | None, design: dict | None) -> str:
    """A run name from what it trains on and its curriculum: `demo-3-2-0`."""
    stages = (design or default_design())["stages"]
    return "-".join([train or "run", *(str(s["exemplars"]) for s in stages)])


def name_note(settings: Settings, name: str | None, train: str | None,
              design: dict | None) -> str:
    """What the name box says under it: that a name is missing, or the name a duplicate
    gets (the API accepts a name twice; this page launches under a free one)."""
    typed = (name or "").strip()
    if not typed:
        suggestion = runs.free_run_name(settings, name_base(train, design))
        return f"**Give the run a name**, e.g. {code_span(suggestion)}."
    taken = runs.runs_named(settings, typed)
    if not taken:
        return ""
    return (f"A run named {code_span(typed)} exists ({', '.join(f'#{i}' for i in taken)}); "
            f"this one will be {code_span(runs.free_run_name(settings, typed))}.")


def suggest_name(settings: Settings, name: str | None, suggested: str, train: str | None,
                 design: dict | None) -> tuple[str, str, str]:
    """The name box, the suggestion it would hold, and its note: a fresh name (data set,
    curriculum and a number no run has yet) replaces an empty box or the previous
    suggestion; a name the user typed stays."""
    typed = (name or "").strip()
    fresh = runs.free_run_name(settings, name_base(train, design))
    shown = typed if typed and typed != suggested else fresh
    return shown, fresh, name_note(settings, shown, train, design)


def curriculum_section(design: dict | None) -> dict:
    design = design or default_design()
    return {"preset": None, "stages": design["stages"], "adaptive": design.get("adaptive")}


def lora_section(base: dict | None, use_lora: bool, rank, alpha) -> dict | None:
    """The run's `lora:` from the form; keys it does not show (dropout, targets) from `base`."""
    if not use_lora:
        return None
    defaults = LoraSpec()
    return {**(base or {}), "rank": int(rank or defaults.rank),
            "alpha": int(alpha or defaults.alpha)}


def lora_fields(lora: dict | None) -> tuple[bool, int, int]:
    """The form's LoRA checkbox, rank and alpha for a config's `lora:`."""
    shown = LoraSpec.model_validate(lora or {})
    return lora is not None, shown.rank, shown.alpha


def lr_for_lora(use_lora: bool, lr: float | None) -> float | None:
    """Ticking LoRA moves the untouched full fine-tuning rate to LoRA's, and back."""
    if use_lora and lr == FULL_LR:
        return LORA_LR
    if not use_lora and lr == LORA_LR:
        return FULL_LR
    return lr


def assemble(base: dict, design: dict | None, name: str, source: str, typed_model: str,
             corpus: str | None, train: str | None, evals: list[str] | None,
             exemplars: str | None, backend: str, queue: str, layout: str,
             tools: list[str] | None, use_lora: bool, lora_rank, lora_alpha, *values) -> dict:
    """The run config the form shows, over `base` (which keeps what the form does not show)."""
    config = copy.deepcopy(base)
    config.update(name=run_name(name), model=model_ref(source, typed_model),
                  backend=backend, queue=queue, tools=list(tools or []),
                  lora=lora_section(base.get("lora"), use_lora, lora_rank, lora_alpha))
    config["curriculum"].update(curriculum_section(design))
    searches = bool(corpus_tools(config["tools"]))  # a run without search names no corpus
    config["data"].update(corpus=(corpus or "") if searches else None, train=train or "",
                          eval=list(evals or []), exemplars=exemplars or None)
    config["prompt"]["layout"] = layout
    for setting, value in zip(SETTINGS, values, strict=True):
        set_path(config, setting.path,
                 form_value(setting, get_path(base, setting.path), value))
    return config


def form_value(setting: Setting, default, value):
    """A form field's value in its config type: an empty box unsets an optional setting
    (such as the upward clip) and keeps the base's value of any other; a number box's float
    becomes an int where the setting is one."""
    if value is None:
        return None if setting.optional else default
    return value if default is None else type(default)(value)


def form_values(config: RunConfig) -> tuple:
    """The form's fields for a parsed config, in `FORM` order, after the base and design."""
    dumped = config.model_dump(mode="json")
    data = dumped["data"]
    return (dumped, config.curriculum.build().to_dict(), dumped["name"],
            *model_fields(dumped["model"]), data["corpus"], data["train"], data["eval"],
            data["exemplars"] or NO_EXEMPLARS, dumped["backend"], dumped["queue"],
            dumped["prompt"]["layout"], dumped["tools"], *lora_fields(dumped["lora"]),
            *(get_path(dumped, s.path) for s in SETTINGS))


# --- actions ----------------------------------------------------------------------------


def curriculum_words(design: dict | None) -> str:
    design = design or default_design()
    spec = " → ".join(str(s["exemplars"]) for s in design["stages"])
    total = sum(s["steps"] for s in design["stages"])
    mode = ", adaptive" if design.get("adaptive") else ""
    words = (f"**Curriculum:** {spec} exemplars over {total} steps{mode}. Change it on the "
             "**Curriculum** page.")
    ready_made = sorted(presets.preset_steps(name) for name in presets.RUN_PRESETS)
    if total > ready_made[-1]:
        words += (f" {total} steps is long on a CPU: the paper trained 100 steps a stage on "
                  f"four large GPUs, and the ready-made runs above show the method in "
                  f"{ready_made[0]}-{ready_made[-1]} small steps (*Estimate* below says how "
                  "long this run takes here).")
    return words


def estimate(settings: Settings, actor: Actor, *form) -> tuple[list, str]:
    """Each stage's longest prompt in tokens, built as the trainer builds it, and its time per
    step on the queue's worker (the launch check; it may queue that worker's measurement)."""
    try:
        report = run_validation.validate_run(settings, actor, assemble(*form))
    except UserError as exc:
        return [], error_markdown(str(exc), "No estimate")
    rows = [{"stage": s["stage"], "exemplars": s["exemplars"], "steps": s["steps"],
             "tokens": s["prompt_tokens"],
             "fits": f"no: over {s['max_prompt_tokens']}" if s["cut"] else "yes",
             "seconds": "not measured yet" if s["seconds_per_step"] is None
             else f"{s['seconds_per_step']:,.1f}"}
            for s in report["stages"]]
    timing = report["time_estimate"]
    again = " Press the button again to see it." if timing["state"] == "measuring" else ""
    note = (f"Counted with the tokenizer of {code_span(report['config']['model'])}.\n\n"
            f"**Time:** {markdown_text(timing['message'])}.{again}")
    if report["warnings"]:
        note += "\n\n" + "\n".join(f"- {markdown_text(w)}" for w in report["warnings"])
    return table(rows, STAGE_COLUMNS), note


def stage_time(stage: dict, expected: dict | None = None) -> str:
    """A stage's seconds a step: about the `expected` step's (`presets.expected_time`'s
    stage), at most the worst case's."""
    seconds = stage.get("seconds_per_step")
    if seconds is None:
        return ""
    if expected is None:
        return f", at most about {seconds:,.0f} s a step"
    return f", about {expected['seconds_per_step']:,.0f} s a step (at most {seconds:,.0f})"


def quick_start_estimate(settings: Settings, actor: Actor, name: str = presets.RECOMMENDED
                         ) -> str:
    """A ready-made run's stages and time on its queue's worker, before it is launched, beside
    the time it took when it was measured: the step expected with answers as long as the
    measured ones first, where the preset was measured, then the worst case."""
    config = presets.preset_config(name, settings)
    if not presets.data_ready(settings, name):
        return (f"*Estimate:* the {presets.PACKS[name]} pack is not stored yet; load it on the "
                "**Data** page to see this run's time here, or launch: the run stores it "
                "first.\n\n" + markdown_text(presets.time_beside_measured(
                    name, {}, config["model"])))
    try:
        report = run_validation.validate_run(settings, actor, config)
    except UserError as exc:
        return error_markdown(str(exc), "No estimate")
    timing, runs = report["time_estimate"], presets.measured_runs(name)
    expected = presets.expected_time(settings, name, timing, report["stages"], runs)
    per_stage = expected["stages"] if expected else [None] * len(report["stages"])
    lines = [f"- stage {s['stage']}: {s['exemplars']} exemplars for {s['steps']} steps, "
             f"prompts up to {s['prompt_tokens']:,} tokens{stage_time(s, e)}"
             for s, e in zip(report["stages"], per_stage, strict=True)]
    measured = markdown_text(presets.time_beside_measured(name, timing, config["model"], runs,
                                                          expected))
    worst = markdown_text(timing["message"])
    if expected is None:
        return "\n".join([f"**Estimate:** {worst}", *lines, "", measured])
    return "\n".join([measured, "", f"**At most:** {worst}", *lines])


def launch_quick_start(settings: Settings, actor: Actor, follow_on: str,
                       name: str = presets.QUICK_START) -> tuple[int | None, str]:
    """Store the demo pack if needed and launch the ready-made run `name` (its id, or None)."""
    try:
        require_member(actor, "launch runs")
        config = presets.prepare_preset(settings, actor, name)
        config["name"] = runs.free_run_name(settings, config["name"])
        run = runs.create_run(settings, actor, config)
    except UserError as exc:
        return None, error_markdown(str(exc), "The quick start was not launched")
    return run["id"], ok_markdown(
        f"Run #{run['id']} '{run['name']}' is {plain(run['state'])} on the {run['queue']} "
        f"queue ({run['total_steps']} steps); it ends with its zero-shot evaluation on "
        f"{', '.join(config['data']['eval'])}") + f"\n\nFollow it on {follow_on}."


def save_yaml(*form) -> tuple[str | None, str]:
    try:
        config = parse_run_config(assemble(*form))
    except (RunConfigError, UserError) as exc:
        return None, error_markdown(str(exc), "Not saved")
    folder = Path(tempfile.mkdtemp(prefix="studio-run-yaml-"))
    path = folder / f"{config.name}.yaml"
    path.write_text(config.to_yaml(), encoding="utf-8")
    return str(path), ok_markdown(f"Saved the config of '{config.name}' as YAML: download it "
                                  "above")


def load_yaml(settings: Settings, actor: Actor, path: str | None, outputs: int):
    """Fill the form (and the curriculum) from a run YAML the acting user uploaded; the last
    output says how."""
    if not path:
        return (gr.skip(),) * outputs
    try:
        check_ui_upload_reader(settings, path, actor)
        config = parse_run_config(Path(path).read_text(encoding="utf-8"))
    except (RunConfigError, UnicodeDecodeError, Forbidden) as exc:
        return *(gr.skip(),) * (outputs - 1), error_markdown(
            f"{Path(path).name}: {exc}", "The YAML was not loaded")
    return *form_values(config), ok_markdown(f"Loaded '{config.name}' from "
                                             f"{Path(path).name}; check it and launch")


def launch(settings: Settings, actor: Actor, follow_on: str, base: dict, design: dict | None,
           name: str | None, *rest) -> tuple[int | None, str]:
    """Create and queue the run (its id, or None when refused), and say where to follow it.
    A name another run has gets the first free `-2`, `-3`, ... (`name_note` said so)."""
    try:
        typed = run_name(name)
        free = runs.free_run_name(settings, typed)
        run = runs.create_run(settings, actor, assemble(base, design, free, *rest))
    except UserError as exc:
        return None, error_markdown(str(exc), "The run was not launched")
    renamed = "" if free == typed else f" (a run named '{typed}' exists)"
    return run["id"], ok_markdown(
        f"Run #{run['id']} '{run['name']}' is {plain(run['state'])} on the {run['queue']} "
        f"queue ({run['total_steps']} steps){renamed}") + (
        f"\n\nTime: {markdown_text(run['time_estimate']['message'])}.\n\nFollow it on "
        f"{follow_on}.")


def data_choices(settings: Settings, corpus, train, evals, exemplars):
    """Dropdowns of what is stored now; a choice made earlier stays, else the demo or first."""
    def pick(names: list[str], chosen):
        if chosen in names:
            return chosen
        return "demo" if "demo" in names else (names[0] if names else None)

    corpus_rows = corpora.list_corpora(settings)
    qa_rows = qa_sets.list_qa_sets(settings)
    qa_names = [q["name"] for q in qa_rows]
    train_names = [q["name"] for q in qa_rows if q["purpose"] == "train"] or qa_names
    ex_rows = exemplar_sets.list_exemplar_sets(settings)
    ex_names = [e["name"] for e in ex_rows]
    empty = "" if qa_rows else NOTHING_TO_TRAIN_ON
    return (
        gr.Dropdown(choices=choices(corpus_rows, lambda c: f"{c['name']} ({plain(c['status'])})"),
                    value=pick([c["name"] for c in corpus_rows], corpus)),
        gr.Dropdown(choices=train_names, value=pick(train_names, train)),
        gr.Dropdown(choices=qa_names, value=[e for e in evals or [] if e in qa_names]),
        gr.Dropdown(choices=[("no exemplars", NO_EXEMPLARS),
                             *choices(ex_rows, lambda e: f"{e['name']} ({e['size']} exemplars)")],
                    value=exemplars if exemplars == NO_EXEMPLARS else pick(ex_names, exemplars)),
        empty)


# --- layout -----------------------------------------------------------------------------


def setting_field(setting: Setting, default):
    """Radio buttons for a setting with choices, a checkbox for a yes/no one, a number box for
    the rest."""
    common = {"label": setting.label, "info": setting.explain,
              "elem_id": "setting-" + setting.path.replace(".", "-")}
    if setting.choices:
        return gr.Radio(list(setting.choices), value=default, **common)
    if isinstance(default, bool):
        return gr.Checkbox(default, **common)
    return gr.Number(default, precision=0 if isinstance(default, int) else None, **common)


def setting_rows(settings: list[Setting], defaults: dict) -> list:
    """The settings' fields, two to a row."""
    fields = []
    for pair in range(0, len(settings), 2):
        with gr.Row(equal_height=True):
            fields += [setting_field(s, get_path(defaults, s.path))
                       for s in settings[pair:pair + 2]]
    return fields


def build(settings: Settings) -> None:
    shared = current()
    base = gr.State(default_config())
    defaults = default_config()
    with gr.Group(elem_id="quick-start-card"):
        gr.Markdown(QUICK_START_WORDS)
        quick_preset = gr.Radio([(f"{name}: {words}", name)
                                 for name, words in presets.DESCRIPTIONS.items()],
                                value=presets.RECOMMENDED, label="Ready-made run",
                                elem_id="quick-start-preset")
        quick_expect = gr.Markdown(preset_expectation(presets.RECOMMENDED),
                                   elem_id="quick-start-expect")
        quick_estimate = gr.Markdown(elem_id="quick-start-estimate")
        quick_button = gr.Button("Launch this ready-made run", variant="primary",
                                 elem_id="quick-start")
        quick_message = gr.Markdown(elem_id="quick-start-message")
        quick_follow = gr.Button("Watch it on the Live run page", visible=False,
                                 elem_id="quick-start-follow")
    gr.Markdown(INTRO, elem_id="launch-intro")
    data_empty = gr.Markdown(elem_id="launch-empty")
    model_shelf.build(settings)  # across the page: its table is wide
    with gr.Row():
        with gr.Column():
            name = gr.Textbox(label="Run name", placeholder="e.g. demo-3-2-0",
                              elem_id="run-name")
            name_hint = gr.Markdown(elem_id="run-name-note")
            suggested = gr.State("")  # the name last suggested: replaced while untouched
            default_source, default_ref = model_fields(settings.default_model)
            source = gr.Radio([(words, key) for key, words in MODEL_SOURCES.items()],
                              value=default_source, label="Model", elem_id="model-source")
            typed_model = gr.Textbox(default_ref, label="Model: a shelf name, a Hub id or a "
                                     "folder (empty: the bundled model)", elem_id="model-ref")
            with gr.Group():
                corpus = gr.Dropdown(label="Corpus the model searches", allow_custom_value=True,
                                     info="Used by the search tool only: a run without "
                                          "search names none", elem_id="launch-corpus")
                train = gr.Dropdown(label="QA set to train on", allow_custom_value=True,
                                    elem_id="launch-train")
                evals = gr.Dropdown(label="QA sets to evaluate on (optional)", multiselect=True,
                                    allow_custom_value=True)
                exemplars = gr.Dropdown(label="Exemplar set", allow_custom_value=True,
                                        elem_id="launch-exemplars")
            curriculum = gr.Markdown(elem_id="launch-curriculum")
            gr.Markdown(GUIDANCE_WORDS)
            guidance = [setting_field(s, get_path(defaults, s.path))
                        for s in GUIDANCE_SETTINGS[:len(GUIDANCE_SHOWN)]]
            with gr.Accordion("Guidance options, the exemplars' draw and the call bonus",
                              open=False, elem_id="guidance-options"):
                guidance += [setting_field(s, get_path(defaults, s.path))
                             for s in GUIDANCE_SETTINGS[len(GUIDANCE_SHOWN):]]
            with gr.Row():
                backend = gr.Radio([(e.label, e.name) for e in ENGINES.values()],
                                   value=defaults["backend"], label="Training backend")
                queue = gr.Radio([("cpu", "cpu"), ("gpu", "gpu")], value=defaults["queue"],
                                 label="Queue", info="Which workers take the run")
            layout = gr.Radio([("chat: exemplars as earlier turns", "chat"),
                               ("inline: the paper's single message", "inline")],
                              value=defaults["prompt"]["layout"], label="Prompt layout")
            tools_field = config_field("tools")
            tools = gr.CheckboxGroup(list(TOOL_CHOICES), value=defaults["tools"],
                                     label=tools_field.title, info=tools_field.description,
                                     elem_id="launch-tools")
        with gr.Column():
            gr.Markdown("**Settings** (defaults in place; each says what it does)")
            values = []
            shown = len(FORM_SETTINGS)
            advanced = shown + len(ADVANCED_SETTINGS)
            values += setting_rows(SETTINGS[:shown], defaults)
            with gr.Accordion("Advanced settings: the update's limits, the reward's weights, "
                              "precision, checkpoints", open=False, elem_id="advanced-settings"):
                values += setting_rows(SETTINGS[shown:advanced], defaults)
            with gr.Accordion("GRPO variants", open=False, elem_id="grpo-variants"):
                gr.Markdown(GRPO_OPTION_WORDS)
                values += [setting_field(s, get_path(defaults, s.path))
                           for s in SETTINGS[advanced:advanced + len(GRPO_OPTIONS)]]
            with gr.Accordion("Collapse sentinel", open=False, elem_id="sentinel"):
                gr.Markdown(SENTINEL_WORDS)
                values += [setting_field(s, get_path(defaults, s.path))
                           for s in SENTINEL_SETTINGS]
            values += guidance  # (beside the curriculum, on the left)
            gr.Markdown(LORA_WORDS)
            use_lora, lora_rank, lora_alpha = lora_fields(None)
            with gr.Row(equal_height=True):
                use_lora = gr.Checkbox(use_lora, label="Train LoRA adapters", elem_id="lora")
                lora_rank = gr.Number(lora_rank, precision=0, label="LoRA rank",
                                      minimum=1, maximum=256, elem_id="lora-rank")
                lora_alpha = gr.Number(lora_alpha, precision=0, label="LoRA alpha", minimum=1,
                                       elem_id="lora-alpha")
    with gr.Row():
        estimate_button = gr.Button("Estimate prompt length and time per stage",
                                    elem_id="estimate")
    estimate_note = gr.Markdown(elem_id="estimate-note")
    stage_table = dataframe(STAGE_COLUMNS, elem_id="stage-estimate")
    with gr.Row():
        with gr.Column():
            save_button = gr.Button("Save the config as YAML", elem_id="save-yaml")
            yaml_file = gr.File(label="Run YAML to download", interactive=False,
                                elem_id="yaml-download", height=80)
        with gr.Column():
            upload = gr.UploadButton("Load a run YAML", file_types=[".yaml", ".yml"],
                                     elem_id="load-yaml")
            yaml_message = gr.Markdown(elem_id="yaml-message")
    launch_button = gr.Button("Launch", variant="primary", size="lg", elem_id="launch")
    launch_message = gr.Markdown(elem_id="launch-message")
    live_page = "live_run" if "live_run" in shared.page_ids else None
    follow = gr.Button("Watch it on the Live run page", visible=False, elem_id="follow-run")

    fields = [name, source, typed_model, corpus, train, evals, exemplars, backend, queue, layout,
              tools, use_lora, lora_rank, lora_alpha, *values]
    form = [base, shared.curriculum, *fields]
    follow_on = ("the **Runs** and **Live run** pages" if live_page else
                 "the API (`GET /api/v1/runs/<id>`)")

    def refresh(*chosen):
        return data_choices(settings, *chosen)

    on_show(refresh, [corpus, train, evals, exemplars],
            [corpus, train, evals, exemplars, data_empty])

    def suggest(*now):
        return suggest_name(settings, *now)

    named = [name, train, shared.curriculum]
    # always_last: a data set filled in while the tab's own suggestion runs is seen after it
    gr.on([shared.blocks.load, shared.tab.select, train.change, shared.curriculum.change],
          suggest, [name, suggested, train, shared.curriculum], [name, suggested, name_hint],
          trigger_mode="always_last", show_progress="hidden")
    name.change(lambda *now: name_note(settings, *now), named, name_hint, show_progress="hidden")
    gr.on([shared.blocks.load, shared.curriculum.change], curriculum_words, shared.curriculum,
          curriculum)
    # every field's value once the last change is in (a loaded YAML changes several)
    gr.on([field.change for field in guidance],
          lambda *now: dict(zip(GUIDANCE_PATHS, now, strict=True)), guidance, shared.guidance,
          trigger_mode="always_last", show_progress="hidden")
    lr = values[[s.path for s in SETTINGS].index("grpo.lr")]
    use_lora.input(lr_for_lora, [use_lora, lr], lr)  # the user's tick, not a loaded YAML's
    estimate_button.click(acting(settings, estimate), form, [stage_table, estimate_note])
    save_button.click(save_yaml, form, [yaml_file, yaml_message])
    loaded = [base, shared.curriculum, *fields, yaml_message]
    upload.upload(acting(settings, lambda s, actor, path: load_yaml(s, actor, path,
                                                                    len(loaded))),
                  upload, loaded)

    launched = gr.State(None)  # the run launched last on this page: *Watch it* follows it

    def shown(run_id: int | None, message: str):
        """The run launched (kept when refused), the message, the follow button."""
        if run_id is None:
            return gr.skip(), message, gr.Button(visible=False)
        return run_id, message, gr.Button(visible=live_page is not None)

    def start(request: gr.Request, *f):
        """Launch; once launched, the name box gets a fresh name for the next run."""
        run_id, message = launch(settings, signed_in(settings, request), follow_on, *f)
        design_now, train_now = f[form.index(shared.curriculum)], f[form.index(train)]
        next_name = suggest_name(settings, "", "", train_now, design_now) if run_id else \
            (gr.skip(),) * 3
        return *shown(run_id, message), *next_name

    def start_quick(request: gr.Request, name: str):
        return shown(*launch_quick_start(settings, signed_in(settings, request), follow_on,
                                         name))

    def forget_last():
        """A press launches anew: the last launch's message and *Watch it* go at once (else
        *Watch it* pressed before the answer follows the run launched before)."""
        return "", gr.Button(visible=False)

    launch_button.click(forget_last, outputs=[launch_message, follow],
                        show_progress="hidden").then(
        start, form, [launched, launch_message, follow, name, suggested, name_hint])
    quick_button.click(forget_last, outputs=[quick_message, quick_follow],
                       show_progress="hidden").then(
        start_quick, quick_preset, [launched, quick_message, quick_follow])
    on_show(acting(settings, quick_start_estimate), quick_preset, quick_estimate)
    # what the chosen run did comes at once; its estimate (a validation, a tokenizer) after
    quick_preset.change(preset_expectation, quick_preset, quick_expect,
                        show_progress="hidden").then(
        acting(settings, quick_start_estimate), quick_preset, quick_estimate)
    # the ready-made run another page asked for (Home's quick start button)
    shared.preset.change(lambda name: gr.skip() if name is None else name, shared.preset,
                         quick_preset, show_progress="hidden")
    for button in (follow, quick_follow):  # the Live run page keeps its run until asked
        button.click(lambda run_id: (run_id, *switch_to(live_page)), launched,
                     [shared.focus_run, *shared.switch])
