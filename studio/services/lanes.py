"""Where a queued job waits, and behind what, in words.

Runs, evaluations and speed measurements go to a training queue (cpu or gpu), whose worker
runs one job per slot for as long as it takes; index builds and exports go to the short
jobs' lane (`studio.jobs.queue.SHORT_QUEUE`), served by a light worker of its own, so that they
never wait behind training. A queued job's message names its queue and what waits there,
then: no worker serves the queue (and how to start one), a worker takes it within seconds,
or the jobs ahead of it: those running (a run with its step and, at its recent pace, the
time it has left) and those queued before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, select

from studio.jobs.lifecycle import ACTIVE_STATES, CorpusStatus, RunState
from studio.jobs.queue import QUEUE_JOBS, SHORT_QUEUE
from studio.services.estimates import duration_words
from studio.services.health import live_workers, start_a_worker
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Corpus, DeviceCalibration, Evaluation, Export, Run, RunMetric

#: The recent steps whose pace says how long a running run has left.
PACE_STEPS = 5
#: At most this many jobs ahead are named; the rest are counted.
NAMED_AHEAD = 3


@dataclass(frozen=True)
class Job:
    kind: str  # run | evaluation | calibration | corpus | export
    id: int
    running: bool
    since: datetime  # when it was queued: the queue's order
    words: str  # what it is, for a message: "run #1 'tiny' (step 3 of 9, about 4 min left)"


def _run_left(session: Session, run: Run) -> str:
    """'step 3 of 9, about 4 min left', at the pace of its last few steps."""
    done = f"step {run.current_step} of {run.total_steps}"
    times = list(session.exec(select(RunMetric.created_at).where(RunMetric.run_id == run.id)
                              .order_by(RunMetric.id.desc()).limit(PACE_STEPS + 1)))
    if run.started_at is not None and len(times) == 1:
        times.append(run.started_at)  # the first step's time includes loading the model
    if len(times) < 2 or times[0] <= times[-1]:
        return f"{done}; the time it has left is known after its first step"
    per_step = (times[0] - times[-1]).total_seconds() / (len(times) - 1)
    left = max(run.total_steps - run.current_step, 0) * per_step
    return f"{done}, about {duration_words(left)} left"


def _training_jobs(session: Session, queue: str) -> list[Job]:
    jobs = []
    for run in session.exec(select(Run).where(Run.queue == queue,
                                              Run.state.in_(ACTIVE_STATES))):
        running = run.state == RunState.running
        jobs.append(Job("run", run.id, running, run.queued_at or run.created_at,
                        f"run #{run.id} '{run.name}'"
                        + (f" ({_run_left(session, run)})" if running else "")))
    for evaluation in session.exec(select(Evaluation).where(
            Evaluation.state.in_(ACTIVE_STATES))):
        params = evaluation.params or {}
        if params.get("queue", "cpu") != queue:
            continue
        running = evaluation.state == RunState.running
        progress = f" ({params.get('done', 0)} of {params.get('total', '?')} questions)"
        jobs.append(Job("evaluation", evaluation.id, running, evaluation.created_at,
                        f"evaluation #{evaluation.id}" + (progress if running else "")))
    for row in session.exec(select(DeviceCalibration).where(
            DeviceCalibration.queue == queue, DeviceCalibration.state.in_(ACTIVE_STATES))):
        jobs.append(Job("calibration", row.id, row.state == RunState.running, row.created_at,
                        f"speed measurement #{row.id} (about a minute)"))
    return jobs


def _short_jobs(session: Session) -> list[Job]:
    jobs = []
    for corpus in session.exec(select(Corpus).where(
            Corpus.status.in_((CorpusStatus.pending, CorpusStatus.indexing)),
            Corpus.retired_at.is_(None))):
        running = corpus.status == CorpusStatus.indexing
        done = f" ({corpus.rows_read} of {corpus.num_documents} rows)" if running else ""
        jobs.append(Job("corpus", corpus.id, running, corpus.created_at,
                        f"the index build of corpus '{corpus.name}'{done}"))
    for export in session.exec(select(Export).where(Export.state.in_(ACTIVE_STATES))):
        running = export.state == RunState.running
        done = f" ({export.progress:.0%})" if running else ""
        jobs.append(Job("export", export.id, running, export.created_at,
                        f"export #{export.id}{done}"))
    return jobs


def _listed(ahead: list[Job]) -> str:
    named = [job.words for job in ahead[:NAMED_AHEAD]]
    if len(ahead) > NAMED_AHEAD:
        named.append(f"{len(ahead) - NAMED_AHEAD} more job(s)")
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"


def queue_waits(settings: Settings, queue: str) -> dict[tuple[str, int], str]:
    """For each job queued on `queue`, keyed (kind, id): where it waits and behind what."""
    serving = [w for w in live_workers(settings) if queue in w["queues"]]
    with session_scope(settings.sqlalchemy_url) as session:
        jobs = _short_jobs(session) if queue == SHORT_QUEUE else _training_jobs(session, queue)
    jobs.sort(key=lambda job: (not job.running, job.since, job.kind, job.id))
    lead = f"waiting in queue {queue} ({QUEUE_JOBS.get(queue, 'its jobs')})"
    waits = {}
    for position, job in enumerate(jobs):
        if job.running:
            continue
        if not serving:
            waits[(job.kind, job.id)] = f"{lead}: no worker serves it; {start_a_worker(queue)}"
        elif position:
            waits[(job.kind, job.id)] = f"{lead} behind {_listed(jobs[:position])}"
        else:
            waits[(job.kind, job.id)] = f"{lead}: a worker takes it within seconds"
    return waits


def waits_of(settings: Settings, queued: Iterable[tuple[str, int, str]]
             ) -> dict[tuple[str, int], str]:
    """The messages of the queued jobs (kind, id, queue) of a list: each queue read once."""
    waits: dict[tuple[str, int], str] = {}
    for queue in sorted({queue for _, _, queue in queued}):
        waits.update(queue_waits(settings, queue))
    return waits


def add_waits(settings: Settings, views: list[dict], kind: str, field: str,
              queue_of: Callable[[dict], str]) -> list[dict]:
    """Set `field` of each queued view (state queued, or a corpus pending) of a list to its
    wait message; `queue_of(view)` is its queue."""
    queued = [v for v in views if v.get("state", v.get("status")) in ("queued", "pending")]
    waits = waits_of(settings, [(kind, v["id"], queue_of(v)) for v in queued])
    for view in queued:
        view[field] = waits.get((kind, view["id"]))
    return views
