"""A job's heartbeat while its work runs, and the rule for jobs whose heartbeat stopped.

A worker that dies (a killed studio, a lost machine) leaves its job `running`; its heartbeat
column then ages, and `reap` moves every job silent for `MISSED_BEATS` periods to its kind's
`lost` state (`studio.jobs.lifecycle`). Runs and evaluations beat from the worker's watch of
their process; an export or an index build does its work in the worker's own thread, through
steps that report nothing for minutes (a zip, a Hub upload, an index's save), so
`keep_beating` beats for it from a thread of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlmodel import SQLModel

from studio.jobs import lifecycle
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import utcnow

log = logging.getLogger(__name__)

MISSED_BEATS = 3
"""A worker, or a job, silent for this many heartbeat periods is gone."""


def alive_since(settings: Settings) -> datetime:
    """A heartbeat older than this is a dead worker's."""
    return utcnow() - timedelta(seconds=MISSED_BEATS * settings.heartbeat_seconds)


@contextmanager
def keep_beating(settings: Settings, job: lifecycle.JobTable, job_id: int) -> Iterator[None]:
    """Stamp the job's heartbeat every `heartbeat_seconds` while the block runs (only while it
    is running: a cancelled or failed job is left as it is)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(settings.heartbeat_seconds):
            try:
                with session_scope(settings.sqlalchemy_url) as session:
                    lifecycle.beat(session, job, job_id)
            except Exception as exc:  # a busy database must not stop the work
                log.warning("%s %s: heartbeat not recorded: %s", job.kind, job_id, exc)

    thread = threading.Thread(target=beat, name=f"{job.kind}-{job_id}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def silence(settings: Settings) -> str:
    """How long a job goes without a heartbeat before it counts as lost, in words."""
    return f"{MISSED_BEATS * settings.heartbeat_seconds:g} s"


def reap(settings: Settings, job: lifecycle.JobTable, reason: Callable[[SQLModel], str],
         **values) -> list[int]:
    """Move every running job of this kind whose heartbeat is older than `MISSED_BEATS`
    periods to its `lost` state, with `values` and `reason(row)` as its error; their ids."""
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.interrupt_stale(session, job, job.heartbeat, alive_since(settings),
                                         reason, **values)
