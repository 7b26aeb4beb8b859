"""A queued job says which queue it waits in and, when that queue's worker is busy, behind
what: a training run with the time it has left, the jobs queued before it."""

from __future__ import annotations

from datetime import timedelta

from studio.services import corpora, evaluations, exports
from studio.storage import db
from studio.storage.tables import (
    Corpus,
    Evaluation,
    Export,
    QASet,
    Run,
    RunMetric,
    RunState,
    WorkerHeartbeat,
    utcnow,
)

CPU_LEAD = "waiting in queue cpu (runs, evaluations and speed measurements on the CPU)"
SHORT_LEAD = "waiting in queue short (index builds and exports)"


def _worker(settings, queue: str) -> None:
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.merge(WorkerHeartbeat(hostname=f"{queue}@here", queues=queue, pid=1))


def _add(settings, row):
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.add(row)
        session.flush()
        return row.id


def _training_run(settings, *, step: int, seconds_per_step: float) -> int:
    """A run of 9 steps training on queue cpu, `step` of them done at that pace."""
    started = utcnow() - timedelta(seconds=step * seconds_per_step + 30)
    run_id = _add(settings, Run(name="first-try", queue="cpu", state=RunState.running,
                                current_step=step, total_steps=9, config={},
                                started_at=started))
    with db.session_scope(settings.sqlalchemy_url) as session:
        for done in range(step):
            at = started + timedelta(seconds=30 + (done + 1) * seconds_per_step)
            session.add(RunMetric(run_id=run_id, step=done, values={}, created_at=at))
    return run_id


def _evaluation(settings, qa_set_id: int) -> int:
    return _add(settings, Evaluation(model_ref="m", qa_set_id=qa_set_id,
                                     params={"queue": "cpu", "done": 0, "total": 60}))


def test_an_evaluation_says_it_waits_behind_the_run_and_about_how_long(settings):
    qa_set_id = _add(settings, QASet(name="qa", source_filename="qa.jsonl", content_hash="x",
                                     source_format="jsonl"))
    first = _evaluation(settings, qa_set_id)
    assert evaluations.get_evaluation(settings, first)["waiting"] == (
        f"{CPU_LEAD}: no worker serves it; `studio up` restarts its worker, or start one with "
        "`studio worker --queues cpu`")

    _worker(settings, "cpu")
    assert evaluations.get_evaluation(settings, first)["waiting"] == (
        f"{CPU_LEAD}: a worker takes it within seconds")

    run_id = _training_run(settings, step=3, seconds_per_step=60)
    second = _evaluation(settings, qa_set_id)
    waits = {e["id"]: e["waiting"] for e in evaluations.list_evaluations(settings)}
    behind_run = f"run #{run_id} 'first-try' (step 3 of 9, about 6 min left)"
    assert waits == {first: f"{CPU_LEAD} behind {behind_run}",
                     second: f"{CPU_LEAD} behind {behind_run} and evaluation #{first}"}


def test_a_run_before_its_first_step_has_no_time_left_yet(settings):
    qa_set_id = _add(settings, QASet(name="qa", source_filename="qa.jsonl", content_hash="x",
                                     source_format="jsonl"))
    _worker(settings, "cpu")
    run_id = _training_run(settings, step=0, seconds_per_step=60)
    assert evaluations.get_evaluation(settings, _evaluation(settings, qa_set_id))["waiting"] == (
        f"{CPU_LEAD} behind run #{run_id} 'first-try' (step 0 of 9; the time it has left is "
        "known after its first step)")


def test_index_builds_and_exports_wait_in_their_own_queue_never_behind_training(settings):
    _worker(settings, "cpu")
    run_id = _training_run(settings, step=3, seconds_per_step=60)
    corpus_id = _add(settings, Corpus(name="wiki", source_filename="wiki.jsonl",
                                      content_hash="x", upload_path="uploads/x"))
    export_id = _add(settings, Export(run_id=run_id, target="zip", step=3))
    no_worker = ("no worker serves it; `studio up` restarts its worker, or start one with "
                 "`studio worker --queues short`")
    assert corpora.get_corpus(settings, corpus_id)["waiting"] == f"{SHORT_LEAD}: {no_worker}"
    assert exports.get_export(settings, export_id)["message"] == f"{SHORT_LEAD}: {no_worker}"

    _worker(settings, "short")
    assert corpora.list_corpora(settings)[0]["waiting"] == (
        f"{SHORT_LEAD}: a worker takes it within seconds")
    assert exports.list_exports(settings)[0]["message"] == (
        f"{SHORT_LEAD} behind the index build of corpus 'wiki'")
