"""The same Alembic migrations upgrade and downgrade on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from datetime import datetime

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlmodel import SQLModel, delete, select

import studio.storage.tables  # noqa: F401
from studio.method.exemplars import Exemplar
from studio.services.run_plans import exemplars_hash
from studio.storage import db
from studio.storage.tables import Run, RunEvent, RunMetric, utcnow

DOMAIN_TABLES = {
    "users", "api_tokens", "corpora", "qa_sets", "qa_items", "exemplar_sets", "exemplars",
    "runs", "run_metrics", "run_events", "rollouts", "evaluations", "exports",
    "worker_heartbeats", "device_calibrations", "login_failures",
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


def test_teams_migration_gives_rows_to_the_first_admin_and_keeps_roles(any_db_url):
    """0009: is_admin becomes a role, every owned row gets an owner (a run keeps its creator),
    every run a job key; a downgrade gives is_admin and the creator back."""
    db.upgrade(any_db_url, "0008_drop_curricula")
    now = "CURRENT_TIMESTAMP"
    with db.engine_for(any_db_url).begin() as conn:
        conn.execute(text("INSERT INTO users (username, password_hash, is_admin, created_at) "
                          f"VALUES ('root', 'x', true, {now}), ('ana', 'x', false, {now})"))
        conn.execute(text(
            "INSERT INTO corpora (name, source_filename, content_hash, upload_path, status, "
            "backend, num_documents, num_passages, rows_read, passages_indexed, created_at, "
            f"updated_at) VALUES ('docs', 'd.jsonl', 'c0', 'u', 'ready', 'bm25s', 1, 1, 1, 1, "
            f"{now}, {now})"))
        conn.execute(text("INSERT INTO exemplar_sets (name, created_at, updated_at) "
                          f"VALUES ('ex', {now}, {now})"))
        for name, creator in (("by-ana", 2), ("by-nobody", None)):
            conn.execute(text(
                "INSERT INTO runs (name, config, backend, queue, state, attempt, current_step, "
                f"total_steps, created_at, created_by) VALUES ('{name}', '{{}}', 'native', "
                "'cpu', 'failed', 1, 0, 0, CURRENT_TIMESTAMP, :creator)"), {"creator": creator})
    db.upgrade(any_db_url)
    with db.engine_for(any_db_url).begin() as conn:
        assert conn.execute(text("SELECT username, role FROM users ORDER BY id")).all() == [
            ("root", "admin"), ("ana", "member")]
        assert conn.execute(text("SELECT owner_id FROM corpora")).scalar() == 1
        assert conn.execute(text("SELECT owner_id FROM exemplar_sets")).scalar() == 1
        owners = dict(conn.execute(text("SELECT name, owner_id FROM runs")).all())
        assert owners == {"by-ana": 2, "by-nobody": 1}
        keys = conn.execute(text("SELECT job_key FROM runs")).scalars().all()
        assert len(set(keys)) == 2 and all(len(k) == 32 for k in keys)
    db.downgrade(any_db_url, "0008_drop_curricula")
    with db.engine_for(any_db_url).begin() as conn:
        assert conn.execute(text("SELECT username FROM users WHERE is_admin")).all() == [("root",)]
        assert dict(conn.execute(text("SELECT name, created_by FROM runs")).all()) == {
            "by-ana": 2, "by-nobody": 1}


def _integer_id_tables() -> list:
    return [t for t in SQLModel.metadata.sorted_tables
            if [c.name for c in t.primary_key.columns] == ["id"]]


def test_no_table_hands_out_a_deleted_id_again(any_db_url):
    """Every table with an integer id: its largest row deleted, the next insert gets a new id,
    so a queued message naming a deleted row's id can never act on another row
    (on SQLite only AUTOINCREMENT promises that; PostgreSQL's sequences always do)."""
    db.upgrade(any_db_url)
    tables = _integer_id_tables()
    assert {t.name for t in tables} == DOMAIN_TABLES - {"worker_heartbeats"}
    if any_db_url.startswith("sqlite"):
        with db.engine_for(any_db_url).connect() as conn:
            plain = [t.name for t in tables if "AUTOINCREMENT" not in conn.execute(text(
                "SELECT sql FROM sqlite_master WHERE name = :n"), {"n": t.name}).scalar()]
        assert plain == [], "tables that would hand a deleted id out again"
    with _without_foreign_keys(any_db_url) as conn:
        for table in tables:
            _insert_minimal(conn, table)
            second = _insert_minimal(conn, table)
            conn.execute(table.delete().where(table.c.id == second))
            assert _insert_minimal(conn, table) > second, table.name


@contextmanager
def _without_foreign_keys(url: str):
    """A connection whose inserts need no parent rows (the ids are what is tested)."""
    engine = db.engine_for(url)
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        else:
            conn.exec_driver_sql("SET session_replication_role = replica")
        try:
            yield conn
            conn.commit()
        finally:
            if engine.dialect.name == "sqlite":
                conn.exec_driver_sql("PRAGMA foreign_keys=ON")
            else:
                conn.exec_driver_sql("SET session_replication_role = DEFAULT")


def _insert_minimal(conn, table) -> int:
    """A row with every required column filled (unique ones made unique); its id."""
    filler = {int: lambda n: n, str: lambda n: f"v{n}", datetime: lambda n: utcnow(),
              bool: lambda n: False, float: lambda n: 0.0}
    values = {}
    for column in table.columns:
        if column.name == "id" or column.nullable or column.default is not None or \
                column.server_default is not None:
            continue
        make = filler.get(column.type.python_type, filler[str])  # AutoString: object
        values[column.name] = make(uuid.uuid4().int % 10**9)
    return conn.execute(table.insert().values(**values)).inserted_primary_key[0]
