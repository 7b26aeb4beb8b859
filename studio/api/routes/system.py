"""Health, identity and the queue round trip."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from studio.api.deps import CurrentUser, OptionalUser, get_settings
from studio.services.health import health
from studio.settings import Settings

public = APIRouter()
router = APIRouter(tags=["system"])


@public.get("/healthz", tags=["system"])
def healthz(caller: OptionalUser, settings: Settings = Depends(get_settings)) -> JSONResponse:
    """`ok`, `degraded` or `down` for anyone (503 when the database or the broker is down);
    the parts, their URLs (credentials hidden), the workers and the problems only with an
    API token, since they map the deployment for whoever asks."""
    report = health(settings)
    body = report if caller is not None else {
        "status": report["status"],
        "detail": "send an API token (Authorization: Bearer ...) for the parts and workers"}
    return JSONResponse(body, status_code=503 if report["status"] == "down" else 200)


@router.get("/me")
def me(actor: CurrentUser) -> dict:
    """Who the token acts as, with its role (admin, member or viewer)."""
    return {"id": actor.id, "username": actor.username, "role": actor.role.value,
            "is_admin": actor.is_admin}
