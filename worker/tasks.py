"""Celery tasks. Each task body is a thin call into studio services or an engine."""

from __future__ import annotations

import os
import socket

from worker import heartbeat  # noqa: F401  (connects the worker's heartbeat signals)
from worker.celery_app import app


@app.task(name="worker.ping")
def ping(payload: str = "ping") -> dict:
    """Prove the round trip producer -> broker -> worker -> result backend."""
    return {"pong": payload, "hostname": socket.gethostname(), "pid": os.getpid()}
