"""The FastAPI application: public health check, everything else behind a token."""

from __future__ import annotations

from fastapi import Depends, FastAPI

from studio.api.deps import current_user
from studio.api.routes import system
from studio.settings import Settings

API_PREFIX = "/api/v1"


def create_api(settings: Settings) -> FastAPI:
    app = FastAPI(title="ICRL Studio", version="0.1.0",
                  docs_url=f"{API_PREFIX}/docs", openapi_url=f"{API_PREFIX}/openapi.json")
    app.state.settings = settings
    app.include_router(system.public)
    protected = [Depends(current_user)]
    app.include_router(system.router, prefix=API_PREFIX, dependencies=protected)
    return app
