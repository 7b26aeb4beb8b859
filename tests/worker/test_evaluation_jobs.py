"""Evaluations run like training runs: the task spawns a process of their own (a GPU slot of
its own on queue gpu), a cancel stops it, and nothing it writes afterwards counts."""

from __future__ import annotations

import threading
import time

from studio.services import evaluation_files, evaluations
from studio.storage.tables import RunState
from tests.support.actors import admin
from tests.support.processes import wait_for
from worker import child_process
from worker.child_process import DeviceSlots
from worker.evaluation_process import run_evaluation_job

QUICK = {"max_turns": 1, "max_turn_tokens": 8, "max_response_tokens": 16}
SLOW = {"max_turns": 6, "max_turn_tokens": 512, "max_response_tokens": 4096, "batch_size": 1}


def queue_evaluation(settings, model, protocol, queue="cpu", limit=2) -> int:
    return evaluations.create_evaluation(settings, admin(settings), qa_set="demo", corpus="demo",
                                         model=str(model), limit=limit, protocol=protocol,
                                         queue=queue, start=False)["id"]


def test_an_evaluation_runs_in_its_own_process_with_its_own_gpu_slot(studio, monkeypatch):
    settings, model = studio
    slots = DeviceSlots(["7"])  # the worker's one GPU (CUDA itself is not needed here)
    monkeypatch.setattr(child_process, "_gpu_slots", slots)
    evaluation_id = queue_evaluation(settings, model, QUICK, queue="gpu")

    done = run_evaluation_job(settings, evaluation_id)

    assert done["state"] == RunState.succeeded, done["error"]
    assert done["metrics"]["questions"] == 2
    log = evaluation_files.evaluation_log_path(settings, evaluation_id).read_text()
    assert log.startswith(f"--- evaluation {evaluation_id}, GPU 7 ---")
    assert "%|" not in log and "it/s]" not in log, "no progress bar redrawn in a log file"
    with slots.take(1) as free:
        assert free == ["7"]  # lent for the job, given back after it


def test_a_cancel_stops_the_process_and_stays_cancelled(studio):
    settings, model = studio
    evaluation_id = queue_evaluation(settings, model, SLOW, limit=None)
    result: dict = {}
    job = threading.Thread(target=lambda: result.update(run_evaluation_job(settings,
                                                                           evaluation_id)))
    job.start()
    wait_for(lambda: evaluations.get_evaluation(settings, evaluation_id)["params"]["done"] >= 1,
             120, "the evaluation process to answer its first question")
    cancelled = evaluations.cancel_evaluation(settings, admin(settings), evaluation_id)
    started = time.monotonic()
    job.join(60)

    assert not job.is_alive() and time.monotonic() - started < 30
    assert cancelled["state"] == result["state"] == RunState.cancelled
    assert result["error"] is None and result["metrics"] is None
    assert 1 <= result["params"]["done"] < result["params"]["total"]  # stopped midway
    # a process that wrote late would change nothing: a cancel is final
    evaluations.update_evaluation(settings, evaluation_id, state=RunState.succeeded,
                                  metrics={"em": 1.0})
    assert evaluations.get_evaluation(settings, evaluation_id)["state"] == RunState.cancelled


def test_an_evaluation_cancelled_before_it_starts_never_runs(studio):
    settings, model = studio
    evaluation_id = queue_evaluation(settings, model, QUICK)
    evaluations.cancel_evaluation(settings, admin(settings), evaluation_id)

    assert run_evaluation_job(settings, evaluation_id)["state"] == RunState.cancelled
    assert not evaluation_files.evaluation_log_path(settings, evaluation_id).exists()


def test_the_api_cancels_and_says_when_there_is_nothing_to_cancel(studio):
    from fastapi.testclient import TestClient

    from frontend.server import create_app
    from tests.support.api_client import admin_headers

    settings, model = studio
    evaluation_id = queue_evaluation(settings, model, QUICK)
    with TestClient(create_app(settings)) as client:
        headers = admin_headers(settings)
        first = client.post(f"/api/v1/evaluations/{evaluation_id}/cancel", headers=headers)
        again = client.post(f"/api/v1/evaluations/{evaluation_id}/cancel", headers=headers)
    assert first.status_code == 200 and first.json()["state"] == "cancelled"
    assert again.status_code == 409
    assert again.json()["detail"] == f"evaluation {evaluation_id} is already cancelled"
