"""Indexes for a run's live stream and its pages: (run_id, id) on metrics, events and rollouts;
(run_id, [stage | exemplars | reward,] step, id) on rollouts, so a filtered page newest first
and its total read one index range. They replace the single-column indexes.

Revision ID: 0003_run_history_indexes
Revises: 0002_export_step_and_message
"""
from __future__ import annotations

from alembic import op

revision = "0003_run_history_indexes"
down_revision = "0002_export_step_and_message"
branch_labels = None
depends_on = None

# table -> (indexes dropped, indexes created as name -> columns)
CHANGES = {
    "run_metrics": (["ix_run_metrics_run_id"], {"ix_run_metrics_run_id_id": ["run_id", "id"]}),
    "run_events": (["ix_run_events_run_id"], {"ix_run_events_run_id_id": ["run_id", "id"]}),
    "rollouts": (["ix_rollouts_run_id", "ix_rollouts_step"], {
        "ix_rollouts_run_id_id": ["run_id", "id"],
        "ix_rollouts_run_id_step_id": ["run_id", "step", "id"],
        "ix_rollouts_run_id_stage_step_id": ["run_id", "stage", "step", "id"],
        "ix_rollouts_run_id_exemplars_step_id": ["run_id", "exemplars", "step", "id"],
        "ix_rollouts_run_id_reward_step_id": ["run_id", "reward", "step", "id"],
    }),
}
OLD_COLUMNS = {"ix_run_metrics_run_id": ["run_id"], "ix_run_events_run_id": ["run_id"],
               "ix_rollouts_run_id": ["run_id"], "ix_rollouts_step": ["step"]}


def upgrade() -> None:
    for table, (old, new) in CHANGES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name, columns in new.items():
                batch_op.create_index(name, columns, unique=False)
            for name in old:
                batch_op.drop_index(name)


def downgrade() -> None:
    for table, (old, new) in CHANGES.items():
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in old:
                batch_op.create_index(name, OLD_COLUMNS[name], unique=False)
            for name in new:
                batch_op.drop_index(name)
