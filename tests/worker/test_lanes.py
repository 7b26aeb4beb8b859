"""Short jobs never wait behind training: on real workers, as `studio up` runs them (one for
queue cpu, one for queue short), an export and an index build queued while a run trains
start within seconds, and an evaluation says it waits behind the run."""

from __future__ import annotations

import io
import json

import pytest

from studio.services import corpora, evaluations, exports, runs
from studio.storage import db
from studio.storage.tables import Run, RunState
from tests.support.actors import admin
from tests.support.processes import running_worker, wait_for
from tests.support.training import tiny_config, trained_studio

#: Seconds within which a short job leaves the queue: the worker polls the broker every second.
STARTS_WITHIN = 20


def _started(settings, export_id: int, corpus_id: int) -> dict[str, str] | None:
    states = {"export": exports.get_export(settings, export_id)["state"],
              "corpus": corpora.get_corpus(settings, corpus_id)["status"]}
    return states if "queued" not in states.values() and "pending" not in states.values() \
        else None


@pytest.mark.slow
def test_an_export_and_an_index_build_start_within_seconds_while_a_run_trains(tmp_path):
    settings, trained_id, model = trained_studio(tmp_path / "data")
    actor, data = admin(settings), settings.resolved_data_dir
    with running_worker(data, tmp_path / "cpu.log", queues="cpu", heartbeat_seconds="1"), \
            running_worker(data, tmp_path / "short.log", queues="short", heartbeat_seconds="1"):
        training = runs.create_run(settings, actor, {**tiny_config(model, steps=500),
                                                     "name": "long"})["id"]
        wait_for(lambda: runs.get_run(settings, training)["current_step"] >= 1, 180,
                 "the run's first step")

        export_id = exports.create_export(settings, actor, trained_id, target="zip")["id"]
        doc = {"id": "d1", "title": "Ondrell", "text": "The capital of Ondrell is Vask."}
        corpus_id = corpora.create_corpus(settings, actor, io.BytesIO(json.dumps(doc).encode()),
                                          "late.jsonl", "late")["id"]
        evaluation = evaluations.create_evaluation(settings, actor, qa_set="demo",
                                                   run_id=trained_id, limit=1)
        wait_for(lambda: _started(settings, export_id, corpus_id), STARTS_WITHIN,
                 "the export and the index build to start")

        assert evaluation["waiting"].startswith(
            f"waiting in queue cpu (runs, evaluations and speed measurements on the CPU) "
            f"behind run #{training} 'long' (step "), evaluation["waiting"]
        assert runs.get_run(settings, training)["state"] == "running", "the run trains on"
        done = wait_for(lambda: (e := exports.get_export(settings, export_id))["state"]
                        in ("succeeded", "failed") and e, 120, "the export")
        assert done["state"] == "succeeded", done["error"]
        assert wait_for(lambda: corpora.get_corpus(settings, corpus_id)["status"] == "ready",
                        60, "the index")
        assert runs.get_run(settings, training)["state"] == "running"

        evaluations.cancel_evaluation(settings, actor, evaluation["id"])
        runs.cancel_run(settings, actor, training)
        wait_for(lambda: _pid(settings, training) is None, 60, "the run's process to end")
    assert runs.get_run(settings, training)["state"] == RunState.cancelled.value


def _pid(settings, run_id: int) -> int | None:
    with db.session_scope(settings.sqlalchemy_url) as session:
        return session.get(Run, run_id).pid
