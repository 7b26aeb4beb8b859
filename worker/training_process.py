"""Runs a training run's process for a Celery task: claim, spawn, watch, cancel, record.

The task claims one attempt of a run (`runs.claim_run`); a task whose attempt
is not there to take (a redelivered message for a run that was interrupted or
resumed since, a cancelled or deleted run) does nothing. The process runs in
its own process group so that cancelling kills the whole of it; the task keeps
the attempt's heartbeat while it waits, and stops the process as soon as the
run is no longer its attempt's (cancelled, interrupted, deleted). On a GPU
worker each process sees one GPU of its own (`CUDA_VISIBLE_DEVICES`): the
worker's concurrency is its number of GPUs, one job per GPU.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from studio.gpus import visible_gpus
from studio.services import runs
from studio.services.errors import NotFound
from studio.settings import Settings
from studio.tables import RunState

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0
STOP_GRACE_SECONDS = 10.0
ENGINES = {"native": "worker.engines.native.main"}


class DeviceSlots:
    """The worker's GPUs, each lent to one training process at a time."""

    def __init__(self, devices: list[str]):
        self._free, self._lock = list(devices), threading.Lock()

    @contextmanager
    def take(self) -> Iterator[str | None]:
        """A free GPU id, or None when the worker has none to give (the job runs on CPU)."""
        with self._lock:
            device = self._free.pop(0) if self._free else None
        try:
            yield device
        finally:
            if device is not None:
                with self._lock:
                    self._free.append(device)


_gpu_slots: DeviceSlots | None = None
_gpu_slots_lock = threading.Lock()


def gpu_slots() -> DeviceSlots:
    global _gpu_slots
    with _gpu_slots_lock:
        if _gpu_slots is None:
            _gpu_slots = DeviceSlots(visible_gpus())
        return _gpu_slots


def _tail(path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        process.wait()


def _still_ours(settings: Settings, run_id: int, attempt: int, pid: int) -> bool:
    """The attempt's heartbeat; a database hiccup is not a reason to stop training."""
    try:
        return runs.keep_alive(settings, run_id, attempt, pid)
    except Exception as exc:
        log.warning("run %s: heartbeat not recorded: %s", run_id, exc)
        return True


def _final_state(settings: Settings, run_id: int) -> str:
    try:
        return runs.run_state(settings, run_id).value
    except NotFound:
        return "deleted"


def run_training(settings: Settings, run_id: int, attempt: int, hostname: str) -> str:
    """Run attempt `attempt` of a run to its end; return the run's state afterwards."""
    if not runs.claim_run(settings, run_id, attempt, hostname):
        log.info("run %s: attempt %s is not queued (any more); nothing to do", run_id, attempt)
        return _final_state(settings, run_id)
    run = runs.get_run(settings, run_id)
    if run["backend"] not in ENGINES:
        runs.finish_run(settings, run_id, RunState.failed,
                        f"backend '{run['backend']}' cannot run on this worker", attempt=attempt)
        return RunState.failed.value
    folder = runs.run_dir(settings, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "train.log"
    slot = gpu_slots().take() if run["queue"] == "gpu" else nullcontext(None)
    with slot as gpu, open(log_path, "ab") as out:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
               "STUDIO_DATA_DIR": str(settings.resolved_data_dir)}
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        out.write(f"--- run {run_id} attempt {attempt} on {hostname}, "
                  f"GPU {gpu if gpu is not None else 'none'} ---\n".encode())
        out.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", ENGINES[run["backend"]], str(run_id),
             "--attempt", str(attempt), "--parent-pid", str(os.getpid())],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        interval = min(POLL_SECONDS, settings.heartbeat_seconds)
        while process.poll() is None:
            if not _still_ours(settings, run_id, attempt, process.pid) \
                    and process.poll() is None:
                _stop(process)
                break
            time.sleep(interval)
    runs.process_ended(settings, run_id, attempt)
    runs.finish_run(settings, run_id, RunState.failed,
                    f"the training process exited with code {process.returncode} without "
                    f"recording an outcome:\n{_tail(log_path)}", attempt=attempt)
    return _final_state(settings, run_id)
