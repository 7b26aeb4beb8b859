"""Exports: the checkpoint step exported and a stage message for progress.

Revision ID: 0002_export_step_and_message
Revises: 0001
Create Date: 2026-11-30 10:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0002_export_step_and_message'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('exports', schema=None) as batch_op:
        batch_op.add_column(sa.Column('step', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('message', sqlmodel.sql.sqltypes.AutoString(length=512),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('exports', schema=None) as batch_op:
        batch_op.drop_column('message')
        batch_op.drop_column('step')
