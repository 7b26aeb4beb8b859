"""Plotly figures of a run's metric rows: the live run's panels and the compare page's overlays.

Rows are what the runs services return (one dict per step); events are the
run's event rows (stage changes are drawn as dotted lines labelled with the
new exemplar count, warnings as red lines with a marker that carries the
message). Steps are shown from 1 (`studio.steps`), on whole-step ticks; a curve of few
points marks each point. Values read as plain numbers (no "µ"); a panel's legend sits over
the panel, titled with it; the toolbar has the right margin to itself. Figures are built as
plain plotly JSON: plotly's per-property validation took ~0.3 s for the live panels of a
1,000-step run, most of a page load's budget; tests validate the dicts with
`plotly.graph_objects`. Plotly reads HTML tags in names, labels and hover text: run names
and messages are escaped.
"""

from __future__ import annotations

import functools

import plotly.io as pio
from gradio.components.plot import PlotData

from studio.escaping import html_text
from studio.steps import MARK_POINTS_BELOW, shown_step, stage_line_x

# (panel title, [(metric key, line label)]); penalty rates are added per penalty found
LIVE_PANELS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Reward", [("reward_mean", "total"), ("acc", "accuracy"), ("format", "format")]),
    ("Penalty rates", []),
    ("KL to the reference", [("kl", "KL")]),
    ("Response length (tokens)", [("response_length", "tokens per rollout")]),
    ("Tool calls per rollout", [("search_calls", "tool calls")]),
    ("Masked fraction (tool output, not trained on)", [("masked_fraction", "masked")]),
]
GUIDANCE_HALVES = (("zero_shot", "Answers without exemplars"),
                   ("guided", "Answers with the exemplars as a hint"))
"""A mixed-guidance run's rollouts in two halves, by the prefix of their step metrics (a soft
curriculum's zero-shot questions have the first too)."""
HALF_FIGURES = (("valid_search_rate", "tool-call rate"), ("answer_rate", "answer rate"),
                ("acc", "accuracy"))
HALF_PANELS: list[tuple[str, list[tuple[str, str]]]] = [
    (title, [(f"{prefix}_{key}", label) for key, label in HALF_FIGURES])
    for prefix, title in GUIDANCE_HALVES]
"""The live run's panels of each half, side by side, drawn when a run records them."""
PENALTY_PREFIX = "penalty_"
WARNING_PANEL = 4  # the tool-calls panel: premature termination shows there first
PALETTE = ["#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#ca8a04", "#db2777",
           "#4b5563", "#65a30d", "#dc2626"]
PANEL_HEIGHT = 230
COLUMNS = 2
MODEBAR_WIDTH = 36  # the right margin, where plotly's toolbar stands upright
LEGEND_ROWS = 3  # a legend of more lines is split into columns side by side
EVERY_STEP_UP_TO = 10  # a tick on each step while the run has this many; plotly's beyond


@functools.cache
def _template() -> dict:
    return pio.templates["plotly_white"].to_plotly_json()


def plot_value(figure: dict) -> PlotData:
    """What `gr.Plot` takes: the figure as plotly JSON."""
    return PlotData(type="plotly", plot=pio.to_json(figure, validate=False))


def _suffix(index: int) -> str:
    return "" if index == 0 else str(index + 1)


def _grid(titles: list[str], top: float = 30, untitled: frozenset[int] = frozenset()) -> dict:
    """A layout of panels in COLUMNS columns: axes x/y, x2/y2, ... and a title over each
    (but the `untitled`, whose legend carries their title)."""
    rows = -(-len(titles) // COLUMNS)
    height = PANEL_HEIGHT * rows + top
    v_gap, h_gap = 60 / height, 0.08
    panel_h = (1 - v_gap * (rows - 1)) / rows
    panel_w = (1 - h_gap * (COLUMNS - 1)) / COLUMNS
    layout = {"template": _template(), "height": height, "hovermode": "closest",
              "margin": {"l": 40, "r": MODEBAR_WIDTH, "t": top, "b": 30}, "annotations": [],
              "modebar": {"orientation": "v"}}
    for index, title in enumerate(titles):
        row, col = divmod(index, COLUMNS)
        x0, y1 = col * (panel_w + h_gap), 1 - row * (panel_h + v_gap)
        n = _suffix(index)
        layout[f"xaxis{n}"] = {"domain": [x0, x0 + panel_w], "anchor": f"y{n}"}
        # (the bottom row's edge sums to about 0, and plotly refuses -1e-16)
        layout[f"yaxis{n}"] = {"domain": [max(0.0, y1 - panel_h), y1], "anchor": f"x{n}",
                               "rangemode": "tozero", "exponentformat": "none",
                               "separatethousands": True}
        if index not in untitled:
            layout["annotations"].append({"text": title, "x": x0 + panel_w / 2, "y": y1,
                                          "xref": "paper", "yref": "paper", "xanchor": "center",
                                          "yanchor": "bottom", "showarrow": False,
                                          "font": {"size": 12}})
    return layout


def _step_axes(layout: dict, panels: int, steps: list[int]) -> None:
    """Whole steps on every x axis: one tick per step while there are few (plotly would put
    0.5 between two), plotly's own (whole numbers from there) beyond."""
    last = max(steps, default=0)
    if not 0 < last <= EVERY_STEP_UP_TO:
        return
    for index in range(panels):
        layout[f"xaxis{_suffix(index)}"].update(tick0=1, dtick=1, range=[0.5, last + 0.5])


def _line(rows: list[dict], key: str, label: str, index: int, colour: str, **extra) -> dict:
    """One curve, named `label` (as text) in its legend and hover box; each point marked
    while there are few."""
    pairs = [(shown_step(r["step"]), r[key]) for r in rows if r.get(key) is not None]
    n = _suffix(index)
    return {"type": "scatter", "mode": "lines+markers" if len(pairs) < MARK_POINTS_BELOW
            else "lines", "name": html_text(label), "xaxis": f"x{n}",
            "yaxis": f"y{n}", "x": [p[0] for p in pairs], "y": [p[1] for p in pairs],
            "line": {"width": 1.6, "color": colour}, "marker": {"size": 6, "color": colour},
            # the name by reference: one typed into the template would be read as one
            "hovertemplate": "%{fullData.name}: %{y:.3g} at step %{x}<extra></extra>", **extra}


def penalty_keys(rows: list[dict]) -> list[str]:
    """The penalty-rate metrics present in the rows, in a stable order."""
    return sorted({k for r in rows[:1] + rows[-1:] for k in r if k.startswith(PENALTY_PREFIX)})


def _legends(layout: dict, index: int, title: str, count: int, first: int) -> list[str]:
    """Legends over panel `index`, its title on the first, columns of LEGEND_ROWS lines side
    by side; `first` numbers the first (plotly's legend, legend2, ...). Their ids."""
    x0, x1 = layout[f"xaxis{_suffix(index)}"]["domain"]
    top = layout[f"yaxis{_suffix(index)}"]["domain"][1]
    columns = -(-count // LEGEND_ROWS)
    ids = []
    for column in range(columns):
        legend = "legend" if first + column == 1 else f"legend{first + column}"
        layout[legend] = {"x": x0 + column * (x1 - x0) / columns, "xanchor": "left",
                          "y": top, "yanchor": "bottom", "orientation": "v",
                          "bgcolor": "rgba(0,0,0,0)", "font": {"size": 10}}
        if column == 0:
            layout[legend]["title"] = {"text": title, "font": {"size": 12}}
        ids += [legend] * min(LEGEND_ROWS, count - column * LEGEND_ROWS)
    return ids


def half_metrics(recorded) -> list[tuple[str, str]]:
    """(metric key, panel title) of each half's figures among the `recorded` keys, the two
    halves of a figure one after the other (side by side in a grid of two columns)."""
    return [(f"{prefix}_{key}", f"{label.capitalize()}: {title.lower()}")
            for key, label in HALF_FIGURES for prefix, title in GUIDANCE_HALVES
            if f"{prefix}_{key}" in recorded]


def live_figure(rows: list[dict], events: list[dict], empty_note: str = "") -> dict:
    """The live run's panels, with stage boundaries and warnings marked on each (and each
    half's panels where the rows have them: `HALF_PANELS`); without rows, `empty_note` (say
    when the first point comes) over panels with no axes."""
    panels = [(title, lines or [(k, k[len(PENALTY_PREFIX):].replace("_", " "))
                                for k in penalty_keys(rows)])
              for title, lines in LIVE_PANELS]
    panels += [(title, lines) for title, lines in HALF_PANELS
               if any(key in row for row in rows for key, _ in lines)]
    # (plotly shows no legend, title included, of curves without points)
    with_legend = frozenset(i for i, (_, lines) in enumerate(panels) if len(lines) > 1 and rows)
    top = 30 + 16 * LEGEND_ROWS if with_legend & set(range(COLUMNS)) else 30
    layout = _grid([title for title, _ in panels], top=top, untitled=with_legend)
    data, legends = [], 1
    for index, (title, lines) in enumerate(panels):
        ids = _legends(layout, index, title, len(lines), legends) if index in with_legend \
            else [None] * len(lines)
        legends += len(set(ids) - {None})
        for n, (key, label) in enumerate(lines):
            data.append(_line(rows, key, label, index, PALETTE[n % len(PALETTE)],
                              **({"legend": ids[n]} if ids[n] else {"showlegend": False})))
    _step_axes(layout, len(panels), [shown_step(r["step"]) for r in rows])
    if rows:
        _mark_events(layout, data, events, len(panels))
    else:
        for index in range(len(panels)):
            layout[f"xaxis{_suffix(index)}"]["visible"] = False
            layout[f"yaxis{_suffix(index)}"]["visible"] = False
        layout["annotations"].append({
            "text": "<br>".join(html_text(line) for line in empty_note.splitlines()),
            "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper", "showarrow": False,
            "font": {"size": 14, "color": "#374151"},
            "bgcolor": "#f3f4f6", "bordercolor": "#d1d5db", "borderpad": 10})
    layout["uirevision"] = "live"  # keep the user's zoom while new steps arrive
    return {"data": data, "layout": layout}


def _vline(x: float, index: int, **line) -> dict:
    n = _suffix(index)
    return {"type": "line", "x0": x, "x1": x, "y0": 0, "y1": 1, "xref": f"x{n}",
            "yref": f"y{n} domain", "line": line}


def _mark_events(layout: dict, data: list, events: list[dict], panels: int) -> None:
    """Dotted lines where a stage starts (labelled with its exemplar count) and red warnings."""
    shapes = []
    for event in events:
        if event["kind"] != "stage_change":
            continue
        x = stage_line_x(event["step"]) if event["step"] > 0 else shown_step(0)
        if event["step"] > 0:
            shapes += [_vline(x, i, dash="dot", color="#6b7280", width=1) for i in range(panels)]
        layout["annotations"].append({
            "x": x, "y": 0, "xref": "x", "yref": "y domain", "xanchor": "left",
            "yanchor": "bottom", "showarrow": False, "font": {"size": 10, "color": "#374151"},
            "text": f"{html_text((event.get('data') or {}).get('to', '?'))} ex."})
    warnings = [e for e in events if e["kind"] == "warning"]
    for event in warnings:
        shapes += [_vline(shown_step(event["step"]), i, color="#dc2626", width=1)
                   for i in range(panels)]
    if warnings:
        n = _suffix(WARNING_PANEL)
        data.append({"type": "scatter", "mode": "markers", "name": "warning",
                     "showlegend": False, "xaxis": f"x{n}", "yaxis": f"y{n}",
                     "x": [shown_step(e["step"]) for e in warnings], "y": [0] * len(warnings),
                     "marker": {"symbol": "triangle-up", "size": 12, "color": "#dc2626"},
                     "hovertext": [html_text(e["message"]) for e in warnings],
                     "hoverinfo": "text"})
    layout["shapes"] = shapes


def compare_figure(labels: list[str], steps: list[int], series: dict[str, list[list]],
                   metrics: list[tuple[str, str]]) -> dict:
    """One panel per metric, one line per run (the same colour for a run in every panel).

    `series[key][i]` is run `labels[i]`'s value at each of `steps` (None where it has none),
    as `run_history.compare_runs` aligns them; `metrics` lists (key, panel title).
    """
    layout = _grid([title for _, title in metrics], top=70)
    layout["legend"] = {"orientation": "h", "x": 0, "y": 1, "yanchor": "top",
                        "yref": "container"}  # in the top margin, above the panel titles
    data = []
    for n, label in enumerate(labels):
        for index, (key, _) in enumerate(metrics):
            rows = [{"step": s, key: v} for s, v in zip(steps, series[key][n], strict=True)]
            data.append(_line(rows, key, label, index, PALETTE[n % len(PALETTE)],
                              legendgroup=label, showlegend=index == 0))
    _step_axes(layout, len(metrics), [shown_step(s) for s in steps])
    return {"data": data, "layout": layout}
