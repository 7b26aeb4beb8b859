"""Runs a training run's process for a Celery task: spawn, watch, cancel, record.

The process runs in its own process group so that cancelling kills the whole
of it (data loaders, engine subprocesses); the task keeps the run's heartbeat
while it waits, so a dead worker can be told from a busy one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from studio.services import runs
from studio.settings import Settings
from studio.tables import RunState

POLL_SECONDS = 1.0
STOP_GRACE_SECONDS = 10.0
ENGINES = {"native": "worker.engines.native.main", "verl": "worker.engines.verl.main"}


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


def run_training(settings: Settings, run_id: int, hostname: str) -> str:
    """Run the training process to its end; return the run's final state."""
    if not runs.claim_run(settings, run_id, hostname):
        return runs.run_state(settings, run_id).value
    backend = runs.get_run(settings, run_id)["backend"]
    if backend not in ENGINES:
        runs.finish_run(settings, run_id, RunState.failed,
                        f"backend '{backend}' cannot run on this worker")
        return RunState.failed.value
    run_dir = settings.resolved_data_dir / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "train.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
           "STUDIO_DATA_DIR": str(settings.resolved_data_dir)}
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", ENGINES[backend], str(run_id)],
                                   stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    runs.record_process(settings, run_id, process.pid)
    while process.poll() is None:
        time.sleep(POLL_SECONDS)
        if runs.run_state(settings, run_id) == RunState.cancelled:
            stop_process_group(process)
            break
        runs.record_process(settings, run_id, process.pid)
    runs.record_process(settings, run_id, None)
    state = runs.run_state(settings, run_id)
    if state == RunState.running:  # the process died without recording its outcome
        runs.finish_run(settings, run_id, RunState.failed,
                        f"the training process exited with code {process.returncode}:\n"
                        f"{log_tail(log)}")
    return runs.run_state(settings, run_id).value
