"""Uploaded files: streamed to a temporary file, hashed, size-limited, then kept by content hash.

A file enters the data directory only under `uploads/<sha256><suffix>`, never
under a name the user chose; until the caller commits its database row the
file stays a temporary one, so a rejected upload leaves nothing behind. A
process killed meanwhile leaves its staging file, which the next start
removes (`remove_stale_staging`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sqlmodel import Session, SQLModel

from studio.ingest import Limits
from studio.services.access import Actor, Forbidden
from studio.services.errors import InvalidInput, TooLarge
from studio.services.records import check_new_name, check_printable
from studio.settings import Settings
from studio.storage.db import session_scope

CHUNK = 1 << 20
STAGING_PREFIX = "staging-"
STALE_AFTER_S = 24 * 3600
"""Age (since the last write) after which a staging file that holds no lock to test is
stale: receiving and reading an upload takes minutes, never a day."""


UI_UPLOAD_MAX_AGE_S = 3600
"""Age after which a file the browser uploaded to the UI's folder goes: a page hands it to
the studio within the request that follows the upload."""
UI_UPLOAD_SWEEP_S = 600
"""How often the web app looks for such files while it runs."""


def ui_upload_folder(settings: Settings) -> Path:
    """Where Gradio keeps the files the browser uploads, before a page stores them: in the
    data dir (the studio's user's alone), not the machine's shared temporary folder."""
    return settings.resolved_data_dir / "tmp" / "ui-uploads"


UI_UPLOADER_MARK = ".uploaded-by-"
"""Beside a file the browser uploaded to the UI, `<mark><user id>` says who uploaded it."""


def _ui_upload_dir(settings: Settings, path: str) -> Path | None:
    """The folder Gradio made for the UI upload at `path` (one per content), else None."""
    folder = Path(os.path.realpath(ui_upload_folder(settings)))
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(folder) or len(target.relative_to(folder).parts) < 2:
        return None
    return folder / target.relative_to(folder).parts[0]


def mark_ui_upload(settings: Settings, path: str, actor: Actor) -> None:
    """Note that `actor` uploaded the UI file at `path`; two users who upload the same
    content share its file, and each may read it."""
    folder = _ui_upload_dir(settings, path)
    if folder is not None and folder.is_dir():
        (folder / f"{UI_UPLOADER_MARK}{actor.id}").touch()


def check_ui_upload_reader(settings: Settings, path: str, actor: Actor) -> None:
    """Refuse (403) `actor` the file at `path` if it is a UI upload of another user: an
    upload is its uploader's and the admins' (any signed-in user could read another's).
    Other files (what the pages give the browser to download) are not the uploads' to
    refuse."""
    folder = _ui_upload_dir(settings, path)
    if folder is None or actor.is_admin or not any(folder.glob(f"{UI_UPLOADER_MARK}*")) or \
            (folder / f"{UI_UPLOADER_MARK}{actor.id}").exists():
        return
    raise Forbidden(f"{actor.username} may not read this file: another user uploaded it; "
                    "only its uploader or an admin may")


def upload_limits(settings: Settings) -> Limits:
    """The limits the readers enforce on one upload, from the settings."""
    return Limits(max_bytes=settings.max_upload_bytes, max_rows=settings.max_upload_rows,
                  max_archive_members=settings.max_archive_members,
                  max_unpacked_bytes=settings.max_unpacked_bytes,
                  max_record_bytes=settings.max_record_bytes,
                  max_question_chars=settings.max_question_chars,
                  max_answer_chars=settings.max_answer_chars)


@dataclass(frozen=True)
class StagedUpload:
    """A received file, still temporary: `path` is removed unless `keep()` is called."""

    path: Path
    filename: str  # the user's name for it: for format detection and messages only
    sha256: str
    size: int

    @property
    def suffix(self) -> str:
        name = self.filename.lower()
        for double in (".tar.gz",):
            if name.endswith(double):
                return double
        return Path(name).suffix


def safe_filename(filename: str | None) -> str:
    """The last component of the user's file name, printable (it reaches messages and rows)."""
    name = Path((filename or "").replace("\\", "/")).name.strip()
    if not name:
        raise InvalidInput("file: the upload has no file name; send the file as a form field "
                           "named 'file' with its name")
    check_printable(name, "file", "file name")
    return name


@contextmanager
def _staging_file(folder: Path, suffix: str = "", mode: int = 0o600
                  ) -> Iterator[tuple[BinaryIO, Path]]:
    """A new file `staging-<random><suffix>` in `folder`, open for writing and locked until
    the block ends, then removed unless the block renamed it (`remove_stale_staging`)."""
    while True:
        path = folder / f"{STAGING_PREFIX}{secrets.token_hex(8)}{suffix}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a cleanup holds it and removes it: make another
            os.close(fd)
            continue
        except OSError:  # a file system without locks: the cleanup goes by age there
            pass
        if _names(path, fd):
            break
        os.close(fd)  # removed by a cleanup between its creation and the lock
    out = os.fdopen(fd, "wb")
    try:
        yield out, path
    finally:
        path.unlink(missing_ok=True)  # before the lock goes, so no one sees it unlocked
        out.close()


def _names(path: Path, fd: int) -> bool:
    """Whether `path` is still the file open as `fd`."""
    try:
        return os.path.samestat(os.stat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


def remove_stale_staging(settings: Settings) -> list[Path]:
    """Remove the staging files left by processes killed while receiving or keeping an upload.

    Several web processes, on several hosts, may share the data directory, so
    only files whose writer is surely gone are removed. Each process holds an
    exclusive lock (flock) on each of its staging files (`tmp/staging-*`, and
    the `uploads/staging-*.partial` of a copy into place) for as long as the
    file exists; the kernel drops the lock when the process dies, however it
    dies (on NFS, the server does once the client's lease ends). So a staging
    file whose lock can be taken has no live writer and goes, and one whose
    lock is held stays: this holds across containers and pid namespaces, with
    no pid to be reused, and at any time, not only at start. Where the file
    system has no locks, and for the files of older versions, which took none
    (`tmp/upload-*`, `uploads/*.partial`), a file goes once untouched for
    `STALE_AFTER_S`. A file of the UI's upload folder (`ui_upload_folder`) goes once
    untouched for `UI_UPLOAD_MAX_AGE_S`. Returns the files removed.
    """
    root, now, removed = settings.resolved_data_dir, time.time(), []
    locked = [*(root / "tmp").glob(f"{STAGING_PREFIX}*"),
              *(root / "uploads").glob(f"{STAGING_PREFIX}*.partial")]
    unlocked = [*(root / "tmp").glob("upload-*"),
                *(p for p in (root / "uploads").glob("*.partial") if p not in locked)]
    candidates = [(path, True) for path in locked] + [(path, False) for path in unlocked]
    ui_files = [p for p in ui_upload_folder(settings).rglob("*") if p.is_file()]
    for path in ui_files:
        if now - path.stat().st_mtime > UI_UPLOAD_MAX_AGE_S:
            path.unlink(missing_ok=True)
            removed.append(path)
    for path, locked_by_writer in sorted(candidates):
        try:  # read-write: NFS grants an exclusive lock only on a file open for writing
            fd = os.open(path, os.O_RDWR)
        except OSError:  # gone already, a folder, or not ours to lock
            continue
        try:
            if _is_stale(fd, now, locked_by_writer):
                path.unlink(missing_ok=True)
                removed.append(path)
        finally:
            os.close(fd)
    return removed


def _is_stale(fd: int, now: float, locked_by_writer: bool) -> bool:
    """Whether no live process writes the open file `fd` (see `remove_stale_staging`)."""
    if locked_by_writer:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        except OSError:
            pass
    return now - os.fstat(fd).st_mtime > STALE_AFTER_S


@contextmanager
def stage_upload(stream: BinaryIO, filename: str | None, settings: Settings
                 ) -> Iterator[StagedUpload]:
    """Receive `stream` into the data directory's tmp folder; yield it; remove it after.

    Call `keep(staged, settings)` inside the block to move it into `uploads/`.
    """
    name = safe_filename(filename)
    tmp_dir = settings.resolved_data_dir / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    with _staging_file(tmp_dir) as (out, path):
        while chunk := stream.read(CHUNK):
            size += len(chunk)
            if size > settings.max_upload_bytes:
                raise TooLarge(
                    f"{name}: larger than the limit of {settings.max_upload_bytes} bytes; "
                    "split it or raise STUDIO_MAX_UPLOAD_BYTES")
            digest.update(chunk)
            out.write(chunk)
        out.flush()
        if size == 0:
            raise InvalidInput(f"{name}: the file is empty")
        yield StagedUpload(path=path, filename=name, sha256=digest.hexdigest(), size=size)


def keep(staged: StagedUpload, settings: Settings) -> tuple[Path, bool]:
    """Copy the staged file to its content-addressed place; return it and whether it is new.

    Callers remove a new file again if they fail to commit the row that names it.
    """
    folder = settings.resolved_data_dir / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{staged.sha256}{staged.suffix}"
    if target.exists():
        return target, False
    with _staging_file(folder, ".partial", mode=0o666) as (out, partial):  # a copy's mode
        with open(staged.path, "rb") as source:
            shutil.copyfileobj(source, out, CHUNK)
        out.flush()
        os.replace(partial, target)
    return target, True


@contextmanager
def kept_upload(staged: StagedUpload, settings: Settings) -> Iterator[Path]:
    """Keep the file for the duration of a database transaction; undo if the block fails."""
    path, created = keep(staged, settings)
    try:
        yield path
    except BaseException:
        if created:
            path.unlink(missing_ok=True)
        raise


@contextmanager
def kept_as_new(staged: StagedUpload, settings: Settings, table: type[SQLModel],
                name: str) -> Iterator[tuple[str, Session]]:
    """`kept_upload` for a new row of `table` named `name`: the kept file's path in the data
    directory and the session to add the row in, the name checked again there (another
    upload may have taken it while this one was read)."""
    with kept_upload(staged, settings) as path, \
            session_scope(settings.sqlalchemy_url) as session:
        check_new_name(session, table, name)
        yield str(path.relative_to(settings.resolved_data_dir)), session
