"""What every job that runs in a process of its own shares: the worker's GPU slots, the
child's environment, watching it and stopping its whole process group, its log's tail.

Training runs, evaluations and calibrations each run in a fresh interpreter (never a fork,
so CUDA is safe) that sees only the GPUs lent to it (`CUDA_VISIBLE_DEVICES`), so two jobs
on one GPU worker never share a device.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

from studio.jobs.gpus import visible_gpus
from studio.jobs.launcher import NO_PROGRESS_BARS
from studio.settings import Settings

STOP_GRACE_SECONDS = 10.0


class DeviceSlots:
    """The worker's GPUs, each lent to one process at a time."""

    def __init__(self, devices: list[str]):
        self._free, self._lock = list(devices), threading.Lock()

    @contextmanager
    def take(self, count: int = 1) -> Iterator[list[str]]:
        """Up to `count` free GPU ids ([] when the worker has none to give: CPU)."""
        with self._lock:
            devices, self._free = self._free[:count], self._free[count:]
        try:
            yield devices
        finally:
            with self._lock:
                self._free.extend(devices)


_gpu_slots: DeviceSlots | None = None
_gpu_slots_lock = threading.Lock()


def gpu_slots() -> DeviceSlots:
    global _gpu_slots
    with _gpu_slots_lock:
        if _gpu_slots is None:
            _gpu_slots = DeviceSlots(visible_gpus())
        return _gpu_slots


def devices_for(on_gpu: bool, count: int = 1):
    """A context giving the GPU ids a job takes: `count` of the worker's free ones on queue
    gpu, none elsewhere."""
    return gpu_slots().take(count) if on_gpu else nullcontext([])


def child_env(settings: Settings, gpus: list[str]) -> dict[str, str]:
    """A job process's environment: unbuffered output, one OpenMP thread (the job sets its
    own torch threads), no progress bars (its output goes to its log file) unless the user
    asked for them, the worker's data folder and database and, with GPUs lent, only those
    visible."""
    env = {**NO_PROGRESS_BARS, **os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "STUDIO_DATA_DIR": str(settings.resolved_data_dir)}
    if settings.database_url:
        env["STUDIO_DATABASE_URL"] = settings.database_url
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return env


def spawn(module: str, args: list[str], settings: Settings, gpus: list[str],
          out) -> subprocess.Popen:
    """`python -m module *args` in a process group of its own (a cancel kills all of it),
    its output to `out`, told the worker's pid so that it dies with the worker."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args, "--parent-pid", str(os.getpid())],
        stdout=out, stderr=subprocess.STDOUT, env=child_env(settings, gpus),
        start_new_session=True)


def log_tail(path, lines: int = 20) -> str:
    """The last lines of a log file ('' when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process_group(process: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process's group, SIGKILL it after `grace` seconds."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


def watch(process: subprocess.Popen, still_wanted: Callable[[int], bool], interval: float,
          on_tick: Callable[[], None] | None = None) -> int:
    """Wait for `process`, asking `still_wanted(pid)` every `interval` seconds; when it says
    no (the job was cancelled, or is no longer this worker's), stop the process group.
    Returns the exit code."""
    while process.poll() is None:
        if not still_wanted(process.pid) and process.poll() is None:
            stop_process_group(process)
            break
        if on_tick:
            on_tick()
        time.sleep(interval)
    return process.wait()
