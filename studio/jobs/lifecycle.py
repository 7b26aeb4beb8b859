"""One life cycle for every job the studio queues: training runs, evaluations, exports,
speed measurements (calibrations) and index builds.

A job is a row whose state moves along `TRANSITIONS`, each move one conditional UPDATE
(`move`): it changes the row only from a state that may reach the new one, and only under
the caller's fence (a run's attempt and job key), so of two writers racing (a worker's
claim and a cancel, a stale attempt's outcome and a resume) one alone wins. The moves the
kinds call: `claim` (a worker takes it), `beat` (its heartbeat: is it still the worker's?),
`finish` (succeeded or failed), `cancel`, `interrupt` (its worker is gone;
`interrupt_stale` finds those whose heartbeat stopped, as a restarted studio does),
`requeue` (a resume, a retry). Each kind's module keeps its own work and words (a run's
resume advice, an export's files) and declares its table's `JobTable`; docs/lifecycle.md
draws the states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum

from sqlalchemy import func, or_, update
from sqlmodel import Session, SQLModel, select


class RunState(str, Enum):
    """A job's state: a run's, an evaluation's, an export's or a calibration's, as stored. An
    index build stores its states in its corpus's words (`CorpusStatus`)."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    interrupted = "interrupted"  # its worker died; a run's `resume` continues it
    paused = "paused"  # a run the collapse sentinel stopped at a checkpoint; `resume` continues


class CorpusStatus(str, Enum):
    """An index build's states in the words its corpus stores and shows."""

    pending = "pending"
    indexing = "indexing"
    ready = "ready"
    failed = "failed"


INDEX_BUILD_WORDS = {RunState.queued: CorpusStatus.pending,
                     RunState.running: CorpusStatus.indexing,
                     RunState.succeeded: CorpusStatus.ready,
                     RunState.failed: CorpusStatus.failed}
"""An index build reaches these four states alone, each stored as its corpus's word."""

_ENDS = frozenset({RunState.succeeded, RunState.failed, RunState.cancelled, RunState.paused})
TRANSITIONS: Mapping[RunState, frozenset[RunState]] = {
    # a job done in place (a test, a bench, the veRL ingest's replay) ends without a claim
    RunState.queued: frozenset({RunState.running}) | _ENDS,
    # running again: a redelivered message redoes a job whose work starts over (an export,
    # an index build); interrupted: its worker is gone
    RunState.running: frozenset({RunState.running, RunState.interrupted}) | _ENDS,
    RunState.interrupted: frozenset({RunState.queued, RunState.cancelled}),
    RunState.paused: frozenset({RunState.queued}),
    RunState.failed: frozenset({RunState.queued}),
    RunState.cancelled: frozenset({RunState.queued}),
    RunState.succeeded: frozenset(),
}
"""Where each state may go; every move not listed is refused."""


def sources(target: RunState) -> tuple[RunState, ...]:
    """The states a job may leave for `target`, in `RunState`'s order."""
    return tuple(state for state in RunState if target in TRANSITIONS[state])


ACTIVE_STATES = (RunState.queued, RunState.running)
"""A worker holds the job, or will take it."""
FINAL_STATES = (RunState.succeeded, RunState.failed, RunState.cancelled, RunState.paused)
"""Nothing more will come (an interrupted run may still be resumed; a paused run stopped
itself at a checkpoint, and waits for a resume)."""
OUTCOMES = (RunState.succeeded, RunState.failed)
"""What a job's own work ends in."""
REQUEUE_FROM = sources(RunState.queued)
"""A job in one of these may be queued again (a run's resume, an export's retry)."""


@dataclass(frozen=True)
class JobTable:
    """Where one kind of job keeps its life cycle: its table, the column of its state and the
    columns a move stamps (None: the table has none)."""

    kind: str  # for messages: "run", "evaluation", ...
    table: type[SQLModel]
    state: str = "state"
    words: Mapping[RunState, str] | None = None  # the word stored per state; None: its own
    started: str | None = None  # when a worker first took it
    heartbeat: str | None = None  # stamped at each claim and beat
    finished: str | None = "finished_at"  # stamped when it leaves the active states
    touched: str | None = None  # stamped at every move
    lost: RunState = RunState.interrupted  # where a job whose worker is gone goes

    def stored(self, state: RunState) -> str | None:
        """The word this kind stores for `state`; None when it never reaches it."""
        return state.value if self.words is None else self.words.get(state)

    def column(self, name: str):
        return getattr(self.table, name)

    def in_state(self, *states: RunState):
        """The condition "its state is one of `states`" (those this kind reaches)."""
        return self.column(self.state).in_(
            [word for word in map(self.stored, states) if word is not None])


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _stamps(job: JobTable, target: RunState) -> dict:
    """The columns a move to `target` sets besides the state."""
    now, stamps = _now(), {}
    if job.touched:
        stamps[job.touched] = now
    if target == RunState.running:
        if job.started:
            stamps[job.started] = func.coalesce(job.column(job.started), now)
        if job.heartbeat:
            stamps[job.heartbeat] = now
    elif target == RunState.queued:
        stamps.update({name: None for name in (job.finished, job.heartbeat) if name})
        stamps["error"] = None
    elif job.finished:
        stamps[job.finished] = now
    return stamps


def move(session: Session, job: JobTable, job_id: int, target: RunState, *fence,
         leaving: Iterable[RunState] | None = None, **values) -> bool:
    """Move job `job_id` to `target`, with `values`, from any state that may reach it (or
    from those of `leaving`, fewer), under the `fence` conditions; False when the row is not
    there in such a state. A move `TRANSITIONS` does not list is a mistake (ValueError)."""
    allowed = sources(target) if leaving is None else tuple(leaving)
    word = job.stored(target)
    if word is None or not set(allowed) <= set(sources(target)):
        raise ValueError(f"{job.kind}: no move from {', '.join(allowed)} to {target.value}")
    table = job.table
    done = session.exec(update(table).where(table.id == job_id, job.in_state(*allowed), *fence)
                        .values({job.state: word, **_stamps(job, target), **values}))
    return done.rowcount == 1


def claim(session: Session, job: JobTable, job_id: int, *fence,
          leaving: Iterable[RunState] = (RunState.queued,), **values) -> bool:
    """A worker takes a queued job (a kind whose work starts over names running too, for a
    redelivered message); False when it is not there to take."""
    return move(session, job, job_id, RunState.running, *fence, leaving=leaving, **values)


def beat(session: Session, job: JobTable, job_id: int, *fence, **values) -> bool:
    """A running job's heartbeat, with `values`: False once it is no longer running under
    `fence` (cancelled, interrupted, deleted, resumed), the worker's sign to stop it."""
    table = job.table
    where = (table.id == job_id, job.in_state(RunState.running), *fence)
    stamps = {job.heartbeat: _now()} if job.heartbeat else {}
    if not stamps and not values:
        return session.exec(select(table.id).where(*where)).first() is not None
    return session.exec(update(table).where(*where).values(**stamps, **values)).rowcount == 1


def finish(session: Session, job: JobTable, job_id: int, outcome: RunState, *fence,
           leaving: Iterable[RunState] = ACTIVE_STATES, **values) -> bool:
    """Record a job's outcome, succeeded or failed, with `values` (its figures, or `error`);
    a job that ended otherwise meanwhile (cancelled, interrupted) keeps its state."""
    if outcome not in OUTCOMES:
        raise ValueError(f"{job.kind}: {outcome.value} is not an outcome")
    return move(session, job, job_id, outcome, *fence, leaving=leaving, **values)


def cancel(session: Session, job: JobTable, job_id: int, *fence,
           leaving: Iterable[RunState] | None = None) -> bool:
    """Cancel a job; its worker sees it at its next `beat` and stops the work."""
    return move(session, job, job_id, RunState.cancelled, *fence, leaving=leaving)


def interrupt(session: Session, job: JobTable, job_id: int, reason: str, *fence,
              **values) -> bool:
    """A running job whose worker is gone: interrupted (its kind's `lost` state), its error
    saying why."""
    return move(session, job, job_id, job.lost, *fence, error=f"interrupted: {reason}",
                **values)


def interrupt_stale(session: Session, job: JobTable, alive_by: str, cutoff: datetime,
                    reason: Callable[[SQLModel], str], **values) -> list[int]:
    """Interrupt every running job whose `alive_by` column (its heartbeat; its claim's time
    for a job that never beats) is unset or older than `cutoff`: its worker died, or the
    studio restarted without it. `reason(row)` says why; returns their ids."""
    stamp = job.column(alive_by)
    stale = or_(stamp.is_(None), stamp < cutoff)
    rows = session.exec(select(job.table).where(job.in_state(RunState.running), stale)).all()
    return [row.id for row in rows
            if interrupt(session, job, row.id, reason(row), stale, **values)]


def requeue(session: Session, job: JobTable, job_id: int, *fence, **values) -> bool:
    """Queue an ended job again (`REQUEUE_FROM`), its error and end cleared."""
    return move(session, job, job_id, RunState.queued, *fence, **values)
