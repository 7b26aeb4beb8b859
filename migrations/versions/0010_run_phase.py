"""Runs say what their step under way is doing (`runs.phase`: rolling out, scoring,
updating...) and keep the launch's estimate of a first step (`runs.first_step_seconds`), so
the Live run page shows a run at work before its first point.

Revision ID: 0010_run_phase
Revises: 0009_teams
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_run_phase"
down_revision = "0009_teams"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("phase", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("first_step_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("first_step_seconds")
        batch.drop_column("phase")
