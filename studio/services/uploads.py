"""Uploaded files: streamed to a temporary file, hashed, size-limited, then kept by content hash.

A file enters the data directory only under `uploads/<sha256><suffix>`, never
under a name the user chose; until the caller commits its database row the
file stays a temporary one, so a rejected upload leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from studio.ingest import Limits
from studio.services.errors import InvalidInput, TooLarge
from studio.services.records import check_printable
from studio.settings import Settings

CHUNK = 1 << 20


def upload_limits(settings: Settings) -> Limits:
    """The limits the readers enforce on one upload, from the settings."""
    return Limits(max_bytes=settings.max_upload_bytes, max_rows=settings.max_upload_rows,
                  max_archive_members=settings.max_archive_members,
                  max_unpacked_bytes=settings.max_unpacked_bytes)


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
def stage_upload(stream: BinaryIO, filename: str | None, settings: Settings
                 ) -> Iterator[StagedUpload]:
    """Receive `stream` into the data directory's tmp folder; yield it; remove it after.

    Call `keep(staged, settings)` inside the block to move it into `uploads/`.
    """
    name = safe_filename(filename)
    tmp_dir = settings.resolved_data_dir / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix="upload-")
    path = Path(tmp_name)
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > settings.max_upload_bytes:
                    raise TooLarge(
                        f"{name}: larger than the limit of {settings.max_upload_bytes} bytes; "
                        "split it or raise STUDIO_MAX_UPLOAD_BYTES")
                digest.update(chunk)
                out.write(chunk)
        if size == 0:
            raise InvalidInput(f"{name}: the file is empty")
        yield StagedUpload(path=path, filename=name, sha256=digest.hexdigest(), size=size)
    finally:
        path.unlink(missing_ok=True)


def keep(staged: StagedUpload, settings: Settings) -> tuple[Path, bool]:
    """Copy the staged file to its content-addressed place; return it and whether it is new.

    Callers remove a new file again if they fail to commit the row that names it.
    """
    folder = settings.resolved_data_dir / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{staged.sha256}{staged.suffix}"
    if target.exists():
        return target, False
    partial = target.with_name(target.name + ".partial")
    shutil.copyfile(staged.path, partial)
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
