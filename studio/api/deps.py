"""Request dependencies: the settings and the authenticated user."""

from __future__ import annotations

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from studio.db import session_scope
from studio.services.auth import user_for_token
from studio.settings import Settings
from studio.tables import User

_bearer = HTTPBearer(auto_error=False)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def current_user(
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    settings: Settings = Depends(get_settings),
) -> User:
    """The token's owner. Its own short transaction: a request-long one would hold
    SQLite's write lock (the token's last use is recorded) while the route writes."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing API token: send 'Authorization: Bearer <token>' "
            "(create one with `studio token create --name NAME`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    with session_scope(settings.sqlalchemy_url) as session:
        user = user_for_token(session, credentials.credentials)
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return user
