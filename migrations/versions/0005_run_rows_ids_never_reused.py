"""Run metrics, events and rollouts: SQLite AUTOINCREMENT, so that a deleted row's id is
never handed out again (a resumed run re-writes its latest steps, and the live stream and
the TensorBoard mirror follow these tables by id). PostgreSQL's sequences never reuse ids:
nothing changes there.

Revision ID: 0005_run_rows_ids_never_reused
Revises: 0004_run_attempts
"""
from __future__ import annotations

from alembic import op

revision = "0005_run_rows_ids_never_reused"
down_revision = "0004_run_attempts"
branch_labels = None
depends_on = None

TABLES = ("run_metrics", "run_events", "rollouts")


def _recreate(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(table, recreate="always",
                                  table_kwargs={"sqlite_autoincrement": autoincrement}):
            pass


def upgrade() -> None:
    _recreate(True)


def downgrade() -> None:
    _recreate(False)
