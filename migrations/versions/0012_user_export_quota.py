"""A user's own export quota, in bytes, set by an admin (`users.export_quota_bytes`; null:
the studio's STUDIO_EXPORT_QUOTA_BYTES).

Revision ID: 0012_user_export_quota
Revises: 0011_a_rollout_tokens
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_user_export_quota"
down_revision = "0011_a_rollout_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("export_quota_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("export_quota_bytes")
