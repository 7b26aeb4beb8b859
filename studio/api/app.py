"""The FastAPI application: public health check, everything else behind a token."""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from studio.api.deps import current_user
from studio.api.request_gate import BodyBounds, RequestGate
from studio.api.routes import (
    calibrations,
    corpora,
    curricula,
    demo,
    exemplar_sets,
    exports,
    qa_sets,
    run_history,
    run_presets,
    run_streams,
    runs,
    system,
    users,
)
from studio.api.security_headers import install_security_headers
from studio.api_paths import API_PREFIX
from studio.services.errors import UserError
from studio.services.run_streams import RunStreams
from studio.settings import Settings


def validation_message(exc: RequestValidationError) -> str:
    """FastAPI's validation errors as the studio's one line: each problem after its field
    (`k: Input should be less than or equal to 50; name: Field required`), without
    echoing the value sent (it may be a secret, or megabytes)."""
    problems = []
    for error in exc.errors():
        where = [str(part) for part in error["loc"]]
        if len(where) > 1 and where[0] in ("query", "path", "header", "cookie", "body"):
            where = where[1:]
        problems.append(f"{'.'.join(where) or 'request'}: {error['msg']}")
    return "; ".join(problems)


def create_api(settings: Settings) -> FastAPI:
    app = FastAPI(title="ICRL Studio", version="0.1.0",
                  docs_url=f"{API_PREFIX}/docs", openapi_url=f"{API_PREFIX}/openapi.json")
    app.state.settings = settings
    install_security_headers(app)  # CSP, no framing, nosniff on every response
    app.state.run_streams = RunStreams(settings.sqlalchemy_url)  # one poller per followed run
    app.include_router(system.public)
    protected = [Depends(current_user)]
    # The token, then each body's bound, before any route reads the body; the UI's routes
    # add their own bounds here (frontend.server).
    app.state.body_bounds = BodyBounds()
    app.add_middleware(RequestGate, settings=settings, bounds=app.state.body_bounds,
                       public_paths=frozenset([app.openapi_url, app.docs_url]))
    # run_history before runs: /runs/compare must not be taken for /runs/{run_id}
    for module in (system, corpora, qa_sets, exemplar_sets, demo, curricula, run_history,
                   run_streams, run_presets, runs, exports, calibrations, users):
        app.include_router(module.router, prefix=API_PREFIX, dependencies=protected)
        app.state.body_bounds.add_routes(module.router.routes, API_PREFIX)

    @app.exception_handler(UserError)
    def user_error(_request: Request, exc: UserError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_message(exc)}, status_code=422)

    return app
