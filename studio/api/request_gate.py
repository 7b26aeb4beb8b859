"""Who sends a request, and how much it may send: both settled before its body is read.

FastAPI reads a route's body (a form's file spooled to disk, a JSON document parsed whole)
before it solves the route's dependencies, the token check among them, and Gradio's routes
do the same: an unauthenticated 300 MB upload was read and written to disk before its 401,
and a 200 MB JSON body to /retrieve parsed before its limits applied. `RequestGate` sees each
request before the app does:

- a request to the REST API (all of it but the schema and its docs page) without a valid API
  token is a 401 before anything reads its body; the token's user goes on in the scope
  (`studio.api.deps.current_user` takes it from there);
- a body is bounded by its route (`bounded_body`, else `DEFAULT_BOUND`): a larger
  Content-Length is a 413 at once, and a body that streams past the bound (chunked too) is a
  413 when the first byte past it arrives.

The UI's requests are signed in by `frontend.login` before they reach the gate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.api.deps import ACTOR_SCOPE_KEY, bearer_credentials, token_actor
from studio.api_paths import API_PREFIX
from studio.settings import Settings

DEFAULT_BODY_BYTES = 16 << 20
"""The most a request body may hold unless its route says otherwise: a run config, an
exemplar set typed in, a UI event are kilobytes to a few megabytes."""
FORM_FIELDS_BYTES = 1 << 20
"""What an upload's form may add to its file: the other fields and the form's framing."""


@dataclass(frozen=True)
class BodyBound:
    """How many bytes a route's request body may hold, and what to do past it."""

    limit: Callable[[Settings], int]
    advice: str

    def refusal(self, limit: int) -> str:
        return f"body: larger than the {limit} bytes this route takes; {self.advice}"


DEFAULT_BOUND = BodyBound(lambda _settings: DEFAULT_BODY_BYTES, "send less in one request")
UPLOAD_BOUND = BodyBound(lambda settings: settings.max_upload_bytes + FORM_FIELDS_BYTES,
                         "split the file, or raise STUDIO_MAX_UPLOAD_BYTES")


def bounded_body(bound: BodyBound):
    """Give a route its own bound (put it below the route's decorator); an app's
    `BodyBounds.add_routes` finds it on the endpoint."""

    def mark(endpoint):
        endpoint.body_bound = bound
        return endpoint

    return mark


class BodyBounds:
    """The routes whose bodies have a bound of their own: method, path pattern, bound."""

    def __init__(self) -> None:
        self._bounds: list[tuple[frozenset[str], object, BodyBound]] = []

    def add(self, methods: Iterable[str], path: str, bound: BodyBound) -> None:
        pattern, _format, _convertors = compile_path(path)
        self._bounds.append((frozenset(methods), pattern, bound))

    def add_routes(self, routes: Iterable[BaseRoute], prefix: str = "") -> None:
        """The routes among `routes` marked with `bounded_body`, under `prefix`."""
        for route in routes:
            bound = getattr(getattr(route, "endpoint", None), "body_bound", None)
            if bound is not None:
                self.add(route.methods, prefix + route.path, bound)

    def of(self, method: str, path: str) -> BodyBound:
        for methods, pattern, bound in self._bounds:
            if method in methods and pattern.match(path):
                return bound
        return DEFAULT_BOUND


def sends_body(scope: Scope) -> bool:
    """Whether the request has a body to read (HTTP/1.1 says so in one of these headers)."""
    headers = Headers(scope=scope)
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def _route_path(scope: Scope) -> str:
    root, path = scope.get("root_path", ""), scope["path"]
    return path[len(root):] if root and path.startswith(root) else path


def _declared_length(scope: Scope) -> int | None:
    try:
        return int(Headers(scope=scope)["content-length"])
    except (KeyError, ValueError):
        return None


class RequestGate:
    """ASGI middleware: the API's token before any body; every body within its bound."""

    def __init__(self, app: ASGIApp, settings: Settings, bounds: BodyBounds,
                 public_paths: frozenset[str]) -> None:
        self.app, self.settings, self.bounds = app, settings, bounds
        self.public_paths = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)
        if (path == API_PREFIX or path.startswith(API_PREFIX + "/")) and \
                path not in self.public_paths:
            refusal = await self._sign_in(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        bound = self.bounds.of(scope["method"], path)
        limit = bound.limit(self.settings)
        too_large = JSONResponse({"detail": bound.refusal(limit)}, status_code=413)
        if (_declared_length(scope) or 0) > limit:
            await too_large(scope, receive, send)
            return
        received, started = 0, False

        async def metered() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:  # the app answers it (FastAPI's handler), or the gate
                    raise HTTPException(413, bound.refusal(limit))
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, metered, watched)
        except Exception:
            if received <= limit or started:
                raise
            await too_large(scope, receive, send)

    async def _sign_in(self, scope: Scope) -> JSONResponse | None:
        """None once the scope holds the token's user; else the 401 to answer."""
        credentials = await bearer_credentials(Request(scope))
        try:
            scope[ACTOR_SCOPE_KEY] = await run_in_threadpool(token_actor, self.settings,
                                                             credentials)
        except HTTPException as exc:
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code,
                                headers=exc.headers)
        return None
