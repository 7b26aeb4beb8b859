"""The Curriculum designer: how many exemplars each stage of training shows.

One design (`{"stages": [...], "adaptive": ...}`, the run config's
`curriculum`) lives in the shared state; every control edits it and the
table, the step chart and the warnings are drawn from it, so the Launch page
(which also writes it, from an uploaded YAML) and this page always agree.
"""

from __future__ import annotations

import gradio as gr
import plotly.graph_objects as go

from frontend.shared import current
from studio.escaping import markdown_text
from studio.run_config import AdaptiveSpec, CurriculumSpec, config_field
from studio.services import curricula, presets, run_history
from studio.settings import Settings

TITLE = "Curriculum"

INTRO = """
## Curriculum
Training starts with worked examples (exemplars) in every prompt and removes them
stage by stage, so the model first copies the way of searching and then does it on
its own. **3 → 2 → 0** worked best in the paper: drop one, then the rest.
Edit the stages in the table, with the sliders, or start from a preset.
"""

PRESET_LABELS = {
    curricula.BEST_PRESET: "3 → 2 → 0  ★ the paper's best",
    "3-0": "3 → 0",
    "3-2-1-0": "3 → 2 → 1 → 0",
    "0": "0 (exemplar-free baseline)",
}
METRIC_WORDS = {
    "format": "format reward (answers in the right tags)",
    "valid_search_rate": "share of searches that were well formed",
    "search_calls": "tool calls per answer",
    "acc": "accuracy (answers that match)",
    "reward_mean": "total reward",
}
RULE_KEYS = ("metric", "direction", "threshold", "window", "min_steps", "max_steps")
GUIDANCE_SHOWN = ("guidance.mode", "guidance.share")
GUIDANCE_OPTIONS = ("guidance.shaping", "guidance.gamma", "guidance.when",
                    "prompt.exemplar_selection", "prompt.exemplar_draw", "reward.call_bonus")
GUIDANCE_PATHS = GUIDANCE_SHOWN + GUIDANCE_OPTIONS
"""How a stage's exemplars teach (`RunConfig.guidance`), which of them a prompt shows and
the call bonus: fields of the Launch page (the options folded away there), put in words here
beside the curriculum."""
MAX_EXEMPLARS = 8
MAX_STAGE_STEPS = 2000
DEFAULT_STEPS = CurriculumSpec().steps_per_stage


def default_design() -> dict:
    return curricula.preset_design(curricula.BEST_PRESET, DEFAULT_STEPS)


def steps_info() -> str:
    """Why the default stages are long, and what the ready-made runs use instead."""
    ready_made = sorted(stage["steps"] for preset in presets.RUN_PRESETS.values()
                        for stage in preset["curriculum"]["stages"])
    return (f"{DEFAULT_STEPS} a stage is the paper's length, trained on four large GPUs; on "
            "two CPU cores a step of the bundled model takes minutes, so the ready-made runs "
            f"on the Launch page use {ready_made[0]} to {ready_made[-1]} steps a stage.")


def stages_of(design: dict | None) -> list[dict]:
    return [dict(stage) for stage in (design or default_design())["stages"]]


def with_stages(design: dict | None, stages: list[dict]) -> dict:
    return {"stages": stages, "adaptive": (design or {}).get("adaptive")}


# --- edits (each returns the new design and the selected stage, from 1) ------------------


def apply_preset(design: dict | None, name: str, steps: float):
    return with_stages(design, curricula.preset_design(name, int(steps))["stages"]), 1


def from_table(design: dict | None, rows: list[list]):
    """The table's rows as stages; a cell that is not a whole number keeps the old design."""
    try:
        stages = [{"exemplars": int(float(e)), "steps": int(float(s))} for e, s in rows
                  if str(e).strip() != "" or str(s).strip() != ""]
    except (TypeError, ValueError):
        gr.Warning("Each cell must be a whole number: exemplars 0 or more, steps 1 or more.")
        return gr.skip()
    return with_stages(design, stages or stages_of(design)[:1])


def set_stage(design: dict | None, selected: int, exemplars: float, steps: float):
    stages = stages_of(design)
    if 1 <= selected <= len(stages):
        stages[selected - 1] = {"exemplars": int(exemplars), "steps": int(steps)}
    return with_stages(design, stages)


def add_stage(design: dict | None, selected: int):
    """A copy of the selected stage, right after it, selected."""
    stages = stages_of(design)
    at = min(max(selected, 1), len(stages))
    stages.insert(at, dict(stages[at - 1]))
    return with_stages(design, stages), at + 1


def remove_stage(design: dict | None, selected: int):
    stages = stages_of(design)
    if len(stages) == 1:
        gr.Warning("A curriculum needs at least one stage.")
        return gr.skip(), gr.skip()
    stages.pop(min(max(selected, 1), len(stages)) - 1)
    return with_stages(design, stages), min(selected, len(stages))


def move_stage(design: dict | None, selected: int, offset: int):
    stages = stages_of(design)
    other = selected + offset
    if not (1 <= selected <= len(stages) and 1 <= other <= len(stages)):
        return gr.skip(), gr.skip()
    stages[selected - 1], stages[other - 1] = stages[other - 1], stages[selected - 1]
    return with_stages(design, stages), other


def set_adaptive(design: dict | None, on: bool, metric: str, direction: str, threshold: float,
                 window: float, min_steps: float, max_steps: float):
    adaptive = None
    if on:
        adaptive = {"metric": metric, "direction": direction, "threshold": float(threshold),
                    "window": int(window), "min_steps": int(min_steps),
                    "max_steps": int(max_steps)}
    return {"stages": stages_of(design), "adaptive": adaptive}


# --- drawing ----------------------------------------------------------------------------


def step_chart(design: dict, described: dict) -> go.Figure:
    """Exemplars in the prompt over training steps: a step line with each stage labelled."""
    stages, starts = design["stages"], described["starts"]
    fig = go.Figure()
    if starts:
        xs = [*starts, described["total_steps"]]
        ys = [s["exemplars"] for s in stages] + [stages[-1]["exemplars"]]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", fill="tozeroy",
                                 line={"width": 3}, name="exemplars",
                                 hovertemplate="step %{x}: %{y} exemplars<extra></extra>"))
        for i, (start, stage) in enumerate(zip(starts, stages, strict=True), 1):
            if i > 1:
                fig.add_vline(x=start, line_dash="dot", line_color="grey")
            fig.add_annotation(x=start + stage["steps"] / 2, y=stage["exemplars"],
                               text=f"stage {i}: {stage['exemplars']}", showarrow=False,
                               yshift=14)
    top = max([s["exemplars"] for s in stages] + [1])
    title = "Exemplars in the prompt over training"
    if design.get("adaptive"):
        title += " (planned: adaptive stages end when the rule is met)"
    fig.update_layout(title=title, xaxis_title="training step",
                      yaxis_title="exemplars in the prompt", height=360, showlegend=False,
                      margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      yaxis={"range": [0, top + 1], "dtick": 1})
    return fig


def summary(design: dict, described: dict) -> str:
    if not described["starts"]:
        return "**✗ This curriculum cannot be used:**\n\n" + "\n".join(
            f"- {markdown_text(e)}" for e in described["errors"])
    spec = " → ".join(str(s["exemplars"]) for s in design["stages"])
    lines = [f"**{spec}**, {described['total_steps']} steps in all."]
    about = described["about"]
    if about:
        lines.append(f"\n{markdown_text(about[0].upper() + about[1:])}.\n")
    rule = design.get("adaptive")
    if rule:
        words = METRIC_WORDS.get(rule["metric"]) or markdown_text(rule["metric"])
        compare = "at least" if rule["direction"] == "at_least" else "at most"
        lines.append(f"Adaptive: each stage but the last ends once the {words}, averaged over "
                     f"its last {rule['window']} steps, is {compare} {rule['threshold']}, after "
                     f"{described['shortest_stage']} to {rule['max_steps']} of its steps; the "
                     "chart shows the planned stages.")
    lines += [f"- ✗ {markdown_text(e)}" for e in described["errors"]]
    lines += [f"- ⚠ {markdown_text(w)}" for w in described["warnings"]]
    if not described["warnings"] and not described["errors"]:
        lines.append("- ✓ No warning from the paper's findings.")
    return "\n".join(lines)


def guidance_words(guidance: dict | None) -> str:
    """The guidance the Launch page's fields hold (`GUIDANCE_PATHS` -> value; None: the
    defaults) in the fields' own words: the mode and what it does, then the options that do
    something with it (`run_history.unused_keys`: a mixed run's, luffy's gamma with luffy)."""
    values = {path: config_field(path).default for path in GUIDANCE_PATHS} | (guidance or {})
    config: dict[str, dict] = {}
    for path, value in values.items():
        section, key = path.split(".")
        config.setdefault(section, {})[key] = value
    unused = run_history.unused_keys(config)
    mode = config_field("guidance.mode")
    lines = [f"**{mode.title}: {markdown_text(values['guidance.mode'])}** (set on the "
             f"**Launch** page). {markdown_text(mode.description)}", ""]
    lines += [f"- {markdown_text(config_field(p).title)}: {markdown_text(_as_text(values[p]))}"
              for p in GUIDANCE_PATHS[1:] if p not in unused]
    return "\n".join(lines)


def _as_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def render(design: dict | None, selected: int):
    """Everything drawn from the design: table, chart, summary, the stage and rule controls."""
    design = design or default_design()
    described = curricula.describe(design)
    stages = design["stages"]
    selected = min(max(int(selected or 1), 1), len(stages))
    stage = stages[selected - 1]
    rows = [[s["exemplars"], s["steps"]] for s in stages]
    rule = design.get("adaptive")
    shown = rule or AdaptiveSpec().model_dump()
    return (rows, step_chart(design, described), summary(design, described),
            gr.Dropdown(choices=list(range(1, len(stages) + 1)), value=selected),
            stage["exemplars"], stage["steps"], rule is not None, gr.Group(visible=bool(rule)),
            *(shown[key] for key in RULE_KEYS))


def build(settings: Settings) -> None:
    design, guidance = current().curriculum, current().guidance
    rule = AdaptiveSpec()
    gr.Markdown(INTRO)
    with gr.Row():
        preset_buttons = {name: gr.Button(label, size="sm",
                                          variant="primary" if name == curricula.BEST_PRESET
                                          else "secondary", elem_id=f"preset-{name}")
                          for name, label in PRESET_LABELS.items()}
    preset_steps = gr.Slider(1, 1000, value=DEFAULT_STEPS, step=1,
                             label="Steps per stage for a preset", info=steps_info(),
                             elem_id="preset-steps")
    with gr.Row():
        with gr.Column(scale=2):
            table = gr.Dataframe(headers=["Exemplars", "Steps"], datatype="number",
                                 type="array", interactive=True, show_row_numbers=True,
                                 label="Stages, in order (edit a cell to change it)",
                                 elem_id="stage-table")
            with gr.Group():
                selected = gr.Dropdown(choices=[1], value=1, label="Stage", elem_id="stage-pick")
                exemplars = gr.Slider(0, MAX_EXEMPLARS, step=1, label="Exemplars in this stage",
                                      elem_id="stage-exemplars")
                steps = gr.Slider(1, MAX_STAGE_STEPS, step=1, label="Steps in this stage",
                                  elem_id="stage-steps")
            with gr.Row():
                add = gr.Button("Add stage", size="sm", elem_id="add-stage")
                remove = gr.Button("Remove stage", size="sm", elem_id="remove-stage")
                up = gr.Button("Move up", size="sm")
                down = gr.Button("Move down", size="sm")
            adaptive = gr.Checkbox(label="Adaptive: end each stage when the model is ready, "
                                         "not after a fixed number of steps",
                                   elem_id="adaptive")
            with gr.Group(visible=False) as adaptive_box:
                metric = gr.Dropdown([(w, m) for m, w in METRIC_WORDS.items()],
                                     value=rule.metric, label="Watch")
                direction = gr.Radio([("at least", "at_least"), ("at most", "at_most")],
                                     value=rule.direction, label="Move on when it is")
                threshold = gr.Number(rule.threshold, label="Threshold")
                with gr.Row():
                    window = gr.Number(rule.window, precision=0, label="Averaged over (steps)")
                    min_steps = gr.Number(rule.min_steps, precision=0,
                                          label="Not before (steps)")
                    max_steps = gr.Number(rule.max_steps, precision=0, label="Not after (steps)")
        with gr.Column(scale=3):
            chart = gr.Plot(label="Exemplar count over training", elem_id="curriculum-chart")
            notes = gr.Markdown(elem_id="curriculum-notes")
            guidance_notes = gr.Markdown(guidance_words(None), elem_id="curriculum-guidance")

    rule_inputs = [adaptive, metric, direction, threshold, window, min_steps, max_steps]
    drawn = [table, chart, notes, selected, exemplars, steps, adaptive, adaptive_box,
             *rule_inputs[1:]]

    def redraw(design_now, selected_now):
        return render(design_now, selected_now)

    # The design starts as the paper's best; every change to it (here, or an uploaded run
    # YAML on the Launch page) redraws the page. Controls listen to .input (user edits
    # only), so a redraw never writes the design back.
    current().blocks.load(lambda d: d or default_design(), design, design)
    design.change(redraw, [design, selected], drawn)
    for name, button in preset_buttons.items():
        button.click(lambda d, s, name=name: apply_preset(d, name, s), [design, preset_steps],
                     [design, selected])
    table.input(from_table, [design, table], design)
    selected.input(redraw, [design, selected], drawn)
    gr.on([exemplars.release, steps.release], set_stage, [design, selected, exemplars, steps],
          design)
    add.click(add_stage, [design, selected], [design, selected])
    remove.click(remove_stage, [design, selected], [design, selected])
    up.click(lambda d, s: move_stage(d, s, -1), [design, selected], [design, selected])
    down.click(lambda d, s: move_stage(d, s, +1), [design, selected], [design, selected])
    gr.on([c.input for c in rule_inputs], set_adaptive, [design, *rule_inputs], design)
    guidance.change(guidance_words, guidance, guidance_notes, show_progress="hidden")
