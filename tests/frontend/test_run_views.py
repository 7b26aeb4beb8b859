"""What the run pages draw, checked on their data: the live panels and the compare overlay
(valid plotly, stage boundaries, warnings), the rollout viewer's spans and token table, the
compare page's config table, and the Evaluate page's question limit and notes."""

from __future__ import annotations

import json
import re
from html import unescape

import plotly.graph_objects as go
import pytest
from markdown_it import MarkdownIt

from frontend.charts import (
    HALF_PANELS,
    LIVE_PANELS,
    MODEBAR_WIDTH,
    compare_figure,
    live_figure,
    plot_value,
)
from frontend.pages import evaluate
from frontend.pages.compare import DIFFERS, NOT_USED, config_table, drawn_panels
from frontend.rollout_view import (
    COLOR_MAP,
    NOT_TRAINED,
    OVERLAYS,
    PREFIX,
    RESULT_LABELS,
    header_markdown,
    highlighted,
    overlay_html,
    overlay_legend_html,
    reward_turns_markdown,
    token_rows,
    token_summary,
    token_table,
)
from studio.escaping import markdown_text
from studio.method.reward import PENALTY_NAMES
from studio.method.rollouts import Rollout, Segment, rollout_segments
from studio.method.tags import CALCULATOR_TOOL, PYTHON_TOOL, corrective_message
from studio.method.tools import named_specs
from studio.run_config import parse_run_config
from studio.services.errors import InvalidInput
from studio.services.model_card import reward_curves_figure
from studio.services.run_history import config_differences, unused_keys

ROWS = [{"step": s, "stage": s // 4, "exemplars": (3, 2, 0)[s // 4], "reward_mean": s / 12,
         "acc": s / 20, "format": 0.5, "kl": 0.001 * s, "response_length": 100 + s,
         "search_calls": 1.0, "masked_fraction": 0.3, "penalty_no_search": 0.1,
         "penalty_missing_answer": 0.4} for s in range(12)]
EVENTS = [
    {"step": 0, "kind": "stage_change", "message": "stage 1", "data": {"to": 3}},
    {"step": 4, "kind": "stage_change", "message": "stage 2", "data": {"from": 3, "to": 2}},
    {"step": 8, "kind": "stage_change", "message": "stage 3", "data": {"from": 2, "to": 0}},
    {"step": 10, "kind": "warning", "message": "search calls fell by 60%", "data": {}},
    {"step": 5, "kind": "info", "message": "resumed", "data": {}},
]


def panel_titles(figure: dict) -> list[str]:
    """Each panel's title: its legend's title where it has a legend, else the text over it."""
    layout = figure["layout"]
    titles = {a["text"]: a["x"] for a in layout["annotations"] if a.get("xref") == "paper"
              and a.get("yanchor") == "bottom"}
    titles |= {v["title"]["text"]: v["x"] for k, v in layout.items()
               if k.startswith("legend") and "title" in v}
    return list(titles)


def test_live_figure_is_valid_plotly_with_every_panel_and_penalty():
    figure = live_figure(ROWS, EVENTS)
    go.Figure(figure)  # raises on anything plotly does not accept
    names = [t["name"] for t in figure["data"]]
    assert names[:3] == ["total", "accuracy", "format"]
    assert {"missing answer", "no search", "KL", "tool calls", "masked"} <= set(names)
    reward = figure["data"][0]
    assert reward["x"] == list(range(1, 13)) and reward["y"][-1] == 11 / 12
    assert sorted(panel_titles(figure)) == sorted(title for title, _ in LIVE_PANELS)


def test_stage_boundaries_and_warnings_are_drawn_on_every_panel():
    """Steps are shown from 1: stage 2 starts at step 5 (stored 4), its line between 4 and 5."""
    figure = live_figure(ROWS, EVENTS)
    shapes = figure["layout"]["shapes"]
    dotted = [s for s in shapes if s["line"].get("dash") == "dot"]
    red = [s for s in shapes if s["line"]["color"] == "#dc2626"]
    panels = len(LIVE_PANELS)
    assert sorted({s["x0"] for s in dotted}) == [4.5, 8.5] and len(dotted) == 2 * panels
    assert {s["x0"] for s in red} == {11} and len(red) == panels
    labels = [a["text"] for a in figure["layout"]["annotations"] if a.get("xref") == "x"]
    assert labels == ["3 ex.", "2 ex.", "0 ex."]
    warning = next(t for t in figure["data"] if t["name"] == "warning")
    assert warning["x"] == [11] and warning["hovertext"] == ["search calls fell by 60%"]


def test_the_page_and_the_exported_png_draw_stage_lines_at_the_same_steps():
    page = {s["x0"] for s in live_figure(ROWS, EVENTS)["layout"]["shapes"]
            if s["line"].get("dash") == "dot"}
    png = reward_curves_figure(ROWS)
    for axes in png.axes:
        assert {line.get_xdata()[0] for line in axes.lines
                if line.get_linestyle() == ":"} == page == {4.5, 8.5}
        assert axes.lines[0].get_xdata()[0] == 1, "the first step is step 1"


def test_short_series_show_each_point_and_integer_steps():
    """One step done: a line of one point draws nothing, a marker does; the axis counts
    steps 1, 2, ... with no 0.5 between them."""
    for rows in (ROWS[:1], ROWS[:2]):
        figure = live_figure(rows, EVENTS[:1])
        go.Figure(figure)
        curves = [t for t in figure["data"] if t["name"] != "warning"]
        assert all("markers" in t["mode"] for t in curves)
        for n in range(1, len(LIVE_PANELS) + 1):
            axis = figure["layout"][f"xaxis{'' if n == 1 else n}"]
            assert (axis["tick0"], axis["dtick"]) == (1, 1)
            assert axis["range"] == [0.5, len(rows) + 0.5]
    many = [{**ROWS[0], "step": s} for s in range(200)]
    figure = live_figure(many, [])
    assert all(t["mode"] == "lines" for t in figure["data"])
    assert "dtick" not in figure["layout"]["xaxis"], "plotly's own integer ticks for 200 steps"


def test_a_run_without_steps_says_when_its_first_point_comes():
    note = "The first point comes after step 1."
    figure = live_figure([], [], empty_note=note)
    go.Figure(figure)
    assert all(t["x"] == [] for t in figure["data"])
    notes = [a for a in figure["layout"]["annotations"] if a["text"] == note]
    assert len(notes) == 1 and (notes[0]["x"], notes[0]["y"]) == (0.5, 0.5)
    assert not any(figure["layout"][f"xaxis{n}"]["visible"] for n in ("", 2, 3, 4, 5, 6))
    assert panel_titles(figure) == [title for title, _ in LIVE_PANELS], "each panel says what"


def test_values_read_plainly_and_legends_sit_outside_the_panels():
    """No SI prefix ("5µ" for a KL of 0.000005); a panel's legend sits over it, titled with
    the panel's title, never over its lines; the toolbar has a margin of its own."""
    every_penalty = [{**row, **{f"penalty_{name}": 0.1 for name in PENALTY_NAMES}} for row in ROWS]
    layout = live_figure(every_penalty, EVENTS)["layout"]
    for n in ("", 2, 3, 4, 5, 6):
        assert layout[f"yaxis{n}"]["exponentformat"] == "none"
    legends = [v for k, v in layout.items() if k.startswith("legend")]
    assert [v["title"]["text"] for v in legends if "title" in v] == ["Reward", "Penalty rates"]
    assert len(legends) == 3, "six penalties: two columns of three"
    tops = {layout[k]["domain"][1] for k in layout if k.startswith("yaxis")}
    for legend in legends:
        assert legend["yanchor"] == "bottom" and legend["y"] in tops
    assert layout["modebar"]["orientation"] == "v"
    assert layout["margin"]["r"] >= MODEBAR_WIDTH


def test_plot_value_is_the_figure_as_plotly_json():
    value = plot_value(live_figure(ROWS, EVENTS))
    assert value.type == "plotly"
    assert json.loads(value.plot)["data"][0]["name"] == "total"


# a mixed-guidance run: the answers without and with the exemplars as a hint, apart; the
# last steps show no exemplar, so none is guided there
HALVES = [{**row, "guided_share": 0.5 if row["exemplars"] else 0.0,
           "zero_shot_valid_search_rate": row["step"] / 11, "zero_shot_answer_rate": 1.0,
           "zero_shot_acc": 0.1,
           **({"guided_valid_search_rate": 0.9, "guided_answer_rate": 1.0, "guided_acc": 0.4}
              if row["exemplars"] else {})} for row in ROWS]


def test_a_mixed_run_draws_its_answers_without_and_with_the_hint_side_by_side():
    figure = live_figure(HALVES, EVENTS)
    go.Figure(figure)
    assert sorted(panel_titles(figure)) == sorted(t for t, _ in LIVE_PANELS + HALF_PANELS)
    assert [t for t, _ in HALF_PANELS] == ["Answers without exemplars",
                                           "Answers with the exemplars as a hint"]
    left, right = (len(LIVE_PANELS) + 1, len(LIVE_PANELS) + 2)  # the axes' numbers
    assert figure["layout"][f"yaxis{left}"]["domain"] == \
        figure["layout"][f"yaxis{right}"]["domain"], "side by side"
    curves = {(t["name"], t["xaxis"]): t for t in figure["data"]}
    calls = curves["tool-call rate", f"x{left}"]
    assert calls["x"] == list(range(1, 13)) and calls["y"][-1] == 1.0
    guided = curves["accuracy", f"x{right}"]
    assert guided["x"] == list(range(1, 9)), "no guided answer once the exemplars are gone"
    assert {n for n, axis in curves if axis == f"x{right}"} == {
        "tool-call rate", "answer rate", "accuracy"}
    assert calls["line"]["color"] == curves["tool-call rate", f"x{right}"]["line"]["color"]
    assert sorted(panel_titles(live_figure(ROWS, EVENTS))) == sorted(
        t for t, _ in LIVE_PANELS), "a run without them draws no such panel"


def test_compare_draws_the_chosen_curves_then_each_half_where_a_run_has_them():
    recorded = {"reward_mean", "acc", *HALVES[0]}
    assert drawn_panels(["acc"], recorded) == [
        ("acc", "Accuracy"),
        ("zero_shot_valid_search_rate", "Tool-call rate: answers without exemplars"),
        ("guided_valid_search_rate", "Tool-call rate: answers with the exemplars as a hint"),
        ("zero_shot_answer_rate", "Answer rate: answers without exemplars"),
        ("guided_answer_rate", "Answer rate: answers with the exemplars as a hint"),
        ("zero_shot_acc", "Accuracy: answers without exemplars"),
        ("guided_acc", "Accuracy: answers with the exemplars as a hint")]
    assert drawn_panels(None, {"reward_mean", "acc", "kl"}) == [
        ("reward_mean", "Reward (total)"), ("acc", "Accuracy")]
    steps = [0, 1]
    series = {key: [[0.5, 0.75], [None, None]] for key, _ in drawn_panels(["acc"], recorded)}
    go.Figure(compare_figure(["#1 mixed", "#2 shown"], steps, series,
                             drawn_panels(["acc"], recorded)))


def test_compare_overlays_one_line_per_run_in_each_panel():
    steps = [0, 1, 2]
    series = {"reward_mean": [[0.1, 0.2, 0.3], [0.5, None, None]], "kl": [[0, 0, 0], [1, 1, None]]}
    figure = compare_figure(["#1 a", "#2 b"], steps, series, [("reward_mean", "Reward"),
                                                               ("kl", "KL")])
    go.Figure(figure)
    assert [(t["name"], t["xaxis"], t["showlegend"]) for t in figure["data"]] == [
        ("#1 a", "x", True), ("#1 a", "x2", False), ("#2 b", "x", True), ("#2 b", "x2", False)]
    assert figure["data"][0]["line"]["color"] == figure["data"][1]["line"]["color"]
    assert figure["data"][2]["x"] == [1] and figure["data"][3]["y"] == [1, 1]
    assert figure["data"][0]["x"] == [1, 2, 3], "steps shown from 1, as on the Live run page"


def test_config_table_marks_the_settings_that_differ():
    configs = [{"grpo": {"lr": 1e-6, "clip": 0.2}, "seed": 0,
                "curriculum": {"stages": [{"exemplars": 3, "steps": 2}]}},
               {"grpo": {"lr": 1e-5, "clip": 0.2}, "seed": 0, "queue": "gpu",
                "curriculum": {"stages": [{"exemplars": 3, "steps": 2}]}}]
    labels = ["#1 a · succeeded", "#2 b · running"]
    differences = config_differences(configs)
    frame = config_table(labels, configs, differences, only_differences=False).data
    marked = dict(zip(frame["setting"], frame[""], strict=True))
    assert marked == {"grpo.clip": "", "grpo.lr": DIFFERS, "queue": DIFFERS, "seed": "",
                      "curriculum.stages": ""}
    assert list(frame.columns) == ["", "setting", *labels]
    assert list(frame["setting"])[:2] == ["grpo.lr", "queue"], "the differences come first"
    rows = frame.set_index("setting")
    assert rows.loc["queue"].tolist()[1:] == ["–", "gpu"]
    assert rows.loc["curriculum.stages"].tolist()[1] == "3 (2 steps)"
    only = config_table(labels, configs, differences, only_differences=True).data
    assert list(only["setting"]) == ["grpo.lr", "queue"]


def test_compare_shows_the_grpo_options_like_any_setting_and_their_unused_companions():
    """Two runs stored with full configs, one plain GRPO, one DAPO-like: the options that
    differ come first; a companion of an option that is off says it was not used."""
    plain, dapo = (parse_run_config({"name": n, "data": {"corpus": "c", "train": "t"},
                                     "grpo": grpo}).model_dump(mode="json")
                   for n, grpo in [("grpo", {}),
                                   ("dapo", {"clip_high": 0.28, "dynamic_sampling": True,
                                             "overlong_buffer": 64,
                                             "loss_agg_mode": "token-mean"})])
    configs = [plain, dapo]
    labels = ["#1 grpo · succeeded", "#2 dapo · succeeded"]
    differences = config_differences(configs)
    assert {"grpo.clip_high", "grpo.dynamic_sampling", "grpo.overlong_buffer",
            "grpo.dynamic_sampling_max_batches", "grpo.overlong_penalty"} <= set(differences)
    assert "grpo.loss_agg_mode" not in differences
    unused = [sorted(unused_keys(c)) for c in configs]
    rows = config_table(labels, configs, differences, True, unused).data.set_index("setting")
    assert rows.loc["grpo.clip_high"].tolist() == [DIFFERS, "–", "0.28"]
    assert rows.loc["grpo.dynamic_sampling_max_batches"].tolist() == [DIFFERS, NOT_USED, "3"]
    assert rows.loc["grpo.overlong_penalty"].tolist() == [DIFFERS, NOT_USED, "1.0"]


def _curriculum(stages: list[tuple[int, int]] | None, preset: str | None = None) -> dict:
    """A stored config's curriculum and backend, every key filled as the schema fills it."""
    return {"backend": "native", "verl": {"nnodes": 1, "overrides": []},
            "curriculum": {"preset": preset, "steps_per_stage": 100, "adaptive": None,
                           "stages": stages and [{"exemplars": e, "steps": n}
                                                 for e, n in stages]}}


def test_config_table_leaves_out_what_a_run_s_own_settings_override():
    labels = ["#1 a · succeeded", "#2 b · succeeded"]
    explicit = [_curriculum([(3, 3), (2, 3), (0, 3)]), _curriculum([(3, 4), (2, 4), (0, 4)])]
    unused = [sorted(unused_keys(c)) for c in explicit]
    assert unused[0] == ["curriculum.preset", "curriculum.steps_per_stage", "verl.nnodes",
                         "verl.overrides"]
    frame = config_table(labels, explicit, config_differences(explicit), False, unused).data
    rows = frame.set_index("setting")
    assert list(rows.index) == ["curriculum.stages", "backend", "curriculum.adaptive"]
    assert rows.loc["curriculum.stages"].tolist() == [
        DIFFERS, "3 → 2 → 0 (3 + 3 + 3 steps)", "3 → 2 → 0 (4 + 4 + 4 steps)"]

    mixed = [explicit[0], _curriculum(None, "3-2-0")]  # stages beside a preset
    differences = config_differences(mixed)
    assert differences == ["curriculum.preset", "curriculum.stages",
                           "curriculum.steps_per_stage"]
    unused = [sorted(unused_keys(c)) for c in mixed]
    rows = config_table(labels, mixed, differences, True, unused).data.set_index("setting")
    assert rows.loc["curriculum.preset"].tolist()[1:] == [NOT_USED, "3-2-0"]
    assert rows.loc["curriculum.steps_per_stage"].tolist()[1:] == [NOT_USED, "100"]
    assert rows.loc["curriculum.stages"].tolist()[1:] == ["3 → 2 → 0 (3 + 3 + 3 steps)",
                                                          NOT_USED]
    verl = {**mixed[1], "backend": "verl"}
    assert "verl.nnodes" not in unused_keys(verl) and "curriculum.stages" in unused_keys(verl)


# as the trainer stores it (`rollout_segments`): the prompt's assistant prefix opens <think>,
# the model's first words close it
ROLLOUT = {
    "id": 7, "step": 3, "group": 0, "sample": 1, "stage": 1, "exemplars": 2,
    "question": "Where is Port Ondrell?", "golden_answers": ["Ondrell"], "reward": 0.8,
    "advantage": -0.25,
    "breakdown": {"acc": 1.0, "format": 0.85, "answer": "Ondrell",
                  "penalties": {"no_search": 0.15}},
    "segments": rollout_segments(Rollout([], [
        Segment("model", [0] * 9, "hm</think>\n<search>Ondrell</search>"),
        Segment("env", [0] * 14, "\n\n<information>Doc 1(Title: O) a port</information>\n\n"),
        Segment("model", [0] * 5, "<answer>Ondrell</answer>")], "answer", 1), "<think>"),
}


def test_a_guided_rollout_says_which_exemplars_it_saw_and_that_it_learned_without_them():
    long = "What is the sum of 3458 and 6582, less 922, written as a whole number?"
    guided = {**ROLLOUT, "hint_exemplars": [2, 0], "hint_questions": [long, "*2* + 2?"]}
    header = header_markdown(guided)
    assert "2 exemplars as a hint · group 0" in header
    line = header.splitlines()[1]
    assert line == (
        f"**Guided:** written with exemplars 3 ({markdown_text(long[:60])}…), "
        f"1 ({markdown_text('*2* + 2?')}) of the run's set as a hint; it learned on the "
        "prompt without them.  ")
    unknown = header_markdown({**guided, "hint_questions": None})  # a run without a plan
    assert "written with exemplars 3, 1 of the run's set as a hint" in unknown
    for plain in (ROLLOUT, {**ROLLOUT, "hint_exemplars": None}, {**ROLLOUT, "hint_exemplars": []}):
        assert "Guided" not in header_markdown(plain)
        assert "2 exemplars in the prompt" in header_markdown(plain)


def test_highlighted_spans_mark_the_environment_as_not_trained_on():
    spans = highlighted(ROLLOUT)
    assert "".join(text for text, _ in spans) == "".join(s["text"] for s in ROLLOUT["segments"])
    assert [label for _, label in spans] == [PREFIX, "think", None, "search", NOT_TRAINED,
                                             "answer"]


def test_overlay_spans_take_their_bucket_on_every_scale_and_show_tokens_as_text():
    view = {"text": ["<b>", "x\ny", "<i>"], "mask": [1, 1, 0], "logprob": [-0.01, -4.0, None],
            "entropy": [0.05, 5.0, None], "advantage": [-0.25, -0.25, 0.0]}
    spans = re.findall(r'<span class="([\w -]+)" title="([^"]*)">(.*?)</span>',
                       overlay_html({**ROLLOUT, "token_view": view}))
    assert [(classes, text) for classes, _, text in spans] == [
        ("tok log-prob-s0 entropy-s0 advantage-d3", "&lt;b&gt;"),
        ("tok log-prob-s6 entropy-s7 advantage-d3", "x<br>y"),
        ("tok tok-masked", "&lt;i&gt;")]
    assert spans[1][1] == "log-prob -4.000 (p 0.018) · entropy 5.000 · advantage -0.250"
    assert spans[2][1] == "inserted by the environment: not trained on"


def test_the_overlay_legends_say_what_each_scale_shows():
    legends = re.findall(r'<div class="token-legend legend-([\w-]+)">(.*?): ([^.]*)\.',
                         overlay_legend_html())
    assert [(name, shown) for name, shown, _ in legends] == [(n, n) for n in OVERLAYS]
    assert [unescape(meaning) for _, _, meaning in legends] == [
        o.meaning for o in OVERLAYS.values()]
    assert 'class="tok advantage-d0">≤ −1.5<' in overlay_legend_html()


def test_the_reward_per_turn_says_which_answer_was_scored():
    text = reward_turns_markdown(ROLLOUT)
    first, second = [line for line in text.splitlines() if line.startswith("| 1") or
                     line.startswith("| 2")]
    assert "Ondrell" in first and "no search" in first and "| 14 |" in first
    assert "its last answer is the one scored\\: accuracy 1\\.00" in second
    assert "no search −0.15" in text and "**Reward 0.80**" in text
@pytest.mark.parametrize(("spec", "call", "result"), [
    (PYTHON_TOOL, "print(6*7)", "42"), (CALCULATOR_TOOL, "709 * 62", "43958")],
    ids=["python", "calculator"])
def test_a_tools_call_has_its_colour_and_its_result_is_masked_like_information(spec, call,
                                                                              result):
    """A python or a calculator run's rollout: `<code>` or `<calc>` styled as a call of its
    own, `<output>` or `<result>` the environment's text with the information blocks'
    highlight (not trained on), labelled with its tag; the reward per turn names the call."""
    tag, shown = spec.call_tag, spec.result_tag
    rollout = {**ROLLOUT, "segments": rollout_segments(Rollout([], [
        Segment("model", [0] * 9, f"hm</think>\n<{tag}>{call}</{tag}>"),
        Segment("env", [0] * 6, f"\n\n<{shown}>{result}</{shown}>\n\n", spec.name),
        Segment("model", [0] * 5, f"<answer>{result}</answer>")], "answer", 1), "<think>",
        (spec,))}
    assert [part["kind"] for part in rollout["segments"][2]["parts"]] == [shown]
    spans = highlighted(rollout)
    label = f"{shown} (not trained on)"
    assert [label for _, label in spans] == [PREFIX, "think", None, tag, label, "answer"]
    assert COLOR_MAP[label] == COLOR_MAP[NOT_TRAINED]
    assert COLOR_MAP[tag] not in (COLOR_MAP["search"], COLOR_MAP[NOT_TRAINED])
    assert [r[4] for r in token_rows(rollout)][2] == "no (masked)"
    first = reward_turns_markdown(rollout).splitlines()[2]
    assert f"| {markdown_text(f'{spec.name}: {call}')} | 6 |" in first
    assert markdown_text(f"its {spec.name} call spares the format's 'no search' penalty") \
        in first
    # a corrective note is in the run's first tool's result tag, and labelled so
    noted = rollout_segments(Rollout([], [Segment("model", [0] * 3, "hm"), Segment(
        "env", [0] * 9, corrective_message(spec))], "max_turns", 0), "", (spec,))
    assert highlighted({**ROLLOUT, "segments": noted})[1][1] == label


def test_every_tools_call_and_result_has_a_colour():
    """Every tool the studio ships (test-only tools registered by other test modules in
    the same process may come after the viewer was imported)."""
    shipped = named_specs(("search", "python", "calculator"))
    for spec in shipped:
        assert spec.call_tag in COLOR_MAP and RESULT_LABELS[spec.result_tag] in COLOR_MAP
    calls = [COLOR_MAP[spec.call_tag] for spec in shipped]
    assert len(set(calls)) == len(calls), "each tool's call in a colour of its own"
    assert {COLOR_MAP[label] for label in RESULT_LABELS.values()} == {COLOR_MAP[NOT_TRAINED]}


def test_token_table_counts_each_segment_and_what_is_trained():
    rows = token_rows(ROLLOUT)
    assert [(r[1], r[3], r[4]) for r in rows] == [
        ("assistant prefix (from the prompt)", 0, "no (prompt)"), ("model", 9, "yes"),
        ("environment", 14, "no (masked)"), ("model", 5, "yes")]
    assert rows[1][2] == "think, text, search"
    summary = token_summary(ROLLOUT)
    assert "28 response tokens" in summary and "14 written by the model" in summary
    assert "14 inserted by the environment" in summary and "50%" in summary


def test_token_table_shows_tags_and_pipes_as_text():
    """Rendered as Markdown (CommonMark with GFM tables), each cell is the row's text."""
    rollout = {**ROLLOUT, "segments": ROLLOUT["segments"] + [
        {"source": "model", "text": "a | b", "tokens": 3, "parts": [{"kind": "text",
                                                                    "text": "a | b"}]}]}
    lines = token_table(rollout).splitlines()
    assert lines[0] == "| # | written by | tags | tokens | trained on | text |"
    assert len(lines) == 2 + len(rollout["segments"])
    html = MarkdownIt("commonmark").enable("table").render(token_table(rollout))
    cells = [[unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)]
             for row in re.findall(r"<tr>(.*?)</tr>", html, re.S)[1:]]
    assert cells == [[str(v) for v in row] for row in token_rows(rollout)]
    assert cells[1][5] == "hm</think> <search>Ondrell</search>" and cells[-1][5] == "a | b"


def test_questions_per_set_is_empty_for_all_or_a_whole_number():
    assert evaluate.question_limit(None) is None and evaluate.question_limit("  ") is None
    assert evaluate.question_limit(" 25 ") == 25
    for typed in ("0", "-3", "two", "1.5"):
        with pytest.raises(InvalidInput, match=f"Questions per set: '{typed}' is not a whole"):
            evaluate.question_limit(typed)


def _evaluation(state: str = "succeeded", owner: str | None = "olga", **metrics) -> dict:
    scores = {"em": 0.0, "subem": 0.0, "f1": 0.0, "acc": 0.0, "format": 0.2,
              "search_calls": 0.0, "valid_search_rate": 0.0, "answer_rate": 0.0}
    return {"state": state, "metrics": {**scores, **metrics}, "params": {"total": 60},
            "error": None, "owner": owner, "waiting": None}


def test_an_evaluation_that_failed_or_lost_its_worker_says_why_and_what_to_do():
    lost = {"state": "interrupted", "params": {}, "waiting": None,
            "error": "interrupted: no heartbeat from its worker for 30 s; evaluate again"}
    assert evaluate._status(lost) == ("interrupted: no heartbeat from its worker for 30 s; "
                                      "evaluate again")
    failed = {**lost, "state": "failed", "error": "Traceback ...\nValueError: no such model"}
    assert evaluate._status(failed) == "failed: ValueError: no such model"
    assert evaluate._status({**failed, "error": None}) == "failed"


def test_an_evaluation_that_scored_zero_says_why():
    pairs = [{"qa_set": "demo-heldout", "base": _evaluation(),
              "trained": _evaluation(search_calls=1.4, valid_search_rate=0.62)},
             {"qa_set": "demo", "base": _evaluation(answer_rate=0.5),
              "trained": _evaluation(answer_rate=0.8, search_calls=1.0, valid_search_rate=0.5)},
             {"qa_set": "scored", "base": _evaluation(em=0.1, answer_rate=0.5),
              "trained": _evaluation("running")}]
    assert note_lines(pairs) == [
        "demo-heldout, base model: EM, SubEM and F1 are 0 because the model never wrote "
        "an answer between <answer> tags and never searched: it does not follow the tag "
        "protocol zero-shot.",
        "demo-heldout, trained model: EM, SubEM and F1 are 0 because the model searched "
        "(1.4 searches per question) but never wrote an answer between <answer> tags.",
        "demo, base model: EM, SubEM and F1 are 0 because the model answered 50% of the "
        "questions without searching, and no answer matched a gold answer.",
        "demo, trained model: EM, SubEM and F1 are 0 because the model answered 80% of "
        "the questions and searched on 50% of them, but no answer matched a gold answer."]
    assert evaluate.zero_notes(pairs[2:]) == "", "a score above 0 or a running one: no note"
    calc = [{"qa_set": "calc", "base": _evaluation(tool_calls={"calculator": 0.0}),
             "trained": _evaluation(answer_rate=0.9, search_calls=0.5, valid_search_rate=0.4,
                                    tool_calls={"calculator": 0.5})},
            {"qa_set": "math", "base": _evaluation(answer_rate=0.3,
                                                   tool_calls={"python": 0.0, "search": 0.0}),
             "trained": _evaluation(search_calls=2.0, tool_calls={"python": 2.0,
                                                                  "search": 0.0})}]
    assert note_lines(calc) == [
        "calc, base model: EM, SubEM and F1 are 0 because the model never wrote an answer "
        "between <answer> tags and never called the calculator tool: it does not follow the "
        "tag protocol zero-shot.",
        "calc, trained model: EM, SubEM and F1 are 0 because the model answered 90% of the "
        "questions and called the calculator tool on 40% of them, but no answer matched a "
        "gold answer.",
        "math, base model: EM, SubEM and F1 are 0 because the model answered 30% of the "
        "questions without calling the python or search tool, and no answer matched a gold "
        "answer.",
        "math, trained model: EM, SubEM and F1 are 0 because the model called the python or "
        "search tool (2.0 calls per question) but never wrote an answer between <answer> "
        "tags."]


def note_lines(pairs: list[dict]) -> list[str]:
    """The Evaluate page's zero-score notes as a reader sees them (rendered, tags dropped)."""
    html = MarkdownIt("commonmark").render(evaluate.zero_notes(pairs))
    return [unescape(re.sub(r"<[^>]+>", "", item)) for item in re.findall(r"<li>(.*?)</li>", html)]


def test_the_table_shows_calls_per_tool_and_tool_errors_beside_the_scores():
    python = {"tool_calls": {"python": 1.25, "search": 0.5}, "code_errors": 3}
    pairs = [{"qa_set": "math", "base": _evaluation(tool_calls={"python": 0.0}, code_errors=0),
              "trained": _evaluation(**python), "yours": None},
             {"qa_set": "demo", "base": _evaluation(tool_calls={"search": 1.0}),
              "trained": None, "yours": None},
             {"qa_set": "calc", "base": _evaluation(tool_calls={"calculator": 0.5},
                                                    code_errors=2), "trained": None,
              "yours": None}]
    rows = evaluate.table_rows(pairs)
    column = {name: i for i, name in enumerate(evaluate.HEADERS)}
    math, demo, calc = ({name: row[i] for name, i in column.items()} for row in rows)
    assert (math["calls per tool base"], math["calls per tool trained"]) == (
        "python 0.00", "python 1.25 · search 0.50")
    assert (math["tool errors base"], math["tool errors trained"]) == ("0", "3")
    assert (demo["calls per tool base"], demo["tool errors base"]) == ("search 1.00", "")
    assert (calc["calls per tool base"], calc["tool errors base"]) == ("calculator 0.50", "2")
    assert demo["calls per tool trained"] == "" and len(rows[0]) == len(evaluate.HEADERS)


def test_the_table_says_whose_pair_each_row_is_with_the_requester_s_own_under_it():
    """A member reading another's run sees the owner's pair, and its own labelled beside
    it; the table follows the member's pair while it runs."""
    own = {"requested_by": "mel", "base": {**_evaluation("running", "mel"), "metrics": None},
           "trained": {**_evaluation("cancelled", "mel"), "metrics": None}}
    pairs = [{"qa_set": "demo", "base": _evaluation(em=0.1), "trained": _evaluation(em=0.3),
              "yours": own},
             {"qa_set": "held", "base": _evaluation(owner=None), "trained": _evaluation(),
              "yours": None}]
    column = {name: i for i, name in enumerate(evaluate.HEADERS)}
    shown = [(row[0], row[column["EM change"]], row[column["requested by"]],
              row[column["status"]]) for row in evaluate.table_rows(pairs)]
    assert shown == [("demo", "+20.0", "olga", "base succeeded · trained succeeded"),
                     ("demo", "", "mel (yours)", "base running 0/60 · trained cancelled"),
                     ("held", "+0.0", "unknown · olga", "base succeeded · trained succeeded")]
    assert evaluate.moving(pairs) and not evaluate.moving(pairs[1:])


def test_the_failure_split_has_a_row_per_label_of_each_labelled_set():
    labelled = {"labels": {"correct": 1, "format_miss": 2, "no_search": 0,
                           "retrieval_miss": 1, "reasoning_miss": 0}}
    pairs = [{"qa_set": "held", "base": None, "trained": _evaluation(**labelled)},
             {"qa_set": "old", "base": _evaluation(), "trained": _evaluation("running")}]
    assert evaluate.label_rows(pairs) == [
        ["held", "correct", "", "1 (25%)"], ["held", "format miss", "", "2 (50%)"],
        ["held", "no search", "", "0 (0%)"], ["held", "retrieval miss", "", "1 (25%)"],
        ["held", "reasoning miss", "", "0 (0%)"]], "a set without labels has no rows"


def test_the_failure_split_and_its_legend_speak_the_evaluation_s_tool():
    def calculator(**labels) -> dict:
        evaluation = _evaluation(labels={"correct": 0, "format_miss": 0, "no_call": 0,
                                         "call_failed": 0, "wrong_expression": 0,
                                         "copied_wrong": 0, **labels})
        return {**evaluation, "params": {"total": 4, "protocol": {"tools": ["calculator"]}}}

    pairs = [{"qa_set": "calc", "base": calculator(no_call=4),
              "trained": calculator(correct=1, wrong_expression=2, copied_wrong=1)}]
    assert evaluate.label_rows(pairs) == [
        ["calc", "correct", "0 (0%)", "1 (25%)"], ["calc", "format miss", "0 (0%)", "0 (0%)"],
        ["calc", "no call", "4 (100%)", "0 (0%)"], ["calc", "call failed", "0 (0%)", "0 (0%)"],
        ["calc", "wrong expression", "0 (0%)", "2 (50%)"],
        ["calc", "copied wrong", "0 (0%)", "1 (25%)"]]
    legend = evaluate.labels_help(pairs)
    assert "- **no call**: the model answered without calling the calculator" in legend
    assert "search" not in legend and legend.count("**correct**") == 1
    assert evaluate.labels_help([{"qa_set": "old", "base": _evaluation(),
                                  "trained": None}]) == ""
    # a call in an example: its tool, input and result, escaped, a long result cut
    assert evaluate.call_line({"tool": "calculator", "input": "3458 + 6582", "result": "10040",
                               "failed": False}) == "calculator: 3458 \\+ 6582 → 10040"
    passages = evaluate.call_line({"tool": "search", "input": "<b>lamp</b>", "failed": False,
                                   "result": "Doc 1(Title: Lamp)\n" + "moss " * 40})
    assert passages.startswith("search: &lt;b&gt;lamp&lt;/b&gt; → Doc 1(Title\\: Lamp\\) moss")
    assert passages.endswith("…") and passages.count("moss") < 20
    assert evaluate.call_line({"tool": "search", "input": "q", "result": None,
                               "failed": False}) == "search: q"
