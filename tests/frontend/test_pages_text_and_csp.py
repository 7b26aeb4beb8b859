"""Text is text, and the Content-Security-Policy holds, in Chromium against a live
`studio up`: a stored rollout and a run whose question, model output, answers and name hold
`<img onerror>`, `<svg onload>`, `<a href="javascript:">`, `<b>`, Markdown and a formula show
them literally on the Live run page (card and full screen; a python and a calculator
turn's call and result too, each in its colour), the Runs table and the Compare page, and nothing in them runs; every tab loads, and a plot downloads as PNG, with no CSP
violation (the browser's `securitypolicyviolation` events and console) and no uncaught
script error."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from frontend.pages.live_run import SCALES
from frontend.rollout_view import COLOR_MAP, OVERLAYS, RESULT_LABELS
from studio.method.tags import CALCULATOR_TOOL, PYTHON_TOOL, SEARCH_TOOL, parse
from studio.method.token_arrays import TokenArrays
from studio.settings import Settings
from tests.support.hostile_text import FLAG, HOSTILE, HOSTILE_MARKUP
from tests.support.studio_ui import StudioUI, studio_in_browser
from tests.support.synthetic_runs import add_rollout, finished_run
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow

RECORD_VIOLATIONS = """window.cspViolations = [];
document.addEventListener('securitypolicyviolation', e => window.cspViolations.push(
    `${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`));"""
# Per tab, an element its build puts in the page (tabs are drawn when first shown).
TABS = {"Home": "#studio-status", "Data": "#corpus-table", "Exemplars": "#exemplar-findings",
        "Curriculum": "#curriculum-notes", "Launch": "#estimate", "Runs": "#runs-table",
        "Live run": "#live-plot", "Compare": "#compare-runs", "Evaluate": "#evaluate-run",
        "Export": "#export-run"}


def hostile_segments() -> list[dict]:
    """Model output holding the hostile text in think and answer tags, and the environment's
    passage holding it too, in the trainer's stored form."""
    model = f"<think>{HOSTILE}</think>\n<answer>{HOSTILE}</answer>"
    env = f"\n\n<information>Doc 1(Title: {HOSTILE}) {HOSTILE}</information>\n\n"
    return [{"source": "model", "text": model, "tokens": 40,
             "parts": [{"kind": p.kind, "text": p.text} for p in parse(model)]},
            {"source": "env", "text": env, "tokens": 40,
             "parts": [{"kind": "information", "text": env}]}]


def hostile_token_arrays(segments: list[dict]) -> bytes:
    """Per-token figures for `hostile_segments`: each segment cut into its token count of
    near-equal pieces; model tokens alternate a near-certain and a surprising pick."""
    chars, mask = [], []
    for segment in segments:
        n, size = segment["tokens"], len(segment["text"])
        ends = [size * (k + 1) // n for k in range(n)]
        chars += [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]
        mask += [int(segment["source"] == "model")] * n
    return TokenArrays(logprob=[(-0.05, -6.0)[i % 2] if m else 0.0 for i, m in enumerate(mask)],
                       entropy=[2.5 * m for m in mask], advantage=[0.5 * m for m in mask],
                       mask=mask, chars=chars).pack()


TOOL_TURNS = {"python": (PYTHON_TOOL, f"print({HOSTILE!r})"), "calculator": (CALCULATOR_TOOL,
                                                                          f"2 * {HOSTILE}")}
"""Per tool: its tags and a call holding the hostile text."""


def tool_segments(tool: str) -> list[dict]:
    """A turn of a run with `tool`: a call holding the hostile text, and the environment's
    result block echoing it."""
    spec, call = TOOL_TURNS[tool]
    model = f"<think>compute</think>\n<{spec.call_tag}>{call}</{spec.call_tag}>"
    env = f"\n\n<{spec.result_tag}>{HOSTILE}</{spec.result_tag}>\n\n"
    tools = (SEARCH_TOOL, spec)
    return [{"source": "model", "text": model, "tokens": 30,
             "parts": [{"kind": p.kind, "text": p.text} for p in parse(model, tools)]},
            {"source": "env", "text": env, "tokens": 20,
             "parts": [{"kind": spec.result_tag, "text": env}]},
            {"source": "model", "text": "<answer>42</answer>", "tokens": 6,
             "parts": [{"kind": "answer", "text": "<answer>42</answer>"}]}]


@dataclass
class Studio:
    ui: StudioUI
    hostile: int  # the run named with the hostile text
    plain: int
    rollout: int  # the hostile run's rollout
    untokened: int  # the plain run's rollout, logged without per-token figures
    tooled: dict[str, int]  # the plain run's rollout of a python or a calculator turn
    console: list[str] = field(default_factory=list)  # the page's console messages
    errors: list[str] = field(default_factory=list)  # its uncaught script errors


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """`studio up` with the demo pack, a run named with the hostile text (its rollout holds
    it everywhere) and a plain run (its rollout has no per-token figures); the page records
    CSP violations, console messages and uncaught script errors."""
    root = tmp_path_factory.mktemp("ui-text")
    model = str(build_tiny_model(root / "tiny"))
    with studio_in_browser(root, default_model=model) as ui:
        with ui.api(timeout=60) as api:
            assert api.post("/demo").status_code == 200
        settings = Settings(data_dir=ui.data_dir)
        config = {"model": model, "data": {"corpus": "demo", "train": "demo",
                                           "exemplars": "demo"}}
        hostile = finished_run(settings, {**config, "name": HOSTILE}, 12)
        plain = finished_run(settings, {**config, "name": "plain-run"}, 12)
        segments = hostile_segments()
        rollout = add_rollout(settings, hostile, 11, segments, question=HOSTILE,
                              answer=HOSTILE, token_arrays=hostile_token_arrays(segments))
        untokened = add_rollout(settings, plain, 11, hostile_segments())
        tooled = {tool: add_rollout(settings, plain, 11, segments, answer="42",
                                    token_arrays=hostile_token_arrays(segments))
                  for tool in TOOL_TURNS for segments in [tool_segments(tool)]}
        studio = Studio(ui, hostile, plain, rollout, untokened, tooled)
        ui.page.add_init_script(RECORD_VIOLATIONS)
        ui.page.on("console", lambda message: studio.console.append(message.text))
        ui.page.on("pageerror", lambda error: studio.errors.append(error.stack or str(error)))
        yield studio
    assert "Traceback" not in ui.log.read_text(), ui.log.read_text()[-3000:]


def assert_text_only(ui: StudioUI) -> None:
    assert ui.page.evaluate(HOSTILE_MARKUP) == []
    assert ui.page.evaluate(f"() => window.{FLAG}") is None, "a hostile handler ran"


def assert_no_csp_violation_or_script_error(studio: Studio) -> None:
    assert studio.ui.page.evaluate("() => window.cspViolations") == []
    refused = [m for m in studio.console if "Content Security Policy" in m or "Refused" in m]
    assert refused == []
    # (one, thrown while Gradio redrew the rollout cards, left the old cards on the page)
    assert studio.errors == []


def test_a_hostile_rollout_and_run_name_show_as_text_on_the_live_run_page(studio):
    ui, rollout = studio.ui, studio.rollout
    page = ui.page
    page.goto(f"{ui.base}/?run={studio.hostile}")
    card = page.locator(f"#rollout-{rollout}")
    header = card.locator(".prose", has_text="Question:").first
    header.wait_for(timeout=60_000)
    assert f"Question: {HOSTILE}" in header.inner_text()
    assert f"Gold: {HOSTILE} · model's answer: {HOSTILE}" in header.inner_text()
    assert HOSTILE in ui.wait_text("#live-status", "step 12")
    text = card.locator(".rollout-text").inner_text()
    assert text.count(HOSTILE) == 4  # think, answer, the passage's title and text
    assert_text_only(ui)

    card.locator(".rollout-open").click()
    page.wait_for_function(
        "(id) => { const card = document.getElementById(id); return card && card"
        ".getBoundingClientRect().height >= window.innerHeight - 1; }",
        arg=f"rollout-{rollout}", timeout=30_000)
    table = card.locator(".rollout-token-table table")
    table.wait_for()
    assert HOSTILE[:60] in table.inner_text()
    ui.screenshot("hostile-rollout-full-screen")
    assert_text_only(ui)
    card.locator(".rollout-close").click()
    table.wait_for(state="hidden")
    assert_no_csp_violation_or_script_error(studio)


def test_token_overlays_colour_each_token_and_full_screen_gives_the_reward_per_turn(studio):
    """Log-prob, entropy, advantage, then off behind the hostile rollout's tokens: each
    token's span shows its bucket's colour on the chosen scale (the environment's marked
    masked), the text still text; off gives the tag-coloured text back; full screen, the
    reward's breakdown per turn; a rollout without per-token figures says so."""
    ui, rollout = studio.ui, studio.rollout
    page = ui.page
    page.goto(f"{ui.base}/?run={studio.hostile}")
    card = page.locator(f"#rollout-{rollout}")
    # (a gr.Markdown's classes go on its block and on its text inside)
    text, tokens = card.locator(".rollout-text"), card.locator(".block.rollout-overlay")
    text.wait_for(timeout=60_000)
    assert tokens.is_hidden()
    spans = card.locator(".token-overlay span.tok")
    looks = ("(id) => [...document.querySelectorAll(`#${id} .token-overlay span.tok`)].map(s =>"
             " [[...s.classList].filter(c => c !== 'tok').join(' '),"
             " getComputedStyle(s).backgroundColor])")
    masked = ["tok-masked", rgb("#e5e7eb")]
    model = [[f"log-prob-s{b} entropy-s5 advantage-d6"] for b in (0, 7)] * 20
    # (the overlay, each model token's bucket on its scale: near-certain and surprising picks
    # alternate, entropy 2.5 nats, advantage +0.5)
    for name, buckets in (("log-prob", [0, 7] * 20), ("entropy", [5] * 40),
                          ("advantage", [6] * 40)):
        page.locator("#live-overlay label", has_text=name).click()
        tokens.wait_for()
        family = OVERLAYS[name].family
        expected = [[*classes, rgb(SCALES[family][b])] for classes, b in zip(model, buckets,
                                                                            strict=True)]
        assert page.evaluate(looks, f"rollout-{rollout}") == expected + [masked] * 40, name
        assert text.is_hidden()
        assert OVERLAYS[name].meaning in card.locator(".block.rollout-overlay-legend").inner_text()
    segments = hostile_segments()
    assert tokens.inner_text() == "".join(s["text"] for s in segments)
    assert "log-prob -6.000 (p 0.002)" in spans.nth(1).get_attribute("title")
    assert "not trained on" in spans.nth(40).get_attribute("title")
    assert_text_only(ui)

    card.locator(".rollout-open").click()
    turns = card.locator(".rollout-turns table")
    turns.wait_for()
    row = turns.locator("tbody tr").first.inner_text()
    assert "its last answer is the one scored: accuracy 1.00" in row and HOSTILE[:40] in row
    assert "Reward 1.00" in card.locator(".block.rollout-turns").inner_text()
    ui.screenshot("token-overlay-full-screen")
    assert_text_only(ui)
    card.locator(".rollout-close").click()
    page.locator("#live-overlay label", has_text="off").click()
    text.wait_for()
    assert tokens.is_hidden()

    # the cards drawn again for a run whose rollout has no per-token figures: its card's
    # components are those of a card that has them (they differed, and the redraw threw)
    ui.choose("#live-run", f"#{studio.plain} plain-run · succeeded")
    card = page.locator(f"#rollout-{studio.untokened}")
    card.locator(".rollout-text").wait_for(timeout=60_000)
    page.locator("#live-overlay label", has_text="entropy").click()
    note = card.locator(".block.rollout-no-tokens")
    note.wait_for()
    assert "no per-token figures" in note.inner_text()
    assert card.locator(".rollout-text").is_visible() and card.locator(".tok").count() == 0
    assert_no_csp_violation_or_script_error(studio)


@pytest.mark.parametrize("tool", list(TOOL_TURNS))
def test_a_tool_turn_shows_its_call_and_the_result_as_the_environment_s(studio, tool):
    """The rollout card colours `<code>` or `<calc>` as a call of its own and `<output>` or
    `<result>` as text the environment inserted (not trained on, labelled with its tag), all
    shown as text; under a token overlay the result's tokens are the masked ones."""
    ui = studio.ui
    page = ui.page
    spec, call = TOOL_TURNS[tool]
    rollout = f"rollout-{studio.tooled[tool]}"
    page.goto(f"{ui.base}/?run={studio.plain}")
    card = page.locator(f"#{rollout}")
    text = card.locator(".rollout-text")
    text.wait_for(timeout=60_000)
    spans = page.evaluate(
        "(id) => [...document.querySelectorAll(`#${id} .rollout-text .token`)].map(t =>"
        " [t.querySelector('.text').textContent.trim(), t.querySelector('.label').textContent,"
        " getComputedStyle(t.querySelector('.label')).backgroundColor])", rollout)
    label = RESULT_LABELS[spec.result_tag]
    assert label == f"{spec.result_tag} (not trained on)"
    assert [label for _, label, _ in spans] == ["think", spec.call_tag, label, "answer"]
    called, result = spans[1], spans[2]
    assert called[0] == f"<{spec.call_tag}>{call}</{spec.call_tag}>"
    assert called[2] == rgb(COLOR_MAP[spec.call_tag])
    assert result[0] == f"<{spec.result_tag}>{HOSTILE}</{spec.result_tag}>"
    assert result[2] == rgb(COLOR_MAP[label]) == rgb(COLOR_MAP[RESULT_LABELS["information"]])
    assert result[2] != called[2]

    page.locator("#live-overlay label", has_text="entropy").click()
    card.locator(".block.rollout-overlay").wait_for()
    masked = page.evaluate("(id) => [...document.querySelectorAll(`#${id} .token-overlay "
                           "span.tok-masked`)].map(s => s.textContent).join('')", rollout)
    assert masked == f"<{spec.result_tag}>{HOSTILE}</{spec.result_tag}>"  # (<br>s: no text)
    page.locator("#live-overlay label", has_text="off").click()
    text.wait_for()
    assert_text_only(ui)
    assert_no_csp_violation_or_script_error(studio)


def rgb(colour: str) -> str:
    """A '#rrggbb' colour as the browser's computed style writes it."""
    red, green, blue = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def test_the_runs_table_and_compare_page_show_a_hostile_name_as_text(studio):
    ui = studio.ui
    ui.open("Runs")
    ui.wait_text("#runs-table", "plain-run")
    rows = ui.table_rows("#runs-table")
    assert [r[1] for r in rows if r[0] == str(studio.hostile)] == [HOSTILE]
    ui.open("Compare")
    for run_id, name in ((studio.hostile, HOSTILE), (studio.plain, "plain-run")):
        ui.choose("#compare-runs", f"#{run_id} {name} · succeeded")
    ui.page.locator("#compare-plot .legendtext").first.wait_for(timeout=60_000)
    legend = ui.page.locator("#compare-plot .legendtext").all_text_contents()
    assert f"#{studio.hostile} {HOSTILE} · succeeded" in legend
    assert HOSTILE in ui.page.locator("#compare-config").inner_text()
    assert_text_only(ui)
    assert_no_csp_violation_or_script_error(studio)


def test_every_tab_loads_with_no_csp_violation(studio):
    ui, card = studio.ui, f"#rollout-{studio.rollout}"
    ui.page.goto(f"{ui.base}/")
    ui.page.wait_for_selector("#studio-status", timeout=60_000)
    for tab, selector in TABS.items():
        ui.open(tab)
        ui.page.wait_for_selector(selector, state="attached", timeout=30_000)
    ui.open("Live run")  # a run's curves and a rollout card, opened full screen
    ui.choose("#live-run", f"#{studio.hostile} {HOSTILE} · succeeded")
    plot = ui.page.locator("#live-plot .js-plotly-plot")
    plot.locator(".scatterlayer").first.wait_for(timeout=60_000)
    plot.hover()
    with ui.page.expect_download() as download:  # plotly draws the PNG through a blob: image
        plot.locator(".modebar-btn[data-title^='Download']").click()
    assert download.value.suggested_filename.endswith(".png")
    ui.page.locator(f"{card} .rollout-open").click()
    ui.page.locator(f"{card} .rollout-token-table table").wait_for()
    assert_text_only(ui)
    assert_no_csp_violation_or_script_error(studio)
