"""Loading named records by id or name, with the 404/409 errors users see."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TypeVar

from sqlmodel import Session, SQLModel, select

from studio.escaping import name_problem
from studio.services.access import Actor, require_owner
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.storage.tables import User

Row = TypeVar("Row", bound=SQLModel)

MAX_SQL_INT = 2**63 - 1
"""The largest integer a column of the studio holds (BIGINT): a larger id, step or offset
is refused as input before it reaches the database (which would fail with a 500)."""


def parse_sql_int(text: str, field: str, hint: str) -> int:
    """A whole number from 0 to MAX_SQL_INT written in ASCII digits, else a 422 naming
    `field` with `hint` (what to send instead)."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_SQL_INT:
        raise InvalidInput(f"{field}: {text[:40]!r} is not {hint}")
    return int(text)


SIZE_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
              "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
"""A size's units, in any case: decimal as `human_bytes` shows sizes, binary by their
KiB-style names."""
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) *([a-z]*)", re.ASCII | re.IGNORECASE)


def parse_size(text: str, field: str, hint: str = "") -> int:
    """A size as a person types it ('500 MB', '2gb', '1.5 GiB', or bytes: '5000000') in
    bytes, else a 422 naming `field` that shows how to write one (then `hint`)."""
    typed = text.strip()
    found = _SIZE.fullmatch(typed)
    unit = SIZE_UNITS.get(found.group(2).lower()) if found else None
    size = int(Decimal(found.group(1)) * unit) if unit else None
    if size is None or size > MAX_SQL_INT:
        raise InvalidInput(f"{field}: {typed[:40]!r} is not a size; write it as 500 MB or "
                           "2 GB (kB, MB, GB, TB; KiB, MiB, GiB, TiB) or a number of bytes"
                           + (f"; {hint}" if hint else ""))
    return size


def get_or_404(session: Session, table: type[Row], row_id: int, kind: str, *,
               retired: bool = False) -> Row:
    """The row as its users see it: a retired row (deleted, kept for the runs that pin it,
    studio.services.run_plans) does not exist for them; `retired` for the engines, which
    still train and evaluate on it."""
    row = session.get(table, row_id)
    if row is None or (not retired and getattr(row, "retired_at", None) is not None):
        raise NotFound(f"{kind} {row_id} does not exist")
    return row


def get_owned(session: Session, table: type[Row], row_id: int, kind: str, actor: Actor,
              action: str) -> Row:
    """The row (404 as `get_or_404`), once `actor` may `action` it: its owner or an admin
    (403 otherwise)."""
    row = get_or_404(session, table, row_id, kind)
    require_owner(actor, row.owner_id, action, f"{kind} {row_id}")
    return row


def inserted_id(session: Session, row: SQLModel) -> int:
    """Add a new row and return the id the database gave it, read inside the session: the
    caller queues the row's job once the session has committed it."""
    session.add(row)
    session.flush()
    return row.id


def usernames(session: Session) -> dict[int, str]:
    """Every user's name by id: the owners shown beside listed rows (a team is small)."""
    return dict(session.exec(select(User.id, User.username)).all())


def _named(table: type[Row], name: str):
    query = select(table).where(table.name == name)
    return query.where(table.retired_at.is_(None)) if hasattr(table, "retired_at") else query


def by_name_or_404(session: Session, table: type[Row], name: str, kind: str) -> Row:
    row = session.exec(_named(table, name)).first()
    if row is None:
        raise NotFound(f"{kind} '{name}' does not exist")
    return row


def check_printable(value: str, field: str, what: str) -> None:
    """Refuse a name (`what`) that does not show as what it is (`studio.escaping.name_problem`)."""
    problem = name_problem(value, what)
    if problem:
        raise InvalidInput(f"{field}: {problem}")


def check_new_name(session: Session, table: type[SQLModel], name: str) -> str:
    """A stripped, non-empty, printable name not used by another row of `table`."""
    name = (name or "").strip()
    if not name or len(name) > 128:
        raise InvalidInput("name: give a name of 1 to 128 characters")
    check_printable(name, "name", "name")
    if session.exec(_named(table, name)).first() is not None:
        raise Conflict(f"name: '{name}' is already used; choose another name or delete the old one")
    return name
