"""The Evaluate and Compare pages in Chromium on stored runs (nothing trains), as a new user
meets them (issue 15): an evaluation that scored 0 says why, its results are there again
after a reload without picking the run, the question limit starts empty; the split by failure
label shows base beside trained and a row opens its questions, escaped (issue 16); a run
that has just succeeded is followed from Live run until the evaluations it queues itself
have finished, without a reload (the first-run walk's path); the configs of two runs show both columns whole, without the settings a run's own config
overrides; the studio's page refresh setting sets every page's timer. Screenshots go to
artifacts/screenshots/.
"""

from __future__ import annotations

import pytest
from sqlmodel import select

from studio.services.demo import load_demo_pack
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Evaluation, QASet, Run, RunState, utcnow
from tests.support.actors import admin
from tests.support.hostile_text import FLAG, HOSTILE, HOSTILE_MARKUP
from tests.support.labelled_evaluations import finished_evaluation
from tests.support.studio_ui import StudioUI, studio_in_browser
from tests.support.synthetic_runs import finished_run
from tests.support.tiny_model import build_tiny_model

pytestmark = pytest.mark.slow

#: The studio's page timers tick every second (STUDIO_PAGE_REFRESH_SECONDS): the pages follow
#: what is stored sooner than at their own periods.
REFRESH_SECONDS = 1
SILENT = {"em": 0.0, "subem": 0.0, "f1": 0.0, "acc": 0.0, "format": 0.1, "search_calls": 0.0,
          "valid_search_rate": 0.0, "answer_rate": 0.0, "questions": 60}


def stored_run(settings: Settings, model, name: str, steps: int, lr: float,
               evaluate_at_end: bool = False) -> int:
    """A finished 3 -> 2 -> 0 run with a checkpoint, as the Launch page writes its config
    (the quick start's evaluates at the end)."""
    per_stage = -(-steps // 3)
    config = {"name": name, "model": str(model),
              "data": {"corpus": "demo", "train": "demo", "exemplars": "demo",
                       "eval": ["demo-heldout"]},
              "curriculum": {"preset": None, "stages": [{"exemplars": k, "steps": per_stage}
                                                        for k in (3, 2, 0)]},
              "grpo": {"lr": lr, "batch_size": 2, "group_size": 2},
              "engine": {"evaluate_at_end": evaluate_at_end}}
    run_id = finished_run(settings, config, steps)
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        run.checkpoint_dir = f"runs/{run_id}/checkpoints/step-{steps}"
        session.add(run)
    return run_id


# the trained model answers half the questions, all wrongly, searching on most
TRIED = {**SILENT, "format": 0.5, "search_calls": 1.0, "valid_search_rate": 0.7,
         "answer_rate": 0.5}
TRAINED_LABELS = (["format_miss"] * 30 + ["no_search"] * 10 + ["retrieval_miss"] * 12
                  + ["reasoning_miss"] * 8)


def stored_evaluations(settings: Settings, run_id: int, model) -> None:
    """Base and trained on demo-heldout, both finished with every score 0: base never
    answered (60 format misses), trained missed in every way, its text hostile."""
    with session_scope(settings.sqlalchemy_url) as session:
        checkpoint = session.get(Run, run_id).checkpoint_dir
        heldout = session.exec(select(QASet).where(QASet.name == "demo-heldout")).one().id
    finished_evaluation(settings, heldout, ["format_miss"] * 60, model_ref=str(model),
                        metrics=SILENT)
    finished_evaluation(settings, heldout, TRAINED_LABELS, model_ref=checkpoint, run_id=run_id,
                        metrics=TRIED, text=HOSTILE)


@pytest.fixture(scope="module")
def ui(tmp_path_factory) -> StudioUI:
    root = tmp_path_factory.mktemp("ui-evaluate-compare")
    model = build_tiny_model(root / "tiny")
    with studio_in_browser(root, default_model=str(model),
                           page_refresh_seconds=str(REFRESH_SECONDS)) as studio:
        settings = Settings(data_dir=studio.data_dir)
        load_demo_pack(settings, admin(settings), index_now=True)
        first = stored_run(settings, model, "first-try-3-2-0", 9, 1e-4)
        stored_run(settings, model, "second-try-3-2-0-lower-lr", 12, 1e-5)
        stored_evaluations(settings, first, model)
        # the browser opened before these were stored: its Evaluate page chose on load
        studio.reload()
        yield studio
    assert "Traceback" not in studio.log.read_text(), studio.log.read_text()[-5000:]


def test_evaluate_says_why_a_result_is_zero_and_keeps_it_after_a_reload(ui):
    ui.open("Evaluate")
    # the evaluated run is chosen for the user: its results show without a pick
    ui.wait_text("#evaluate-table", "base succeeded · trained succeeded")
    assert "first-try-3-2-0" in ui.page.locator("#evaluate-run input").input_value()
    notes = ui.wait_text("#evaluate-notes", "trained model")
    assert ("demo-heldout, base model: EM, SubEM and F1 are 0 because the model never wrote an "
            "answer between <answer> tags and never searched") in notes
    limit = ui.page.locator("#evaluate-limit textarea")
    assert limit.input_value() == "" and limit.get_attribute("placeholder") == "all"
    ui.screenshot("evaluate-zero")

    ui.reload()
    ui.open("Evaluate")
    ui.wait_text("#evaluate-table", "base succeeded · trained succeeded")
    ui.wait_text("#evaluate-notes", "never searched")


def test_evaluate_splits_failures_base_beside_trained_and_opens_their_questions(ui):
    ui.open("Evaluate")
    ui.wait_text("#evaluate-labels", "reasoning miss")
    rows = {cells[1]: cells[2:] for cells in ui.table_rows("#evaluate-labels")
            if cells[0] == "demo-heldout"}
    assert rows == {"correct": ["0 (0%)", "0 (0%)"], "format miss": ["60 (100%)", "30 (50%)"],
                    "no search": ["0 (0%)", "10 (17%)"],
                    "retrieval miss": ["0 (0%)", "12 (20%)"],
                    "reasoning miss": ["0 (0%)", "8 (13%)"]}
    ui.wait_text("#evaluate-labels-help", "retrieval miss: the model searched, but no passage "
                 "it got back contains the gold answer")

    ui.page.locator("#evaluate-labels [role=gridcell]", has_text="retrieval miss").click()
    trained = ui.wait_text("#evaluate-examples-trained", "Question 41?")
    for shown in ("Trained model: retrieval miss (5 of 12)", "Gold answer: gold 41",
                  f"Model's answer: wrong 41 {HOSTILE}",
                  f"Calls: search: query 41 {HOSTILE} → Doc 1(Title: Page 41) passage 41 <img",
                  "Question 45?"):
        assert shown in trained, (shown, trained)
    assert "Question 46?" not in trained
    assert "No question got this label." in ui.page.locator(
        "#evaluate-examples-base").inner_text()
    assert ui.page.evaluate(HOSTILE_MARKUP) == []
    assert ui.page.evaluate(f"() => window.{FLAG}") is None, "a hostile handler ran"
    ui.screenshot("evaluate-failure-labels")

    ui.page.locator("#evaluate-labels [role=gridcell]", has_text="format miss").click()
    base = ui.wait_text("#evaluate-examples-base", "Question 1?")
    assert "Base model: format miss (5 of 60)" in base and "Model's answer: none" in base


def test_compare_shows_every_run_s_column_and_no_overridden_default(ui):
    ui.open("Compare")
    for name in ("first-try-3-2-0", "second-try-3-2-0-lower-lr"):
        ui.choose_run("#compare-runs", name)
    ui.page.keyboard.press("Escape")
    ui.wait_text("#compare-config", "grpo.lr")
    rows = {cells[1]: cells[2:] for cells in ui.table_rows("#compare-config")}
    assert rows["grpo.lr"] == ["0.0001", "1e-05"]
    assert rows["curriculum.stages"] == ["3 → 2 → 0 (3 + 3 + 3 steps)",
                                         "3 → 2 → 0 (4 + 4 + 4 steps)"]
    for overridden in ("curriculum.preset", "curriculum.steps_per_stage", "verl.nnodes"):
        assert overridden not in rows, f"{overridden} does not matter beside explicit stages"
    # each run's column lies whole inside the table's box (wrapped, not cut off)
    edges = ui.page.evaluate("""() => {
        const box = document.querySelector('#compare-config').getBoundingClientRect();
        const heads = [...document.querySelectorAll('#compare-config thead th')];
        return {right: box.right, heads: heads.map(h => [h.innerText.trim(),
                                                         h.getBoundingClientRect().right])}; }""")
    shown = {text: right for text, right in edges["heads"] if text}
    for name in ("first-try-3-2-0", "second-try-3-2-0-lower-lr"):
        (right,) = [r for text, r in shown.items() if name in text]
        assert right <= edges["right"] + 1, (name, edges)
    ui.page.wait_for_selector("#compare-plot .js-plotly-plot .main-svg", timeout=60_000)
    ui.screenshot("compare-configs")


def test_evaluate_follows_the_evaluations_a_run_queues_at_its_end(ui):
    """The first run's path: the run has just succeeded and its worker has not yet queued base
    against trained when the user goes from Live run to Evaluate. The page keeps following:
    the evaluations show up queued, then finished, with no reload and no click."""
    settings = Settings(data_dir=ui.data_dir)
    with session_scope(settings.sqlalchemy_url) as session:
        model = session.exec(select(Run)).first().config["model"]
        heldout = session.exec(select(QASet).where(QASet.name == "demo-heldout")).one().id
    run_id = stored_run(settings, model, "just-ended", 6, 1e-4, evaluate_at_end=True)
    ui.open("Live run")
    ui.open("Evaluate")
    ui.choose_run("#evaluate-run", "just-ended")
    ui.wait_text("#evaluate-notes", "fills in then, without a reload")
    # the page's timer ticks while nothing is queued yet (the walk's order): it must go on
    ui.page.wait_for_timeout(3_000 * REFRESH_SECONDS)

    with session_scope(settings.sqlalchemy_url) as session:  # what its worker queues
        checkpoint = session.get(Run, run_id).checkpoint_dir
        queued = [Evaluation(run_id=None, model_ref=model, qa_set_id=heldout),
                  Evaluation(run_id=run_id, model_ref=checkpoint, qa_set_id=heldout)]
        session.add_all(queued)
        session.flush()
        ids = [e.id for e in queued]
    ui.wait_text("#evaluate-table", "base queued")
    with session_scope(settings.sqlalchemy_url) as session:  # ... and what it records after
        for evaluation_id in ids:
            evaluation = session.get(Evaluation, evaluation_id)
            evaluation.state, evaluation.finished_at = RunState.succeeded, utcnow()
            evaluation.metrics, evaluation.params = TRIED, {"total": 60, "done": 60}
            session.add(evaluation)
    ui.wait_text("#evaluate-table", "base succeeded · trained succeeded")
    assert "fills in then" not in ui.page.locator("#evaluate-notes").inner_text()


def test_the_page_refresh_setting_sets_every_page_timer(ui):
    """STUDIO_PAGE_REFRESH_SECONDS replaces each page's own period (1 to 3 s)."""
    periods = ui.page.evaluate("() => window.gradio_config.components"
                               ".filter(c => c.type === 'timer').map(c => c.props.value)")
    assert periods and set(periods) == {REFRESH_SECONDS}, periods
