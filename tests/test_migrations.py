"""The same Alembic migrations upgrade and downgrade on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlmodel import SQLModel, delete, select

import studio.tables  # noqa: F401
from studio import db
from studio.method.exemplars import Exemplar
from studio.services.run_plans import exemplars_hash
from studio.tables import Run, RunEvent, RunMetric

DOMAIN_TABLES = {
    "users", "api_tokens", "corpora", "qa_sets", "qa_items", "exemplar_sets", "exemplars",
    "runs", "run_metrics", "run_events", "rollouts", "evaluations", "exports",
    "worker_heartbeats", "device_calibrations",
}


def _tables(url: str) -> set[str]:
    return set(inspect(db.engine_for(url)).get_table_names()) - {"alembic_version"}


def test_upgrade_creates_every_table_and_matches_the_models(any_db_url):
    db.upgrade(any_db_url)
    assert _tables(any_db_url) == DOMAIN_TABLES
    with db.engine_for(any_db_url).connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    assert diff == [], f"the models changed without a migration: {diff}"


def test_downgrade_to_base_and_upgrade_again(any_db_url):
    db.upgrade(any_db_url)
    db.downgrade(any_db_url, "base")
    assert _tables(any_db_url) == set()
    assert db.current_revision(any_db_url) is None
    db.upgrade(any_db_url)
    assert _tables(any_db_url) == DOMAIN_TABLES


def test_sqlite_runs_in_wal_mode(tmp_path):
    url = f"sqlite:///{tmp_path / 'wal.db'}"
    db.upgrade(url)
    with db.engine_for(url).connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_a_deleted_run_row_id_never_comes_back(any_db_url):
    """The stream and the TensorBoard mirror follow run rows by id; a resumed run deletes its
    latest steps and writes them again. Rows stored before migration 0005 keep their ids."""
    db.upgrade(any_db_url, "0004_run_attempts")
    with db.engine_for(any_db_url).begin() as conn:  # the models are newer than 0004
        conn.execute(text("INSERT INTO runs (name, config, backend, queue, state, attempt, "
                          "current_step, total_steps, created_at) VALUES ('r', '{}', 'native', "
                          "'cpu', 'queued', 1, 0, 0, CURRENT_TIMESTAMP)"))
    with db.session_scope(any_db_url) as session:
        session.add_all([RunMetric(run_id=1, step=s, values={}) for s in range(3)])
        session.add(RunEvent(run_id=1, step=0, kind="info", message="kept"))
    db.upgrade(any_db_url)
    with db.session_scope(any_db_url) as session:
        assert [m.id for m in session.exec(select(RunMetric).order_by(RunMetric.id))] == [1, 2, 3]
        assert session.exec(select(RunEvent.message)).all() == ["kept"]
        session.exec(delete(RunMetric).where(RunMetric.step >= 1))
        session.exec(delete(RunEvent))
    with db.session_scope(any_db_url) as session:
        session.add(RunMetric(run_id=1, step=1, values={}))
        session.add(RunEvent(run_id=1, step=1, kind="info", message="new"))
    with db.session_scope(any_db_url) as session:
        assert [m.id for m in session.exec(select(RunMetric).order_by(RunMetric.id))] == [1, 4]
        assert session.exec(select(RunEvent.id)).all() == [2]


def test_runs_stored_before_plans_get_the_plan_their_names_resolve_to(any_db_url):
    db.upgrade(any_db_url, "0006_device_calibrations")
    now = "CURRENT_TIMESTAMP"
    with db.engine_for(any_db_url).begin() as conn:
        conn.execute(text(
            "INSERT INTO corpora (name, source_filename, content_hash, upload_path, status, "
            "backend, num_documents, num_passages, rows_read, passages_indexed, created_at, "
            f"updated_at) VALUES ('docs', 'd.jsonl', 'c0ffee', 'u', 'ready', 'bm25s', 1, 1, 1, "
            f"1, {now}, {now})"))
        conn.execute(text(
            "INSERT INTO qa_sets (name, purpose, source_filename, content_hash, source_format, "
            f"num_rows, created_at) VALUES ('qa', 'train', 'q.jsonl', 'beef', 'jsonl', 0, {now})"))
        conn.execute(text("INSERT INTO exemplar_sets (name, created_at, updated_at) "
                          f"VALUES ('ex', {now}, {now})"))
        conn.execute(text("INSERT INTO exemplars (exemplar_set_id, position, question, "
                          "solution) VALUES (1, 0, 'Q?', '<answer> A </answer>')"))
        for name, corpus in (("kept", "docs"), ("lost", "gone")):
            config = json.dumps({"name": name, "data": {"corpus": corpus, "train": "qa",
                                                        "exemplars": "ex"}})
            conn.execute(text(
                "INSERT INTO runs (name, config, backend, queue, state, attempt, current_step, "
                f"total_steps, created_at) VALUES ('{name}', :config, 'native', 'cpu', "
                "'failed', 1, 0, 0, CURRENT_TIMESTAMP)"), {"config": config})
    db.upgrade(any_db_url)
    with db.session_scope(any_db_url) as session:
        plans = {r.name: r.plan for r in session.exec(select(Run))}
    assert plans["lost"] is None, "a name that no longer resolves gives no plan"
    kept = plans["kept"]
    assert kept["corpus"] == {"id": 1, "name": "docs", "content_hash": "c0ffee"}
    assert kept["train"]["content_hash"] == "beef" and kept["eval"] == []
    assert kept["exemplars"] == [{"question": "Q?", "solution": "<answer> A </answer>"}]
    assert kept["exemplar_set"]["content_hash"] == exemplars_hash(
        [Exemplar("Q?", "<answer> A </answer>")])
