"""Compare: the curves of several runs overlaid, and their configs side by side with the
differences marked."""

from __future__ import annotations

import json

import gradio as gr
import pandas as pd

from frontend.charts import compare_figure, plot_value
from frontend.run_picker import run_dropdown_update, run_label, shows_user_errors
from studio.services import runs
from studio.settings import Settings

TITLE = "Compare"
METRICS = {  # key -> panel title
    "reward_mean": "Reward (total)", "acc": "Accuracy", "format": "Format score",
    "search_calls": "Search calls per rollout", "kl": "KL to the reference",
    "response_length": "Response length (tokens)", "masked_fraction": "Masked fraction",
    "em": "Exact match", "f1": "F1", "valid_search_rate": "Valid search rate",
    "answer_rate": "Answer rate", "entropy": "Entropy",
}
DEFAULT_METRICS = ["reward_mean", "acc", "format", "search_calls"]
EMPTY = "Choose two or more runs above to overlay their curves and compare their configs."
DIFFERS = "≠"


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """Dotted keys to printable values: `grpo.lr` -> `1e-06`; a list (of stages) is one JSON
    value."""
    flat = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{path}."))
        elif value is None:
            flat[path] = "–"
        else:
            flat[path] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return flat


def config_table(chosen: list[dict], only_differences: bool):
    """One row per config key, one column per run, the rows that differ marked and tinted."""
    flat = {run_label(r): flatten(r["config"]) for r in chosen}
    keys = sorted(set().union(*(f.keys() for f in flat.values())))
    rows = []
    for key in keys:
        values = [f.get(key, "–") for f in flat.values()]
        differs = len(set(values)) > 1
        if differs or not only_differences:
            rows.append([DIFFERS if differs else "", key, *values])
    rows.sort(key=lambda row: row[0] != DIFFERS)  # the differences first, each part sorted
    frame = pd.DataFrame(rows, columns=["", "setting", *flat.keys()])

    def tint(row):
        colour = "background-color: #fef3c7" if row.iloc[0] == DIFFERS else ""
        return [colour] * len(row)

    return frame.style.apply(tint, axis=1)


def build(settings: Settings) -> None:
    gr.Markdown("## Compare runs")
    with gr.Row():
        chosen = gr.Dropdown(label="Runs", choices=[], multiselect=True, elem_id="compare-runs",
                             scale=3)
        metrics = gr.Dropdown(label="Curves", multiselect=True, value=DEFAULT_METRICS,
                              choices=[(title, key) for key, title in METRICS.items()], scale=3,
                              elem_id="compare-metrics")
    message = gr.Markdown(EMPTY, elem_id="compare-message")
    plot = gr.Plot(show_label=False, elem_id="compare-plot", visible=False)
    only_differences = gr.Checkbox(label="Show only the settings that differ", value=False)
    table = gr.Dataframe(interactive=False, wrap=True, elem_id="compare-config", visible=False,
                         label="Configs (≠ marks a setting that differs; those come first)")

    def refresh_choices(current):
        return run_dropdown_update(settings, current, multiselect=True)

    gr.on([chosen.focus], refresh_choices, inputs=chosen, outputs=chosen,
          show_progress="hidden")
    gr.on(triggers=None, fn=lambda: refresh_choices([]), outputs=chosen, show_progress="hidden")

    @shows_user_errors
    def compare(run_ids, metric_keys, differences_only):
        if not run_ids or len(run_ids) < 2:
            return EMPTY, gr.Plot(visible=False), gr.Dataframe(visible=False)
        chosen_runs = [runs.get_run(settings, int(i)) for i in run_ids]
        series = {run_label(r): runs.run_metrics(settings, r["id"]) for r in chosen_runs}
        keys = metric_keys or DEFAULT_METRICS
        empty = [label for label, rows in series.items() if not rows]
        note = f"No steps recorded yet for: {', '.join(empty)}." if empty else ""
        figure = compare_figure(series, [(k, METRICS[k]) for k in keys])
        return note, gr.Plot(plot_value(figure), visible=True), \
            gr.Dataframe(config_table(chosen_runs, differences_only), visible=True)

    gr.on([chosen.change, metrics.change, only_differences.change], compare,
          inputs=[chosen, metrics, only_differences], outputs=[message, plot, table])
