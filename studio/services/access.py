"""Who may do what: the studio's roles and ownership, checked by every service that acts.

A viewer reads everything of the team. A member also creates (uploads, runs,
evaluations, exports) and changes, cancels, resumes, deletes and exports what it owns.
An admin does everything, users included. The API, the CLI and the UI pass the acting
user (`Actor`) to the services, which check here before they touch anything, so the
three faces refuse alike: a 403 whose message says what the role allows.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.services.errors import UserError
from studio.storage.tables import Role


class Forbidden(UserError):
    status_code = 403


@dataclass(frozen=True)
class Actor:
    """The user on whose behalf a service acts, with its role at the time of the request."""

    id: int
    username: str
    role: Role

    @property
    def is_admin(self) -> bool:
        return self.role == Role.admin


class ActorView(TypedDict):
    """Who a token acts as (`GET /me`)."""

    id: int
    username: str
    role: str  # admin | member | viewer
    is_admin: bool


def require_member(actor: Actor, action: str) -> None:
    """Creating anything needs the member or admin role; `action`: "upload a corpus"."""
    if actor.role == Role.viewer:
        raise Forbidden(f"{actor.username} is a viewer and may not {action}: viewers read "
                        "only; ask an admin for the member role")


def require_owner(actor: Actor, owner_id: int | None, action: str, what: str) -> None:
    """Changing a row needs its owner or an admin; `action` "delete", `what` "corpus 3"."""
    require_member(actor, f"{action} {what}")
    if not actor.is_admin and owner_id != actor.id:
        raise Forbidden(f"{actor.username} may not {action} {what}: it belongs to another "
                        "user; only its owner or an admin may")


def require_admin(actor: Actor, action: str) -> None:
    if not actor.is_admin:
        raise Forbidden(f"{actor.username} may not {action}: only admins may")
