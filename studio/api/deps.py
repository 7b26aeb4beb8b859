"""Request dependencies: the settings, the acting user, bounded numbers, JSON bodies.

Every id, step, offset or count a client sends is bounded here, so a number that no
database column holds (2^63 and above) is a 422 naming the parameter, never a 500; an id is
written in digits and nothing else. Every route's JSON body is decoded by the studio's one
decoder (`JsonBodyRoute`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from studio.services.access import Actor
from studio.services.auth import actor_for_token
from studio.services.errors import InvalidInput
from studio.services.json_input import decode_json_input
from studio.services.records import MAX_SQL_INT
from studio.settings import Settings

bearer_credentials = HTTPBearer(auto_error=False)
"""The request's `Authorization: Bearer` credentials, or None."""
ACTOR_SCOPE_KEY = "studio.actor"
"""Where `studio.api.request_gate` leaves the API token's user for the request."""


def _digits_only(value: object) -> object:
    """An id as a path or query sends it: ASCII digits, nothing else (int() and pydantic
    would take ' 1', '+1', '1_0' and '1.0' for object 1)."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise PydanticCustomError("id_digits", "an id is written in digits only, e.g. 12")
    return value


DigitsOnly = BeforeValidator(_digits_only)
Id = Annotated[int, DigitsOnly, Path(ge=1, le=MAX_SQL_INT, description="An id (from 1)")]
Step = Annotated[int | None, Query(ge=0, le=MAX_SQL_INT)]
Offset = Annotated[int, Query(ge=0, le=MAX_SQL_INT, description="Rows to skip")]
OptionalId = Annotated[int | None, DigitsOnly, Query(ge=1, le=MAX_SQL_INT)]


async def get_settings(request: Request) -> Settings:
    """Async, so FastAPI does not hand it to a worker thread: under a burst of requests
    every thread hop waits its turn."""
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]
"""The app's settings, as a route or a dependency takes them: `settings: SettingsDep`."""
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_credentials)]


def token_actor(settings: Settings, credentials: HTTPAuthorizationCredentials | None
                ) -> Actor:
    """The token's user with its role now, or a 401. Its own short transaction: a
    request-long one would hold SQLite's write lock (the token's last use is recorded) while
    the route writes."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing API token: send 'Authorization: Bearer <token>' "
            "(create one with `studio token create --name NAME`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    actor = actor_for_token(settings, credentials.credentials)
    if actor is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid, revoked or expired API token, or a "
            "disabled user", headers={"WWW-Authenticate": "Bearer"},
        )
    return actor


def current_user(request: Request, credentials: Credentials, settings: SettingsDep) -> Actor:
    """The API token's user: as the request gate found it before the body was read, or
    looked up here (a route outside the gate's part of the app)."""
    return request.scope.get(ACTOR_SCOPE_KEY) or token_actor(settings, credentials)


def optional_user(credentials: Credentials, settings: SettingsDep) -> Actor | None:
    """`token_actor`, or None where it would answer 401: for a public route that shows
    more to a signed-in caller."""
    try:
        return token_actor(settings, credentials)
    except HTTPException:
        return None


CurrentUser = Annotated[Actor, Depends(current_user)]
OptionalUser = Annotated[Actor | None, Depends(optional_user)]


class _DecodedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = decode_json_input(await self.body(), "body")
            except InvalidInput as exc:
                raise HTTPException(exc.status_code, str(exc)) from None
        return self._json


class JsonBodyRoute(APIRoute):
    """An API route whose JSON body goes through the decoder the uploads use
    (`studio.services.json_input`): a 5,000-digit integer or a NUL is a 422 naming the body,
    not FastAPI's 400 or a 500. Every router of the API is made with it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def decoded(request: Request) -> Response:
            return await handle(_DecodedRequest(request.scope, request.receive))

        return decoded
