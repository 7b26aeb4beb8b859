"""The one life cycle of runs, evaluations, exports, calibrations and index builds
(`studio.jobs.lifecycle`): the moves it allows and refuses on each kind's own table, the words
each stores, heartbeats and the interrupted rule (one sweep for every kind a worker beats for), and that the state names and the writes of
a state live in that module alone. On SQLite and PostgreSQL, rows written as the kinds write
them."""

from __future__ import annotations

import ast
import itertools
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import select

from studio.jobs import heartbeats, lifecycle
from studio.jobs.lifecycle import REQUEUE_FROM, TRANSITIONS, RunState
from studio.services import calibrations, corpora, evaluations, exports, lost_jobs, runs
from studio.settings import Settings
from studio.storage import db, tables
from studio.storage.tables import (
    Corpus,
    DeviceCalibration,
    Evaluation,
    Export,
    QASet,
    Run,
    utcnow,
)

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count()


@pytest.fixture
def url(migrated_db_url, tmp_path) -> str:
    settings = Settings(data_dir=tmp_path / "data", database_url=migrated_db_url)
    return settings.sqlalchemy_url


def _stored(url: str, row) -> int:
    with db.session_scope(url) as session:
        session.add(row)
        session.flush()
        return row.id


def _run(url: str) -> int:
    return _stored(url, Run(name="job", config={}))


def _evaluation(url: str) -> int:
    qa_set = _stored(url, QASet(name=f"qa-{next(_names)}", source_filename="qa.jsonl", content_hash="x",
                                source_format="jsonl"))
    return _stored(url, Evaluation(model_ref="m", qa_set_id=qa_set))


KINDS = {  # each kind's JobTable, and a queued job of that kind
    "run": (runs.RUN_JOBS, _run),
    "evaluation": (evaluations.EVALUATION_JOBS, _evaluation),
    "export": (exports.EXPORT_JOBS,
               lambda url: _stored(url, Export(run_id=_run(url), target="zip"))),
    "calibration": (calibrations.CALIBRATION_JOBS, lambda url: _stored(
        url, DeviceCalibration(model="m", queue="cpu", dtype="float32"))),
    "index build": (corpora.INDEX_BUILDS, lambda url: _stored(
        url, Corpus(name=f"c-{next(_names)}", source_filename="c.jsonl", content_hash="x",
                    upload_path="c"))),
}


def _state(url: str, job: lifecycle.JobTable, job_id: int) -> str:
    with db.session_scope(url) as session:
        return session.exec(select(job.column(job.state)).where(job.table.id == job_id)).one()


def _moved(url: str, move, *args, **kw) -> bool:
    with db.session_scope(url) as session:
        return move(session, *args, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_claimed_once_and_finished_once_in_its_own_words(url, kind):
    job, make = KINDS[kind]
    job_id = make(url)
    assert _state(url, job, job_id) == job.stored(RunState.queued)
    assert _moved(url, lifecycle.claim, job, job_id)
    assert not _moved(url, lifecycle.claim, job, job_id), "one worker takes it"
    assert _state(url, job, job_id) == job.stored(RunState.running)
    assert _moved(url, lifecycle.beat, job, job_id), "still running: its worker goes on"
    assert _moved(url, lifecycle.finish, job, job_id, RunState.succeeded)
    assert not _moved(url, lifecycle.finish, job, job_id, RunState.failed), "one outcome"
    assert not _moved(url, lifecycle.beat, job, job_id), "ended: its worker stops"
    assert not _moved(url, lifecycle.requeue, job, job_id), "a success is never queued again"
    assert _state(url, job, job_id) == job.stored(RunState.succeeded)


def test_an_index_build_stores_its_corpus_s_words():
    words = {state: corpora.INDEX_BUILDS.stored(state) for state in RunState}
    assert words == {RunState.queued: "pending", RunState.running: "indexing",
                     RunState.succeeded: "ready", RunState.failed: "failed",
                     RunState.cancelled: None, RunState.interrupted: None, RunState.paused: None}
    with pytest.raises(ValueError, match="index build: no move .* to cancelled"):
        lifecycle.cancel(None, corpora.INDEX_BUILDS, 1)


@pytest.mark.parametrize("kind", ["run", "evaluation"])
def test_a_cancel_wins_over_a_late_claim_and_a_late_outcome(url, kind):
    job, make = KINDS[kind]
    queued, running = make(url), make(url)
    assert _moved(url, lifecycle.cancel, job, queued)
    assert not _moved(url, lifecycle.claim, job, queued), "its message, arriving late"
    assert _moved(url, lifecycle.claim, job, running)
    assert _moved(url, lifecycle.cancel, job, running)
    assert not _moved(url, lifecycle.finish, job, running, RunState.succeeded)
    assert not _moved(url, lifecycle.cancel, job, running), "cancelled once"
    assert {_state(url, job, queued), _state(url, job, running)} == {"cancelled"}
    with db.session_scope(url) as session:
        assert session.get(job.table, running).finished_at is not None


def test_a_fence_keeps_a_stale_attempt_out(url):
    job, run_id = runs.RUN_JOBS, _run(url)
    assert not _moved(url, lifecycle.claim, job, run_id, Run.attempt == 2), "not attempt 2's"
    assert _moved(url, lifecycle.claim, job, run_id, Run.attempt == 1)
    assert _moved(url, lifecycle.interrupt, job, run_id, "its worker died", Run.attempt == 1)
    assert _moved(url, lifecycle.requeue, job, run_id, attempt=2)
    assert not _moved(url, lifecycle.claim, job, run_id, Run.attempt == 1), "attempt 1's message"
    assert _moved(url, lifecycle.claim, job, run_id, Run.attempt == 2)
    assert not _moved(url, lifecycle.finish, job, run_id, RunState.failed, Run.attempt == 1)
    with db.session_scope(url) as session:
        run = session.get(Run, run_id)
        assert (run.state, run.attempt, run.error, run.finished_at) == ("running", 2, None, None)


def test_a_stale_heartbeat_interrupts_only_the_silent_job(url):
    job = runs.RUN_JOBS
    silent, beating = _run(url), _run(url)
    for run_id in (silent, beating):
        assert _moved(url, lifecycle.claim, job, run_id)
    with db.session_scope(url) as session:
        session.get(Run, silent).heartbeat_at = utcnow() - timedelta(minutes=5)
    cutoff = utcnow() - timedelta(minutes=1)
    assert _moved(url, lifecycle.interrupt_stale, job, "heartbeat_at", cutoff,
                  lambda run: f"run {run.id} went silent") == [silent]
    assert _moved(url, lifecycle.interrupt_stale, job, "heartbeat_at", cutoff,
                  lambda run: "again") == [], "once"
    with db.session_scope(url) as session:
        assert session.get(Run, silent).error == f"interrupted: run {silent} went silent"
    assert (_state(url, job, silent), _state(url, job, beating)) == ("interrupted", "running")


BEATING = ("run", "evaluation", "export", "index build")
"""The kinds whose worker beats for them (a calibration never beats: `LOST_AFTER`)."""


@pytest.fixture
def beating(migrated_db_url, tmp_path) -> Settings:
    """A studio whose heartbeat period is 0.5 s: a job is lost after 1.5 s of silence."""
    return Settings(data_dir=tmp_path / "data", database_url=migrated_db_url,
                    heartbeat_seconds=0.5)


def _age(url: str, job: lifecycle.JobTable, job_id: int, seconds: float) -> None:
    with db.session_scope(url) as session:
        setattr(session.get(job.table, job_id), job.heartbeat,
                utcnow() - timedelta(seconds=seconds))


def test_one_sweep_moves_every_kind_s_silent_jobs_to_its_lost_state_with_what_to_do(beating):
    url = beating.sqlalchemy_url
    silent, alive = {}, {}
    for kind in BEATING:
        job, make = KINDS[kind]
        silent[kind], alive[kind] = make(url), make(url)
        for job_id in (silent[kind], alive[kind]):
            assert _moved(url, lifecycle.claim, job, job_id)
        _age(url, job, silent[kind], 60)
    for kind in BEATING:  # the live ones' workers beat just now
        assert _moved(url, lifecycle.beat, KINDS[kind][0], alive[kind])
    assert lost_jobs.reap_lost_jobs(beating) == {kind: [silent[kind]] for kind in BEATING}
    assert lost_jobs.reap_lost_jobs(beating) == {kind: [] for kind in BEATING}, "once"
    advice = {"run": f"studio run resume {silent['run']}", "evaluation": "evaluate again",
              "export": f"/api/v1/exports/{silent['export']}/retry",
              "index build": "upload its file again"}
    for kind in BEATING:
        job = KINDS[kind][0]
        assert _state(url, job, silent[kind]) == job.stored(job.lost)
        assert _state(url, job, alive[kind]) == job.stored(RunState.running)
        with db.session_scope(url) as session:
            error = session.get(job.table, silent[kind]).error
        assert error.startswith("interrupted: no heartbeat from") and " 1.5 s" in error, error
        assert advice[kind] in error
    assert corpora.INDEX_BUILDS.stored(corpora.INDEX_BUILDS.lost) == "failed", \
        "a corpus has no word for interrupted"


@pytest.mark.parametrize("kind", ["export", "index build"])
def test_work_that_reports_nothing_for_many_periods_keeps_its_job_alive(beating, kind):
    """A zip or a Hub upload, an index's save: minutes without progress, the worker alive."""
    url = beating.sqlalchemy_url
    job, make = KINDS[kind]
    job_id = make(url)
    assert _moved(url, lifecycle.claim, job, job_id)
    with heartbeats.keep_beating(beating, job, job_id):
        time.sleep(3)  # six periods of silence from the work itself
        assert lost_jobs.reap_lost_jobs(beating)[kind] == []
    assert _state(url, job, job_id) == job.stored(RunState.running)
    time.sleep(2)  # the work's thread died without an outcome: nothing beats any more
    assert lost_jobs.reap_lost_jobs(beating)[kind] == [job_id]


def test_moves_the_table_does_not_list_are_refused():
    assert TRANSITIONS[RunState.succeeded] == frozenset(), "a success is final"
    assert REQUEUE_FROM == (RunState.failed, RunState.cancelled, RunState.interrupted,
                            RunState.paused)
    assert lifecycle.sources(RunState.interrupted) == (RunState.running,), "a worker held it"
    with pytest.raises(ValueError, match="run: no move from queued to interrupted"):
        lifecycle.move(None, runs.RUN_JOBS, 1, RunState.interrupted,
                       leaving=[RunState.queued])
    with pytest.raises(ValueError, match="cancelled is not an outcome"):
        lifecycle.finish(None, runs.RUN_JOBS, 1, RunState.cancelled)


def _defined_states(path: Path) -> list[str]:
    """The enums of `path` with a member named queued, running or pending."""
    return [node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.Assign) and any(
                    getattr(target, "id", None) in ("queued", "running", "pending")
                    for target in item.targets) for item in node.body)]


def _state_assignments(path: Path) -> list[int]:
    """The lines of `path` that assign a row's state or status attribute."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            flat = [t for target in targets
                    for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            if any(isinstance(t, ast.Attribute) and t.attr in ("state", "status")
                   for t in flat):
                lines.append(node.lineno)
    return lines


def test_the_state_names_and_their_writes_live_in_the_lifecycle_alone():
    sources = [path for folder in ("studio", "worker", "frontend")
               for path in (ROOT / folder).rglob("*.py")]
    defined = {str(path.relative_to(ROOT)): names for path in sources
               if (names := _defined_states(path))}
    assert defined == {"studio/jobs/lifecycle.py": ["RunState", "CorpusStatus"]}
    assert tables.RunState is RunState, "the tables store the lifecycle's states"
    written = {str(path.relative_to(ROOT)): lines for path in sources
               if (lines := _state_assignments(path))}
    assert written == {}, "a job's state changes through studio.jobs.lifecycle"
