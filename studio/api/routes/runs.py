"""Training runs: launch from a config, follow, cancel; evaluations of models and runs."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel

from studio.api.deps import current_user, get_settings
from studio.services import evaluations, runs
from studio.settings import Settings
from studio.tables import User

router = APIRouter(tags=["runs"])


@router.post("/runs", status_code=201)
def launch(config: dict = Body(..., description="A run config (the YAML file's schema)"),
           user: User = Depends(current_user),
           settings: Settings = Depends(get_settings)) -> dict:
    """Validate the config, store the run as queued and send it to its queue."""
    return runs.create_run(settings, config, user_id=user.id)


@router.get("/runs")
def list_all(settings: Settings = Depends(get_settings)) -> list[dict]:
    return runs.list_runs(settings)


@router.get("/runs/{run_id}")
def get(run_id: int, settings: Settings = Depends(get_settings)) -> dict:
    return runs.get_run(settings, run_id)


@router.post("/runs/{run_id}/cancel")
def cancel(run_id: int, settings: Settings = Depends(get_settings)) -> dict:
    return runs.cancel_run(settings, run_id)


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
