"""Training runs: launch from a config, queue, follow, cancel, resume, delete.

A run is a config snapshot plus its state: queued -> running -> succeeded |
failed | cancelled, interrupted when its worker died (no heartbeat for
three periods), and paused when the collapse sentinel stopped it at a checkpoint
(`studio.method.sentinel`). `resume` queues an interrupted, paused, failed or cancelled run again
as a new attempt; the trainer continues from its latest checkpoint. Each
queueing is an attempt (1, 2, ...): a worker, and the training process it
spawns, change a run only while it is still their attempt, so a redelivered
or stale task can never take over a run (docs/lifecycle.md). These functions
are what the API, the UI and the CLI call; the state changes at the end are
the workers'. What a run wrote (metrics, events, rollouts) is read back
by `run_history`, importable from here too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sqlalchemy import update
from sqlmodel import Session, delete, select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.jobs import heartbeats, lifecycle
from studio.jobs.lifecycle import ACTIVE_STATES, JobTable, RunState
from studio.jobs.queue import enqueue
from studio.run_config import MAX_RUN_NAME
from studio.services import corpora, qa_sets
from studio.services.access import Actor, require_member
from studio.services.errors import Conflict
from studio.services.evaluation_files import evaluation_records_path
from studio.services.exports import export_folder, export_zip
from studio.services.records import get_or_404, get_owned, usernames
from studio.services.run_folder import RunFolder
from studio.services.run_history import run_events, run_metrics, run_rollouts  # noqa: F401
from studio.services.run_validation import checked_config
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Evaluation, Export, Rollout, Run, RunEvent, RunMetric, utcnow

TRAIN_TASK = "worker.train_run"
RUN_JOBS = JobTable("run", Run, started="started_at", heartbeat="heartbeat_at")
"""A run's life cycle (`studio.jobs.lifecycle`); every change a worker or a training process
makes is fenced on its attempt."""


def create_run(settings: Settings, actor: Actor, config: dict | str, *,
               start: bool = True) -> LaunchedRun:
    """Validate a config (dict or YAML), store the run as queued (the actor's), and send it
    to its queue. The data it names may be any of the team's.

    The answer is the run's view plus the launch report: `stages` (each stage's
    longest prompt in tokens and seconds per step), `time_estimate` and `warnings` (e.g.
    prompts that would be cut, a run of many hours)."""
    require_member(actor, "launch runs")
    plan, report = checked_config(settings, config,
                                  queue_calibration_for=actor if start else None)
    parsed = plan.config
    with session_scope(settings.sqlalchemy_url) as session:
        run = Run(name=parsed.name, config=parsed.model_dump(mode="json"),
                  plan=plan.model_dump(mode="json"), backend=parsed.backend, queue=parsed.queue,
                  total_steps=parsed.total_steps, owner_id=actor.id,
                  first_step_seconds=report["stages"][0]["seconds_per_step"])
        session.add(run)
        session.flush()
        run_id, job_key = run.id, run.job_key
    if start:
        _send(settings, run_id, attempt=1, job_key=job_key, queue=parsed.queue)
    return {**get_run(settings, run_id), **report}


def _send(settings: Settings, run_id: int, *, attempt: int, job_key: str, queue: str) -> None:
    """The message names the run, its attempt and its job key: a worker does nothing with a
    message whose three do not match a queued run (`claim_run`)."""
    task_id = enqueue(settings, TRAIN_TASK, run_id, attempt, job_key, queue=queue)
    with session_scope(settings.sqlalchemy_url) as session:
        session.exec(update(Run).where(Run.id == run_id).values(task_id=task_id))


def _queue_positions(session: Session) -> dict[int, int]:
    """Run id -> place among the queued runs of its queue (1 = next), in queueing order."""
    positions, lengths = {}, {}
    for run_id, queue in session.exec(select(Run.id, Run.queue).where(
            Run.state == RunState.queued).order_by(Run.queued_at, Run.id)):
        lengths[queue] = lengths.get(queue, 0) + 1
        positions[run_id] = lengths[queue]
    return positions


def _iso(moment) -> str | None:
    return moment.isoformat() if moment else None


class RunView(TypedDict):
    """A run as the API, the CLI and the pages show it (times in ISO 8601, UTC)."""

    id: int
    name: str
    owner: str | None  # who launched it: only they (and admins) cancel, resume, delete, export
    state: str  # queued | running | succeeded | failed | cancelled | interrupted | paused
    backend: str
    queue: str
    queue_position: int | None  # 1 = next on its queue; None unless queued
    attempt: int
    current_step: int  # steps done
    total_steps: int
    # while running (None in any other state), what the step under way does: {name, step
    # (stored, from 0) or None, since}; see `run_recorder.phase`
    phase: dict | None
    first_step_seconds: float | None  # the launch's estimate of a first step (worst case)
    error: str | None
    checkpoint_dir: str | None  # the latest complete checkpoint, relative to the data folder
    config: dict  # the run config as validated, every default filled in
    worker: str | None
    created_at: str
    queued_at: str | None
    started_at: str | None
    finished_at: str | None
    heartbeat_at: str | None


class LaunchedRun(RunView):
    """The run just stored, with its launch report."""

    stages: list[dict]  # per stage: exemplars, steps, longest prompt in tokens, seconds
    warnings: list[str]
    time_estimate: dict


def _view(run: Run, positions: dict[int, int], owners: dict[int, str]) -> RunView:
    return {
        "id": run.id, "name": run.name, "owner": owners.get(run.owner_id),
        "state": RunState(run.state).value,
        "backend": run.backend,
        "queue": run.queue, "queue_position": positions.get(run.id),
        "attempt": run.attempt, "current_step": run.current_step,
        "total_steps": run.total_steps,
        "phase": run.phase if run.state == RunState.running else None,  # the last one stays
        "first_step_seconds": run.first_step_seconds, "error": run.error,
        "checkpoint_dir": run.checkpoint_dir, "config": run.config,
        "worker": run.worker_hostname, "created_at": run.created_at.isoformat(),
        "queued_at": _iso(run.queued_at), "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at), "heartbeat_at": _iso(run.heartbeat_at),
    }


def get_run(settings: Settings, run_id: int) -> RunView:
    reap_stale_runs(settings)
    with session_scope(settings.sqlalchemy_url) as session:
        return _view(get_or_404(session, Run, run_id, "run"), _queue_positions(session),
                     usernames(session))


def list_runs(settings: Settings) -> list[RunView]:
    reap_stale_runs(settings)
    with session_scope(settings.sqlalchemy_url) as session:
        positions, owners = _queue_positions(session), usernames(session)
        return [_view(r, positions, owners)
                for r in session.exec(select(Run).order_by(Run.id.desc()))]


def runs_named(settings: Settings, name: str) -> list[int]:
    """The ids of the runs called `name`, oldest first: the API accepts a name twice, the
    pages say so before they launch."""
    with session_scope(settings.sqlalchemy_url) as session:
        return list(session.exec(select(Run.id).where(Run.name == name).order_by(Run.id)))


def free_run_name(settings: Settings, name: str) -> str:
    """`name` when no run has it, else the first of `name-2`, `name-3`, ... that none has
    (`name` cut so that it fits the length a run name may have)."""
    with session_scope(settings.sqlalchemy_url) as session:  # a suffix of up to 11 characters
        taken = set(session.exec(select(Run.name).where(
            Run.name.startswith(name[:MAX_RUN_NAME - 12], autoescape=True))))
    number, candidate = 1, name
    while candidate in taken:
        number += 1
        suffix = f"-{number}"
        candidate = name[:MAX_RUN_NAME - len(suffix)] + suffix
    return candidate


def cancel_run(settings: Settings, actor: Actor, run_id: int) -> RunView:
    """Mark the run cancelled; its worker sees it within a second and kills the process group.

    Its metrics, rollouts and checkpoints stay; `resume` can continue it later."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_owned(session, Run, run_id, "run", actor, "cancel")
        if not lifecycle.cancel(session, RUN_JOBS, run_id):
            raise Conflict(f"run {run_id} is already {RunState(run.state).value}")
    return get_run(settings, run_id)


def resume_run(settings: Settings, actor: Actor, run_id: int) -> RunView:
    """Queue an interrupted, paused, failed or cancelled run again as its next attempt; the trainer
    continues from the latest checkpoint (steps after it run again, seeded identically)."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_owned(session, Run, run_id, "run", actor, "resume")
        state, attempt = RunState(run.state), run.attempt + 1
        if not lifecycle.requeue(session, RUN_JOBS, run_id, Run.attempt == run.attempt,
                                 attempt=attempt, queued_at=utcnow(), pid=None,
                                 worker_hostname=None):
            what = ("has finished all its steps" if state == RunState.succeeded
                    else f"is {state.value}")
            raise Conflict(f"run {run_id} {what}; only an interrupted, paused, failed or "
                           "cancelled run can be resumed")
        job_key, queue = run.job_key, run.queue
    _send(settings, run_id, attempt=attempt, job_key=job_key, queue=queue)
    return get_run(settings, run_id)


def resume_point(run: RunView) -> str:
    """Where a resume of `run` starts, in words: its latest checkpoint, or step 1 while it has
    none (the trainer then starts over and replaces the steps it wrote), so that no page
    promises a checkpoint that is not there."""
    if run["checkpoint_dir"]:
        return "from its last checkpoint"
    return "from step 1 (it has no checkpoint yet)"


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def delete_run(settings: Settings, actor: Actor, run_id: int) -> None:
    """Delete a run that is not queued or running: its rows (metrics, events, rollouts,
    evaluations, exports) and its files (checkpoints, log, evaluation records, exports)."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_owned(session, Run, run_id, "run", actor, "delete")
        if run.state in ACTIVE_STATES:
            raise Conflict(f"run {run_id} is {RunState(run.state).value}; cancel it first, "
                           "then delete it")
        for table, kind in ((Evaluation, "evaluation"), (Export, "export")):
            busy = session.exec(select(table).where(table.run_id == run_id,
                                                    table.state.in_(ACTIVE_STATES))).first()
            if busy:
                raise Conflict(f"{kind} {busy.id} of run {run_id} is "
                               f"{RunState(busy.state).value}; wait until it ends, then "
                               "delete the run")
        files = [evaluation_records_path(settings, e) for e in session.exec(
            select(Evaluation.id).where(Evaluation.run_id == run_id))]
        for export_id in session.exec(select(Export.id).where(Export.run_id == run_id)):
            files += [export_folder(settings, export_id), export_zip(settings, export_id)]
        for table in (RunMetric, RunEvent, Rollout, Evaluation, Export):
            session.exec(delete(table).where(table.run_id == run_id))
        session.delete(run)
    for path in [RunFolder.of(settings, run_id).root, *files]:
        _remove(path)
    corpora.purge_retired(settings)
    qa_sets.purge_retired(settings)


# --- heartbeats: a run whose worker died is interrupted -------------------------------------

def _with_resume(run_id: int, reason: str) -> str:
    """An interrupted run's reason, and the way to go on."""
    return (f"{reason}; `studio run resume {run_id}` (POST /api/v1/runs/{run_id}/resume) "
            "continues it from its latest checkpoint, or from step 1 if it wrote none")


def reap_stale_runs(settings: Settings) -> list[int]:
    """Mark interrupted every running run without a heartbeat for three periods.

    Called by every live worker at each heartbeat (`lost_jobs`), by `studio up` at start and
    before runs are read, so no run stays `running` after its worker died."""
    return heartbeats.reap(settings, RUN_JOBS, lambda run: _with_resume(
        run.id, f"no heartbeat from worker {run.worker_hostname} for "
                f"{heartbeats.silence(settings)}"), pid=None)


def interrupt_run(settings: Settings, run_id: int, attempt: int, reason: str) -> bool:
    """A training process that finds its worker gone marks its own attempt interrupted."""
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.interrupt(session, RUN_JOBS, run_id, _with_resume(run_id, reason),
                                   Run.attempt == attempt, pid=None)


# --- state changes made by workers ------------------------------------------------------------


def claim_run(settings: Settings, run_id: int, attempt: int, job_key: str,
              hostname: str) -> bool:
    """A worker takes attempt `attempt` of a queued run; False when that attempt is not
    there to take (cancelled, deleted, already taken, or superseded by a resume), or when
    the message was for another run (its job key differs)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.claim(session, RUN_JOBS, run_id, Run.attempt == attempt,
                               Run.job_key == job_key, worker_hostname=hostname, error=None,
                               pid=None, phase=None)


def run_state(settings: Settings, run_id: int) -> RunState:
    with session_scope(settings.sqlalchemy_url) as session:
        return RunState(get_or_404(session, Run, run_id, "run").state)


def keep_alive(settings: Settings, run_id: int, attempt: int, pid: int | None) -> bool:
    """The worker's heartbeat for its attempt (and the training process's pid); False when
    the run is no longer this attempt's to run (cancelled, interrupted, deleted, resumed)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.beat(session, RUN_JOBS, run_id, Run.attempt == attempt, pid=pid)


def process_ended(settings: Settings, run_id: int, attempt: int) -> None:
    """The attempt's training process is gone (exited, or killed after a cancel)."""
    with session_scope(settings.sqlalchemy_url) as session:
        session.exec(update(Run).where(Run.id == run_id, Run.attempt == attempt).values(pid=None))


def finish_run(settings: Settings, run_id: int, state: RunState, error: str | None = None,
               *, attempt: int | None = None) -> bool:
    """Record the outcome of a running run (of `attempt`, when given); a run that is no
    longer running (cancelled, interrupted) keeps its state whatever its process said."""
    fence = () if attempt is None else (Run.attempt == attempt,)
    values = {"error": error} if error else {}
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.finish(session, RUN_JOBS, run_id, state, *fence,
                                leaving=(RunState.running,), pid=None, **values)


def record_event(settings: Settings, run_id: int, kind: str, message: str,
                 step: int = 0, data: dict | None = None) -> None:
    """One entry of the run's event log (warnings, notes) from outside the training process."""
    with session_scope(settings.sqlalchemy_url) as session:
        session.add(RunEvent(run_id=run_id, step=step, kind=kind, message=message, data=data))
