"""Training runs: validate, launch, follow, cancel, resume, delete; evaluations of models and
runs."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel

from studio.api.deps import current_user, get_settings
from studio.services import evaluations, run_validation, runs
from studio.settings import Settings
from studio.tables import User

router = APIRouter(tags=["runs"])


RunConfigBody = Body(..., description="A run config (the YAML file's schema)")


@router.post("/runs", status_code=201)
def launch(config: dict = RunConfigBody, user: User = Depends(current_user),
           settings: Settings = Depends(get_settings)) -> dict:
    """Validate the config, store the run as queued and send it to its queue; the answer
    adds `stages` (each stage's longest prompt in tokens and seconds per step),
    `time_estimate` and `warnings`."""
    return runs.create_run(settings, config, user_id=user.id)


@router.post("/runs/validate")
def validate(config: dict = RunConfigBody, settings: Settings = Depends(get_settings)) -> dict:
    """What launching would check and estimate (per stage: exemplars, steps, longest prompt
    in tokens against grpo.max_prompt_tokens, seconds per step on the queue's worker; the
    run's time; warnings), storing nothing; it queues the measurement of the queue's device
    when the time estimate needs one (`time_estimate.state` is then `measuring`)."""
    return run_validation.validate_run(settings, config)


@router.get("/runs")
def list_all(settings: Settings = Depends(get_settings)) -> list[dict]:
    """Newest first; a queued run carries its `queue_position` (1 = next on its queue)."""
    return runs.list_runs(settings)


@router.get("/runs/{run_id}")
def get(run_id: int, settings: Settings = Depends(get_settings)) -> dict:
    return runs.get_run(settings, run_id)


@router.delete("/runs/{run_id}", status_code=204)
def delete(run_id: int, settings: Settings = Depends(get_settings)) -> None:
    """Delete a run that is not queued or running (409), with its rows and files."""
    runs.delete_run(settings, run_id)


@router.post("/runs/{run_id}/cancel")
def cancel(run_id: int, settings: Settings = Depends(get_settings)) -> dict:
    """Kill the run's process group; its metrics, rollouts and checkpoints stay."""
    return runs.cancel_run(settings, run_id)


@router.post("/runs/{run_id}/resume")
def resume(run_id: int, settings: Settings = Depends(get_settings)) -> dict:
    """Queue an interrupted, failed or cancelled run again; it continues from its latest
    checkpoint (409 for a queued, running or succeeded run)."""
    return runs.resume_run(settings, run_id)


class EvaluationRequest(BaseModel):
    qa_set: str
    corpus: str | None = None
    model: str | None = None
    run_id: int | None = None
    limit: int | None = None
    protocol: dict | None = None
    queue: str = "cpu"


@router.post("/evaluations", status_code=201)
def evaluate(body: EvaluationRequest, settings: Settings = Depends(get_settings)) -> dict:
    """Zero-shot evaluation (k = 0, temperature 0.1) of a model or a run's latest checkpoint."""
    return evaluations.create_evaluation(settings, **body.model_dump())


@router.get("/evaluations")
def list_evaluations(run_id: int | None = Query(None),
                     settings: Settings = Depends(get_settings)) -> list[dict]:
    return evaluations.list_evaluations(settings, run_id)


@router.get("/evaluations/{evaluation_id}")
def get_evaluation(evaluation_id: int, settings: Settings = Depends(get_settings)) -> dict:
    return evaluations.get_evaluation(settings, evaluation_id)
