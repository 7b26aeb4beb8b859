"""Health, identity and the queue round trip."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from studio.api.deps import current_user, get_settings
from studio.services.health import health
from studio.settings import Settings
from studio.tables import User

public = APIRouter()
router = APIRouter(tags=["system"])


@public.get("/healthz", tags=["system"])
def healthz(settings: Settings = Depends(get_settings)) -> JSONResponse:
    """Database, broker and worker status; 503 when the database or the broker is down."""
    report = health(settings)
    return JSONResponse(report, status_code=503 if report["status"] == "down" else 200)


@router.get("/me")
def me(user: User = Depends(current_user)) -> dict:
    return {"id": user.id, "username": user.username, "is_admin": user.is_admin}
