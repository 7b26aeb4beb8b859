"""Shared fixtures: real SQLite and PostgreSQL databases, settings, free ports.

PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) run on every
machine of this project, CI's too; the tests use them for real.
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from studio.settings import Settings
from studio.storage import db
from tests.support.actors import admin

# Two test workers share two cores: torch's default of a thread per core, in each of them and
# in the studios, workers and commands they start, oversubscribes the cores (the perf notes
# measured a forward pass ~50x slower). One thread each, set before torch is first imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

PG_ADMIN_DSN = os.environ.get("STUDIO_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get(
    "STUDIO_TEST_REDIS_URL",
    # tests flush their database: under pytest-xdist each worker has its own (gw0: 9, gw1: 10)
    f"redis://127.0.0.1:6379/{9 + int(os.environ.get('PYTEST_XDIST_WORKER', 'gw0')[2:])}")


@pytest.fixture(scope="session", autouse=True)
def models_in_the_test_folders(tmp_path_factory) -> Iterator[None]:
    """Tests build their tiny models in temporary folders: the studios they make (the
    browser tests' too) read models there as from a folder an admin lists."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STUDIO_MODEL_FOLDERS", str(tmp_path_factory.getbasetemp()))
        yield


def _pg_url(name: str) -> str:
    dsn = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_DSN)
    user, host, port = dsn.get("user", "postgres"), dsn["host"], dsn.get("port", 5432)
    return f"postgresql+psycopg://{user}@{host}:{port}/{name}"


def _pg_admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(sql)


@contextmanager
def _pg_database(template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database (a copy of `template` when given), dropped on exit."""
    name = f"studio_test_{uuid.uuid4().hex[:12]}"
    _pg_admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    url = _pg_url(name)
    try:
        yield url
    finally:
        db.engine_for(url).dispose()
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end."""
    with _pg_database() as url:
        yield url
    db.engine_for.cache_clear()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_url(request, tmp_path: Path) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL (a fresh, empty
    schema: tests/test_migrations.py migrates it)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'studio.db'}"
    url = request.getfixturevalue("pg_url")
    db.engine_for(url).dispose()
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return url


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    """A SQLite database at the migrations' head, migrated once a session: a test's copy
    takes milliseconds where migrating takes ~0.7 s on 2 cores (tests/test_migrations.py
    migrates from empty)."""
    path = tmp_path_factory.mktemp("migrated") / "studio.db"
    db.upgrade(f"sqlite:///{path}")
    db.engine_for(f"sqlite:///{path}").dispose()
    return path


@pytest.fixture(scope="session")
def migrated_pg() -> Iterator[str]:
    """A PostgreSQL database at the migrations' head, the template of each test's own copy
    (CREATE DATABASE ... TEMPLATE: ~0.15 s against ~0.6 s for migrating)."""
    with _pg_database() as url:
        db.upgrade(url)
        db.engine_for(url).dispose()  # a template takes no open connection
        yield url.rsplit("/", 1)[1]


def migrated_sqlite_copy(template: Path, path: Path) -> str:
    """`path` made a copy of the migrated template; its URL, checked at head."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    url = f"sqlite:///{path}"
    db.upgrade(url)
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def migrated_db_url(request, tmp_path: Path) -> Iterator[str]:
    """A database at the migrations' head of the test's own, once on SQLite and once on
    PostgreSQL, copied from a template migrated once a session."""
    if request.param == "sqlite":
        yield migrated_sqlite_copy(request.getfixturevalue("migrated_sqlite"),
                                   tmp_path / "studio.db")
        return
    with _pg_database(template=request.getfixturevalue("migrated_pg")) as url:
        db.upgrade(url)
        yield url


@pytest.fixture
def settings(tmp_path: Path, migrated_sqlite: Path) -> Settings:
    """Settings of an embedded studio in a fresh data directory, migrated."""
    s = Settings(data_dir=tmp_path / "data")
    s.resolved_data_dir.mkdir(parents=True)
    migrated_sqlite_copy(migrated_sqlite, s.resolved_data_dir / "studio.db")
    return s


@pytest.fixture
def studio(migrated_db_url, tmp_path):
    """A migrated studio on SQLite or PostgreSQL with the demo pack and a tiny model, its
    heartbeat period 1 s; returns (settings, model folder)."""
    from studio.services.demo import load_demo_pack
    from tests.support.tiny_model import build_tiny_model

    s = Settings(data_dir=tmp_path / "data", database_url=migrated_db_url, heartbeat_seconds=1)
    s.resolved_data_dir.mkdir(parents=True)
    load_demo_pack(s, admin(s), index_now=True)
    return s, build_tiny_model(tmp_path / "tiny")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    """A data directory holding the bundled SmolLM2, converted once per test run (~25 s): the
    pytest-xdist workers of a run share it (their base folders' parent is the run's), the
    first converts while the others wait on the conversion's lock. Tests only read it."""
    from studio.models.base_models import DEFAULT_MODEL, resolve_model

    run_folder = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        run_folder = run_folder.parent
    data_dir = run_folder / "converted-models"
    resolve_model(DEFAULT_MODEL, data_dir)
    return data_dir


@pytest.fixture
def api(settings):
    """The admin's API client of a fresh studio (`tests/support/api_client.Api`): the REST
    API alone, without the UI mounted around it (~1.5 s a test on 2 cores); the tests of
    the whole app (test_security_headers, test_request_limits, test_ui_uploads, the
    browser tests) build it with the UI."""
    from fastapi.testclient import TestClient

    from studio.api.app import create_api
    from studio.services import auth
    from tests.support.api_client import Api

    with db.session_scope(settings.sqlalchemy_url) as session:
        token = auth.bootstrap_admin(session).token
    with TestClient(create_api(settings)) as client:
        yield Api(settings, client, token)
