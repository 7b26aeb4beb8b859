"""The studio's API served by uvicorn in a thread, a small Server-Sent Events reader, and the
run rows a stream follows (shared by the stream tests and bench/streams.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from studio.storage import db
from studio.storage.tables import Run, RunState, utcnow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """The app on a real HTTP server at the base URL yielded, stopped at the end."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def parse_events(lines: Iterable[str]) -> Iterator[dict]:
    """SSE lines -> {"id", "event", "data"} per event (comments and `retry` skipped)."""
    event: dict = {}
    for line in lines:
        if line == "":
            if "data" in event:
                yield event
            event = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            event["data"] = f"{event['data']}\n{value}" if "data" in event else value
        elif name in ("id", "event"):
            event[name] = value


def new_run(url: str, name: str = "streamed", state: RunState = RunState.queued,
            total_steps: int = 40) -> int:
    """A bare run row for a stream to follow; returns its id."""
    with db.session_scope(url) as session:
        run = Run(name=name, config={"name": name}, state=state, total_steps=total_steps)
        session.add(run)
        session.flush()
        return run.id


def set_state(url: str, run_id: int, state: RunState) -> None:
    """Move the run to `state`, stamping `finished_at` for a final one, as workers do."""
    with db.session_scope(url) as session:
        run = session.get(Run, run_id)
        run.state = state
        if state in (RunState.succeeded, RunState.failed, RunState.cancelled):
            run.finished_at = utcnow()
        session.add(run)
