"""A calibration has an owner (`device_calibrations.owner_id`): who asked for it, or whose
launch check queued it; earlier rows have none (the studio's).

Revision ID: 0014_calibration_owner
Revises: 0013_rollout_hint_exemplars
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_calibration_owner"
down_revision = "0013_rollout_hint_exemplars"
branch_labels = None
depends_on = None


def _batch():
    """An ALTER of device_calibrations; on SQLite the table is re-created, AUTOINCREMENT kept
    (a deleted row's id never comes back)."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    return op.batch_alter_table("device_calibrations", recreate="always" if sqlite else "auto",
                                table_kwargs={"sqlite_autoincrement": True})


def upgrade() -> None:
    with _batch() as batch:
        batch.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_device_calibrations_owner_id_users", "users",
                                 ["owner_id"], ["id"])
        batch.create_index("ix_device_calibrations_owner_id", ["owner_id"])


def downgrade() -> None:
    with _batch() as batch:
        batch.drop_index("ix_device_calibrations_owner_id")
        batch.drop_constraint("fk_device_calibrations_owner_id_users", type_="foreignkey")
        batch.drop_column("owner_id")
