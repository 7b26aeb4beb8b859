"""Database engines, sessions and migrations, for SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent


def _on_sqlite_connect(dbapi_connection, _record) -> None:
    # WAL lets the web app read while a worker writes; busy_timeout makes
    # concurrent writers wait for the lock instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _on_sqlite_connect)
        return engine
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5})


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One engine per URL per process (engines hold the connection pool)."""
    return make_engine(url)


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with Session(engine_for(url), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def check_connection(url: str) -> None:
    """Raise if the database cannot be reached (used at start-up and by /healthz)."""
    with engine_for(url).connect() as conn:
        conn.execute(text("SELECT 1"))


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine_for(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
