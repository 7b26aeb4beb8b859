"""Start-up: checks that turn a broken setting into one clear line, and the
supervisor that runs the web app and the workers as child processes.

`studio up` runs two workers: one for training (its queues, `STUDIO_WORKER_QUEUES`) and a
light one for the short jobs' lane (index builds and exports: `studio.jobs.queue.SHORT_QUEUE`),
so that those never wait behind a run. Ctrl-C (or SIGTERM) stops every child. A worker that
dies is restarted with backoff, each on its own, while the web app keeps serving; if the
web app dies the workers are stopped too, so `studio up` never leaves a studio nobody can
see.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from studio.jobs.queue import SHORT_QUEUE, check_broker
from studio.services.health import forget_worker
from studio.settings import Settings, redact_url
from studio.storage import db


class StartupError(RuntimeError):
    """A problem with the settings or the machine, said in one line with what to do."""


def _first_line(exc: BaseException) -> str:
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__


PRIVATE_UMASK = 0o077
"""What every studio process writes is its user's alone: folders 0700, files 0600 (the
database, checkpoints, exports and uploads hold a team's data and password hashes)."""


def check_data_dir(settings: Settings) -> Path:
    """The data directory, checked writable (created owner-only, and its SQLite database made
    owner-only); the process, and what it starts, writes owner-only files from here on."""
    os.umask(PRIVATE_UMASK)
    path = settings.resolved_data_dir
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)  # a folder that exists keeps its mode
        database = path / "studio.db"
        if database.exists():
            database.chmod(0o600)
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
    """uvicorn serving the web app; it believes X-Forwarded-For only from trusted proxies."""
    proxies = ["--proxy-headers", "--forwarded-allow-ips", settings.trusted_proxies] \
        if settings.trusted_proxies else ["--no-proxy-headers"]
    return [sys.executable, "-m", "uvicorn", "frontend.server:create_app", "--factory",
            "--host", settings.host, "--port", str(settings.port), "--log-level", "warning",
            *proxies]


def worker_node_name(queues: Sequence[str]) -> str:
    """The worker's Celery hostname, also the key of its heartbeat row."""
    return f"{'-'.join(queues)}@{socket.gethostname()}-{os.getpid()}"


def worker_command(settings: Settings, queues: Sequence[str], concurrency: int, *,
                   quiet: bool = False) -> list[str]:
    """The Celery worker's command line; `quiet`: no banner and warnings only (the workers of
    `studio up`, whose terminal shows what the user needs: the address and credentials)."""
    return [sys.executable, "-m", "celery", "-A", "worker.celery_app",
            *(["--quiet"] if quiet else []), "worker",
            "-Q", ",".join(queues), "--pool", "threads", "--concurrency", str(concurrency),
            "--hostname", worker_node_name(queues), "--loglevel", "WARNING" if quiet else "INFO",
            "--without-gossip", "--without-mingle"]


NO_PROGRESS_BARS = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
"""Progress bars (Hugging Face's downloads, transformers' "Loading weights", the bundled
model's conversion) redraw their line many times a second: in a log file every redraw
stays. The pages, and a log line per training step, say the progress instead. Hugging Face's
switch turns off its bars and transformers', tqdm's own any other."""


def quiet_progress_bars() -> None:
    """No progress bars in this process and those it starts when its errors go to a file,
    not a terminal (`studio up > studio.log 2>&1`); a value set by the user is kept."""
    if not sys.stderr.isatty():
        for key, value in NO_PROGRESS_BARS.items():
            os.environ.setdefault(key, value)


SHORT_LANE_CONCURRENCY = 2
"""An export runs beside a long index build; both are light next to training."""
SHORT_LANE_ENV = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""The short jobs' worker sees no GPU and takes one thread per job from the training."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker of `studio up`: what it serves, how many jobs at once, its environment."""

    queues: tuple[str, ...]
    concurrency: int
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"the {'/'.join(self.queues)} worker"


def studio_workers(settings: Settings) -> list[WorkerSpec]:
    """The training worker and the short jobs' worker that `studio up` runs."""
    return [WorkerSpec(tuple(settings.queues), settings.worker_concurrency),
            WorkerSpec((SHORT_QUEUE,), SHORT_LANE_CONCURRENCY, SHORT_LANE_ENV)]


def wait_until_serving(url: str, process: subprocess.Popen, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except Exception:
            time.sleep(0.3)
    return False


def describe_exit(returncode: int) -> str:
    """A child's exit in words: Popen gives a signal as a negative return code."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:  # a signal Python has no name for
        return f"was killed by signal {-returncode}"


class RestartBackoff:
    """Seconds to wait before restarting a crashed worker, so one that crashes at once
    does not spin: 1 s, doubling with each crash in a row, at most 60 s; a worker that
    stayed up for a minute starts again from 1 s."""

    FIRST_DELAY = 1.0
    LONGEST_DELAY = 60.0
    STEADY_UPTIME = 60.0

    def __init__(self) -> None:
        self._next_delay = self.FIRST_DELAY

    def delay_after_crash(self, uptime: float) -> float:
        if uptime >= self.STEADY_UPTIME:
            self._next_delay = self.FIRST_DELAY
        delay = self._next_delay
        self._next_delay = min(2 * delay, self.LONGEST_DELAY)
        return delay


class RestartingWorker:
    """A worker child of `studio up`. When it dies its heartbeat row is deleted at once
    (so /healthz says its queues have no worker) and it is started again after its backoff."""

    def __init__(self, settings: Settings, spec: WorkerSpec) -> None:
        self.settings, self.name = settings, spec.name
        self.node_name = worker_node_name(spec.queues)
        self.command = worker_command(settings, spec.queues, spec.concurrency, quiet=True)
        self.env = {**os.environ, **spec.env}
        self.backoff = RestartBackoff()
        self.restart_at: float | None = None  # set while waiting out a backoff
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env)
        self.started_at = time.monotonic()
        self.restart_at = None

    def tend(self) -> None:
        """Notice a dead worker, or start it again once its backoff is over."""
        now = time.monotonic()
        if self.restart_at is not None:
            if now >= self.restart_at:
                self._start()
            return
        if self.process.poll() is None:
            return
        delay = self.backoff.delay_after_crash(uptime=now - self.started_at)
        self.restart_at = now + delay
        print(f"studio: {self.name} (pid {self.process.pid}) "
              f"{describe_exit(self.process.returncode)}; restarting it in {delay:g} s",
              file=sys.stderr)
        try:
            forget_worker(self.settings, self.node_name, self.process.pid)
        except SQLAlchemyError as exc:
            print(f"studio: the dead worker's heartbeat row stays until it expires: "
                  f"{_first_line(exc)}", file=sys.stderr)


def stop_processes(processes: Sequence[subprocess.Popen], grace: float) -> None:
    """Terminate, then kill what is still running after `grace` seconds."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def supervise(web_app: subprocess.Popen, workers: Sequence[RestartingWorker],
              grace: float = 20.0) -> int:
    """Run until Ctrl-C or SIGTERM (exit 0, every child stopped) or until the web app dies.

    The web app is what the user sees: when it dies the workers are stopped and `studio up`
    exits 1. A worker crash is not an outage: that worker is restarted with backoff while
    the web app and the other worker keep serving.
    """
    stopping = False

    def request_stop(_signum, _frame) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping and web_app.poll() is None:
            for worker in workers:
                worker.tend()
            time.sleep(0.2)
        web_app_died = not stopping
        if web_app_died:
            print(f"studio: the web app {describe_exit(web_app.returncode)}; stopping the "
                  "workers", file=sys.stderr)
        stop_processes([web_app, *(worker.process for worker in workers)], grace)
        return 1 if web_app_died else 0
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
