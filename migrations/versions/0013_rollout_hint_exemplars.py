"""A rollout sampled with exemplars as a hint and trained on the prompt without them
(`guidance.mode: mixed`) keeps which exemplars it saw (`rollouts.hint_exemplars`, their
indices in the run's exemplar set; null for every other rollout).

Revision ID: 0013_rollout_hint_exemplars
Revises: 0012_user_export_quota
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_rollout_hint_exemplars"
down_revision = "0012_user_export_quota"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("hint_exemplars", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("hint_exemplars")
