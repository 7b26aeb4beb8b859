"""Start-up: checks that turn a broken setting into one clear line, and the
supervisor that runs the web app and a worker as child processes.

Ctrl-C (or SIGTERM) stops every child; if one child dies the others are
stopped too, so `studio up` never leaves half a studio running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from studio import db
from studio.queue import check_broker
from studio.settings import Settings, redact_url


class StartupError(RuntimeError):
    """A problem with the settings or the machine, said in one line with what to do."""


def _first_line(exc: BaseException) -> str:
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__


def check_data_dir(settings: Settings) -> Path:
    path = settings.resolved_data_dir
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise StartupError(
            f"data directory {path} is not writable ({exc.strerror or exc}); "
            "set STUDIO_DATA_DIR or --data-dir to a folder you can write"
        ) from None
    return path


def check_database(settings: Settings) -> None:
    url = settings.sqlalchemy_url
    try:
        db.check_connection(url)
    except (ArgumentError, SQLAlchemyError, ImportError, ValueError) as exc:
        raise StartupError(
            f"database {redact_url(url)} cannot be reached: {_first_line(exc)}; "
            "check STUDIO_DATABASE_URL (e.g. postgresql+psycopg://user@host:5432/db)"
        ) from None


def check_queue(settings: Settings) -> None:
    url = settings.celery_broker_url
    try:
        check_broker(url)
    except Exception as exc:
        raise StartupError(
            f"broker {redact_url(url)} cannot be reached: {_first_line(exc)}; "
            "check STUDIO_BROKER_URL (e.g. redis://host:6379/0) or unset it for the embedded broker"
        ) from None


def check_migrated(settings: Settings) -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db.alembic_config(settings.sqlalchemy_url))
    head = script.get_current_head()
    current = db.current_revision(settings.sqlalchemy_url)
    if current != head:
        raise StartupError(
            f"database {redact_url(settings.sqlalchemy_url)} is at revision {current}, "
            f"not {head}: run `studio db upgrade` first"
        )


def preflight(settings: Settings, *, migrate: bool) -> None:
    """Every check a process of the studio needs before it starts serving."""
    check_data_dir(settings)
    check_database(settings)
    check_queue(settings)
    if migrate:
        db.upgrade(settings.sqlalchemy_url)
    else:
        check_migrated(settings)


def web_command(settings: Settings) -> list[str]:
    return [sys.executable, "-m", "uvicorn", "frontend.server:create_app", "--factory",
            "--host", settings.host, "--port", str(settings.port), "--log-level", "warning"]


def worker_command(settings: Settings, queues: Sequence[str], concurrency: int) -> list[str]:
    name = "-".join(queues)
    return [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker",
            "-Q", ",".join(queues), "--pool", "threads", "--concurrency", str(concurrency),
            "--hostname", f"{name}@%h-{os.getpid()}", "--loglevel", "INFO",
            "--without-gossip", "--without-mingle"]


def wait_until_serving(url: str, process: subprocess.Popen, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except Exception:
            time.sleep(0.3)
    return False


def supervise(children: dict[str, subprocess.Popen], grace: float = 20.0) -> int:
    """Wait until a child exits or a stop signal arrives, then stop all children."""
    stopping = False

    def request_stop(_signum, _frame) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping and all(p.poll() is None for p in children.values()):
            time.sleep(0.2)
        failed = [name for name, p in children.items() if p.poll() not in (None, 0)]
        for name in failed:
            print(f"studio: the {name} stopped (exit code {children[name].returncode}); "
                  "stopping the rest", file=sys.stderr)
        for p in children.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + grace
        for p in children.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return 1 if failed and not stopping else 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
