"""The calibration task's body: measure a model on this worker's device, store the figures.

The measurement (`worker.engines.native.calibrate`) runs in a fresh process set up as a
training process of the same queue is (`OMP_NUM_THREADS=1`, the run's threads, one GPU of
its own on queue gpu), so that its figures are what a run there would get. A calibration
that is no longer queued (a redelivered message) does nothing.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from studio.jobs.devices import queue_device
from studio.jobs.lifecycle import RunState
from studio.services import calibrations
from studio.settings import Settings
from worker.child_process import child_env, devices_for

log = logging.getLogger(__name__)
TIMEOUT_SECONDS = 900  # ~45 s for the default model on a CPU; a 7B model on a CPU is too slow


def _measure(settings: Settings, calibration: dict) -> dict:
    """The measuring process's figures; RuntimeError with the end of its output if it fails."""
    device = calibration["device"]
    on_gpu = device["kind"] == "cuda"
    with devices_for(on_gpu) as gpus:
        env = child_env(settings, gpus)
        command = [sys.executable, "-m", "worker.engines.native.calibrate", calibration["model"],
                   "--dtype", calibration["dtype"], "--threads", str(calibration["threads"]),
                   "--device", "cuda" if on_gpu else "cpu"]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"it took more than {TIMEOUT_SECONDS} s") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"the measuring process exited with code {done.returncode}: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_calibration(settings: Settings, calibration_id: int, hostname: str) -> str:
    """Measure calibration `calibration_id` here; return its state afterwards."""
    row = calibrations.get_calibration(settings, calibration_id)
    calibration = calibrations.claim_calibration(settings, calibration_id, hostname,
                                                 queue_device(row["queue"]))
    if calibration is None:
        log.info("calibration %s is not queued (any more); nothing to do", calibration_id)
        return row["state"]
    try:
        figures = _measure(settings, calibration)
    except (RuntimeError, ValueError, OSError) as exc:
        calibrations.finish_calibration(settings, calibration_id, error=str(exc))
        return RunState.failed.value
    calibrations.finish_calibration(settings, calibration_id, figures=figures)
    return RunState.succeeded.value
