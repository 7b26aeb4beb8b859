"""Runs a training run's process for a Celery task: claim, spawn, watch, cancel, record.

The task claims one attempt of a run (`runs.claim_run`); a task whose attempt
is not there to take (a redelivered message for a run that was interrupted or
resumed since, a cancelled or deleted run, a message for another run: its job key
differs) does nothing. The process runs in
its own process group so that cancelling kills the whole of it; the task keeps
the attempt's heartbeat while it waits, and stops the process as soon as the
run is no longer its attempt's (cancelled, interrupted, deleted); a run that asks for
it has its metrics mirrored to TensorBoard meanwhile (`worker.metrics_mirror`). On a GPU
worker each process sees GPUs of its own (`CUDA_VISIBLE_DEVICES`), as many as the run's
engine asks (`studio.jobs.engines`): a native run one, so the worker's concurrency is its
number of GPUs; a veRL run its `verl.gpus_per_node` (docs/verl.md).
"""

from __future__ import annotations

import logging

from studio.jobs.engines import engine_named
from studio.jobs.lifecycle import RunState
from studio.services import evaluations, run_plans, runs
from studio.services.errors import NotFound, UserError
from studio.services.run_folder import RunFolder
from studio.settings import Settings
from worker.child_process import devices_for, log_tail, spawn, watch
from worker.metrics_mirror import TensorBoardMirror

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0


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


def run_training(settings: Settings, run_id: int, attempt: int, job_key: str | None,
                 hostname: str) -> str:
    """Run attempt `attempt` of a run to its end; return the run's state afterwards."""
    if not job_key or not runs.claim_run(settings, run_id, attempt, job_key, hostname):
        log.info("run %s: attempt %s of this message is not queued (any more, or the message "
                 "was for another run); nothing to do", run_id, attempt)
        return _final_state(settings, run_id)
    run = runs.get_run(settings, run_id)
    try:
        config = run_plans.stored_plan(settings, run_id).config
        engine = engine_named(run["backend"])
    except (UserError, ValueError) as exc:
        runs.finish_run(settings, run_id, RunState.failed, str(exc), attempt=attempt)
        return RunState.failed.value
    folder = RunFolder.of(settings, run_id)
    folder.root.mkdir(parents=True, exist_ok=True)
    log_path = folder.log
    with devices_for(run["queue"] == "gpu", engine.gpus(config)) as gpus, \
            open(log_path, "ab") as out:
        out.write(f"--- run {run_id} attempt {attempt} on {hostname}, "
                  f"GPU {','.join(gpus) or 'none'} ---\n".encode())
        out.flush()
        process = spawn(engine.entry, [str(run_id), "--attempt", str(attempt)],
                        settings, gpus, out)
        mirror = TensorBoardMirror(settings, run_id) if config.mirror.tensorboard else None
        watch(process, lambda pid: _still_ours(settings, run_id, attempt, pid),
              min(POLL_SECONDS, settings.heartbeat_seconds), mirror.sync if mirror else None)
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
