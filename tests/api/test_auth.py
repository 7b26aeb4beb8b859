"""Auth from day one: hashed tokens, 401 on every route but /healthz, the UI's login."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlmodel import select

from frontend.server import create_app
from studio import db
from studio.services import auth
from studio.tables import ApiToken, utcnow


def test_passwords_and_tokens_are_stored_hashed(any_db_url):
    db.upgrade(any_db_url)
    with db.session_scope(any_db_url) as session:
        creds = auth.bootstrap_admin(session)
        assert creds is not None and creds.token.startswith(auth.TOKEN_PREFIX)
        rows = session.exec(select(ApiToken)).all()
        assert [r.token_hash for r in rows] != [creds.token]
        assert creds.token not in {r.token_hash for r in rows}
        assert auth.authenticate(session, "admin", creds.password) is not None
        assert auth.authenticate(session, "admin", creds.password + "x") is None
        assert auth.user_for_token(session, creds.token).username == "admin"
    with db.session_scope(any_db_url) as session:
        assert auth.bootstrap_admin(session) is None, "the admin is created only once"


def test_revoked_token_is_refused(settings):
    with db.session_scope(settings.sqlalchemy_url) as session:
        user = auth.create_user(session, "ana", "pw")
        token = auth.create_token(session, user, "ci")
        row = session.exec(select(ApiToken).where(ApiToken.name == "ci")).one()
        row.revoked_at = utcnow()
    with db.session_scope(settings.sqlalchemy_url) as session:
        assert auth.user_for_token(session, token) is None


def test_duplicate_username_names_the_field(settings):
    with db.session_scope(settings.sqlalchemy_url) as session:
        auth.create_user(session, "ana", "pw")
        with pytest.raises(auth.AuthError, match="username: 'ana' already exists"):
            auth.create_user(session, "ana", "other")


@pytest.fixture
def client_and_creds(settings):
    with db.session_scope(settings.sqlalchemy_url) as session:
        creds = auth.bootstrap_admin(session)
    with TestClient(create_app(settings)) as client:
        yield client, creds


def test_api_needs_a_valid_bearer_token(client_and_creds):
    client, creds = client_and_creds
    assert client.get("/healthz").status_code == 200
    assert client.get("/api/v1/openapi.json").status_code == 200
    missing = client.get("/api/v1/me")
    assert missing.status_code == 401 and "Authorization: Bearer" in missing.json()["detail"]
    assert client.get("/api/v1/me", headers={"Authorization": "Bearer icrl_nope"}).status_code == 401
    assert client.get("/api/v1/me", headers={"Authorization": f"Basic {creds.token}"}).status_code == 401
    ok = client.get("/api/v1/me", headers={"Authorization": f"Bearer {creds.token}"})
    assert ok.status_code == 200 and ok.json()["username"] == "admin"


def test_every_api_route_but_health_and_schema_is_protected(client_and_creds):
    client, _ = client_and_creds
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert "/api/v1/me" in paths and "/healthz" in paths
    for path, methods in paths.items():
        if path == "/healthz":
            continue
        concrete = re.sub(r"\{[^}]+\}", "1", path)
        for method in methods:
            assert client.request(method, concrete).status_code == 401, (method, path)


def test_ui_needs_a_login(client_and_creds):
    client, creds = client_and_creds
    assert client.get("/config").status_code == 401
    bad = client.post("/login", data={"username": "admin", "password": "wrong"})
    assert bad.status_code == 400
    good = client.post("/login", data={"username": "admin", "password": creds.password})
    assert good.status_code == 200
    assert client.get("/config").status_code == 200
