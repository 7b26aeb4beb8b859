"""Calibrations: how fast a model trains on a queue's worker (the launch check's time
estimate measures one by itself when it needs it; this measures again)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from studio.api.deps import CurrentUser, Id, JsonBodyRoute, SettingsDep
from studio.run_config import MAX_THREADS
from studio.services import calibrations
from studio.services.calibrations import CalibrationView

router = APIRouter(tags=["calibrations"], route_class=JsonBodyRoute)


class CalibrationRequest(BaseModel):
    model: str = Field(description="As a run config's model: bundled name, HF id or folder")
    queue: str = "cpu"
    threads: int = Field(default=1, ge=1, le=MAX_THREADS,
                         description="As the runs' engine.threads")
    dtype: str = Field(default="auto", description="As the runs' engine.dtype")


@router.post("/calibrations", status_code=202)
def measure(body: CalibrationRequest, actor: CurrentUser, settings: SettingsDep) -> CalibrationView:
    """Queue a new measurement on the queue's worker (after the jobs ahead of it there)."""
    return calibrations.request_calibration(settings, actor, **body.model_dump())


@router.get("/calibrations")
def list_all(settings: SettingsDep) -> list[CalibrationView]:
    """Newest first, with their figures (studio.services.estimates) once measured."""
    return calibrations.list_calibrations(settings)


@router.get("/calibrations/{calibration_id}")
def get(calibration_id: Id, settings: SettingsDep) -> CalibrationView:
    return calibrations.get_calibration(settings, calibration_id)
