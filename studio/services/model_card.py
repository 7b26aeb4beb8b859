"""The model card of an exported run: README.md for the Hub and its reward-curve image.

Everything comes from what the studio stored: the run's plan (its config, the sizes
and content hashes of its corpus, QA sets and exemplars), its metric rows, and the evaluations
of the run and of its base model. The UI shows the same card before an
export (`preview_model_card`). Names (the run's, the data sets', the model's) and prompt text
are written as text (`studio.escaping`): nothing in them renders as Markdown or HTML, on the
Hub or in the page.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.escaping import code_span, markdown_text
from studio.jobs.lifecycle import RunState
from studio.method.tools import TOOLS, corpus_tools, named_specs, results_words, sole_verb
from studio.models.base_models import packaged_model
from studio.run_config import LoraSpec, RunConfig
from studio.sandbox import Limits
from studio.services import evaluations, qa_sets, runs
from studio.services.errors import NotFound
from studio.services.exports import checkpoint_steps
from studio.services.reproduce import card_block, run_bundle
from studio.services.run_plans import DataRef, RunPlan, pinned_row, stored_plan
from studio.settings import Settings
from studio.steps import MARK_POINTS_BELOW, shown_step, stage_line_x
from studio.storage.db import session_scope
from studio.storage.tables import Corpus, QASet

REWARD_CURVES = "reward_curves.png"
EVAL_COLUMNS = (("EM", "em"), ("SubEM", "subem"), ("F1", "f1"),
                ("tool calls", "search_calls"), ("answer rate", "answer_rate"))


def hub_tags(config: RunConfig) -> list[str]:
    """The card's Hub tags: the studio's, with the run's tool names."""
    return ["icrl", "grpo", "reinforcement-learning", "tool-use", *config.tools, "icrl-studio"]




@dataclass
class ModelCard:
    markdown: str  # README.md, YAML front matter included
    metadata: dict  # the front matter
    reward_curves_png: bytes | None  # None when the run has no metric rows yet
    step: int  # the checkpoint it describes (steps done)


def _front_matter_of(folder: Path) -> dict:
    """A local model folder's README front matter (its licence), if it has one."""
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    text = readme.read_text(errors="replace")
    if not text.startswith("---"):
        return {}
    try:
        found = yaml.safe_load(text.split("---", 2)[1])
    except yaml.YAMLError:
        return {}
    return found if isinstance(found, dict) else {}


def base_model_label(ref: str) -> str:
    """How the card names a base model: a local folder by its name only (no local paths)."""
    hub_id, _ = base_model_facts(ref)
    return hub_id or f"local model {Path(ref).name}"


def base_model_facts(ref: str) -> tuple[str | None, str | None]:
    """(Hub id, licence) of a base model reference, each None when unknown."""
    packaged = packaged_model(ref)
    if packaged is not None:  # the shelf knows where it comes from
        return packaged.upstream, packaged.licence
    folder = Path(ref).expanduser()
    if folder.is_dir():
        licence = _front_matter_of(folder).get("license")
        return None, licence if isinstance(licence, str) else None
    return ref, None


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _pinned(settings: Settings, table, ref: DataRef | None, describe) -> str:
    """A data set as the run's plan pinned it: its name, size and content hash."""
    if ref is None:
        return "none"
    with session_scope(settings.sqlalchemy_url) as session:
        row = pinned_row(session, table, ref) if table else None
        size = describe(row) if row is not None else None
    if table and size is None:
        return f"{markdown_text(ref.name)} (no longer stored in the studio)"
    return f"{markdown_text(ref.name)}: {size or describe(None)} (sha256 `{ref.content_hash[:12]}`)"


def _data_section(settings: Settings, plan: RunPlan) -> str:
    """The run's pinned data; a run without a corpus (no search tool) gets no corpus row."""
    rows = [
        ["corpus (searched with BM25)", _pinned(settings, Corpus, plan.corpus,
                                                lambda c: f"{c.num_documents:,} documents, "
                                                          f"{c.num_passages:,} passages")],
    ] if plan.corpus else []
    rows += [
        ["training questions", _pinned(settings, QASet, plan.train,
                                       lambda q: f"{q.num_rows:,} question/answer pairs")],
        ["exemplars (in-context, removed over training)",
         _pinned(settings, None, plan.exemplar_set,
                 lambda _: f"{len(plan.exemplars)} worked examples")],
    ]
    rows += [[f"evaluation set {i + 1}", _pinned(settings, QASet, ref,
                                                 lambda q: f"{q.num_rows:,} questions")]
             for i, ref in enumerate(plan.eval)]
    return _table(["data", "set"], rows)


def _curriculum_section(config: RunConfig) -> str:
    curriculum = config.curriculum.build()
    rows = [[n, stage.exemplars, stage.steps] for n, stage in enumerate(curriculum.stages, 1)]
    text = _table(["stage", "exemplars in the prompt", "steps"], rows)
    if curriculum.adaptive:
        rule = curriculum.adaptive
        direction = rule.direction.replace("_", " ")
        text += (f"\n\nStages advance early when `{rule.metric}` is {direction}"
                 f" {rule.threshold} over {rule.window} steps (between {rule.min_steps} and "
                 f"{rule.max_steps} steps a stage).")
    return text


def _hyperparameters_section(config: RunConfig) -> str:
    rows = [[f"grpo.{key}", value] for key, value in config.grpo.model_dump().items()
            if value is not None]
    rows += [[f"reward.{key}", value] for key, value in config.reward.model_dump().items()]
    if config.lora:
        lora = config.lora
        rows += [["lora.rank", lora.rank], ["lora.alpha", lora.alpha],
                 ["lora.dropout", lora.dropout], ["lora.target_modules", _lora_targets(lora)]]
    rows += [["prompt.layout", config.prompt.layout],
             ["prompt.assistant_prefix", markdown_text(config.prompt.assistant_prefix or "")],
             ["backend", config.backend], ["seed", config.seed]]
    return _table(["parameter", "value"], rows)


def _lora_targets(lora: LoraSpec) -> str:
    """The adapted layers, as the card writes them (as text)."""
    targets = lora.target_modules
    return markdown_text(targets if isinstance(targets, str) else ", ".join(targets))


def _lora_words(lora: LoraSpec) -> str:
    """What the card says of a LoRA run: the adapter's shape, and where each form of it is."""
    return (f"It was trained with LoRA (rank {lora.rank}, alpha {lora.alpha}, dropout "
            f"{lora.dropout:g}, on {_lora_targets(lora)}): the base weights stayed frozen and "
            "low-rank adapters learnt the update. The weights here have the adapter merged "
            "in (plain Transformers loads them); the adapter alone is in `adapter/` (PEFT "
            "loads it onto the base model).")


def _calls(config: RunConfig) -> str:
    """What the model writes for each of the run's tools and what the application does."""
    limits = Limits()
    clauses = []
    for spec in named_specs(config.tools):
        usage = TOOLS[spec.name].card
        runs = usage.runs.format(top_k=config.grpo.top_k, wall=limits.wall_seconds,
                                 cpu=limits.cpu_seconds)
        clauses.append(f"writes {usage.writes} inside `<{spec.call_tag}>...</{spec.call_tag}>` "
                       f"and stops; {runs}`<{spec.result_tag}>...</{spec.result_tag}>` "
                       f"{usage.returns}")
    return "; or it ".join(clauses)


def _usage_section(config: RunConfig, repo: str) -> str:
    prompt = config.build_prompt(TOOLS[config.tools[0]].card.example, [], 0)
    prefix = config.prompt.assistant_prefix or ""
    specs = named_specs(config.tools)
    stops = [f"</{spec.call_tag}>" for spec in specs] + ["</answer>"]
    served = "\n".join(
        f"# on </{spec.call_tag}>: {TOOLS[spec.name].card.serves}, append "
        f"\"\\n\\n<{spec.result_tag}>...</{spec.result_tag}>\\n\\n\", generate again"
        for spec in specs)
    return f"""The model was trained to answer with this tag protocol: it thinks inside
`<think>`, {_calls(config)}; the model continues and ends with
`<answer>...</answer>`. It was trained and evaluated zero-shot with these messages:

```json
{json.dumps(prompt.messages, indent=2)}
```

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained("{repo}")
model = AutoModelForCausalLM.from_pretrained("{repo}")
messages = [...]  # as above
text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
text += {json.dumps(prefix)}
inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
out = model.generate(**inputs, max_new_tokens={config.grpo.max_turn_tokens},
                     stop_strings={json.dumps(stops)}, tokenizer=tokenizer)
print(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:]))
{served}
```"""


def _latest_evaluations(settings: Settings, run_id: int,
                        config: RunConfig) -> dict[tuple[str, str], dict]:
    """The newest succeeded evaluation per (QA set, model): this run's and its base model's."""
    names = {q["id"]: q["name"] for q in qa_sets.list_qa_sets(settings)}
    latest: dict[tuple[str, str], dict] = {}
    for evaluation in reversed(evaluations.list_evaluations(settings)):  # oldest first
        if evaluation["state"] != RunState.succeeded:
            continue
        if evaluation["run_id"] == run_id:
            folder = Path(evaluation["model"]).name
            model = f"this model (after {folder[5:]} steps)" if folder.startswith("step-") \
                else "this model"
        elif evaluation["run_id"] is None and evaluation["model"] == config.model:
            model = f"base ({markdown_text(base_model_label(config.model))})"
        else:
            continue
        qa_name = markdown_text(names.get(evaluation["qa_set_id"],
                                          f"QA set {evaluation['qa_set_id']}"))
        latest[(qa_name, model)] = evaluation
    return latest


def _evaluation_section(latest: dict[tuple[str, str], dict], config: RunConfig) -> str:
    if not latest:
        return ("No evaluation was run before this export. `studio eval` (or the Evaluate "
                "page) measures the base model and this run on held-out questions.")
    rows = []
    for (qa_name, model), evaluation in sorted(latest.items(),
                                               key=lambda item: (item[0][0], "base" not in
                                                                 item[0][1], item[0][1])):
        metrics = evaluation["metrics"] or {}
        rows.append([qa_name, model, metrics.get("questions", "")]
                    + [f"{metrics[key]:.3f}" if isinstance(metrics.get(key), float) else ""
                       for _, key in EVAL_COLUMNS])
    return (f"Zero-shot (no exemplars), temperature 0.1, the same {_tool_words(config)}:\n\n"
            + _table(["QA set", "model", "questions"] + [c for c, _ in EVAL_COLUMNS], rows))


def _measured_behaviour(latest: dict[tuple[str, str], dict], config: RunConfig) -> str:
    """What the model was seen to do zero-shot, from its own evaluations only (no claim
    without a measurement)."""
    verb = sole_verb(config.tools)
    call, calls = (verb.noun, verb.plural) if verb else ("tool call", "calls its tools")
    sentences = []
    for (qa_name, model), evaluation in sorted(latest.items()):
        if not model.startswith("this model"):
            continue
        m = evaluation["metrics"] or {}
        base = next((e["metrics"] or {} for (q, label), e in latest.items()
                     if q == qa_name and label.startswith("base")), None)
        against = (f" (base model: {base.get('valid_search_rate', 0):.0%} and "
                   f"{base.get('em', 0):.0%})" if base else "")
        sentences.append(
            f"Zero-shot on {m.get('questions', '?')} questions of {qa_name}, it made a valid "
            f"{call} on {m.get('valid_search_rate', 0):.0%} of them and answered "
            f"{m.get('em', 0):.0%} exactly{against}.")
    return " ".join(sentences) or (f"Whether it {calls} zero-shot has not been measured: no "
                                   "evaluation of this run was made before this export.")


def reward_curves_figure(metrics: list[dict]):
    """Training reward, accuracy, format and tool calls per step (shown from 1, whole
    steps on the axis), a dotted line before each stage as the Live run page draws it; None
    without metric rows."""
    if not metrics:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = [shown_step(m["step"]) for m in metrics]
    marker = "." if len(steps) < MARK_POINTS_BELOW else None
    figure = Figure(figsize=(10, 4), dpi=100, layout="constrained")
    left, right = figure.subplots(1, 2)
    for key, label in (("reward_mean", "reward (mean)"), ("acc", "accuracy"),
                       ("format", "format score")):
        left.plot(steps, [m.get(key, float("nan")) for m in metrics], label=label,
                  marker=marker)
    calls = [m.get("search_calls", float("nan")) for m in metrics]
    right.plot(steps, calls, color="tab:purple", marker=marker)
    right.set_ylim(0, max([1.0] + [c * 1.1 for c in calls if c == c]))
    starts = [(n, m["step"], m["exemplars"]) for n, m in enumerate(metrics)
              if n == 0 or metrics[n - 1]["stage"] != m["stage"]]
    for axes in (left, right):
        for n, first_step, exemplars in starts:
            x = stage_line_x(first_step) if n else shown_step(first_step)
            if n:
                axes.axvline(x, color="grey", linestyle=":", linewidth=1)
            axes.annotate(f"{exemplars} ex.", (x, 1.0), xycoords=("data", "axes fraction"),
                          xytext=(3, -12), textcoords="offset points", fontsize=8, color="grey")
        axes.set_xlabel("training step")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
    left.set_title("training reward")
    left.set_ylim(-0.02, 1.02)
    left.legend(loc="lower right", fontsize=8)
    right.set_title("tool calls per rollout")
    return figure


def reward_curves_png(metrics: list[dict]) -> bytes | None:
    """`reward_curves_figure` as PNG bytes."""
    figure = reward_curves_figure(metrics)
    if figure is None:
        return None
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def build_model_card(settings: Settings, run_id: int, step: int | None = None,
                     repo_id: str | None = None) -> ModelCard:
    """The card of run `run_id`'s checkpoint after `step` steps (default: the latest)."""
    run = runs.get_run(settings, run_id)
    plan = stored_plan(settings, run_id)
    config = plan.config
    if step is None:
        step = max(checkpoint_steps(settings, run_id), default=run["current_step"])
    hub_id, licence = base_model_facts(config.model)
    metadata = {"library_name": "transformers", "pipeline_tag": "text-generation"}
    if hub_id:
        metadata["base_model"] = hub_id
    if licence:
        metadata["license"] = licence
    metadata["tags"] = hub_tags(config)
    metrics = [m for m in runs.run_metrics(settings, run_id) if m["step"] < step]
    latest = _latest_evaluations(settings, run_id, config)
    png = reward_curves_png(metrics)
    curriculum = " -> ".join(str(s.exemplars) for s in config.curriculum.build().stages)
    base = code_span(base_model_label(config.model))
    if png:
        first, last = metrics[: max(1, len(metrics) // 10)], metrics[-max(1, len(metrics) // 10):]
        mean = [sum(m.get("reward_mean", 0.0) for m in part) / len(part) for part in (first, last)]
        curves = (f"![reward curves]({REWARD_CURVES})\n\nMean training reward over the first "
                  f"and last tenth of the steps: {mean[0]:.3f} -> {mean[1]:.3f}. Training "
                  "rewards are measured with the exemplars of each stage in the prompt; the "
                  "evaluation below is zero-shot.")
    else:
        curves = "The run has written no metric rows yet."
    sections = [
        f"# {markdown_text(run['name'])}",
        f"{base} trained with in-context reinforcement learning (ICRL) in ICRL Studio to answer "
        f"questions by {_purposes(config)}: GRPO with an exemplar curriculum "
        f"({curriculum} worked examples in the prompt), which aims at a model that calls the "
        f"{_tool_words(config)} without examples. This checkpoint is after {step} "
        f"of {run['total_steps']} training steps (run state: {run['state']}). "
        + _measured_behaviour(latest, config)
        + (" " + _lora_words(config.lora) if config.lora else ""),
        "## How to use\n\n" + _usage_section(config, repo_id or "PATH_OR_REPO_ID"),
        "## Base model\n\n" + _base_model_section(config.model, base),
        "## Training data\n\n" + _data_section(settings, plan),
        "## Curriculum\n\n" + _curriculum_section(config),
        "## Hyper-parameters\n\n" + _hyperparameters_section(config)
        + "\n\nThe whole run config is `run.yaml` in this repository.",
        "## Reward curves\n\n" + curves,
        "## Evaluation\n\n" + _evaluation_section(latest, config),
        "## Intended use and limits\n\n" + _limits(config),
        "## Reproduce\n\n" + _reproduce_section(run_bundle(settings, run_id), hub_id),
    ]
    front = yaml.safe_dump(metadata, sort_keys=False)
    return ModelCard(f"---\n{front}---\n\n" + "\n\n".join(sections) + "\n", metadata, png, step)


def _base_model_section(ref: str, label: str) -> str:
    """Which model the run started from and what the studio knows of it (its shelf entry:
    where it comes from and how well it reads what it is handed)."""
    packaged = packaged_model(ref)
    if packaged is None:
        return (f"{label}, given by the run's config (a Hugging Face id or a local folder); "
                "the studio has no reading figure for it (`bench/reader_ceiling.py` measures "
                "one).")
    lines = [f"{label}: {packaged.title} ({packaged.upstream}, licence {packaged.licence}), "
             f"converted from the GGUF in the package `{packaged.pip_name}` and checked by the "
             "studio (`studio models list`)."]
    if packaged.reader_ceiling:
        lines.append(f"How well it writes an answer it has been handed (`bench/reader_ceiling"
                     f".py`): {packaged.reader_ceiling}. A model that cannot read what its "
                     "search returns can learn the tool's format but not to answer from it.")
    lines += [f"- {note}" for note in packaged.notes]
    return "\n\n".join(lines[:2]) + ("\n\n" + "\n".join(lines[2:]) if lines[2:] else "")


def _purposes(config: RunConfig) -> str:
    return " and ".join(TOOLS[name].card.purpose for name in config.tools)


def _tool_words(config: RunConfig) -> str:
    """ "search tool", "python tool", "search and python tools"."""
    return " and ".join(config.tools) + (" tool" if len(config.tools) == 1 else " tools")


def _reproduce_section(bundle: dict, hub_id: str | None) -> str:
    """How to start the same run again, and the run's reproducibility bundle to do it with. A
    local base model is named by its folder's name only (no local path goes public)."""
    device = bundle["device"]
    trained_on = (f"It was trained on {markdown_text(device['name'])} ("
                  + ", ".join(filter(None, (device["kind"], device.get("dtype")))) + ")"
                  if device else "Its training had not started when this card was written")
    packages = ", ".join(f"{name} {version or 'not installed'}"
                         for name, version in bundle["packages"].items())
    local = ""
    if hub_id is None:
        folder = Path(bundle["config"]["model"]).name
        bundle = {**bundle, "config": {**bundle["config"], "model": folder}}
        local = (" The base model was a local folder, named here by its name only: add "
                 "`--model PATH` with its path.")
    return (f"{trained_on}, with seed {bundle['seed']} and {packages}. The block below holds "
            "the whole resolved config, the content hashes of its corpus, QA sets and "
            "exemplars, the device and the determinism settings; in an ICRL Studio that "
            "stores the same data, `studio run launch --from-card README.md` starts the same "
            "run (it refuses when the data differs, and warns when the package versions "
            f"do).{local} On a CPU, the same config and seed give the same metrics.\n\n"
            + card_block(bundle))


def _limits(config: RunConfig) -> str:
    usages = [TOOLS[name].card for name in config.tools]
    data = "questions and corpus" if config.data.corpus else "questions"
    other = "documents or kinds of\n  questions" if corpus_tools(config.tools) else \
        "kinds of questions"
    calls = ", ".join(u.calls for u in usages)
    poor = f"on other {other} its {calls} and answers may be poor."
    tools = "tool" if len(usages) == 1 else "tools"
    return f"""- Intended for research and prototypes of {"; and ".join(u.use for u in usages)}.
  How it answers without the {tools} was not measured.
- It was trained on the {data} named above only; {poor} The reward checks the final answer
  against reference answers ({config.reward.acc_weight:g} weight) and the tag format
  ({config.reward.format_weight:g} weight), not the truth of its reasoning: answers can be wrong,
  made up or unsupported by the {results_words(config.tools)} it read.
- It inherits the limits and biases of its base model and of the training data; do not use it
  for decisions about people, or for medical, legal or financial advice.
- Figures above come from small evaluation sets where stated; measure on your own held-out
  questions before relying on it."""


def reward_curves_image(settings: Settings, run_id: int, step: int | None = None) -> bytes:
    """The card's PNG, or a 404 while the run has no metric rows."""
    png = build_model_card(settings, run_id, step).reward_curves_png
    if png is None:
        raise NotFound(f"run {run_id} has written no metric rows yet: no reward curves")
    return png


class CardPreview(TypedDict):
    run_id: int
    step: int  # the checkpoint it describes (steps done)
    markdown: str  # README.md, YAML front matter included
    metadata: dict  # the front matter
    has_reward_curves: bool  # the card's image exists (the run has metric rows)


def preview_model_card(settings: Settings, run_id: int, step: int | None = None,
                       repo_id: str | None = None) -> CardPreview:
    """What the UI shows before an export: the README text and whether curves exist."""
    card = build_model_card(settings, run_id, step, repo_id)
    return {"run_id": run_id, "step": card.step, "markdown": card.markdown,
            "metadata": card.metadata, "has_reward_curves": card.reward_curves_png is not None}
