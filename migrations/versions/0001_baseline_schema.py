"""Baseline schema: users and tokens, data sets, runs with metrics and rollouts, workers.

Revision ID: 0001
Revises:
Create Date: 2026-11-29 12:38:45.002497
"""
from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('corpora',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('source_filename', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('content_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('upload_path', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
    sa.Column('index_path', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('backend', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('index_params', sa.JSON(), nullable=True),
    sa.Column('num_documents', sa.Integer(), nullable=False),
    sa.Column('num_passages', sa.Integer(), nullable=False),
    sa.Column('rows_read', sa.Integer(), nullable=False),
    sa.Column('passages_indexed', sa.Integer(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('updated_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('corpora', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_corpora_name'), ['name'], unique=True)

    op.create_table('curricula',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('curricula', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_curricula_name'), ['name'], unique=True)

    op.create_table('exemplar_sets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('source_filename', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('updated_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('exemplar_sets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_exemplar_sets_name'), ['name'], unique=True)

    op.create_table('qa_sets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('purpose', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('source_filename', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('content_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('upload_path', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=True),
    sa.Column('source_format', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('num_rows', sa.Integer(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('qa_sets', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_qa_sets_name'), ['name'], unique=True)

    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('username', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('password_hash', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('is_admin', sa.Boolean(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_users_username'), ['username'], unique=True)

    op.create_table('worker_heartbeats',
    sa.Column('hostname', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('queues', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('last_seen', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('hostname')
    )
    op.create_table('api_tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('prefix', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('token_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('last_used_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('revoked_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_tokens_token_hash'), ['token_hash'], unique=True)
        batch_op.create_index(batch_op.f('ix_api_tokens_user_id'), ['user_id'], unique=False)

    op.create_table('exemplars',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('exemplar_set_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('question', sa.Text(), nullable=False),
    sa.Column('solution', sa.Text(), nullable=False),
    sa.Column('answer', sa.Text(), nullable=True),
    sa.Column('findings', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['exemplar_set_id'], ['exemplar_sets.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('exemplar_set_id', 'position')
    )
    with op.batch_alter_table('exemplars', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_exemplars_exemplar_set_id'), ['exemplar_set_id'], unique=False)

    op.create_table('qa_items',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('qa_set_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('external_id', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('question', sa.Text(), nullable=False),
    sa.Column('golden_answers', sa.JSON(), nullable=True),
    sa.Column('meta', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['qa_set_id'], ['qa_sets.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('qa_set_id', 'position')
    )
    with op.batch_alter_table('qa_items', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_qa_items_qa_set_id'), ['qa_set_id'], unique=False)

    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('config', sa.JSON(), nullable=True),
    sa.Column('backend', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('queue', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('task_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('worker_hostname', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('current_step', sa.Integer(), nullable=False),
    sa.Column('total_steps', sa.Integer(), nullable=False),
    sa.Column('checkpoint_dir', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_by', sa.Integer(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('started_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('finished_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.Column('heartbeat_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['created_by'], ['users.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_runs_name'), ['name'], unique=False)
        batch_op.create_index(batch_op.f('ix_runs_state'), ['state'], unique=False)

    op.create_table('evaluations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=True),
    sa.Column('model_ref', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
    sa.Column('qa_set_id', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('params', sa.JSON(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('finished_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['qa_set_id'], ['qa_sets.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_evaluations_run_id'), ['run_id'], unique=False)

    op.create_table('exports',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('target', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
    sa.Column('repo_id', sqlmodel.sql.sqltypes.AutoString(length=255), nullable=True),
    sa.Column('private', sa.Boolean(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('progress', sa.Float(), nullable=False),
    sa.Column('location', sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('finished_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('exports', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_exports_run_id'), ['run_id'], unique=False)

    op.create_table('rollouts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('group_index', sa.Integer(), nullable=False),
    sa.Column('sample_index', sa.Integer(), nullable=False),
    sa.Column('stage', sa.Integer(), nullable=False),
    sa.Column('exemplars', sa.Integer(), nullable=False),
    sa.Column('question', sa.Text(), nullable=False),
    sa.Column('golden_answers', sa.JSON(), nullable=True),
    sa.Column('segments', sa.JSON(), nullable=True),
    sa.Column('reward', sa.Float(), nullable=False),
    sa.Column('breakdown', sa.JSON(), nullable=True),
    sa.Column('advantage', sa.Float(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rollouts_run_id'), ['run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rollouts_step'), ['step'], unique=False)

    op.create_table('run_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.Column('data', sa.JSON(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_events_run_id'), ['run_id'], unique=False)

    op.create_table('run_metrics',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('stage', sa.Integer(), nullable=False),
    sa.Column('exemplars', sa.Integer(), nullable=False),
    sa.Column('values', sa.JSON(), nullable=True),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'step')
    )
    with op.batch_alter_table('run_metrics', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_metrics_run_id'), ['run_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('run_metrics', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_metrics_run_id'))

    op.drop_table('run_metrics')
    with op.batch_alter_table('run_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_events_run_id'))

    op.drop_table('run_events')
    with op.batch_alter_table('rollouts', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rollouts_step'))
        batch_op.drop_index(batch_op.f('ix_rollouts_run_id'))

    op.drop_table('rollouts')
    with op.batch_alter_table('exports', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_exports_run_id'))

    op.drop_table('exports')
    with op.batch_alter_table('evaluations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_evaluations_run_id'))

    op.drop_table('evaluations')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_runs_state'))
        batch_op.drop_index(batch_op.f('ix_runs_name'))

    op.drop_table('runs')
    with op.batch_alter_table('qa_items', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_qa_items_qa_set_id'))

    op.drop_table('qa_items')
    with op.batch_alter_table('exemplars', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_exemplars_exemplar_set_id'))

    op.drop_table('exemplars')
    with op.batch_alter_table('api_tokens', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_tokens_user_id'))
        batch_op.drop_index(batch_op.f('ix_api_tokens_token_hash'))

    op.drop_table('api_tokens')
    op.drop_table('worker_heartbeats')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_users_username'))

    op.drop_table('users')
    with op.batch_alter_table('qa_sets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_qa_sets_name'))

    op.drop_table('qa_sets')
    with op.batch_alter_table('exemplar_sets', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_exemplar_sets_name'))

    op.drop_table('exemplar_sets')
    with op.batch_alter_table('curricula', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_curricula_name'))

    op.drop_table('curricula')
    with op.batch_alter_table('corpora', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_corpora_name'))

    op.drop_table('corpora')
