"""Start studio processes (the CLI, a worker) for tests and stop them for sure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from studio.settings import Settings
from tests.support.tiny_model import build_tiny_model

STUDIO = [sys.executable, "-m", "studio.cli"]
ROOT = Path(__file__).resolve().parents[2]


def studio_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of a studio process on `data_dir`: this checkout's code from any
    folder, `studio up`'s record (studio.jobs.locate) beside the data, not in the user's, and of
    the caller's settings only the folders of the tests' models (tests/conftest.py)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STUDIO_") or k == "STUDIO_MODEL_FOLDERS"}
    env["STUDIO_DATA_DIR"] = str(data_dir)
    env["GRADIO_ANALYTICS_ENABLED"] = "False"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["XDG_STATE_HOME"] = f"{data_dir}-user-state"
    env.update({f"STUDIO_{k.upper()}": v for k, v in settings.items() if v is not None})
    return env


def run_studio(args: list[str], env: dict[str, str], timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(STUDIO + args, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def start_studio(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start `studio ARGS` in its own process group, its output going to `log`."""
    with open(log, "w") as out:
        return subprocess.Popen(STUDIO + args, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    """Signal the process, wait, and kill its whole group if it outlives `timeout`."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


def wait_for(predicate, timeout: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@contextmanager
def running_worker(data_dir: Path, log: Path, queues: str = "cpu,short",
                   **settings: str) -> Iterator[subprocess.Popen]:
    """A `studio worker --queues QUEUES` on the studio in `data_dir` (by default one worker
    for training and the short jobs alike), stopped (and checked) after."""
    worker = start_studio(["worker", "--queues", queues], studio_env(data_dir, **settings), log)
    try:
        yield worker
    finally:
        code = stop(worker)
        assert code == 0, log.read_text()


def studio_cli(tmp_path: Path):
    """Settings and a `cli(*args)` running `studio` on a data folder under `tmp_path`."""
    data = tmp_path / "data"
    env = studio_env(data, heartbeat_seconds="1")

    def cli(*args: str, timeout: float = 300):
        return run_studio(list(args), env, timeout=timeout)
    return Settings(data_dir=data, heartbeat_seconds=1), cli


def demo_studio_cli(tmp_path: Path):
    """A migrated studio with the demo pack, its CLI, and a tiny model."""
    settings, cli = studio_cli(tmp_path)
    assert cli("db", "upgrade").returncode == 0
    assert cli("demo").returncode == 0
    return settings, cli, build_tiny_model(tmp_path / "tiny")
