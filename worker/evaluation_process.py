"""Runs an evaluation's process for a Celery task: claim, spawn, watch, cancel, record.

The evaluation's process (`worker.evaluation`) runs in its own process group with a GPU of
the worker's on queue gpu (`worker.child_process`), so an evaluation never lands on a GPU
a training run holds; a cancel stops the group within a second. This module loads no
model: the worker's task stays light, as `worker.training_process` does for runs.
"""

from __future__ import annotations

from studio.jobs.lifecycle import RunState
from studio.services import evaluations
from studio.services.evaluation_files import evaluation_log_path
from studio.services.evaluations import get_evaluation, update_evaluation
from studio.settings import Settings
from worker.child_process import devices_for, log_tail, spawn, watch

POLL_SECONDS = 1.0


def run_evaluation_job(settings: Settings, evaluation_id: int) -> dict:
    """The task's body: claim, spawn the evaluation's process, stop it on a cancel; a process
    that ends without recording an outcome leaves the evaluation failed with its log's tail."""
    evaluation = evaluations.claim_evaluation(settings, evaluation_id)
    if evaluation is None:
        return get_evaluation(settings, evaluation_id)
    log_path = evaluation_log_path(settings, evaluation_id)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with devices_for(evaluation["params"].get("queue") == "gpu") as gpus, \
            open(log_path, "ab") as out:
        out.write(f"--- evaluation {evaluation_id}, GPU {','.join(gpus) or 'none'} ---\n".encode())
        out.flush()
        process = spawn("worker.evaluation", [str(evaluation_id)], settings, gpus, out)
        code = watch(process, lambda _pid: evaluations.is_running(settings, evaluation_id),
                     POLL_SECONDS)
    update_evaluation(settings, evaluation_id, state=RunState.failed,
                      error=f"the evaluation process exited with code {code} without "
                            f"recording an outcome:\n{log_tail(log_path)}")
    return get_evaluation(settings, evaluation_id)
