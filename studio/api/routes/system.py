"""Health, identity and the queue round trip."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from studio.api.deps import CurrentUser, get_settings
from studio.services.health import health
from studio.settings import Settings

public = APIRouter()
router = APIRouter(tags=["system"])


@public.get("/healthz", tags=["system"])
def healthz(settings: Settings = Depends(get_settings)) -> JSONResponse:
    """Database, broker and worker status; 503 when the database or the broker is down."""
    report = health(settings)
    return JSONResponse(report, status_code=503 if report["status"] == "down" else 200)


@router.get("/me")
def me(actor: CurrentUser) -> dict:
    """Who the token acts as, with its role (admin, member or viewer)."""
    return {"id": actor.id, "username": actor.username, "role": actor.role.value,
            "is_admin": actor.is_admin}
