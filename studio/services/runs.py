"""Training runs: create from a config, queue, follow (state, metrics, events, rollouts), cancel.

A run is a config snapshot plus its state: queued -> running -> succeeded |
failed | cancelled (and interrupted when its worker died). The worker moves
the state; these functions are what the API, the UI and the CLI call. What a run
wrote (metrics, events, rollouts) is read back by `run_history`, importable from here too.
"""

from __future__ import annotations

from sqlmodel import select

from studio.db import session_scope
from studio.method.curriculum import CurriculumError
from studio.queue import enqueue
from studio.run_config import RunConfig, RunConfigError, parse_run_config
from studio.services import corpora, exemplar_sets, qa_sets
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.services.records import get_or_404
from studio.services.run_history import run_events, run_metrics, run_rollouts  # noqa: F401
from studio.settings import Settings
from studio.tables import Run, RunState, utcnow

TRAIN_TASK = "worker.train_run"
FINAL_STATES = (RunState.succeeded, RunState.failed, RunState.cancelled)


def check_references(settings: Settings, config: RunConfig) -> None:
    """Every name in `data` must exist, the corpus be indexed, the curriculum fit the set."""
    problems = []

    def lookup(find, name: str, field: str) -> dict | None:
        try:
            return find(settings, name)
        except NotFound:
            problems.append(f"{field}: '{name}' does not exist; upload it first")
            return None

    corpus = lookup(corpora.find_corpus, config.data.corpus, "data.corpus")
    if corpus and corpus["status"] != "ready":
        problems.append(f"data.corpus: '{corpus['name']}' is {corpus['status']}; "
                        "launch when its index is ready")
    lookup(qa_sets.find_qa_set, config.data.train, "data.train")
    for i, name in enumerate(config.data.eval):
        lookup(qa_sets.find_qa_set, name, f"data.eval[{i}]")
    size = 0
    if config.data.exemplars:
        found = lookup(exemplar_sets.find_exemplar_set, config.data.exemplars, "data.exemplars")
        if found:
            size = found["size"]
            if found["errors"]:
                problems.append(f"data.exemplars: '{found['name']}' has {found['errors']} "
                                "errors; fix them on the exemplars page first")
    try:
        config.curriculum.build().check(available_exemplars=size)
    except CurriculumError as exc:
        problems += [f"curriculum.{e}" for e in exc.errors]
    if problems:
        raise InvalidInput("; ".join(problems))


def create_run(settings: Settings, config: dict | str, *, user_id: int | None = None,
               start: bool = True) -> dict:
    """Validate a config (dict or YAML), store the run as queued, and send it to its queue."""
    try:
        parsed = parse_run_config(config)
    except RunConfigError as exc:
        raise InvalidInput(str(exc)) from None
    check_references(settings, parsed)
    with session_scope(settings.sqlalchemy_url) as session:
        run = Run(name=parsed.name, config=parsed.model_dump(mode="json"),
                  backend=parsed.backend, queue=parsed.queue, total_steps=parsed.total_steps,
                  created_by=user_id)
        session.add(run)
        session.flush()
        run_id = run.id
    if start:
        task_id = enqueue(settings, TRAIN_TASK, run_id, queue=parsed.queue)
        with session_scope(settings.sqlalchemy_url) as session:
            run = session.get(Run, run_id)
            run.task_id = task_id
            session.add(run)
    return get_run(settings, run_id)


def _view(run: Run) -> dict:
    return {
        "id": run.id, "name": run.name, "state": run.state, "backend": run.backend,
        "queue": run.queue, "current_step": run.current_step, "total_steps": run.total_steps,
        "error": run.error, "checkpoint_dir": run.checkpoint_dir, "config": run.config,
        "worker": run.worker_hostname,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
    }


def get_run(settings: Settings, run_id: int) -> dict:
    with session_scope(settings.sqlalchemy_url) as session:
        return _view(get_or_404(session, Run, run_id, "run"))


def list_runs(settings: Settings) -> list[dict]:
    with session_scope(settings.sqlalchemy_url) as session:
        return [_view(r) for r in session.exec(select(Run).order_by(Run.id.desc()))]


def cancel_run(settings: Settings, run_id: int) -> dict:
    """Mark the run cancelled; its worker sees it and stops the training process."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_or_404(session, Run, run_id, "run")
        if run.state in FINAL_STATES:
            raise Conflict(f"run {run_id} is already {run.state}")
        run.state = RunState.cancelled
        run.finished_at = utcnow()
        session.add(run)
    return get_run(settings, run_id)


# --- state changes made by workers ------------------------------------------------------------


def claim_run(settings: Settings, run_id: int, hostname: str) -> bool:
    """A worker takes a queued (or interrupted) run; False when it is not there to take."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        if run is None or run.state not in (RunState.queued, RunState.interrupted):
            return False
        run.state, run.worker_hostname, run.error = RunState.running, hostname, None
        run.started_at = run.started_at or utcnow()
        run.heartbeat_at = utcnow()
        session.add(run)
        return True


def run_state(settings: Settings, run_id: int) -> RunState:
    with session_scope(settings.sqlalchemy_url) as session:
        return RunState(get_or_404(session, Run, run_id, "run").state)


def record_process(settings: Settings, run_id: int, pid: int | None) -> None:
    """The training process's pid (None when it ended) and a heartbeat."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        run.pid, run.heartbeat_at = pid, utcnow()
        session.add(run)


def finish_run(settings: Settings, run_id: int, state: RunState, error: str | None = None) -> None:
    """Record the outcome; a cancelled run stays cancelled whatever its process said."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        if run.state == RunState.cancelled:
            return
        run.state, run.pid, run.finished_at = state, None, utcnow()
        if error:
            run.error = error
        session.add(run)
