"""Users, roles, passwords, API tokens, browser sessions and the login rate limit.

Passwords are hashed with scrypt (salted, slow); API tokens and session cookies are long
random strings, so a SHA-256 of one is enough to store and look it up. Neither a
password nor a token is ever stored or logged in clear. A token acts with its user's role
as it is at each request: a disabled user's tokens and sessions stop at once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func
from sqlmodel import Session, select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.services.access import Actor, require_admin
from studio.services.errors import Conflict, InvalidInput, NotFound, UserError
from studio.services.records import MAX_SQL_INT
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import ApiToken, LoginFailure, Role, TokenKind, User, utcnow

TOKEN_PREFIX = "icrl_"
SESSION_PREFIX = "icrls_"
SESSION_LIFETIME = timedelta(days=7)
MIN_PASSWORD = 8
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}
_USERNAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_LAST_USE_EVERY = timedelta(minutes=1)  # a token's last use is written at most this often


class AuthError(InvalidInput):
    """A request the user can fix (unknown user, name taken, short password, ...)."""


class BadLogin(UserError):
    status_code = 401


class TooManyLogins(UserError):
    """Too many failed logins: try again after `retry_after` seconds."""

    status_code = 429

    def __init__(self, retry_after: int):
        self.retry_after = retry_after
        minutes = max(1, round(retry_after / 60))
        super().__init__(f"too many failed logins; try again in {minutes} minute"
                         f"{'s' if minutes > 1 else ''}")


# --- passwords and tokens -----------------------------------------------------------------


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


_NOBODY = hash_password(secrets.token_urlsafe(16))


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_password() -> str:
    return secrets.token_urlsafe(12)


def _check_password(password: str) -> str:
    if len(password) < MIN_PASSWORD:
        raise AuthError(f"password: use at least {MIN_PASSWORD} characters")
    return password


def actor_of(user: User) -> Actor:
    return Actor(id=user.id, username=user.username, role=Role(user.role))


# --- users --------------------------------------------------------------------------------


def _check_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise AuthError(f"role: '{role}' is not one of {', '.join(r.value for r in Role)}"
                        ) from None


def create_user(session: Session, username: str, password: str, *,
                role: Role | str = Role.member) -> User:
    username = (username or "").strip()
    if not _USERNAME.fullmatch(username):
        raise AuthError("username: use 1 to 64 letters, digits, '.', '_', '@' or '-'")
    if session.exec(select(User).where(User.username == username)).first():
        raise Conflict(f"username: '{username}' already exists; choose another name")
    user = User(username=username, password_hash=hash_password(_check_password(password)),
                role=_check_role(role))
    session.add(user)
    session.flush()
    return user


def find_user(session: Session, username: str) -> User:
    user = session.exec(select(User).where(User.username == username)).first()
    if user is None:
        raise NotFound(f"user '{username}' does not exist; an admin adds users with "
                       "`studio user add NAME --role member`")
    return user


def authenticate(session: Session, username: str, password: str) -> User | None:
    """The user whose password this is, unless it is disabled."""
    user = session.exec(select(User).where(User.username == username)).first()
    # the hash is checked for an unknown user too, so the time taken tells nothing
    right = verify_password(password, user.password_hash if user else _NOBODY)
    return user if right and user is not None and user.disabled_at is None else None


@dataclass(frozen=True)
class NewUser:
    """A user just added or whose password was reset: the password is shown this once."""

    username: str
    role: str
    password: str


class NewUserView(TypedDict):
    """`NewUser` as the API answers it: the password is shown this once."""

    username: str
    role: str  # admin | member | viewer
    password: str


class UserView(TypedDict):
    """A user as an admin sees it (times in ISO 8601, UTC)."""

    id: int
    username: str
    role: str  # admin | member | viewer
    disabled: bool
    created_at: str
    disabled_at: str | None
    export_quota_bytes: int | None  # None: the studio's STUDIO_EXPORT_QUOTA_BYTES


def user_view(user: User) -> UserView:
    return {"id": user.id, "username": user.username, "role": Role(user.role).value,
            "disabled": user.disabled_at is not None,
            "created_at": user.created_at.isoformat(),
            "disabled_at": user.disabled_at.isoformat() if user.disabled_at else None,
            "export_quota_bytes": user.export_quota_bytes}


def add_user(settings: Settings, actor: Actor, username: str, role: str,
             password: str | None = None) -> NewUser:
    """An admin adds a user; without a password one is made up (shown once)."""
    require_admin(actor, "add users")
    password = password or new_password()
    with session_scope(settings.sqlalchemy_url) as session:
        user = create_user(session, username, password, role=role)
        return NewUser(user.username, Role(user.role).value, password)


def list_users(settings: Settings, actor: Actor) -> list[UserView]:
    require_admin(actor, "list users")
    with session_scope(settings.sqlalchemy_url) as session:
        return [user_view(u) for u in session.exec(select(User).order_by(User.id))]


def _active_admins(session: Session) -> int:
    return session.exec(select(func.count()).select_from(User).where(
        User.role == Role.admin, User.disabled_at.is_(None))).one()


def _keep_an_admin(session: Session, user: User, action: str) -> None:
    if Role(user.role) == Role.admin and user.disabled_at is None and \
            _active_admins(session) <= 1:
        raise Conflict(f"user '{user.username}' is the last active admin and cannot be "
                       f"{action}; make another user an admin first")


def set_disabled(settings: Settings, actor: Actor, username: str, disabled: bool
                 ) -> UserView:
    """Disable a user (its tokens and sessions stop at once) or enable it again."""
    require_admin(actor, "disable or enable users")
    with session_scope(settings.sqlalchemy_url) as session:
        user = find_user(session, username)
        if disabled and user.disabled_at is None:
            _keep_an_admin(session, user, "disabled")
            user.disabled_at = utcnow()
            _revoke_sessions(session, user.id)
        elif not disabled:
            user.disabled_at = None
        session.add(user)
        return user_view(user)


def set_role(settings: Settings, actor: Actor, username: str, role: str) -> UserView:
    require_admin(actor, "change roles")
    new_role = _check_role(role)
    with session_scope(settings.sqlalchemy_url) as session:
        user = find_user(session, username)
        if new_role != Role.admin:
            _keep_an_admin(session, user, f"made a {new_role.value}")
        user.role = new_role
        session.add(user)
        return user_view(user)


def set_export_quota(settings: Settings, actor: Actor, username: str,
                     quota_bytes: int | None) -> UserView:
    """An admin sets how many bytes a user's exports may hold on disk; None: the studio's
    STUDIO_EXPORT_QUOTA_BYTES again. Exports already stored stay, even past a lower quota."""
    require_admin(actor, "set export quotas")
    if quota_bytes is not None and not 0 <= quota_bytes <= MAX_SQL_INT:
        raise InvalidInput(f"export_quota_bytes: give a number of bytes from 0 to {MAX_SQL_INT}"
                           ", or none for the studio's default (STUDIO_EXPORT_QUOTA_BYTES)")
    with session_scope(settings.sqlalchemy_url) as session:
        user = find_user(session, username)
        user.export_quota_bytes = quota_bytes
        session.add(user)
        return user_view(user)


def reset_password(settings: Settings, actor: Actor, username: str,
                   password: str | None = None) -> NewUser:
    """An admin sets a new password (made up when none is given); the user's browser
    sessions end."""
    require_admin(actor, "reset passwords")
    password = _check_password(password or new_password())
    with session_scope(settings.sqlalchemy_url) as session:
        user = find_user(session, username)
        user.password_hash = hash_password(password)
        session.add(user)
        _revoke_sessions(session, user.id)
        return NewUser(user.username, Role(user.role).value, password)


@dataclass(frozen=True)
class AdminCredentials:
    username: str
    password: str
    token: str


def bootstrap_admin(session: Session, username: str = "admin") -> AdminCredentials | None:
    """On a database with no user, create the admin; return its one-time credentials."""
    if session.exec(select(User)).first() is not None:
        return None
    password = new_password()
    admin = create_user(session, username, password, role=Role.admin)
    return AdminCredentials(username, password, create_token(session, admin, "bootstrap"))


def first_admin(settings: Settings) -> Actor:
    """The oldest active admin: who the CLI acts as when no --user is given."""
    with session_scope(settings.sqlalchemy_url) as session:
        user = session.exec(select(User).where(User.role == Role.admin,
                                               User.disabled_at.is_(None))
                            .order_by(User.id)).first()
        if user is None:
            raise NotFound("no active admin: run `studio db upgrade` on a new database, or "
                           "`studio user add NAME --role admin`")
        return actor_of(user)


def actor_named(settings: Settings, username: str) -> Actor:
    """The active user `username` as an actor (the CLI's --user, the UI's signed-in name)."""
    with session_scope(settings.sqlalchemy_url) as session:
        user = find_user(session, username)
        if user.disabled_at is not None:
            raise NotFound(f"user '{username}' is disabled; an admin can enable it again")
        return actor_of(user)


# --- API tokens and browser sessions -------------------------------------------------------


def create_token(session: Session, user: User, name: str, *, kind: TokenKind = TokenKind.api,
                 expires_at: datetime | None = None) -> str:
    """Store a new token for `user` and return it in clear: the only time it is shown."""
    token = (SESSION_PREFIX if kind == TokenKind.session else TOKEN_PREFIX) + \
        secrets.token_urlsafe(32)
    session.add(ApiToken(user_id=user.id, kind=kind, name=name, prefix=token[:12],
                         token_hash=_token_hash(token), expires_at=expires_at))
    session.flush()
    return token


def user_for_token(session: Session, token: str, kind: TokenKind = TokenKind.api
                   ) -> User | None:
    """The token's active user; None for an unknown, revoked or expired token, or a
    disabled user."""
    row = session.exec(select(ApiToken).where(ApiToken.token_hash == _token_hash(token),
                                              ApiToken.kind == kind)).first()
    now = utcnow()
    if row is None or row.revoked_at is not None or (
            row.expires_at is not None and row.expires_at <= now):
        return None
    user = session.get(User, row.user_id)
    if user is None or user.disabled_at is not None:
        return None
    if row.last_used_at is None or now - row.last_used_at >= _LAST_USE_EVERY:
        row.last_used_at = now
        session.add(row)
    return user


def actor_for_token(settings: Settings, token: str, kind: TokenKind = TokenKind.api
                    ) -> Actor | None:
    with session_scope(settings.sqlalchemy_url) as session:
        user = user_for_token(session, token, kind)
        return actor_of(user) if user else None


class TokenView(TypedDict):
    """An API token without the token: its first characters tell tokens apart."""

    id: int
    name: str
    prefix: str
    created_at: str
    last_used_at: str | None
    revoked: bool


class IssuedToken(TokenView):
    """A token just made: the only time the token itself is shown."""

    token: str


def token_view(row: ApiToken) -> TokenView:
    return {"id": row.id, "name": row.name, "prefix": row.prefix,
            "created_at": row.created_at.isoformat(),
            "last_used_at": row.last_used_at.isoformat() if row.last_used_at else None,
            "revoked": row.revoked_at is not None}


def issue_token(settings: Settings, actor: Actor, name: str) -> IssuedToken:
    """A new API token of the acting user (with its role): shown once."""
    name = (name or "").strip()
    if not name or len(name) > 128 or not name.isprintable():
        raise AuthError("name: give the token a name of 1 to 128 printable characters")
    with session_scope(settings.sqlalchemy_url) as session:
        token = create_token(session, session.get(User, actor.id), name)
        row = session.exec(select(ApiToken).where(
            ApiToken.token_hash == _token_hash(token))).one()
        return {**token_view(row), "token": token}


def list_tokens(settings: Settings, actor: Actor) -> list[TokenView]:
    """The acting user's API tokens (never the tokens themselves)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return [token_view(t) for t in session.exec(select(ApiToken).where(
            ApiToken.user_id == actor.id, ApiToken.kind == TokenKind.api).order_by(ApiToken.id))]


def revoke_token(settings: Settings, actor: Actor, token_id: int) -> TokenView:
    """Revoke one of the acting user's tokens (an admin: anyone's)."""
    with session_scope(settings.sqlalchemy_url) as session:
        row = session.get(ApiToken, token_id)
        if row is None or row.kind != TokenKind.api or (
                row.user_id != actor.id and not actor.is_admin):
            raise NotFound(f"token {token_id} does not exist among your tokens")
        row.revoked_at = row.revoked_at or utcnow()
        session.add(row)
        return token_view(row)


def create_process_token(session: Session, name: str, user_id: int | None) -> str:
    """A token a studio process uses on a user's behalf (a veRL run's calls to /retrieve).

    It belongs to `user_id` (the run's owner) or, when none is known, to the first admin;
    `revoke_tokens` ends it when the process is done.
    """
    user = session.get(User, user_id) if user_id is not None else None
    if user is None:
        user = session.exec(select(User).where(User.role == Role.admin).order_by(User.id)
                            ).first()
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


def _revoke_sessions(session: Session, user_id: int) -> None:
    for row in session.exec(select(ApiToken).where(
            ApiToken.user_id == user_id, ApiToken.kind == TokenKind.session,
            ApiToken.revoked_at.is_(None))):
        row.revoked_at = utcnow()
        session.add(row)


# --- logins: sessions and their rate limit ---------------------------------------------------

LOGIN_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_USER_AND_ADDRESS = 5
"""Failed logins for one username from one address within the window."""
MAX_FAILURES_PER_ADDRESS = 20
"""Failed logins from one address, whatever the usernames (password spraying)."""
MAX_FAILURES_PER_USER = 50
"""Failed logins for one username from anywhere (a brute force from many addresses). Past
it the username is slowed, never locked: each try waits `LOCKED_USER_DELAY_S`, and an
address is refused only by its own failures (`MAX_FAILURES_PER_USER_AND_ADDRESS`,
`MAX_FAILURES_PER_ADDRESS`), so strangers cannot lock the user out, not even after one
mistyped password from its own address, while a brute force gets a few slow tries per
address."""
LOCKED_USER_DELAY_S = 3.0


def _recent_failures(session: Session, limit: int, *conditions) -> list[datetime]:
    """When the last `limit` failed logins matching `conditions` within the window were."""
    since = utcnow() - LOGIN_WINDOW
    return session.exec(select(LoginFailure.at).where(
        LoginFailure.at > since, *conditions).order_by(LoginFailure.at.desc()).limit(limit)
    ).all()


def _wait_for(times: list[datetime], limit: int) -> int:
    """Seconds until the oldest of the last `limit` failures leaves the window (0: under)."""
    if len(times) < limit:
        return 0
    return int((times[-1] + LOGIN_WINDOW - utcnow()).total_seconds()) + 1


def login_wait(session: Session, username: str, address: str) -> int:
    """Seconds until `username` may try again from `address` (0: now): only this
    address's own failures count (the username's over all addresses delay, `login_delay`)."""
    by_pair = _recent_failures(session, MAX_FAILURES_PER_USER_AND_ADDRESS,
                               LoginFailure.username == username, LoginFailure.address == address)
    by_address = _recent_failures(session, MAX_FAILURES_PER_ADDRESS,
                                  LoginFailure.address == address)
    return max(_wait_for(by_pair, MAX_FAILURES_PER_USER_AND_ADDRESS),
               _wait_for(by_address, MAX_FAILURES_PER_ADDRESS))


def login_delay(settings: Settings, username: str) -> float:
    """Seconds a try for `username` waits before its password is checked: 0, or
    `LOCKED_USER_DELAY_S` while the username is over its limit of failures."""
    with session_scope(settings.sqlalchemy_url) as session:
        times = _recent_failures(session, MAX_FAILURES_PER_USER,
                                 LoginFailure.username == (username or "").strip()[:64])
        return LOCKED_USER_DELAY_S if _wait_for(times, MAX_FAILURES_PER_USER) else 0.0


def log_in(settings: Settings, username: str, password: str, address: str) -> str:
    """A new browser session for a right password, as a cookie value; 401 for a wrong one
    (the same message for an unknown user), 429 while the address is over one of its limits
    of failed logins (for this user, or for any)."""
    username, address = (username or "").strip()[:64], (address or "unknown")[:64]
    with session_scope(settings.sqlalchemy_url) as session:
        session.exec(delete(LoginFailure).where(LoginFailure.at <= utcnow() - LOGIN_WINDOW))
        wait = login_wait(session, username, address)
        if wait:
            raise TooManyLogins(wait)
        user = authenticate(session, username, password or "")
        if user is None:
            session.add(LoginFailure(username=username, address=address))
    if user is None:
        raise BadLogin("wrong username or password")
    with session_scope(settings.sqlalchemy_url) as session:
        session.exec(delete(LoginFailure).where(LoginFailure.username == username,
                                                LoginFailure.address == address))
        return create_token(session, user, "browser session", kind=TokenKind.session,
                            expires_at=utcnow() + SESSION_LIFETIME)


def log_out(settings: Settings, token: str) -> None:
    with session_scope(settings.sqlalchemy_url) as session:
        for row in session.exec(select(ApiToken).where(
                ApiToken.token_hash == _token_hash(token),
                ApiToken.kind == TokenKind.session)):
            row.revoked_at = row.revoked_at or utcnow()
            session.add(row)
