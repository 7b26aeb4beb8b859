"""Celery tasks. Each task body is a thin call into studio services or an engine."""

from __future__ import annotations

import os
import socket

from studio.settings import get_settings
from worker import heartbeat  # noqa: F401  (connects the worker's heartbeat signals)
from worker.celery_app import app


@app.task(name="worker.ping")
def ping(payload: str = "ping") -> dict:
    """Prove the round trip producer -> broker -> worker -> result backend."""
    return {"pong": payload, "hostname": socket.gethostname(), "pid": os.getpid()}


@app.task(name="worker.build_corpus_index")
def build_corpus_index(corpus_id: int) -> dict:
    """Index an uploaded corpus; progress and the outcome are written to its row."""
    from studio.services.corpora import build_corpus_index as build

    return build(get_settings(), corpus_id)


@app.task(name="worker.train_run", bind=True)
def train_run(self, run_id: int, attempt: int = 1, job_key: str | None = None) -> str:
    """Train attempt `attempt` of a run in a spawned process; cancellation and failures end
    up on the run. A redelivered message whose attempt was taken already, or one whose job
    key is not the run's (a message for a deleted run of the same id), does nothing."""
    from worker.training_process import run_training

    return run_training(get_settings(), run_id, attempt, job_key,
                        self.request.hostname or socket.gethostname())


@app.task(name="worker.calibrate", bind=True)
def calibrate(self, calibration_id: int) -> str:
    """Measure how fast a model trains on this worker's device (the launch check's time
    estimate); a redelivered message for a calibration taken already does nothing."""
    from worker.calibration import run_calibration

    return run_calibration(get_settings(), calibration_id,
                           self.request.hostname or socket.gethostname())


@app.task(name="worker.evaluate")
def evaluate(evaluation_id: int) -> dict:
    """Zero-shot evaluation of a model or a run's checkpoint on a QA set, in a process of its
    own (a GPU of its own on queue gpu); a cancel stops it."""
    from worker.evaluation_process import run_evaluation_job

    return run_evaluation_job(get_settings(), evaluation_id)


@app.task(name="worker.export")
def export(export_id: int) -> dict:
    """Export a run's checkpoint (folder, zip or Hub); the token comes by file, never here."""
    from worker.export import run_export

    return run_export(get_settings(), export_id)
