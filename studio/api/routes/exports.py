"""Exports of a run's checkpoint: create, follow, retry, download, delete; the model card
preview."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Body, Query
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, Field

from studio.api.deps import (
    MAX_SQL_INT,
    CurrentUser,
    Id,
    JsonBodyRoute,
    OptionalId,
    SettingsDep,
    Step,
)
from studio.services import exports, model_card
from studio.services.exports import ExportView
from studio.services.model_card import CardPreview

router = APIRouter(tags=["exports"], route_class=JsonBodyRoute)


class ExportRequest(BaseModel):
    target: Literal["folder", "zip", "hub"] = "folder"
    step: int | None = Field(default=None, ge=0, le=MAX_SQL_INT,
                             description="Checkpoint after this many steps; default: the "
                                         "latest")
    repo_id: str | None = Field(default=None, description="Hub repo (target hub)")
    private: bool = True
    # Any: a wrongly typed token must not be echoed back in a validation error; the service
    # checks it is a string
    token: Any = Field(default=None, json_schema_extra={"type": "string"},
                       description="Hub access token (target hub); used for this job only, "
                                   "never stored")


class RetryRequest(BaseModel):
    token: Any = Field(default=None, json_schema_extra={"type": "string"},
                       description="The Hub token again (target hub)")


@router.post("/runs/{run_id}/exports", status_code=201)
def create(run_id: Id, body: ExportRequest, actor: CurrentUser,
           settings: SettingsDep) -> ExportView:
    """Queue an export of the run's checkpoint (the run's owner or an admin); follow it at
    /exports/{id}."""
    return exports.create_export(settings, actor, run_id, **body.model_dump())


@router.get("/runs/{run_id}/model-card")
def preview_card(run_id: Id, settings: SettingsDep, step: Step = None,
                 repo_id: str | None = Query(None)) -> CardPreview:
    """The README.md an export of this run would carry (markdown with YAML front matter)."""
    return model_card.preview_model_card(settings, run_id, step, repo_id)


@router.get("/runs/{run_id}/model-card/reward-curves.png", response_class=Response,
            responses={200: {"content": {"image/png": {}}}})
def reward_curves(run_id: Id, settings: SettingsDep, step: Step = None) -> Response:
    """The card's image: training reward, accuracy, format and tool calls per step."""
    return Response(model_card.reward_curves_image(settings, run_id, step),
                    media_type="image/png")


@router.get("/exports")
def list_all(settings: SettingsDep, run_id: OptionalId = None) -> list[ExportView]:
    return exports.list_exports(settings, run_id)


@router.get("/exports/{export_id}")
def get(export_id: Id, settings: SettingsDep) -> ExportView:
    """State, progress (0..1) and `message` (what it is doing), then `location` or `error`."""
    return exports.get_export(settings, export_id)


@router.post("/exports/{export_id}/retry")
def retry(export_id: Id, actor: CurrentUser, settings: SettingsDep,
          body: RetryRequest = Body(default_factory=RetryRequest)) -> ExportView:
    """Queue a failed export again (a Hub push needs the token again)."""
    return exports.retry_export(settings, actor, export_id, token=body.token)


@router.delete("/exports/{export_id}", status_code=204)
def delete(export_id: Id, actor: CurrentUser, settings: SettingsDep) -> None:
    """Delete a finished or failed export with its files, which frees its owner's export
    quota (the owner or an admin)."""
    exports.delete_export(settings, actor, export_id)


@router.get("/exports/{export_id}/download", response_class=FileResponse,
            responses={200: {"content": {"application/zip": {}}}})
def download(export_id: Id, settings: SettingsDep) -> FileResponse:
    """The zip of a finished zip export, streamed."""
    path, filename = exports.download(settings, export_id)
    return FileResponse(path, media_type="application/zip", filename=filename)
