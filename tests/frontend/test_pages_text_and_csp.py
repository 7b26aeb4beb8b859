"""Text is text, and the Content-Security-Policy holds, in Chromium against a live
`studio up`: a stored rollout and a run whose question, model output, answers and name hold
`<img onerror>`, `<svg onload>`, `<a href="javascript:">`, `<b>`, Markdown and a formula show
them literally on the Live run page (card and full screen), the Runs table and the Compare
page, and nothing in them runs; every tab loads, and a plot downloads as PNG, with no CSP
violation (the browser's `securitypolicyviolation` events and console)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import httpx
import pytest

from studio.method.tags import parse
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


@dataclass
class Studio:
    ui: StudioUI
    hostile: int  # the run named with the hostile text
    plain: int
    rollout: int  # the hostile run's rollout
    console: list[str] = field(default_factory=list)  # the page's console messages


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    """`studio up` with the demo pack, a run named with the hostile text (its rollout holds
    it everywhere) and a plain run; the page records CSP violations and console messages."""
    root = tmp_path_factory.mktemp("ui-text")
    model = str(build_tiny_model(root / "tiny"))
    with studio_in_browser(root) as ui:
        token = re.search(r"API token: (\S+)", ui.log.read_text()).group(1)
        with httpx.Client(base_url=f"{ui.base}/api/v1", timeout=60,
                          headers={"Authorization": f"Bearer {token}"}) as api:
            assert api.post("/demo").status_code == 200
        settings = Settings(data_dir=ui.data_dir)
        config = {"model": model, "data": {"corpus": "demo", "train": "demo",
                                           "exemplars": "demo"}}
        hostile = finished_run(settings, {**config, "name": HOSTILE}, 12)
        plain = finished_run(settings, {**config, "name": "plain-run"}, 12)
        rollout = add_rollout(settings, hostile, 11, hostile_segments(), question=HOSTILE,
                              answer=HOSTILE)
        studio = Studio(ui, hostile, plain, rollout)
        ui.page.add_init_script(RECORD_VIOLATIONS)
        ui.page.on("console", lambda message: studio.console.append(message.text))
        yield studio
    assert "Traceback" not in ui.log.read_text(), ui.log.read_text()[-3000:]


def assert_text_only(ui: StudioUI) -> None:
    assert ui.page.evaluate(HOSTILE_MARKUP) == []
    assert ui.page.evaluate(f"() => window.{FLAG}") is None, "a hostile handler ran"


def assert_no_csp_violation(studio: Studio) -> None:
    assert studio.ui.page.evaluate("() => window.cspViolations") == []
    refused = [m for m in studio.console if "Content Security Policy" in m or "Refused" in m]
    assert refused == []


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
    assert_no_csp_violation(studio)


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
    assert_no_csp_violation(studio)


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
    assert_no_csp_violation(studio)
