"""Drop the `curricula` table: nothing ever wrote or read it. A run's curriculum lives in
its config and plan; the designer's presets are code (`studio.method.curriculum.PRESETS`).

Revision ID: 0008_drop_curricula
Revises: 0007_run_plans
"""
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0008_drop_curricula"
down_revision = "0007_run_plans"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("curricula", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_curricula_name"))
    op.drop_table("curricula")


def downgrade() -> None:
    op.create_table(
        "curricula",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("curricula", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_curricula_name"), ["name"], unique=True)
