"""Plotly figures of a run's metric rows: the live run's panels and the compare page's overlays.

Rows are what `studio.services.runs.run_metrics` returns (one dict per step);
events are `run_events` rows (stage changes are drawn as dotted lines, warnings
as red lines with a marker that carries the message).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

# (panel title, [(metric key, line label)]); penalty rates are added per penalty found
LIVE_PANELS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Reward", [("reward_mean", "total"), ("acc", "accuracy"), ("format", "format")]),
    ("Penalty rates", []),
    ("KL to the reference", [("kl", "KL")]),
    ("Response length (tokens)", [("response_length", "tokens per rollout")]),
    ("Search calls per rollout", [("search_calls", "search calls")]),
    ("Masked fraction (tool output, not trained on)", [("masked_fraction", "masked")]),
]
PENALTY_PREFIX = "penalty_"
WARNING_PANEL = 4  # the search-calls panel: premature termination shows there first
PALETTE = ["#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#ca8a04", "#db2777",
           "#4b5563", "#65a30d", "#dc2626"]
PANEL_HEIGHT = 230


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pairs = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def penalty_keys(rows: list[dict]) -> list[str]:
    """The penalty-rate metrics present in the rows, in a stable order."""
    keys = {k for r in rows[-1:] + rows[:1] for k in r if k.startswith(PENALTY_PREFIX)}
    return sorted(keys)


def _grid(titles: list[str], cols: int = 2):
    rows = -(-len(titles) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, shared_xaxes=False,
                        vertical_spacing=0.32 / rows, horizontal_spacing=0.08)
    return fig, rows, cols


def _cell(index: int, cols: int) -> dict:
    return {"row": index // cols + 1, "col": index % cols + 1}


def _axis_suffix(index: int) -> str:
    return "" if index == 0 else str(index + 1)


def _legend_for_panel(fig: go.Figure, index: int, name: str) -> None:
    """A small legend at the top-left corner inside each panel (one legend per panel)."""
    xaxis = fig.layout[f"xaxis{_axis_suffix(index)}"]
    yaxis = fig.layout[f"yaxis{_axis_suffix(index)}"]
    fig.layout[name] = {"x": xaxis.domain[0] + 0.005, "y": yaxis.domain[1] - 0.005,
                        "xanchor": "left", "yanchor": "top", "bgcolor": "rgba(255,255,255,0.7)",
                        "font": {"size": 10}, "orientation": "h"}


def live_figure(rows: list[dict], events: list[dict]) -> go.Figure:
    """The live run's panels, with stage boundaries and warnings marked on each."""
    panels = [(title, lines or [(k, k[len(PENALTY_PREFIX):].replace("_", " "))
                                for k in penalty_keys(rows)])
              for title, lines in LIVE_PANELS]
    fig, _, cols = _grid([title for title, _ in panels])
    for index, (_, lines) in enumerate(panels):
        legend = "legend" if index == 0 else f"legend{index + 1}"
        for n, (key, label) in enumerate(lines):
            x, y = _series(rows, key)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=label, legend=legend,
                                     line={"width": 1.6, "color": PALETTE[n % len(PALETTE)]},
                                     hovertemplate=f"{label}: %{{y:.3g}} at step %{{x}}"
                                                   "<extra></extra>"),
                          **_cell(index, cols))
        if len(lines) > 1:
            _legend_for_panel(fig, index, legend)
        else:
            fig.update_traces(showlegend=False, selector={"legend": legend})
    _mark_events(fig, events, len(panels), cols)
    fig.update_layout(height=PANEL_HEIGHT * -(-len(panels) // cols), margin={"l": 40, "r": 10,
                      "t": 30, "b": 30}, template="plotly_white", hovermode="closest",
                      uirevision="live")
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    fig.update_annotations(font_size=12)
    return fig


def _vline(x: float, index: int, **line) -> dict:
    suffix = _axis_suffix(index)
    return {"type": "line", "x0": x, "x1": x, "y0": 0, "y1": 1, "xref": f"x{suffix}",
            "yref": f"y{suffix} domain", "line": line}


def _mark_events(fig: go.Figure, events: list[dict], panels: int, cols: int) -> None:
    """Dotted lines where a stage starts (labelled with its exemplar count) and red warnings.

    Shapes are set in one assignment: `add_vline` per panel costs ~40 ms each."""
    shapes, labels = [], []
    for event in events:
        data = event.get("data") or {}
        if event["kind"] == "stage_change":
            x = event["step"] - 0.5 if event["step"] > 0 else 0
            if event["step"] > 0:
                shapes += [_vline(x, i, dash="dot", color="#6b7280", width=1)
                           for i in range(panels)]
            labels.append({"x": x, "y": 0, "xref": "x", "yref": "y domain", "yanchor": "bottom",
                           "xanchor": "left", "showarrow": False,
                           "text": f"{data.get('to', '?')} ex.",
                           "font": {"size": 10, "color": "#374151"}})
    warnings = [e for e in events if e["kind"] == "warning"]
    for event in warnings:
        shapes += [_vline(event["step"], i, color="#dc2626", width=1) for i in range(panels)]
    fig.layout.shapes = shapes
    fig.layout.annotations = list(fig.layout.annotations) + labels
    if warnings:
        fig.add_trace(go.Scatter(
            x=[e["step"] for e in warnings], y=[0] * len(warnings), mode="markers",
            name="warning", showlegend=False,
            marker={"symbol": "triangle-up", "size": 12, "color": "#dc2626"},
            hovertext=[e["message"] for e in warnings], hoverinfo="text"),
            **_cell(WARNING_PANEL, cols))


def compare_figure(series: dict[str, list[dict]], metrics: list[tuple[str, str]]) -> go.Figure:
    """One panel per metric, one line per run (same colour for a run across panels).

    `series` maps a run's label to its metric rows; `metrics` lists (key, title).
    """
    fig, _, cols = _grid([title for _, title in metrics])
    for n, (label, rows) in enumerate(series.items()):
        colour = PALETTE[n % len(PALETTE)]
        for index, (key, _) in enumerate(metrics):
            x, y = _series(rows, key)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=label, legendgroup=label,
                                     showlegend=index == 0, line={"width": 1.6, "color": colour},
                                     hovertemplate=f"{label}: %{{y:.3g}} at step %{{x}}"
                                                   "<extra></extra>"),
                          **_cell(index, cols))
    fig.update_layout(height=PANEL_HEIGHT * -(-len(metrics) // cols) + 40,
                      margin={"l": 40, "r": 10, "t": 60, "b": 30}, template="plotly_white",
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})
    fig.update_annotations(font_size=12)
    return fig
