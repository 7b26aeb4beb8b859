"""Health, identity and the queue round trip."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from studio.api.deps import CurrentUser, JsonBodyRoute, OptionalUser, SettingsDep
from studio.services.access import ActorView
from studio.services.health import HealthReport, PublicHealth, health

public = APIRouter()
router = APIRouter(tags=["system"], route_class=JsonBodyRoute)


# It writes its JSONResponse itself (503 when down): response_model only documents it.
@public.get("/healthz", tags=["system"], response_model=HealthReport | PublicHealth,
            responses={503: {"model": HealthReport | PublicHealth,
                             "description": "The database or the broker is down"}})
def healthz(caller: OptionalUser, settings: SettingsDep) -> JSONResponse:
    """`ok`, `degraded` or `down` for anyone (503 when the database or the broker is down);
    the parts, their URLs (credentials hidden), the workers and the problems only with an
    API token, since they map the deployment for whoever asks."""
    report = health(settings)
    body = report if caller is not None else {
        "status": report["status"],
        "detail": "send an API token (Authorization: Bearer ...) for the parts and workers"}
    return JSONResponse(body, status_code=503 if report["status"] == "down" else 200)


@router.get("/me")
def me(actor: CurrentUser) -> ActorView:
    """Who the token acts as, with its role (admin, member or viewer)."""
    return {"id": actor.id, "username": actor.username, "role": actor.role.value,
            "is_admin": actor.is_admin}
