"""Device calibrations (how fast a model trains on a worker's device, for the launch check's
time estimate) and, per worker, the device each of its queues trains on.

Revision ID: 0006_device_calibrations
Revises: 0005_run_rows_ids_never_reused
"""
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0006_device_calibrations"
down_revision = "0005_run_rows_ids_never_reused"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "device_calibrations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
        sa.Column("queue", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("dtype", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("device_key", sqlmodel.sql.sqltypes.AutoString(length=512), nullable=True),
        sa.Column("device", sa.JSON(), nullable=True),
        sa.Column("worker_hostname", sqlmodel.sql.sqltypes.AutoString(length=255),
                  nullable=True),
        sa.Column("busy_runs", sa.Integer(), nullable=False),
        sa.Column("figures", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("started_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("finished_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("device_calibrations") as batch:
        batch.create_index("ix_device_calibrations_key",
                           ["model", "device_key", "threads", "dtype"], unique=False)
    with op.batch_alter_table("worker_heartbeats") as batch:
        batch.add_column(sa.Column("devices", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker_heartbeats") as batch:
        batch.drop_column("devices")
    with op.batch_alter_table("device_calibrations") as batch:
        batch.drop_index("ix_device_calibrations_key")
    op.drop_table("device_calibrations")
