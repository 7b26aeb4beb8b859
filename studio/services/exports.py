"""Exports of a run's checkpoint: a Hugging Face folder, a zip to download, or a Hub push.

The web app, the UI and the CLI create and follow exports here; the worker
(`worker/export.py`) builds them and reports progress through `update_export`.

The Hub token is handed to the job through a file readable only by the
studio's user (`<data>/secrets/export-tokens/<id>`, mode 0600), never
through the job's message: Celery keeps messages and results in the broker
and the result backend (Redis, SQL), which are often on other machines,
persisted and backed up. The job deletes the file when it ends, whatever the
outcome, so a failed push needs the token again to be retried.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlmodel import select

from studio.db import session_scope
from studio.queue import SHORT_QUEUE, enqueue
from studio.services.access import Actor
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.services.lanes import add_waits
from studio.services.records import get_or_404, get_owned, usernames
from studio.services.run_folder import RunFolder
from studio.settings import Settings
from studio.tables import Export, Run, RunState, utcnow

EXPORT_TASK = "worker.export"
TARGETS = ("folder", "zip", "hub")
RETRYABLE = (RunState.failed, RunState.interrupted)
# A Hub repo id: "name" (the token's own namespace) or "namespace/name".
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


# --- where things are -----------------------------------------------------------------------


def exports_root(settings: Settings) -> Path:
    return settings.resolved_data_dir / "exports"


def export_folder(settings: Settings, export_id: int) -> Path:
    """The finished Hugging Face folder of an export (it exists only when complete)."""
    return exports_root(settings) / str(export_id)


def export_zip(settings: Settings, export_id: int) -> Path:
    return exports_root(settings) / f"{export_id}.zip"


def checkpoint_steps(settings: Settings, run_id: int) -> dict[int, Path]:
    """The run's complete checkpoints by steps done."""
    return RunFolder.of(settings, run_id).checkpoint_steps()


def checkpoint_folder(settings: Settings, run_id: int, step: int | None) -> tuple[int, Path]:
    """The checkpoint after `step` steps (default: the latest), or a 422 listing those kept."""
    steps = checkpoint_steps(settings, run_id)
    if not steps:
        raise InvalidInput(f"run {run_id} has no checkpoint yet; export it once it has written "
                           "one (engine.checkpoint_every)")
    if step is None:
        step = max(steps)
    if step not in steps:
        kept = ", ".join(str(s) for s in sorted(steps))
        raise InvalidInput(f"step: run {run_id} has no checkpoint after {step} steps; "
                           f"the checkpoints kept are after steps {kept}")
    return step, steps[step]


# --- the token's hand-off -------------------------------------------------------------------


def _token_dir(settings: Settings) -> Path:
    return settings.resolved_data_dir / "secrets" / "export-tokens"


def _token_file(settings: Settings, export_id: int) -> Path:
    return _token_dir(settings) / str(export_id)


def store_token(settings: Settings, export_id: int, token: str) -> None:
    """Write the token where only this user can read it (0600 in a 0700 folder)."""
    path = _token_file(settings, export_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for folder in (path.parent.parent, path.parent):
        os.chmod(folder, 0o700)
    partial = path.with_name(f".{export_id}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    os.replace(partial, path)


def read_token(settings: Settings, export_id: int) -> str | None:
    path = _token_file(settings, export_id)
    return path.read_text() if path.exists() else None


def discard_token(settings: Settings, export_id: int) -> None:
    _token_file(settings, export_id).unlink(missing_ok=True)


def _discard_tokens_of_finished_exports(settings: Settings) -> None:
    """A worker killed mid-push leaves its token file; once the export is over, drop it."""
    waiting = {int(p.name) for p in _token_dir(settings).glob("*") if p.name.isdigit()}
    if not waiting:
        return
    with session_scope(settings.sqlalchemy_url) as session:
        active = set(session.exec(select(Export.id).where(
            Export.id.in_(waiting), Export.state.in_((RunState.queued, RunState.running)))))
    for export_id in waiting - active:
        discard_token(settings, export_id)


# --- what users call ------------------------------------------------------------------------


def _view(export: Export, owners: dict[int, str]) -> dict:
    return {"id": export.id, "owner": owners.get(export.owner_id), "run_id": export.run_id,
            "target": export.target,
            "step": export.step, "repo_id": export.repo_id, "private": export.private,
            "state": export.state, "progress": export.progress, "message": export.message,
            "location": export.location, "error": export.error,
            "retryable": export.state in RETRYABLE,
            "created_at": export.created_at.isoformat(),
            "finished_at": export.finished_at.isoformat() if export.finished_at else None}


def _check_hub_request(target: str, repo_id: str | None, token: object) -> str | None:
    if token is not None and not isinstance(token, str):
        raise InvalidInput("token: give the Hub token as a string")
    if target != "hub":
        return None
    repo_id = (repo_id or "").strip()
    if not _REPO_ID.match(repo_id) or ".." in repo_id or repo_id.endswith((".git", ".")):
        raise InvalidInput("repo_id: give the Hub repository as 'namespace/name' (or 'name' "
                           "for the token's own account): letters, digits, '-', '_' and '.', "
                           "at most 96 characters each")
    if not (token or "").strip():
        raise InvalidInput("token: a Hub push needs a Hugging Face access token with write "
                           "access; it is used for this job only and never stored")
    return repo_id


def create_export(settings: Settings, actor: Actor, run_id: int, *, target: str = "folder",
                  step: int | None = None, repo_id: str | None = None, private: bool = True,
                  token: str | None = None, start: bool = True) -> dict:
    """Queue an export of run `run_id`'s checkpoint after `step` steps (default: the latest);
    only the run's owner (or an admin) exports it."""
    with session_scope(settings.sqlalchemy_url) as session:
        get_owned(session, Run, run_id, "run", actor, "export")
    if target not in TARGETS:
        raise InvalidInput(f"target: '{target}' is not one of {', '.join(TARGETS)}")
    repo_id = _check_hub_request(target, repo_id, token)
    step, _ = checkpoint_folder(settings, run_id, step)
    with session_scope(settings.sqlalchemy_url) as session:
        export = Export(run_id=run_id, target=target, step=step, repo_id=repo_id,
                        owner_id=actor.id,
                        private=private)
        session.add(export)
        session.flush()
        export_id = export.id
    _start(settings, export_id, token.strip() if token else None, start)
    return get_export(settings, export_id)


def retry_export(settings: Settings, actor: Actor, export_id: int, *,
                 token: str | None = None, start: bool = True) -> dict:
    """Queue a failed export again; a Hub push needs its token again (it was not kept)."""
    with session_scope(settings.sqlalchemy_url) as session:
        export = get_owned(session, Export, export_id, "export", actor, "retry")
        if export.state not in RETRYABLE:
            raise Conflict(f"export {export_id} is {export.state}; only a failed export "
                           "can be retried")
        _check_hub_request(export.target, export.repo_id, token)
        export.state, export.error, export.finished_at = RunState.queued, None, None
        export.message = None  # while queued, the view says where it waits
        session.add(export)
    _start(settings, export_id, token.strip() if token else None, start)
    return get_export(settings, export_id)


def _start(settings: Settings, export_id: int, token: str | None, start: bool) -> None:
    _discard_tokens_of_finished_exports(settings)
    if token:
        store_token(settings, export_id, token)
    if start:
        enqueue(settings, EXPORT_TASK, export_id, queue=SHORT_QUEUE)


def _with_waits(settings: Settings, views: list[dict]) -> list[dict]:
    """A queued export's message says where it waits and behind what."""
    return add_waits(settings, views, "export", "message", lambda _view: SHORT_QUEUE)


def get_export(settings: Settings, export_id: int) -> dict:
    with session_scope(settings.sqlalchemy_url) as session:
        view = _view(get_or_404(session, Export, export_id, "export"), usernames(session))
    return _with_waits(settings, [view])[0]


def list_exports(settings: Settings, run_id: int | None = None) -> list[dict]:
    with session_scope(settings.sqlalchemy_url) as session:
        query = select(Export).order_by(Export.id.desc())
        if run_id is not None:
            query = query.where(Export.run_id == run_id)
        owners = usernames(session)
        views = [_view(e, owners) for e in session.exec(query)]
    return _with_waits(settings, views)


def download(settings: Settings, export_id: int) -> tuple[Path, str]:
    """The zip of a finished zip export and the file name to offer."""
    export = get_export(settings, export_id)
    if export["target"] != "zip":
        raise Conflict(f"export {export_id} is a {export['target']} export; create an export "
                       "with target zip to download the model")
    path = export_zip(settings, export_id)
    if export["state"] != RunState.succeeded or not path.exists():
        raise Conflict(f"export {export_id} is {export['state']}; download it once it has "
                       "succeeded")
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_or_404(session, Run, export["run_id"], "run")
        return path, zip_filename(run.name, export["step"])


def zip_filename(run_name: str, step: int) -> str:
    """The name a zip export downloads under: the run's name (letters, digits, `_.-` only, so
    it is a safe file name everywhere) and the checkpoint's step."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_name).strip("-") or "model"
    return f"{name}-step-{step}.zip"


# --- state changes made by the worker -------------------------------------------------------


def update_export(settings: Settings, export_id: int, *, state: RunState | None = None,
                  progress: float | None = None, message: str | None = None,
                  location: str | None = None, repo_id: str | None = None,
                  error: str | None = None) -> None:
    """Worker-side: state, progress (0..1) with what it is doing, where it ended, or why not."""
    with session_scope(settings.sqlalchemy_url) as session:
        export = session.get(Export, export_id)
        if export is None:
            raise NotFound(f"export {export_id} does not exist")
        if state is not None:
            export.state = state
            export.finished_at = utcnow() if state in (RunState.succeeded, RunState.failed) \
                else None
        for field, value in (("progress", progress), ("message", message and message[:512]),
                             ("location", location), ("repo_id", repo_id), ("error", error)):
            if value is not None:
                setattr(export, field, value)
        session.add(export)
