"""Users, passwords and API tokens.

Passwords are hashed with scrypt (salted, slow); API tokens are long random
strings, so a SHA-256 of the token is enough to store and look them up.
Neither a password nor a token is ever stored or logged in clear.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlmodel import Session, select

from studio.db import session_scope
from studio.settings import Settings
from studio.tables import ApiToken, User, utcnow

TOKEN_PREFIX = "icrl_"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


class AuthError(ValueError):
    """A request the user can fix (unknown user, name taken, ...)."""


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **_SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, salt_hex, digest_hex = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    digest = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt_hex), dklen=32, **_SCRYPT)
    return hmac.compare_digest(digest.hex(), digest_hex)


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(session: Session, username: str, password: str, *, is_admin: bool = False) -> User:
    username = username.strip()
    if not username:
        raise AuthError("username: must not be empty")
    if session.exec(select(User).where(User.username == username)).first():
        raise AuthError(f"username: '{username}' already exists; choose another name")
    user = User(username=username, password_hash=hash_password(password), is_admin=is_admin)
    session.add(user)
    session.flush()
    return user


def authenticate(session: Session, username: str, password: str) -> User | None:
    user = session.exec(select(User).where(User.username == username)).first()
    if user is None or not verify_password(password, user.password_hash):
        return None
    return user


def create_token(session: Session, user: User, name: str) -> str:
    """Store a new token for `user` and return it in clear: the only time it is shown."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        ApiToken(user_id=user.id, name=name, prefix=token[:12], token_hash=_token_hash(token))
    )
    session.flush()
    return token


def user_for_token(session: Session, token: str) -> User | None:
    row = session.exec(
        select(ApiToken).where(ApiToken.token_hash == _token_hash(token))
    ).first()
    if row is None or row.revoked_at is not None:
        return None
    row.last_used_at = utcnow()
    session.add(row)
    return session.get(User, row.user_id)


def find_user(session: Session, username: str) -> User:
    user = session.exec(select(User).where(User.username == username)).first()
    if user is None:
        raise AuthError(f"user '{username}' does not exist; users are created by `studio up`")
    return user


@dataclass(frozen=True)
class AdminCredentials:
    username: str
    password: str
    token: str


def bootstrap_admin(session: Session, username: str = "admin") -> AdminCredentials | None:
    """On a database with no user, create the admin; return its one-time credentials."""
    if session.exec(select(User)).first() is not None:
        return None
    password = secrets.token_urlsafe(12)
    admin = create_user(session, username, password, is_admin=True)
    return AdminCredentials(username, password, create_token(session, admin, "bootstrap"))


def user_id(settings: Settings, username: str | None) -> int | None:
    """The id of a signed-in user (the UI knows names), None for an unknown name."""
    if not username:
        return None
    with session_scope(settings.sqlalchemy_url) as session:
        user = session.exec(select(User).where(User.username == username)).first()
        return user.id if user else None


def create_process_token(session: Session, name: str, user_id: int | None) -> str:
    """A token a studio process uses on a user's behalf (a veRL run's calls to /retrieve).

    It belongs to `user_id` (the run's creator) or, when none is known, to the
    first admin; `revoke_tokens` ends it when the process is done.
    """
    user = session.get(User, user_id) if user_id is not None else None
    if user is None:
        user = session.exec(select(User).where(User.is_admin).order_by(User.id)).first()
    if user is None:
        raise AuthError("no user to issue a token for: run `studio db upgrade` first")
    return create_token(session, user, name)


def revoke_tokens(session: Session, name: str) -> int:
    """Revoke every live token called `name`; the number revoked."""
    rows = session.exec(select(ApiToken).where(ApiToken.name == name,
                                               ApiToken.revoked_at.is_(None))).all()
    for row in rows:
        row.revoked_at = utcnow()
        session.add(row)
    return len(rows)
