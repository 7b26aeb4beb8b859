"""Worker heartbeats in the database.

The embedded broker has no broadcast channel for Celery's remote control, so
liveness is recorded in SQL instead: a row per worker, refreshed every
`heartbeat_seconds`, deleted on a clean shutdown. `/healthz` reads it to tell
a dead worker from a busy one. The row also names the device each of the worker's queues
trains on (the launch check's time estimate looks up that device's calibration). At each
beat a worker also sweeps the jobs whose own heartbeat stopped (their worker died:
`studio.services.lost_jobs`): as long as one worker lives, no run, evaluation, export or index
build stays `running` for a dead one.
"""

from __future__ import annotations

import logging
import os
import threading

from celery.signals import worker_ready, worker_shutdown

from studio.jobs.devices import queue_device
from studio.services.health import forget_worker
from studio.services.lost_jobs import reap_lost_jobs
from studio.settings import get_settings
from studio.storage.db import session_scope
from studio.storage.tables import WorkerHeartbeat, utcnow

log = logging.getLogger(__name__)
_stop = threading.Event()


def _beat(hostname: str, queues: str, devices: dict) -> None:
    with session_scope(get_settings().sqlalchemy_url) as session:
        row = session.get(WorkerHeartbeat, hostname)
        if row is None:
            row = WorkerHeartbeat(hostname=hostname, queues=queues, pid=os.getpid())
        row.queues, row.pid, row.last_seen = queues, os.getpid(), utcnow()
        row.devices = devices
        session.add(row)


def _loop(hostname: str, queues: str) -> None:
    settings = get_settings()
    devices = {queue: queue_device(queue) for queue in queues.split(",")}
    while not _stop.is_set():
        try:
            _beat(hostname, queues, devices)
            for kind, ids in reap_lost_jobs(settings).items():
                for job_id in ids:
                    log.warning("%s %s: no heartbeat from its worker; its worker is gone",
                                kind, job_id)
        except Exception as exc:  # a busy database must not kill the worker
            log.warning("heartbeat not recorded: %s", exc)
        _stop.wait(settings.heartbeat_seconds)


@worker_ready.connect
def _start(sender, **_kw) -> None:
    queues = ",".join(sorted(sender.app.amqp.queues.consume_from or sender.app.amqp.queues))
    _stop.clear()
    threading.Thread(target=_loop, args=(sender.hostname, queues), daemon=True,
                     name="studio-heartbeat").start()


@worker_shutdown.connect
def _stop_beating(sender, **_kw) -> None:
    _stop.set()
    try:
        forget_worker(get_settings(), sender.hostname, os.getpid())
    except Exception as exc:
        log.warning("heartbeat row not removed: %s", exc)
