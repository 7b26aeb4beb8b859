"""Request dependencies: settings, a database session, the authenticated user."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlmodel import Session

from studio.db import session_scope
from studio.services.auth import user_for_token
from studio.settings import Settings
from studio.tables import User

_bearer = HTTPBearer(auto_error=False)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(settings: Settings = Depends(get_settings)) -> Iterator[Session]:
    with session_scope(settings.sqlalchemy_url) as session:
        yield session


def current_user(
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
    session: Session = Depends(get_session),
) -> User:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing API token: send 'Authorization: Bearer <token>' "
            "(create one with `studio token create --name NAME`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    user = user_for_token(session, credentials.credentials)
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return user
