"""Run plans: each run pins the rows its data names meant at launch (`runs.plan`), and a
corpus or QA set deleted while a plan pins it is retired (`retired_at`) instead, so its name
is unique only among the rows not retired. Existing runs get the plan their names resolve to
now (none when a name no longer resolves: such a run cannot be resumed).

Revision ID: 0007_run_plans
Revises: 0006_device_calibrations
"""
from __future__ import annotations

import hashlib
import json

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0007_run_plans"
down_revision = "0006_device_calibrations"
branch_labels = None
depends_on = None

NAMED = ("corpora", "qa_sets")
LIVE = sa.text("retired_at IS NULL")


def _ref(row) -> dict | None:
    return {"id": row.id, "name": row.name, "content_hash": row.content_hash} if row else None


def _plan(conn, config: dict) -> dict | None:
    """The plan of a stored config, as studio.services.run_plans.make_plan builds it."""
    data = config.get("data") or {}

    def named(table: str, name: str | None):
        return conn.execute(sa.text(f"SELECT id, name, content_hash FROM {table} "
                                    "WHERE name = :name"), {"name": name}).first()

    corpus, train = named("corpora", data.get("corpus")), named("qa_sets", data.get("train"))
    eval_sets = [named("qa_sets", name) for name in data.get("eval", [])]
    if corpus is None or train is None or None in eval_sets:
        return None
    plan = {"config": config, "corpus": _ref(corpus), "train": _ref(train),
            "eval": [_ref(q) for q in eval_sets], "exemplar_set": None, "exemplars": []}
    if data.get("exemplars"):
        found = conn.execute(sa.text("SELECT id, name FROM exemplar_sets WHERE name = :name"),
                             {"name": data["exemplars"]}).first()
        if found is None:
            return None
        rows = conn.execute(sa.text("SELECT question, solution, answer FROM exemplars WHERE "
                                    "exemplar_set_id = :id ORDER BY position"), {"id": found.id})
        exemplars = [{"question": q, "solution": s, **({} if a is None else {"answer": a})}
                     for q, s, a in rows]
        digest = hashlib.sha256(json.dumps(exemplars, sort_keys=True, ensure_ascii=False)
                                .encode()).hexdigest()
        plan["exemplar_set"] = {"id": found.id, "name": found.name, "content_hash": digest}
        plan["exemplars"] = exemplars
    return plan


def upgrade() -> None:
    for table in NAMED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("retired_at", sqlmodel.sql.sqltypes.UTCDateTime(),
                                       nullable=True))
            batch.drop_index(f"ix_{table}_name")
            batch.create_index(f"ix_{table}_name", ["name"], unique=False)
        op.create_index(f"uq_{table}_live_name", table, ["name"], unique=True,
                        sqlite_where=LIVE, postgresql_where=LIVE)
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("plan", sa.JSON(), nullable=True))
    conn = op.get_bind()
    runs = sa.table("runs", sa.column("id", sa.Integer), sa.column("config", sa.JSON),
                    sa.column("plan", sa.JSON))
    for run_id, config in conn.execute(sa.select(runs.c.id, runs.c.config)).all():
        plan = _plan(conn, config or {})
        if plan is not None:
            conn.execute(runs.update().where(runs.c.id == run_id).values(plan=plan))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("plan")
    for table in NAMED:
        op.drop_index(f"uq_{table}_live_name", table_name=table)
        if table == "qa_sets":
            op.execute("DELETE FROM qa_items WHERE qa_set_id IN "
                       "(SELECT id FROM qa_sets WHERE retired_at IS NOT NULL)")
        op.execute(f"DELETE FROM {table} WHERE retired_at IS NOT NULL")
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_name")
            batch.create_index(f"ix_{table}_name", ["name"], unique=True)
            batch.drop_column("retired_at")
