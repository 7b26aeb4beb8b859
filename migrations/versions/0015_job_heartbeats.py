"""Evaluations, exports and index builds have a heartbeat (`heartbeat_at`), as runs do: a job
of theirs left running by a worker that died (a killed studio, a lost machine) is marked
interrupted (an index build: failed) once it is silent for three heartbeat periods.

Revision ID: 0015_job_heartbeats
Revises: 0014_calibration_owner
"""
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0015_job_heartbeats"
down_revision = "0014_calibration_owner"
branch_labels = None
depends_on = None

TABLES = ("evaluations", "exports", "corpora")


def upgrade() -> None:
    # a nullable column: SQLite adds it in place, its AUTOINCREMENT kept
    for table in TABLES:
        op.add_column(table, sa.Column("heartbeat_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                       nullable=True))


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in TABLES:
        with op.batch_alter_table(table, recreate="always" if sqlite else "auto",
                                  table_kwargs={"sqlite_autoincrement": True}) as batch:
            batch.drop_column("heartbeat_at")
