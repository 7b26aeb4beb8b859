"""Shared fixtures: real SQLite and PostgreSQL databases, settings, free ports.

PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) run on every
machine of this project, CI's too; the tests use them for real.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from studio.settings import Settings
from studio.storage import db
from tests.support.actors import admin

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


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end."""
    name = f"studio_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.conninfo_to_dict(PG_ADMIN_DSN)
    user, host, port = dsn.get("user", "postgres"), dsn["host"], dsn.get("port", 5432)
    yield f"postgresql+psycopg://{user}@{host}:{port}/{name}"
    db.engine_for.cache_clear()
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_url(request, tmp_path: Path) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL (a fresh schema)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'studio.db'}"
    url = request.getfixturevalue("pg_url")
    db.engine_for(url).dispose()
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return url


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings of an embedded studio in a fresh data directory, migrated."""
    s = Settings(data_dir=tmp_path / "data")
    s.resolved_data_dir.mkdir(parents=True)
    db.upgrade(s.sqlalchemy_url)
    return s


@pytest.fixture
def studio(any_db_url, tmp_path):
    """A migrated studio on SQLite or PostgreSQL with the demo pack and a tiny model, its
    heartbeat period 1 s; returns (settings, model folder)."""
    from studio.services.demo import load_demo_pack
    from tests.support.tiny_model import build_tiny_model

    s = Settings(data_dir=tmp_path / "data", database_url=any_db_url, heartbeat_seconds=1)
    s.resolved_data_dir.mkdir(parents=True)
    db.upgrade(s.sqlalchemy_url)
    load_demo_pack(s, admin(s), index_now=True)
    return s, build_tiny_model(tmp_path / "tiny")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    """A data directory holding the bundled SmolLM2, converted once per test session (~30 s)."""
    from studio.models.base_models import DEFAULT_MODEL, resolve_model

    data_dir = tmp_path_factory.mktemp("converted-models")
    resolve_model(DEFAULT_MODEL, data_dir)
    return data_dir


@pytest.fixture
def api(settings):
    """The admin's API client of a fresh studio (`tests/support/api_client.Api`)."""
    from fastapi.testclient import TestClient

    from frontend.server import create_app
    from studio.services import auth
    from tests.support.api_client import Api

    with db.session_scope(settings.sqlalchemy_url) as session:
        token = auth.bootstrap_admin(session).token
    with TestClient(create_app(settings)) as client:
        yield Api(settings, client, token)
