"""Which studio a command of the CLI acts on, wherever it is run from.

`studio up` records where it serves and keeps its data in a small file of the user's
(`$XDG_STATE_HOME/icrl-studio/studio.json`, by default under ~/.local/state; mode 0600: it
may hold a database URL with its password). A command that reads or changes an existing
studio acts on, in this order: the data directory or database named (--data-dir,
STUDIO_DATA_DIR, STUDIO_DATABASE_URL); the studio a running `studio up` recorded;
./studio-data when it holds a database. It never creates a data directory or a database:
with none of these it says where it looked and how to point elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from studio.settings import Settings

#: The settings that say where a studio's data lives, as the record keeps them.
LOCATING = ("data_dir", "database_url", "broker_url", "result_backend")


class StudioNotFound(RuntimeError):
    """No studio where the command looked; the message says where and what to do."""


def record_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "icrl-studio" / "studio.json"


def write_record(settings: Settings, url: str) -> Path:
    """Record the studio this `studio up` serves (replacing an earlier record)."""
    path = record_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "url": url, "data_dir": str(settings.resolved_data_dir),
              **{key: getattr(settings, key) for key in LOCATING[1:] if getattr(settings, key)}}
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    os.replace(partial, path)
    return path


def read_record() -> dict | None:
    """The last record of `studio up`, or None (none, or not readable as one)."""
    try:
        record = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and isinstance(record.get("pid"), int) \
        and isinstance(record.get("data_dir"), str)
    return record if ok else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _named() -> bool:
    return any(os.environ.get(f"STUDIO_{key.upper()}") for key in ("data_dir", "database_url"))


def studio_overrides() -> dict[str, str]:
    """The settings of the studio to act on, when none is named and `studio up` runs one."""
    record = read_record()
    if _named() or record is None or not _running(record["pid"]):
        return {}
    return {key: record[key] for key in LOCATING if record.get(key)}


def check_found(settings: Settings) -> None:
    """Raise StudioNotFound when the studio's SQLite database does not exist (a PostgreSQL
    database is checked by connecting): where it looked, and how to point elsewhere."""
    database = settings.resolved_data_dir / "studio.db"
    if settings.database_url or database.exists():
        return
    if _named():
        raise StudioNotFound(
            f"no studio in {settings.resolved_data_dir}: it holds no database (studio.db); name "
            "the data directory that `studio up` printed with --data-dir or STUDIO_DATA_DIR "
            "(STUDIO_DATABASE_URL for PostgreSQL), or create a studio there with `studio up`")
    record = read_record()
    last = (f"; the last `studio up` (pid {record['pid']}, not running) kept its data in "
            f"{record['data_dir']}: add --data-dir {record['data_dir']} to use it"
            if record else f" and no `studio up` is running (none recorded in {record_path()})")
    raise StudioNotFound(
        f"no studio found: no database in {settings.resolved_data_dir} (the default data "
        f"directory, ./studio-data of this folder){last}; run the command where you ran "
        "`studio up`, or name the studio's data directory with --data-dir DIR or "
        "STUDIO_DATA_DIR (STUDIO_DATABASE_URL for PostgreSQL)")
