"""The studio's health: is the database reachable, the broker, and which workers are alive."""

from __future__ import annotations

from sqlmodel import select
from typing_extensions import NotRequired, TypedDict  # pydantic reads them on Python 3.11

from studio.jobs.heartbeats import alive_since
from studio.jobs.queue import QUEUE_JOBS, REQUIRED_QUEUES, check_broker
from studio.settings import Settings, redact_url
from studio.storage.db import check_connection, session_scope
from studio.storage.tables import WorkerHeartbeat


class Probe(TypedDict):
    ok: bool
    url: str  # credentials hidden
    error: NotRequired[str]  # why it cannot be reached


class WorkerView(TypedDict):
    hostname: str
    queues: list[str]
    pid: int
    last_seen: str


class LiveWorker(WorkerView):
    devices: dict  # per queue, the device its training processes use


class HealthReport(TypedDict):
    """`/healthz` for a caller with an API token."""

    status: str  # ok | degraded | down
    database: Probe
    broker: Probe
    workers: list[WorkerView]
    queues: dict[str, list[str]]  # each queue the studio needs (and any served): its workers
    problems: list[str]


class PublicHealth(TypedDict):
    """`/healthz` for anyone: the status alone."""

    status: str  # ok | degraded | down
    detail: str  # how to see the parts


def _probe(fn, url: str) -> Probe:
    try:
        fn(url)
        return {"ok": True, "url": redact_url(url)}
    except Exception as exc:
        return {"ok": False, "url": redact_url(url), "error": f"{type(exc).__name__}: {exc}"}


def live_workers(settings: Settings) -> list[LiveWorker]:
    """Workers whose heartbeat is younger than three heartbeat periods."""
    cutoff = alive_since(settings)
    with session_scope(settings.sqlalchemy_url) as session:
        rows = session.exec(select(WorkerHeartbeat).where(WorkerHeartbeat.last_seen >= cutoff))
        return [
            {"hostname": w.hostname, "queues": w.queues.split(","), "pid": w.pid,
             "last_seen": w.last_seen.isoformat(), "devices": w.devices or {}}
            for w in rows
        ]


def forget_worker(settings: Settings, hostname: str, pid: int) -> None:
    """Delete the heartbeat row of a worker known to be gone, so /healthz says so at once
    instead of after MISSED_BEATS periods. The pid must match: a newer worker of the same
    name keeps its row."""
    with session_scope(settings.sqlalchemy_url) as session:
        row = session.get(WorkerHeartbeat, hostname)
        if row is not None and row.pid == pid:
            session.delete(row)


NO_WORKER = ("no worker is alive: runs, evaluations, index builds and exports wait in their "
             "queues; `studio up` restarts its workers, or start them with `studio worker "
             "--queues cpu` and `studio worker --queues short`")


def start_a_worker(queue: str) -> str:
    """What to do when no live worker listens on `queue`."""
    return f"`studio up` restarts its worker, or start one with `studio worker --queues {queue}`"


def queue_workers(workers: list[dict]) -> dict[str, list[str]]:
    """The queues a studio needs (and any other one served) with the live workers of each."""
    served: dict[str, list[str]] = {queue: [] for queue in REQUIRED_QUEUES}
    for worker in workers:
        for queue in worker["queues"]:
            served.setdefault(queue, []).append(worker["hostname"])
    return served


def health(settings: Settings) -> HealthReport:
    """`status` is down (database or broker unreachable), degraded (no live worker on a queue
    the studio needs: cpu, or short for index builds and exports) or ok; `queues` lists each
    queue's live workers; `problems` says in plain words what is wrong."""
    database = _probe(check_connection, settings.sqlalchemy_url)
    broker = _probe(check_broker, settings.celery_broker_url)
    # /healthz answers without credentials: the workers' hardware stays out of it
    workers = [{k: v for k, v in w.items() if k != "devices"}
               for w in live_workers(settings)] if database["ok"] else []
    queues = queue_workers(workers)
    problems = [f"{part} {report['url']} cannot be reached: {report['error']}"
                for part, report in (("database", database), ("broker", broker))
                if not report["ok"]]
    if database["ok"] and not workers:
        problems.append(NO_WORKER)
    elif database["ok"]:
        problems += [f"no worker serves queue {queue}, where {QUEUE_JOBS[queue]} wait; "
                     f"{start_a_worker(queue)}" for queue in REQUIRED_QUEUES if not queues[queue]]
    if not (database["ok"] and broker["ok"]):
        status = "down"
    else:
        status = "degraded" if problems else "ok"
    return {"status": status, "database": database, "broker": broker, "workers": workers,
            "queues": queues, "problems": problems}
