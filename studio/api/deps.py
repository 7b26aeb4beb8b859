"""Request dependencies: the settings, the acting user, and bounded numbers.

Every id, step, offset or count a client sends is bounded here, so a number that no
database column holds (2^63 and above) is a 422 naming the parameter, never a 500.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from studio.services.access import Actor
from studio.services.auth import actor_for_token
from studio.services.records import MAX_SQL_INT
from studio.settings import Settings

_bearer = HTTPBearer(auto_error=False)

Id = Annotated[int, Path(ge=1, le=MAX_SQL_INT, description="An id (from 1)")]
Step = Annotated[int | None, Query(ge=0, le=MAX_SQL_INT)]
Offset = Annotated[int, Query(ge=0, le=MAX_SQL_INT, description="Rows to skip")]
OptionalId = Annotated[int | None, Query(ge=1, le=MAX_SQL_INT)]


async def get_settings(request: Request) -> Settings:
    """Async, so FastAPI does not hand it to a worker thread: under a burst of requests
    every thread hop waits its turn."""
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]
"""The app's settings, as a route or a dependency takes them: `settings: SettingsDep`."""
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def current_user(credentials: Credentials, settings: SettingsDep) -> Actor:
    """The token's user with its role now. Its own short transaction: a request-long one
    would hold SQLite's write lock (the token's last use is recorded) while the route
    writes."""
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


def optional_user(credentials: Credentials, settings: SettingsDep) -> Actor | None:
    """`current_user`, or None where it would answer 401: for a public route that shows
    more to a signed-in caller."""
    try:
        return current_user(credentials, settings)
    except HTTPException:
        return None


CurrentUser = Annotated[Actor, Depends(current_user)]
OptionalUser = Annotated[Actor | None, Depends(optional_user)]
