"""Compare: the curves of several runs overlaid on one step axis (after the chosen ones, the
answers without and with the exemplars as a hint apart, where a run recorded them: mixed
guidance), and their configs side by side with the settings that differ marked (and listed
first); a setting a run's own config overrides (the preset beside explicit stages) says "not
used", and one no run uses is left out."""

from __future__ import annotations

import json

import gradio as gr
import pandas as pd

from frontend import shared
from frontend.charts import compare_figure, half_metrics, plot_value
from frontend.components import toast_user_errors
from frontend.run_picker import run_choices, run_dropdown_update, run_label
from studio.services import run_history
from studio.settings import Settings

TITLE = "Compare"
METRICS = {  # key -> panel title
    "reward_mean": "Reward (total)", "acc": "Accuracy", "format": "Format score",
    "search_calls": "Tool calls per rollout", "kl": "KL to the reference",
    "response_length": "Response length (tokens)", "masked_fraction": "Masked fraction",
    "em": "Exact match", "f1": "F1", "valid_search_rate": "Valid search rate",
    "answer_rate": "Answer rate", "entropy": "Entropy",
}
DEFAULT_METRICS = ["reward_mean", "acc", "format", "search_calls"]
EMPTY = "Choose two or more runs above to overlay their curves and compare their configs."
TOO_FEW = ("### Nothing to compare yet\nCompare overlays the curves of two or more runs and "
           "sets their configs side by side: launch them on **Launch** (after loading data on "
           "**Data**), and pick them above.")


def idle_message(runs_in_studio: int) -> str:
    """What the page says while fewer than two runs are chosen: to choose them, or, with
    fewer than two in the studio, what to do first."""
    return EMPTY if runs_in_studio >= 2 else TOO_FEW
DIFFERS = "≠"
NOT_USED = "not used"
SETTING_WIDTH = 22  # % of the table; the runs share what the marks and settings leave


def drawn_panels(metric_keys: list[str] | None, recorded) -> list[tuple[str, str]]:
    """(metric key, panel title) of each panel drawn: the chosen curves (or the default ones)
    that the runs recorded, then the answers without and with the exemplars as a hint, apart,
    where a run recorded them (`half_metrics`)."""
    return [(k, METRICS[k]) for k in metric_keys or DEFAULT_METRICS if k in recorded] + \
        half_metrics(recorded)


def stages_words(stages: list[dict]) -> str:
    """Explicit stages on one short line: `3 → 2 → 0 (100 + 100 + 100 steps)`."""
    return (" → ".join(str(s["exemplars"]) for s in stages)
            + f" ({' + '.join(str(s['steps']) for s in stages)} steps)")


VALUE_WORDS = {"curriculum.stages": stages_words}
"""Settings whose value reads better in words than as JSON."""


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
        elif path in VALUE_WORDS:
            flat[path] = VALUE_WORDS[path](value)
        else:
            flat[path] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return flat


def config_table(labels: list[str], configs: list[dict], differences: list[str],
                 only_differences: bool, unused: list[list[str]] | None = None):
    """One row per setting, one column per run; the settings that differ marked, tinted and
    listed first; a run's `unused` settings say so, and a setting no run uses is left out."""
    flat = [flatten(c or {}) for c in configs]
    for values, keys_unused in zip(flat, unused or [[]] * len(flat), strict=True):
        values.update(dict.fromkeys(keys_unused, NOT_USED))
    keys = sorted(k for k in set().union(*flat) if any(f.get(k) != NOT_USED for f in flat))
    differ = set(differences)
    rows = [[DIFFERS if key in differ else "", key, *(f.get(key, "–") for f in flat)]
            for key in keys if key in differ or not only_differences]
    rows.sort(key=lambda row: row[0] != DIFFERS)
    frame = pd.DataFrame(rows, columns=["", "setting", *labels])

    def tint(row):
        return ["background-color: #fef3c7" if row.iloc[0] == DIFFERS else ""] * len(row)

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
        """Fresh choices; with none chosen, what to do (`idle_message`)."""
        update = run_dropdown_update(settings, current, multiselect=True)
        return update, gr.skip() if current else idle_message(len(update["choices"]))

    shared.on_show(refresh_choices, inputs=chosen, outputs=[chosen, message],
                   show_progress="hidden")

    @toast_user_errors
    def compare(run_ids, metric_keys, differences_only):
        if not run_ids or len(run_ids) < 2:
            return idle_message(len(run_choices(settings))), gr.Plot(visible=False), \
                gr.Dataframe(visible=False)
        found = run_history.compare_runs(settings, [int(i) for i in run_ids])
        labels = [run_label(r) for r in found["runs"]]
        missing = [METRICS[k] for k in metric_keys or [] if k not in found["series"]]
        note = f"Not recorded by these runs yet: {', '.join(missing)}." if missing else ""
        panels = drawn_panels(metric_keys, found["series"])
        figure = compare_figure(labels, found["steps"], found["series"], panels)
        table_value = config_table(labels, found["configs"], found["differences"],
                                   differences_only, found["unused"])
        run_width = f"{(94 - SETTING_WIDTH) / len(labels):.0f}%"  # cells add padding
        return note, gr.Plot(plot_value(figure), visible=bool(panels)), \
            gr.Dataframe(table_value, visible=True,
                         column_widths=["3%", f"{SETTING_WIDTH}%", *[run_width] * len(labels)])

    gr.on([chosen.change, metrics.change, only_differences.change], compare,
          inputs=[chosen, metrics, only_differences], outputs=[message, plot, table])
