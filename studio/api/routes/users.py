"""Users (admins only) and each user's own API tokens."""

from __future__ import annotations

from fastapi import APIRouter, Body
from pydantic import BaseModel, Field

from studio.api.deps import MAX_SQL_INT, CurrentUser, Id, JsonBodyRoute, SettingsDep
from studio.services import auth
from studio.services.auth import IssuedToken, NewUserView, TokenView, UserView
from studio.storage.tables import Role

router = APIRouter(tags=["users"], route_class=JsonBodyRoute)


class NewUserRequest(BaseModel):
    username: str = Field(description="Letters, digits, '.', '_', '@' or '-'; 1 to 64")
    role: Role = Role.member
    password: str | None = Field(default=None, description=f"At least {auth.MIN_PASSWORD} "
                                 "characters; default: one is made up and answered once")


class RoleChange(BaseModel):
    role: Role


class ExportQuota(BaseModel):
    export_quota_bytes: int | None = Field(
        ge=0, le=MAX_SQL_INT, description="Bytes the user's exports may hold on disk; null: "
                                          "the studio's STUDIO_EXPORT_QUOTA_BYTES")


class PasswordReset(BaseModel):
    password: str | None = Field(default=None, description="Default: one is made up and "
                                 "answered once")


@router.get("/users")
def list_users(actor: CurrentUser, settings: SettingsDep) -> list[UserView]:
    return auth.list_users(settings, actor)


@router.post("/users", status_code=201)
def add_user(body: NewUserRequest, actor: CurrentUser, settings: SettingsDep) -> NewUserView:
    """The new user with its password: the only time the password is shown."""
    return vars(auth.add_user(settings, actor, body.username, body.role, body.password))


@router.post("/users/{username}/disable")
def disable(username: str, actor: CurrentUser, settings: SettingsDep) -> UserView:
    """Its tokens and browser sessions stop at once; its data and runs stay."""
    return auth.set_disabled(settings, actor, username, True)


@router.post("/users/{username}/enable")
def enable(username: str, actor: CurrentUser, settings: SettingsDep) -> UserView:
    return auth.set_disabled(settings, actor, username, False)


@router.put("/users/{username}/role")
def set_role(username: str, body: RoleChange, actor: CurrentUser,
             settings: SettingsDep) -> UserView:
    return auth.set_role(settings, actor, username, body.role)


@router.put("/users/{username}/export-quota")
def set_export_quota(username: str, body: ExportQuota, actor: CurrentUser,
                     settings: SettingsDep) -> UserView:
    """How many bytes the user's exports (folders and zips) may hold; a new export past it
    is refused."""
    return auth.set_export_quota(settings, actor, username, body.export_quota_bytes)


@router.post("/users/{username}/reset-password")
def reset_password(username: str, actor: CurrentUser, settings: SettingsDep,
                   body: PasswordReset = Body(default_factory=PasswordReset)) -> NewUserView:
    """A new password (shown once); the user's browser sessions end."""
    return vars(auth.reset_password(settings, actor, username, body.password))


class TokenRequest(BaseModel):
    name: str = Field(description="What the token is for, e.g. ci")


@router.get("/tokens")
def list_tokens(actor: CurrentUser, settings: SettingsDep) -> list[TokenView]:
    """Your API tokens (their first characters, never the tokens)."""
    return auth.list_tokens(settings, actor)


@router.post("/tokens", status_code=201)
def create_token(body: TokenRequest, actor: CurrentUser, settings: SettingsDep) -> IssuedToken:
    """A new token acting as you, with your role: shown this once."""
    return auth.issue_token(settings, actor, body.name)


@router.delete("/tokens/{token_id}")
def revoke_token(token_id: Id, actor: CurrentUser, settings: SettingsDep) -> TokenView:
    """Revoke one of your tokens (an admin: anyone's)."""
    return auth.revoke_token(settings, actor, token_id)
