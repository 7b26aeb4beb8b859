"""Exports of a run's checkpoint: a Hugging Face folder, a zip to download, or a Hub push.

The web app, the UI and the CLI create and follow exports here; the worker
(`worker/export.py`) builds them and reports progress through `update_export`.

The Hub token is handed to the job through a file readable only by the
studio's user (`<data>/secrets/export-tokens/<id>`, mode 0600), never
through the job's message: Celery keeps messages and results in the broker
and the result backend (Redis, SQL), which are often on other machines,
persisted and backed up. The job deletes the file when it ends, whatever the
outcome, so a failed push needs the token again to be retried.

Exports take disk: each user's exports (folders, zips, and those being written) may hold
at most its export quota (`User.export_quota_bytes`, set by an admin, else
STUDIO_EXPORT_QUOTA_BYTES). A new export, or a retry, that would pass it is refused before
anything is stored, counted at what it will write (a LoRA run's: the merged model, not the
adapter its checkpoint holds); a finished export counts at the bytes its files hold on disk.
A failed export keeps no file, and deleting an export frees its bytes.
"""

from __future__ import annotations

import os
import re
import shutil
from fnmatch import fnmatch
from pathlib import Path

from sqlmodel import Session, select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.ingest.errors import size_text
from studio.jobs import lifecycle
from studio.jobs.lifecycle import ACTIVE_STATES, REQUEUE_FROM, JobTable, RunState
from studio.jobs.queue import SHORT_QUEUE, enqueue
from studio.models.base_models import local_model_folder
from studio.services.access import Actor
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.services.lanes import add_waits
from studio.services.records import get_or_404, get_owned, inserted_id, usernames
from studio.services.run_folder import RunFolder, adapter_folder
from studio.services.run_plans import stored_plan
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Export, Run, User

EXPORT_TASK = "worker.export"
EXPORT_JOBS = JobTable("export", Export, heartbeat="heartbeat_at")
"""An export's life cycle (`studio.jobs.lifecycle`); its work starts over when a worker takes
it again."""
TARGETS = ("folder", "zip", "hub")
# A Hub repo id: "name" (the token's own namespace) or "namespace/name".
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
# The files of a Hugging Face model folder that an export carries: weights, config,
# generation config, tokenizer; never the optimizer, scheduler or trainer state.
MODEL_FILES = ("*.safetensors", "*.safetensors.index.json", "config.json",
               "generation_config.json", "tokenizer*", "special_tokens_map.json", "vocab.json",
               "vocab.txt", "merges.txt", "added_tokens.json", "chat_template.*", "*.model",
               "*.tiktoken")


# --- where things are -----------------------------------------------------------------------


def exports_root(settings: Settings) -> Path:
    return settings.resolved_data_dir / "exports"


def export_folder(settings: Settings, export_id: int) -> Path:
    """The finished Hugging Face folder of an export (it exists only when complete)."""
    return exports_root(settings) / str(export_id)


def export_zip(settings: Settings, export_id: int) -> Path:
    return exports_root(settings) / f"{export_id}.zip"


def partial_path(path: Path) -> Path:
    """Where `path` is written until it is complete (then renamed into place)."""
    return path.with_name(f".{path.name}.partial")


def export_files(settings: Settings, export_id: int) -> list[Path]:
    """Every path an export may hold on disk: its folder and zip, finished or being written."""
    finished = [export_folder(settings, export_id), export_zip(settings, export_id)]
    return [*finished, *(partial_path(path) for path in finished)]


def remove_export_files(settings: Settings, export_id: int) -> None:
    for path in export_files(settings, export_id):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def model_files(folder: Path) -> list[Path]:
    """The files of a model folder that an export carries (MODEL_FILES)."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and any(fnmatch(p.name, pattern) for pattern in MODEL_FILES))


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


# --- disk use and the quota -----------------------------------------------------------------


def _file_bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # absent, or removed while counted
        return 0


def disk_bytes(path: Path) -> int:
    """The bytes of the files at or under `path` now (0 when it is absent)."""
    if not path.is_dir():
        return _file_bytes(path)
    return sum(_file_bytes(Path(root, name)) for root, _, names in os.walk(path)
               for name in names)


def _base_weights(settings: Settings, run_id: int) -> list[Path]:
    """The weights and config of the run's base model, when it is on this machine already
    (nothing is fetched for an estimate)."""
    base = local_model_folder(stored_plan(settings, run_id).config.model,
                              settings.resolved_data_dir)
    if base is None:
        return []
    weights = sorted(base.glob("*.safetensors")) or sorted(base.glob("pytorch_model*.bin"))
    return [*weights, base / "config.json"]


def estimated_bytes(settings: Settings, run_id: int, step: int | None) -> int:
    """What an export of the checkpoint after `step` steps will hold: the model files it
    carries, and for a LoRA checkpoint the merged weights with the adapter beside them. A
    native LoRA checkpoint holds the adapter alone, and its merged model is as large as its
    base's weights. The model card and run.yaml add little."""
    source = checkpoint_steps(settings, run_id).get(step)
    if source is None:
        return 0
    files = model_files(source)
    adapter = adapter_folder(source)
    if adapter == source:  # the adapter alone: its export holds the base merged with it
        files += _base_weights(settings, run_id)
    elif adapter is not None:  # veRL's merger: the merged weights, with the adapter beside
        files += model_files(adapter)
    return sum(_file_bytes(p) for p in files)


def _held_bytes(settings: Settings, export: Export) -> int:
    """The disk an export holds; a queued or running one holds at least its estimate."""
    on_disk = sum(disk_bytes(path) for path in export_files(settings, export.id))
    if export.state in ACTIVE_STATES:
        return max(on_disk, estimated_bytes(settings, export.run_id, export.step))
    return on_disk


def export_quota(settings: Settings, user: User) -> int:
    """The bytes `user`'s exports may hold: its own quota if an admin set one."""
    return settings.export_quota_bytes if user.export_quota_bytes is None \
        else user.export_quota_bytes


def _check_quota(settings: Settings, session: Session, owner_id: int | None, needed: int,
                 what: str, *, besides: int | None = None) -> None:
    """Refuse (409) `what`, needing about `needed` bytes more, when the owner's exports
    (but export `besides`) already hold so much that it would pass the owner's quota.
    The owner's row is locked until the transaction ends, so that two exports asked for at
    once are counted one after the other. An export made before the studio had users has
    no owner to count it against."""
    owner = session.exec(select(User).where(User.id == owner_id).with_for_update()).first()
    if owner is None:
        return
    held = select(Export).where(Export.owner_id == owner_id)
    if besides is not None:
        held = held.where(Export.id != besides)
    used = sum(_held_bytes(settings, e) for e in session.exec(held))
    quota = export_quota(settings, owner)
    if used + needed > quota:
        raise Conflict(
            f"export quota: {owner.username}'s exports hold {size_text(used)} and {what} "
            f"needs about {size_text(needed)} more, past the quota of {size_text(quota)}. "
            "Delete exports no longer needed (`studio exports delete ID`, DELETE "
            "/api/v1/exports/{id}, or on the Export page), or ask an admin for a larger "
            f"quota (`studio user set-export-quota {owner.username} BYTES`)")


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
            Export.id.in_(waiting), Export.state.in_(ACTIVE_STATES))))
    for export_id in waiting - active:
        discard_token(settings, export_id)


# --- what users call ------------------------------------------------------------------------


class ExportView(TypedDict):
    """An export as the API and the pages show it (times in ISO 8601, UTC)."""

    id: int
    owner: str | None
    run_id: int
    target: str  # folder | zip | hub
    step: int | None  # the checkpoint exported (steps done)
    repo_id: str | None  # hub
    private: bool
    state: str  # queued | running | succeeded | failed | interrupted
    progress: float  # 0..1
    message: str | None  # what it is doing now; queued: where it waits, and behind what
    location: str | None
    error: str | None
    retryable: bool
    stored_bytes: int  # what its files hold on disk now
    created_at: str
    finished_at: str | None


def _view(settings: Settings, export: Export, owners: dict[int, str]) -> ExportView:
    """The export's row, and `stored_bytes`: what its files hold on disk now."""
    return {"id": export.id, "owner": owners.get(export.owner_id), "run_id": export.run_id,
            "target": export.target,
            "step": export.step, "repo_id": export.repo_id, "private": export.private,
            "state": export.state, "progress": export.progress, "message": export.message,
            "location": export.location, "error": export.error,
            "retryable": export.state in REQUEUE_FROM,
            "stored_bytes": sum(disk_bytes(p) for p in export_files(settings, export.id)),
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
                  token: str | None = None, start: bool = True) -> ExportView:
    """Queue an export of run `run_id`'s checkpoint after `step` steps (default: the latest);
    only the run's owner (or an admin) exports it."""
    with session_scope(settings.sqlalchemy_url) as session:
        get_owned(session, Run, run_id, "run", actor, "export")
    if target not in TARGETS:
        raise InvalidInput(f"target: '{target}' is not one of {', '.join(TARGETS)}")
    repo_id = _check_hub_request(target, repo_id, token)
    step, _ = checkpoint_folder(settings, run_id, step)
    with session_scope(settings.sqlalchemy_url) as session:
        _check_quota(settings, session, actor.id, estimated_bytes(settings, run_id, step),
                     f"this export of run {run_id}'s checkpoint after {step} steps")
        export_id = inserted_id(session, Export(run_id=run_id, target=target, step=step,
                                                repo_id=repo_id, owner_id=actor.id,
                                                private=private))
    _start(settings, export_id, token.strip() if token else None, start)
    return get_export(settings, export_id)


def retry_export(settings: Settings, actor: Actor, export_id: int, *,
                 token: str | None = None, start: bool = True) -> ExportView:
    """Queue a failed export again; a Hub push needs its token again (it was not kept)."""
    with session_scope(settings.sqlalchemy_url) as session:
        export = get_owned(session, Export, export_id, "export", actor, "retry")
        # while queued, the view's message says where it waits; a check below that refuses
        # the retry rolls this back
        if not lifecycle.requeue(session, EXPORT_JOBS, export_id, message=None):
            raise Conflict(f"export {export_id} is {export.state}; only a failed export "
                           "can be retried")
        _check_hub_request(export.target, export.repo_id, token)
        _check_quota(settings, session, export.owner_id,
                     estimated_bytes(settings, export.run_id, export.step),
                     f"export {export_id} built again", besides=export_id)
    _start(settings, export_id, token.strip() if token else None, start)
    return get_export(settings, export_id)


def _start(settings: Settings, export_id: int, token: str | None, start: bool) -> None:
    _discard_tokens_of_finished_exports(settings)
    if token:
        store_token(settings, export_id, token)
    if start:
        enqueue(settings, EXPORT_TASK, export_id, queue=SHORT_QUEUE)


def _with_waits(settings: Settings, views: list[ExportView]) -> list[ExportView]:
    """A queued export's message says where it waits and behind what."""
    return add_waits(settings, views, "export", "message", lambda _view: SHORT_QUEUE)


def get_export(settings: Settings, export_id: int) -> ExportView:
    with session_scope(settings.sqlalchemy_url) as session:
        view = _view(settings, get_or_404(session, Export, export_id, "export"),
                     usernames(session))
    return _with_waits(settings, [view])[0]


def list_exports(settings: Settings, run_id: int | None = None) -> list[ExportView]:
    with session_scope(settings.sqlalchemy_url) as session:
        query = select(Export).order_by(Export.id.desc())
        if run_id is not None:
            query = query.where(Export.run_id == run_id)
        owners = usernames(session)
        views = [_view(settings, e, owners) for e in session.exec(query)]
    return _with_waits(settings, views)


def delete_export(settings: Settings, actor: Actor, export_id: int) -> None:
    """Delete an export that is not queued or running: its row and its files, which frees
    its owner's quota (the owner or an admin; a repo pushed to the Hub stays there)."""
    with session_scope(settings.sqlalchemy_url) as session:
        export = get_owned(session, Export, export_id, "export", actor, "delete")
        if export.state in ACTIVE_STATES:
            raise Conflict(f"export {export_id} is {RunState(export.state).value}; wait "
                           "until it ends, then delete it")
        session.delete(export)
    remove_export_files(settings, export_id)
    discard_token(settings, export_id)


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


def claim_export(settings: Settings, export_id: int) -> bool:
    """A worker takes a queued export, or one a worker that died was making (its message,
    delivered again: the export starts over); False when it has ended."""
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.claim(session, EXPORT_JOBS, export_id, leaving=ACTIVE_STATES,
                               progress=0.0, message="starting")


def update_export(settings: Settings, export_id: int, *, state: RunState | None = None,
                  progress: float | None = None, message: str | None = None,
                  location: str | None = None, repo_id: str | None = None,
                  error: str | None = None) -> None:
    """Worker-side: progress (0..1) with what it is doing; the outcome (`state` succeeded or
    failed) with where it ended, or why not."""
    values = {field: value for field, value in (
        ("progress", progress), ("message", message and message[:512]), ("location", location),
        ("repo_id", repo_id), ("error", error)) if value is not None}
    with session_scope(settings.sqlalchemy_url) as session:
        if session.get(Export, export_id) is None:
            raise NotFound(f"export {export_id} does not exist")
        if state is not None:
            lifecycle.finish(session, EXPORT_JOBS, export_id, state, **values)
        elif values:
            lifecycle.beat(session, EXPORT_JOBS, export_id, **values)
