"""Users (admins only) and each user's own API tokens."""

from __future__ import annotations

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, Field

from studio.api.deps import CurrentUser, Id, get_settings
from studio.services import auth
from studio.settings import Settings
from studio.tables import Role

router = APIRouter(tags=["users"])


class NewUserRequest(BaseModel):
    username: str = Field(description="Letters, digits, '.', '_', '@' or '-'; 1 to 64")
    role: Role = Role.member
    password: str | None = Field(default=None, description=f"At least {auth.MIN_PASSWORD} "
                                 "characters; default: one is made up and answered once")


class RoleChange(BaseModel):
    role: Role


class PasswordReset(BaseModel):
    password: str | None = Field(default=None, description="Default: one is made up and "
                                 "answered once")


@router.get("/users")
def list_users(actor: CurrentUser, settings: Settings = Depends(get_settings)) -> list[dict]:
    return auth.list_users(settings, actor)


@router.post("/users", status_code=201)
def add_user(body: NewUserRequest, actor: CurrentUser,
             settings: Settings = Depends(get_settings)) -> dict:
    """The new user with its password: the only time the password is shown."""
    return vars(auth.add_user(settings, actor, body.username, body.role, body.password))


@router.post("/users/{username}/disable")
def disable(username: str, actor: CurrentUser,
            settings: Settings = Depends(get_settings)) -> dict:
    """Its tokens and browser sessions stop at once; its data and runs stay."""
    return auth.set_disabled(settings, actor, username, True)


@router.post("/users/{username}/enable")
def enable(username: str, actor: CurrentUser, settings: Settings = Depends(get_settings)) -> dict:
    return auth.set_disabled(settings, actor, username, False)


@router.put("/users/{username}/role")
def set_role(username: str, body: RoleChange, actor: CurrentUser,
             settings: Settings = Depends(get_settings)) -> dict:
    return auth.set_role(settings, actor, username, body.role)


@router.post("/users/{username}/reset-password")
def reset_password(username: str, actor: CurrentUser,
                   body: PasswordReset = Body(default_factory=PasswordReset),
                   settings: Settings = Depends(get_settings)) -> dict:
    """A new password (shown once); the user's browser sessions end."""
    return vars(auth.reset_password(settings, actor, username, body.password))


class TokenRequest(BaseModel):
    name: str = Field(description="What the token is for, e.g. ci")


@router.get("/tokens")
def list_tokens(actor: CurrentUser, settings: Settings = Depends(get_settings)) -> list[dict]:
    """Your API tokens (their first characters, never the tokens)."""
    return auth.list_tokens(settings, actor)


@router.post("/tokens", status_code=201)
def create_token(body: TokenRequest, actor: CurrentUser,
                 settings: Settings = Depends(get_settings)) -> dict:
    """A new token acting as you, with your role: shown this once."""
    return auth.issue_token(settings, actor, body.name)


@router.delete("/tokens/{token_id}")
def revoke_token(token_id: Id, actor: CurrentUser,
                 settings: Settings = Depends(get_settings)) -> dict:
    """Revoke one of your tokens (an admin: anyone's)."""
    return auth.revoke_token(settings, actor, token_id)
