"""Runs a training run's process for a Celery task: claim, spawn, watch, cancel, record.

The task claims one attempt of a run (`runs.claim_run`); a task whose attempt
is not there to take (a redelivered message for a run that was interrupted or
resumed since, a cancelled or deleted run) does nothing. The process runs in
its own process group so that cancelling kills the whole of it; the task keeps
the attempt's heartbeat while it waits, and stops the process as soon as the
run is no longer its attempt's (cancelled, interrupted, deleted); a run that asks for
it has its metrics mirrored to TensorBoard meanwhile (`worker.metrics_mirror`). On a GPU
worker each process sees GPUs of its own (`CUDA_VISIBLE_DEVICES`): a native
run one, so the worker's concurrency is its number of GPUs; a veRL run its
`verl.gpus_per_node` (docs/verl.md).
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
from studio.run_config import RunConfig
from studio.services import evaluations, run_plans, runs
from studio.services.errors import NotFound, UserError
from studio.services.run_folder import RunFolder
from studio.settings import Settings
from studio.tables import RunState
from worker.metrics_mirror import TensorBoardMirror

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0
STOP_GRACE_SECONDS = 10.0
ENGINES = {"native": "worker.engines.native.main", "verl": "worker.engines.verl.main"}


class DeviceSlots:
    """The worker's GPUs, each lent to one training process at a time."""

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


def gpus_wanted(config: RunConfig) -> int:
    """GPUs a run's process takes on this worker: a native run one, a veRL run its
    gpus_per_node (none when it drives a Ray cluster, whose GPUs are elsewhere)."""
    if config.backend != "verl":
        return 1
    return 0 if config.verl.ray_address else config.verl.gpus_per_node


_gpu_slots: DeviceSlots | None = None
_gpu_slots_lock = threading.Lock()


def gpu_slots() -> DeviceSlots:
    global _gpu_slots
    with _gpu_slots_lock:
        if _gpu_slots is None:
            _gpu_slots = DeviceSlots(visible_gpus())
        return _gpu_slots


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
    try:
        config = run_plans.stored_plan(settings, run_id).config
        if run["backend"] not in ENGINES:
            raise UserError(f"backend '{run['backend']}' cannot run on this worker")
    except UserError as exc:
        runs.finish_run(settings, run_id, RunState.failed, str(exc), attempt=attempt)
        return RunState.failed.value
    folder = RunFolder.of(settings, run_id)
    folder.root.mkdir(parents=True, exist_ok=True)
    log_path = folder.log
    slot = gpu_slots().take(gpus_wanted(config)) if run["queue"] == "gpu" else nullcontext([])
    with slot as gpus, open(log_path, "ab") as out:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
               "STUDIO_DATA_DIR": str(settings.resolved_data_dir)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        out.write(f"--- run {run_id} attempt {attempt} on {hostname}, "
                  f"GPU {','.join(gpus) or 'none'} ---\n".encode())
        out.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", ENGINES[run["backend"]], str(run_id),
             "--attempt", str(attempt), "--parent-pid", str(os.getpid())],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        interval = min(POLL_SECONDS, settings.heartbeat_seconds)
        mirror = TensorBoardMirror(settings, run_id) if config.mirror.tensorboard else None
        while process.poll() is None:
            if not _still_ours(settings, run_id, attempt, process.pid) \
                    and process.poll() is None:
                stop_process_group(process)
                break
            if mirror:
                mirror.sync()
            time.sleep(interval)
        if mirror:
            mirror.close()
    runs.process_ended(settings, run_id, attempt)
    runs.finish_run(settings, run_id, RunState.failed,
                    f"the training process exited with code {process.returncode} without "
                    f"recording an outcome:\n{log_tail(log_path)}", attempt=attempt)
    state = _final_state(settings, run_id)
    if state == RunState.succeeded.value:
        evaluations.evaluate_finished_run(settings, run_id)
    return state
