"""The users tests act as: the studio's admin, and team members with other roles."""

from __future__ import annotations

from studio.services import auth
from studio.services.access import Actor
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import Role

PASSWORD = "pw-for-tests"


def admin(settings: Settings) -> Actor:
    """The studio's first admin, created (as `studio up` would) when there is none yet."""
    with db.session_scope(settings.sqlalchemy_url) as session:
        auth.bootstrap_admin(session)
    return auth.first_admin(settings)


def user(settings: Settings, name: str, role: Role | str = Role.member) -> Actor:
    """The user `name` with `role` (created once, password PASSWORD)."""
    with db.session_scope(settings.sqlalchemy_url) as session:
        if session.exec(auth.select(auth.User).where(auth.User.username == name)).first() is None:
            auth.create_user(session, name, PASSWORD, role=role)
    return auth.actor_named(settings, name)
