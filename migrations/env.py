"""Alembic environment: the URL comes from the caller (studio.storage.db) or the settings."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import studio.storage.tables  # noqa: F401  (registers every table on SQLModel.metadata)
from studio.settings import get_settings
from studio.storage.db import make_engine

target_metadata = SQLModel.metadata


def _url() -> str:
    return context.config.get_main_option("sqlalchemy.url") or get_settings().sqlalchemy_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(_url())
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as connection:
            if sqlite:
                # Batch mode re-creates a table to alter it (copy, drop, rename): with foreign
                # keys on, dropping a table that others refer to fails. SQLite takes this
                # pragma only outside a transaction; the keys are checked once at the end.
                connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
                connection.commit()
            # batch mode lets later migrations alter columns on SQLite too
            context.configure(connection=connection, target_metadata=target_metadata,
                              render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"foreign keys broken by the migration: {broken[:5]}")
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
