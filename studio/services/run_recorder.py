"""What a training process writes about its run, for every engine (native and veRL alike).

A process trains a run as one attempt; each write first checks that the run is still
its to write (not cancelled, deleted, or resumed by a newer attempt), so a superseded
process stops instead of mixing its steps into another attempt's. Between steps' rows, an
engine may say what it is doing (`phase`), so a step under way shows on the Live run page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlmodel import delete

from studio.jobs import lifecycle
from studio.jobs.lifecycle import RunState
from studio.services.runs import RUN_JOBS
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Rollout, Run, RunEvent, RunMetric, utcnow

LOADING = "loading the model and data"
STEP_PHASES = ("rolling out", "scoring", "updating")  # a step's phases, in order
CHECKPOINTING = "saving a checkpoint"


class RunStopped(Exception):
    """The run is no longer this process's to train: cancelled, interrupted, resumed by a
    newer attempt, or deleted. The process stops without writing anything more."""


@dataclass(frozen=True)
class RunRecorder:
    """Run `run_id` as written by attempt `attempt` (None: any process may write, as in
    tests and the veRL ingest's replays)."""

    settings: Settings
    run_id: int
    attempt: int | None = None

    def owned(self, session) -> Run:
        """The run row, if this attempt may still write to it; else RunStopped."""
        run = session.get(Run, self.run_id)
        if run is None or run.state == RunState.cancelled:
            raise RunStopped(f"run {self.run_id} was cancelled or deleted")
        if self.attempt is not None and (run.attempt != self.attempt
                                         or run.state != RunState.running):
            raise RunStopped(f"run {self.run_id} is {RunState(run.state).value} at attempt "
                             f"{run.attempt}, not running as attempt {self.attempt}")
        return run

    def write_step(self, step: int, metrics: dict, rollouts: list[Rollout],
                   events: list[RunEvent] = ()) -> None:
        """One transaction per step: its metrics row (non-finite values stored as null),
        events and rollouts, and the run's progress."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            run = self.owned(session)
            clean = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
            session.add(RunMetric(run_id=self.run_id, step=step, stage=int(metrics["stage"]),
                                  exemplars=int(metrics["exemplars"]), values=clean))
            session.add_all([*events, *rollouts])
            run.current_step = step + 1
            run.heartbeat_at = utcnow()
            session.add(run)

    def phase(self, name: str, step: int | None = None) -> None:
        """What the process is doing now (`LOADING`, one of `STEP_PHASES` of stored step
        `step`, `CHECKPOINTING`), since now: one row updated, a few times a step. Like every
        write, it raises RunStopped once the run is not this attempt's (before work worth
        skipping)."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            run = self.owned(session)
            run.phase = {"name": name, "step": step, "since": utcnow().isoformat()}
            session.add(run)

    def event(self, step: int, kind: str, message: str, data: dict | None = None) -> None:
        """One entry of the run's event log (a resume, a stage change, a warning)."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            self.owned(session)
            session.add(RunEvent(run_id=self.run_id, step=step, kind=kind, message=message,
                                 data=data))

    def forget_steps_from(self, step: int) -> None:
        """Rows of steps after the checkpoint (all of them when there is none) were written
        by an attempt that died before checkpointing: they run again, once."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            self.owned(session)
            for table in (RunMetric, RunEvent, Rollout):
                session.exec(delete(table).where(table.run_id == self.run_id,
                                                 table.step >= step))

    def pause(self, reason: str) -> None:
        """The run stops here, paused (the collapse sentinel's `pause`, after the checkpoint
        it resumes from); `reason` says which signal and what to try."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            self.owned(session)
            fence = () if self.attempt is None else (Run.attempt == self.attempt,)
            lifecycle.move(session, RUN_JOBS, self.run_id, RunState.paused, *fence, phase=None,
                           error=reason)

    def checkpointed(self, folder: str) -> None:
        """The run's latest complete checkpoint is `folder` (relative to the data dir)."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            run = self.owned(session)
            run.checkpoint_dir = folder
            session.add(run)
