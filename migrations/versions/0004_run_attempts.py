"""Runs: an attempt counter (resume and redelivered tasks) and when the run was queued.

Revision ID: 0004_run_attempts
Revises: 0003_run_history_indexes
Create Date: 2026-11-30 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0004_run_attempts'
down_revision = '0003_run_history_indexes'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('attempt', sa.Integer(), nullable=False, server_default='1'))
        batch.add_column(sa.Column('queued_at', sqlmodel.sql.sqltypes.UTCDateTime(),
                                   nullable=True))
    op.execute("UPDATE runs SET queued_at = created_at")


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('queued_at')
        batch.drop_column('attempt')
