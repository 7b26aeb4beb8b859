"""A Hub push through the real queue: the token reaches the Hub and nothing else.

A worker process pushes to the local Hub (tests/support/hub_server.py) an export created
through the API, then one created with `studio export --to hub --token-env`; afterwards the
token must be absent from every database row, the broker's and the result backend's stored
messages (decoded: Celery base64-encodes message bodies), the worker's log, the CLI's output,
the API's responses and every file in the data directory.
"""

from __future__ import annotations

import base64
import re

import psycopg
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from studio.api.app import create_api
from studio.storage import db
from tests.conftest import REDIS_URL
from tests.support.api_client import admin_headers
from tests.support.hub_server import TOKEN, LocalHub
from tests.support.processes import run_studio, running_worker, studio_env, wait_for
from tests.support.training import trained_studio

_BASE64 = re.compile(rb"[A-Za-z0-9+/]{16,}={0,2}")


def holds(blob: bytes, secret: str) -> bool:
    """Whether `blob` holds `secret` as is, or inside any base64 run in it."""
    needle = secret.encode()
    if needle in blob:
        return True
    for run in _BASE64.finditer(blob):
        chunk = run.group()
        for start in range(4):  # a run may begin mid-quantum when glued to other text
            part = chunk[start:]
            try:
                if needle in base64.b64decode(part + b"=" * (-len(part) % 4)):
                    return True
            except ValueError:
                continue
    return False


def redis_dump(url: str) -> bytes:
    client = redis.Redis.from_url(url)
    parts = []
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"string":
            parts.append(client.get(key))
        elif kind == b"list":
            parts += client.lrange(key, 0, -1)
        elif kind == b"hash":
            parts += [k + b"=" + v for k, v in client.hgetall(key).items()]
        elif kind == b"set":
            parts += list(client.smembers(key))
        elif kind == b"zset":
            parts += client.zrange(key, 0, -1)
        parts.append(key)
    return b"\n".join(p for p in parts if p)


def database_dump(url: str) -> bytes:
    engine = db.engine_for(url)
    rows = []
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            rows += [repr(tuple(r)) for r in conn.execute(text(f'SELECT * FROM "{table}"'))]
    return "\n".join(rows).encode()


def files_dump(root) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_holds_sees_a_secret_inside_base64():
    wrapped = base64.b64encode(b'{"args": [7], "kwargs": {"token": "' + TOKEN.encode() + b'"}}')
    assert holds(b'{"body": "' + wrapped + b'"}', TOKEN)
    assert not holds(b'{"body": "' + base64.b64encode(b'{"args": [7]}') + b'"}', TOKEN)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis+postgresql"])
def test_the_token_reaches_the_hub_and_nothing_else(backend, tmp_path, monkeypatch, request):
    extra: dict[str, str] = {}
    if backend != "sqlite":
        url = request.getfixturevalue("pg_url")
        db.engine_for(url).dispose()
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"),
                             autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        extra = {"database_url": url, "broker_url": REDIS_URL}
    data_dir = tmp_path / "data"
    settings, run_id, _ = trained_studio(data_dir, extra.get("database_url"))
    settings = settings.model_copy(update={"broker_url": extra.get("broker_url")})
    client, headers = TestClient(create_api(settings)), admin_headers(settings)
    answers: list[str] = []

    with LocalHub({TOKEN: "alice"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)  # the worker and the CLI inherit these
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        created = client.post(f"/api/v1/runs/{run_id}/exports", headers=headers, json={
            "target": "hub", "repo_id": "alice/from-api", "private": False, "token": TOKEN})
        assert created.status_code == 201, created.text
        answers.append(created.text)
        queued = redis_dump(REDIS_URL) if extra else b"\n".join(
            p.read_bytes() for p in sorted(data_dir.glob("*")) if p.name.startswith("broker.db"))
        assert b"worker.export" in queued, "the queued message is where we look"
        assert not holds(queued, TOKEN), "the broker's stored message holds the token"

        export_id = created.json()["id"]
        with running_worker(data_dir, tmp_path / "worker.log", **extra):
            def finished():
                response = client.get(f"/api/v1/exports/{export_id}", headers=headers)
                answers.append(response.text)
                return response.json()["state"] in ("succeeded", "failed") and response.json()

            done = wait_for(finished, 180, "the push to finish")
            assert done["state"] == "succeeded", done["error"]
            env = studio_env(data_dir, **extra)
            env["PUSH_TOKEN"] = TOKEN
            cli = run_studio(["export", str(run_id), "--to", "hub", "--repo-id",
                              "alice/from-cli", "--token-env", "PUSH_TOKEN"], env, timeout=180)
            assert cli.returncode == 0, cli.stdout + cli.stderr
            assert "succeeded" in cli.stdout
        answers += [client.get(path, headers=headers).text for path in (
            "/api/v1/exports", f"/api/v1/runs/{run_id}", f"/api/v1/runs/{run_id}/model-card")]

    assert hub.tokens_seen == {TOKEN}, "the Hub got the token"
    assert set(hub.repos) == {"alice/from-api", "alice/from-cli"}
    assert not hub.repos["alice/from-api"].private
    assert "README.md" in hub.repos["alice/from-cli"].files
    assert not list((data_dir / "secrets" / "export-tokens").iterdir()), "token files deleted"
    places = {
        "database rows": database_dump(settings.sqlalchemy_url),
        "worker log": (tmp_path / "worker.log").read_bytes(),
        "CLI output": (cli.stdout + cli.stderr).encode(),
        "API responses": "\n".join(answers).encode(),
        "data directory (SQLite broker and results included)": files_dump(data_dir),
    }
    if extra:
        places["Redis (broker and result backend)"] = redis_dump(REDIS_URL)
    for place, blob in places.items():
        assert blob, place
        assert not holds(blob, TOKEN), f"the token is in the {place}"
