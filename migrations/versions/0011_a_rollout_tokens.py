"""Logged rollouts keep per response token its log-prob under the policy that sampled it,
the entropy there, its advantage, the loss mask and the characters it covers
(`rollouts.token_arrays`, packed by `studio.method.token_arrays`; null for rollouts
written before, and for veRL's, whose dumps hold text only).

Revision ID: 0011_a_rollout_tokens
Revises: 0010_run_phase
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_a_rollout_tokens"
down_revision = "0010_run_phase"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("token_arrays", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("token_arrays")
