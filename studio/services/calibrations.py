"""Calibrations: how fast a model trains on a worker's device, measured there and kept.

The launch check (`run_validation`) estimates a run's time from the calibration of its model
on the device its queue's workers train on (their heartbeats name it: `studio.jobs.devices`), at
the run's threads and dtype. When there is none yet it queues one on that queue
(`worker.calibrate`: `worker/calibration.py`, under a minute for the default model on a CPU)
and says that the estimate comes once it has run. A worker that runs one job at a time (the
embedded default) measures only after the jobs ahead of it: the answer says how many there
are. A calibration is kept until the device changes (another CPU or GPU model, core count or
PyTorch version make another key) or `studio calibrate` measures again.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func
from sqlmodel import Session, select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.jobs import lifecycle
from studio.jobs.engines import engine_named
from studio.jobs.lifecycle import ACTIVE_STATES, JobTable, RunState
from studio.jobs.queue import TRAINING_QUEUES, enqueue
from studio.method.tools import results_words
from studio.run_config import BF16_AUTOCAST, RunConfig
from studio.services.access import Actor, require_member
from studio.services.errors import InvalidInput
from studio.services.estimates import LONG_RUN_SECONDS, duration_words, estimate_run
from studio.services.health import live_workers
from studio.services.records import get_or_404, inserted_id, usernames
from studio.services.tokenizers import check_model_folder
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import DeviceCalibration, Run, utcnow

CALIBRATE_TASK = "worker.calibrate"
CALIBRATION_JOBS = JobTable("calibration", DeviceCalibration, started="started_at")
"""A calibration's life cycle (`studio.jobs.lifecycle`): it never beats, so one still running
`LOST_AFTER` after its claim lost its worker and is interrupted."""
DTYPES = ("auto", "float32", "bfloat16", BF16_AUTOCAST)
#: A calibration running longer than this lost its worker (it takes about a minute).
LOST_AFTER = timedelta(minutes=30)
#: A CPU calibration that got less than this share of its threads' time ran on a busy machine.
BUSY_SHARE = 0.6


def resolved_dtype(dtype: str, device_kind: str) -> str:
    """`engine.dtype` as the trainer resolves it: auto is bfloat16 on CUDA, float32 on a CPU."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device_kind == "cuda" else "float32"


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None


class CalibrationView(TypedDict):
    """A speed measurement as the API shows it (times in ISO 8601, UTC)."""

    id: int
    owner: str | None  # who asked for it, or whose launch check queued it
    model: str
    queue: str
    threads: int
    dtype: str  # float32 | bfloat16 (engine.dtype resolved)
    state: str  # queued | running | succeeded | failed | interrupted (its worker was lost)
    device: dict | None  # the measuring worker's device (studio.jobs.devices.queue_device)
    device_key: str | None
    worker: str | None
    busy_runs: int  # runs training on that worker when it started measuring
    figures: dict | None  # shape and rates (studio.services.estimates), once measured
    error: str | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None


def _view(row: DeviceCalibration, owners: dict[int, str]) -> CalibrationView:
    return {"id": row.id, "owner": owners.get(row.owner_id), "model": row.model,
            "queue": row.queue, "threads": row.threads,
            "dtype": row.dtype, "state": RunState(row.state).value, "device": row.device,
            "device_key": row.device_key, "worker": row.worker_hostname,
            "busy_runs": row.busy_runs, "figures": row.figures, "error": row.error,
            "created_at": _iso(row.created_at), "started_at": _iso(row.started_at),
            "finished_at": _iso(row.finished_at)}


def _queue_devices(settings: Settings, queue: str) -> list[dict]:
    """The distinct devices the live workers of `queue` train on, with a worker each."""
    found: dict[str, dict] = {}
    for worker in live_workers(settings):
        device = worker["devices"].get(queue)
        if device and queue in worker["queues"]:
            found.setdefault(device["key"], {**device, "worker": worker["hostname"]})
    return list(found.values())


def request_calibration(settings: Settings, actor: Actor, *, model: str, queue: str = "cpu",
                        threads: int = 1, dtype: str = "auto", start: bool = True
                        ) -> CalibrationView:
    """Queue a new calibration of `model` on `queue` (measured again even when one exists)."""
    require_member(actor, "queue measurements")
    return _queue_calibration(settings, actor.id, model=model, queue=queue, threads=threads,
                              dtype=dtype, start=start)


def _queue_calibration(settings: Settings, owner_id: int | None, *, model: str, queue: str,
                       threads: int, dtype: str, start: bool = True) -> CalibrationView:
    if queue not in TRAINING_QUEUES:
        raise InvalidInput(f"queue: '{queue}' is not one of {', '.join(TRAINING_QUEUES)}")
    if threads < 1:
        raise InvalidInput("threads: must be at least 1 (engine.threads of the runs)")
    if dtype not in DTYPES:
        raise InvalidInput(f"dtype: '{dtype}' is not one of {', '.join(DTYPES)}")
    if not model.strip():
        raise InvalidInput("model: name the model to measure (as a run config's model)")
    check_model_folder(settings, model)
    devices = _queue_devices(settings, queue)
    kind = devices[0]["kind"] if devices else ("cuda" if queue == "gpu" else "cpu")
    with session_scope(settings.sqlalchemy_url) as session:
        calibration_id = inserted_id(session, DeviceCalibration(
            owner_id=owner_id, model=model, queue=queue, threads=threads,
            dtype=resolved_dtype(dtype, kind)))
    if start:
        enqueue(settings, CALIBRATE_TASK, calibration_id, queue=queue)
    return get_calibration(settings, calibration_id)


def _interrupt_lost(session: Session) -> None:
    """Interrupt the calibrations running longer than `LOST_AFTER`: their worker is gone (a
    measurement is stopped after `worker.calibration.TIMEOUT_SECONDS`), and the next launch
    check queues a new one."""
    lifecycle.interrupt_stale(
        session, CALIBRATION_JOBS, "started_at", utcnow() - LOST_AFTER,
        lambda row: f"worker {row.worker_hostname} took it more than "
                    f"{LOST_AFTER.total_seconds() / 60:g} minutes ago and recorded nothing")


def get_calibration(settings: Settings, calibration_id: int) -> CalibrationView:
    with session_scope(settings.sqlalchemy_url) as session:
        _interrupt_lost(session)
        return _view(get_or_404(session, DeviceCalibration, calibration_id, "calibration"),
                     usernames(session))


def measured_speed(settings: Settings, model: str, queue: str, threads: int = 1
                   ) -> CalibrationView | None:
    """The latest finished measurement of `model` on `queue` at `threads` (an evaluation's
    process runs one): the figures that estimate an evaluation's time; None when there is
    none."""
    with session_scope(settings.sqlalchemy_url) as session:
        row = _latest(session, DeviceCalibration.model == model, DeviceCalibration.queue == queue,
                      DeviceCalibration.threads == threads,
                      DeviceCalibration.state == RunState.succeeded)
        return _view(row, usernames(session)) if row else None


def list_calibrations(settings: Settings) -> list[CalibrationView]:
    with session_scope(settings.sqlalchemy_url) as session:
        _interrupt_lost(session)
        owners = usernames(session)
        return [_view(r, owners) for r in session.exec(
            select(DeviceCalibration).order_by(DeviceCalibration.id.desc()))]


# --- the worker's side -------------------------------------------------------------------------

def claim_calibration(settings: Settings, calibration_id: int, hostname: str,
                      device: dict) -> CalibrationView | None:
    """Take a queued calibration for this worker's `device`; None when it is not queued."""
    with session_scope(settings.sqlalchemy_url) as session:
        busy_runs = session.exec(select(func.count()).select_from(Run).where(
            Run.state == RunState.running, Run.worker_hostname == hostname)).one()
        if not lifecycle.claim(session, CALIBRATION_JOBS, calibration_id,
                               worker_hostname=hostname, device=device,
                               device_key=device["key"], busy_runs=busy_runs):
            return None
        return _view(session.get(DeviceCalibration, calibration_id), usernames(session))


def finish_calibration(settings: Settings, calibration_id: int, *, figures: dict | None = None,
                       error: str | None = None) -> None:
    """Record the figures (succeeded) or why it could not measure (failed)."""
    outcome = RunState.failed if error else RunState.succeeded
    with session_scope(settings.sqlalchemy_url) as session:
        lifecycle.finish(session, CALIBRATION_JOBS, calibration_id, outcome, figures=figures,
                         error=error)


# --- the launch check's estimate ---------------------------------------------------------------

def _latest(session: Session, *conditions) -> DeviceCalibration | None:
    return session.exec(select(DeviceCalibration).where(*conditions)
                        .order_by(DeviceCalibration.id.desc())).first()


def _last_measured(session: Session, config: RunConfig) -> DeviceCalibration | None:
    """The queue's last finished calibration of the run's model, threads and precision (`auto`
    resolved on the device each one measured): the figures for a queue with no worker now."""
    rows = session.exec(select(DeviceCalibration).where(
        DeviceCalibration.model == config.model, DeviceCalibration.threads == config.engine.threads,
        DeviceCalibration.queue == config.queue, DeviceCalibration.state == RunState.succeeded)
        .order_by(DeviceCalibration.id.desc()))
    return next((row for row in rows
                 if row.dtype == resolved_dtype(config.engine.dtype, row.device["kind"])), None)


def _pending(session: Session, config: RunConfig, dtype: str) -> DeviceCalibration | None:
    """A calibration of the run's model, threads and dtype waiting or measuring on its queue."""
    return _latest(session, DeviceCalibration.model == config.model,
                   DeviceCalibration.queue == config.queue,
                   DeviceCalibration.threads == config.engine.threads,
                   DeviceCalibration.dtype == dtype,
                   DeviceCalibration.state.in_(ACTIVE_STATES))


def _measuring(session: Session, row: DeviceCalibration) -> dict:
    """Why the estimate is not there yet: measuring now, or the runs ahead of it."""
    lead = f"measuring this worker's speed for {row.model} (calibration {row.id})"
    if row.state == RunState.running:
        return _not_ready("measuring", f"{lead}: {row.worker_hostname} is measuring it now; "
                          "check again in a minute", row.id)
    running = session.exec(select(func.count()).select_from(Run).where(
        Run.queue == row.queue, Run.state == RunState.running)).one()
    queued = session.exec(select(func.count()).select_from(Run).where(
        Run.queue == row.queue, Run.state == RunState.queued,
        Run.queued_at < row.created_at)).one()
    if not running and not queued:
        return _not_ready("measuring", f"{lead}: it is queued and takes about a minute for a "
                          "small model; check again then", row.id)
    return _not_ready("measuring", f"{lead}: it waits behind {running} running and {queued} "
                      f"queued run(s) on queue {row.queue}; a worker that runs one job at a "
                      "time (the embedded default) measures only when they have ended, so "
                      "check again then", row.id, ahead=running + queued)


def _busy_words(row: DeviceCalibration) -> str:
    figures = row.figures
    share = None
    if row.device and row.device.get("kind") == "cpu" and figures.get("measure_seconds"):
        share = figures["measure_cpu_seconds"] / (figures["measure_seconds"] * row.threads)
    if row.busy_runs or (share is not None and share < BUSY_SHARE):
        why = (f"{row.busy_runs} run(s) trained on that worker" if row.busy_runs
               else f"the machine was busy (it got {share:.0%} of its threads' time)")
        return (f"; it was measured while {why}, so real steps may be faster: `studio "
                f"calibrate --model {row.model} --queue {row.queue}` measures again")
    return ""


def _ready(row: DeviceCalibration, config: RunConfig, stages: list[dict],
           also: str = "") -> dict:
    estimate = estimate_run(row.figures, config, stages)
    total = duration_words(estimate["total_seconds"])
    tokens = estimate["response_tokens"]
    where = (f"queue {row.queue} ({row.device['name']}, {row.threads} thread(s), {row.dtype}; "
             f"measured on {row.worker_hostname} {row.finished_at:%Y-%m-%d %H:%M} UTC)")
    message = (f"at most about {total} for {estimate['total_steps']} steps on {where}, if "
               f"every response used its whole budget ({tokens['model']} tokens from the model"
               f" and {tokens['env']} of {results_words(config.tools)}){also}"
               f"{_busy_words(row)}")
    warnings = []
    if estimate["long"]:
        faster = "" if row.queue == "gpu" else ", or queue gpu"
        warnings.append(
            f"time: this run may take up to about {total} on queue {row.queue} "
            f"({row.device['name']}), more than {LONG_RUN_SECONDS // 3600} hours; fewer "
            "steps, a smaller grpo.batch_size or grpo.group_size, or shorter "
            f"grpo.max_response_tokens and grpo.max_turn_tokens make it shorter{faster}")
    return {"state": "ready", "message": message, "calibration": row.id,
            "device": row.device["name"], "worker": row.worker_hostname, **estimate,
            "warnings": warnings}


def _not_ready(state: str, message: str, calibration: int | None = None,
               ahead: int = 0) -> dict:
    return {"state": state, "message": message, "calibration": calibration, "ahead": ahead,
            "warnings": []}


def time_estimate(settings: Settings, config: RunConfig, stages: list[dict], *,
                  start: bool = True, owner_id: int | None = None) -> dict:
    """The run's time on its queue's workers: `state` ready (seconds per stage, the total,
    `message` in words, `warnings` over three hours), measuring (a calibration is queued or
    running: `message` says why it may wait) or unavailable (`message` says what to do).
    `start`: queue a calibration when there is none for the queue's device, as `owner_id`'s
    (the user whose check needs it)."""
    if not engine_named(config.backend).timed:
        return _not_ready("unavailable", f"no time estimate for backend {config.backend} (the "
                          "cost model is the native engine's)")
    threads, queue = config.engine.threads, config.queue
    devices = _queue_devices(settings, queue)
    with session_scope(settings.sqlalchemy_url) as session:
        _interrupt_lost(session)
        same = (DeviceCalibration.model == config.model, DeviceCalibration.threads == threads)
        if not devices:
            row = _last_measured(session, config)
            if row is None:
                return _not_ready("unavailable", f"no time estimate: no worker listens on "
                                  f"queue {queue} (start one: `studio up`, or `studio worker "
                                  f"--queues {queue}`); it measures this model's speed then")
            return _ready(row, config, stages, also=f"; no worker listens on queue {queue} "
                          "now, so these are the figures of its last calibration")
        measured = []
        for device in devices:
            dtype = resolved_dtype(config.engine.dtype, device["kind"])
            row = _latest(session, *same, DeviceCalibration.dtype == dtype,
                          DeviceCalibration.device_key == device["key"],
                          DeviceCalibration.state.in_((RunState.succeeded, RunState.failed)))
            if row is not None and row.state == RunState.failed and _pending(
                    session, config, dtype) is None:
                return _not_ready("unavailable", f"no time estimate: measuring {config.model}"
                                  f" on {row.worker_hostname} failed ({row.error}); `studio "
                                  f"calibrate --model {config.model} --queue {queue}` tries "
                                  "again", row.id)
            if row is not None and row.state == RunState.succeeded:
                measured.append(row)
        if measured:
            slowest = max((_ready(r, config, stages) for r in measured),
                          key=lambda e: e["total_seconds"])
            if len(devices) > 1:
                slowest["message"] += (f" (the slowest of the {len(measured)} measured "
                                       f"device(s) of the {len(devices)} on queue {queue})")
            return slowest
        pending = _pending(session, config, resolved_dtype(config.engine.dtype,
                                                           devices[0]["kind"]))
        if pending is not None:
            return _measuring(session, pending)
    if not start:
        return _not_ready("unavailable", f"no time estimate yet: {config.model} was not "
                          f"measured on queue {queue}'s device; `studio run validate` or "
                          "`studio calibrate` queues the measurement")
    queued = _queue_calibration(settings, owner_id, model=config.model, queue=queue,
                                threads=threads, dtype=config.engine.dtype)
    with session_scope(settings.sqlalchemy_url) as session:
        return _measuring(session, session.get(DeviceCalibration, queued["id"]))

