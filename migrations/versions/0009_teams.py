"""Teams: users get a role (admin, member, viewer) and can be disabled; tokens have a kind
(api, or a browser session that expires); failed logins are kept for the rate limit; every
corpus, QA set, exemplar set, run, evaluation and export has an owner (existing rows go to
the first admin); runs get a job key that their queued messages name; on SQLite every table
with an integer id becomes AUTOINCREMENT, so a deleted row's id never comes back.

Revision ID: 0009_teams
Revises: 0008_drop_curricula
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0009_teams"
down_revision = "0008_drop_curricula"
branch_labels = None
depends_on = None

OWNED = ("corpora", "qa_sets", "exemplar_sets", "runs", "evaluations", "exports")
# every table with an integer id not made AUTOINCREMENT before (0005 did the run rows)
INTEGER_IDS = ("users", "api_tokens", "corpora", "qa_sets", "qa_items", "exemplar_sets",
               "exemplars", "runs", "evaluations", "exports", "device_calibrations")


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def _batch(table: str, autoincrement: bool):
    """An ALTER of `table`; on SQLite the table is re-created, AUTOINCREMENT or not."""
    return op.batch_alter_table(table, recreate="always" if _sqlite() else "auto",
                                table_kwargs={"sqlite_autoincrement": autoincrement})


def upgrade() -> None:
    conn = op.get_bind()
    with _batch("users", True) as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=False,
                                   server_default="member"))
        batch.add_column(sa.Column("disabled_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
    conn.execute(sa.text("UPDATE users SET role = 'admin' WHERE is_admin"))
    with _batch("users", True) as batch:
        batch.drop_column("is_admin")

    with _batch("api_tokens", True) as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="api"))
        batch.add_column(sa.Column("expires_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))

    op.create_table(
        "login_failures",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("address", sa.String(64), nullable=False),
        sa.Column("at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_login_failures_username_at", "login_failures", ["username", "at"])
    op.create_index("ix_login_failures_address_at", "login_failures", ["address", "at"])

    for table in OWNED:
        with _batch(table, True) as batch:
            batch.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
            batch.create_foreign_key(f"fk_{table}_owner_id_users", "users", ["owner_id"],
                                     ["id"])
            batch.create_index(f"ix_{table}_owner_id", ["owner_id"])
    conn.execute(sa.text("UPDATE runs SET owner_id = created_by"))
    admin = conn.execute(sa.text("SELECT min(id) FROM users WHERE role = 'admin'")).scalar()
    if admin is not None:
        for table in OWNED:
            conn.execute(sa.text(f"UPDATE {table} SET owner_id = :admin WHERE owner_id IS NULL"),
                         {"admin": admin})

    with _batch("runs", True) as batch:
        batch.add_column(sa.Column("job_key", sa.String(32), nullable=True))
    for (run_id,) in conn.execute(sa.text("SELECT id FROM runs")).all():
        conn.execute(sa.text("UPDATE runs SET job_key = :key WHERE id = :id"),
                     {"key": uuid.uuid4().hex, "id": run_id})
    with _batch("runs", True) as batch:
        batch.alter_column("job_key", existing_type=sa.String(32), nullable=False)
        batch.drop_column("created_by")

    if _sqlite():
        for table in INTEGER_IDS:
            with _batch(table, True):
                pass


def downgrade() -> None:
    conn = op.get_bind()
    with _batch("runs", False) as batch:
        batch.add_column(sa.Column("created_by", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_runs_created_by_users", "users", ["created_by"], ["id"])
        batch.drop_column("job_key")
    conn.execute(sa.text("UPDATE runs SET created_by = owner_id"))
    for table in OWNED:
        with _batch(table, False) as batch:
            batch.drop_index(f"ix_{table}_owner_id")
            batch.drop_constraint(f"fk_{table}_owner_id_users", type_="foreignkey")
            batch.drop_column("owner_id")
    op.drop_table("login_failures")
    with _batch("api_tokens", False) as batch:
        batch.drop_column("expires_at")
        batch.drop_column("kind")
    with _batch("users", False) as batch:
        batch.add_column(sa.Column("is_admin", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    conn.execute(sa.text("UPDATE users SET is_admin = (role = 'admin')"))
    with _batch("users", False) as batch:
        batch.drop_column("disabled_at")
        batch.drop_column("role")
    if _sqlite():
        for table in INTEGER_IDS:
            with _batch(table, False):
                pass
