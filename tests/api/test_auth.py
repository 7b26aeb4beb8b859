"""Who is signed in: hashed tokens, 401 on every route but /healthz, the UI's own login with
its rate limit, roles that apply at once, disabled users stopped at once."""

from __future__ import annotations

import re
import subprocess
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import select

from frontend.login import COOKIE
from frontend.server import create_app
from studio.jobs import launcher
from studio.services import auth
from studio.services.access import Forbidden
from studio.services.errors import Conflict, NotFound
from studio.storage import db
from studio.storage.tables import ApiToken, LoginFailure, utcnow
from tests.conftest import free_port
from tests.support.actors import PASSWORD, admin, user
from tests.support.processes import stop, studio_env
from tests.support.web_sign_in import form_token, post_sign_in


def test_passwords_and_tokens_are_stored_hashed(migrated_db_url):
    with db.session_scope(migrated_db_url) as session:
        creds = auth.bootstrap_admin(session)
        assert creds is not None and creds.token.startswith(auth.TOKEN_PREFIX)
        rows = session.exec(select(ApiToken)).all()
        assert creds.token not in {r.token_hash for r in rows}
        assert auth.authenticate(session, "admin", creds.password) is not None
        assert auth.authenticate(session, "admin", creds.password + "x") is None
        assert auth.user_for_token(session, creds.token).username == "admin"
    with db.session_scope(migrated_db_url) as session:
        assert auth.bootstrap_admin(session) is None, "the admin is created only once"


def test_revoked_token_is_refused(settings):
    with db.session_scope(settings.sqlalchemy_url) as session:
        token = auth.create_token(session, auth.create_user(session, "ana", PASSWORD), "ci")
        row = session.exec(select(ApiToken).where(ApiToken.name == "ci")).one()
        row.revoked_at = utcnow()
    with db.session_scope(settings.sqlalchemy_url) as session:
        assert auth.user_for_token(session, token) is None


def test_usernames_roles_and_passwords_are_checked(settings):
    with db.session_scope(settings.sqlalchemy_url) as session:
        auth.create_user(session, "ana", PASSWORD)
        with pytest.raises(Conflict, match="username: 'ana' already exists"):
            auth.create_user(session, "ana", "other-password")
        with pytest.raises(auth.AuthError, match="password: use at least 8"):
            auth.create_user(session, "bo", "short")
        with pytest.raises(auth.AuthError, match="role: 'boss' is not one of admin, member"):
            auth.create_user(session, "bo", PASSWORD, role="boss")
        for bad in ("", "a b", "x\x00y", "é" * 3, "x" * 65):
            with pytest.raises(auth.AuthError, match="username: use 1 to 64"):
                auth.create_user(session, bad, PASSWORD)


def test_only_admins_manage_users_and_the_last_admin_stays(settings):
    root, ana = admin(settings), user(settings, "ana")
    with pytest.raises(Forbidden, match="ana may not add users: only admins may"):
        auth.add_user(settings, ana, "bo", "member")
    new = auth.add_user(settings, root, "bo", "viewer")
    assert new.role == "viewer" and len(new.password) >= auth.MIN_PASSWORD
    with pytest.raises(Conflict, match="last active admin"):
        auth.set_disabled(settings, root, "admin", True)
    with pytest.raises(Conflict, match="last active admin"):
        auth.set_role(settings, root, "admin", "member")
    auth.set_role(settings, root, "ana", "admin")
    assert auth.set_disabled(settings, root, "admin", True)["disabled"]


@contextmanager
def studio_client(settings, address: str = "testclient"):
    with TestClient(create_app(settings), client=(address, 50000),
                    follow_redirects=False) as client:
        yield client


@pytest.fixture
def client_and_creds(settings):
    with db.session_scope(settings.sqlalchemy_url) as session:
        creds = auth.bootstrap_admin(session)
    with studio_client(settings) as client:
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
    assert ok.json()["role"] == "admin"


def test_health_says_only_up_or_down_without_a_token(client_and_creds):
    """The parts, their URLs and the workers map the deployment: a signed-in caller's."""
    client, creds = client_and_creds
    for headers in ({}, {"Authorization": "Bearer icrl_nope"}):
        public = client.get("/healthz", headers=headers)
        assert public.status_code == 200
        assert set(public.json()) == {"status", "detail"} and "API token" in public.json()["detail"]
    full = client.get("/healthz", headers={"Authorization": f"Bearer {creds.token}"}).json()
    assert full["status"] == public.json()["status"]
    assert {"database", "broker", "workers", "queues", "problems"} <= set(full)


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


def _sign_in(client, username: str, password: str):
    return post_sign_in(client, username, password, "/?run=3")


def _sign_out(client):
    page = client.get("/logout")
    assert page.status_code == 200 and 'id="sign-out"' in page.text
    token = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    return client.post("/logout", data={"csrf": token})


def test_ui_needs_a_login_and_keeps_the_username_after_a_wrong_password(client_and_creds):
    client, creds = client_and_creds
    assert client.get("/config").status_code == 401
    page = client.get("/?run=3")
    assert page.status_code == 303 and page.headers["location"] == "/login?next=%2F%3Frun%3D3"
    bad = _sign_in(client, "admin", "wrong")
    assert bad.status_code == 401 and "wrong username or password" in bad.text
    assert 'value="admin"' in bad.text, "the username stays in the form"
    assert client.get("/config").status_code == 401
    good = _sign_in(client, "admin", creds.password)
    assert good.status_code == 303 and good.headers["location"] == "/?run=3"
    cookie = good.cookies[COOKIE]
    assert cookie.startswith(auth.SESSION_PREFIX)
    assert "httponly" in good.headers["set-cookie"].lower()
    assert client.get("/config").status_code == 200
    assert client.get("/").status_code == 200
    with db.session_scope(client.app.state.settings.sqlalchemy_url) as session:
        assert cookie not in {r.token_hash for r in session.exec(select(ApiToken))}
        assert session.exec(select(LoginFailure)).all() == [], "a success clears the failures"
    assert _sign_out(client).status_code == 303
    client.cookies.set(COOKIE, cookie)  # a copy kept after signing out does not work
    assert client.get("/config").status_code == 401


def test_a_session_cannot_call_the_api_and_a_token_cannot_open_the_ui(client_and_creds):
    client, creds = client_and_creds
    session = _sign_in(client, "admin", creds.password).cookies[COOKIE]
    assert client.get("/api/v1/me", headers={"Authorization": f"Bearer {session}"}
                      ).status_code == 401
    client.cookies.clear()
    client.cookies.set(COOKIE, creds.token)
    assert client.get("/config").status_code == 401


def test_next_never_leaves_the_site(client_and_creds):
    client, creds = client_and_creds
    for target in ("https://evil.example/", "//evil.example/x", "/login?next=/"):
        good = post_sign_in(client, "admin", creds.password, target)
        assert good.headers["location"] == "/", target


def test_failed_logins_are_limited_per_user_and_address(settings):
    user(settings, "ana")
    with studio_client(settings, "10.0.0.1") as first, \
            studio_client(settings, "10.0.0.2") as second:
        for _ in range(auth.MAX_FAILURES_PER_USER_AND_ADDRESS):
            assert _sign_in(first, "ana", "wrong").status_code == 401
        limited = _sign_in(first, "ana", PASSWORD)
        assert limited.status_code == 429, "the right password waits too"
        assert 0 < int(limited.headers["Retry-After"]) <= 15 * 60
        assert "too many failed logins; try again in" in limited.text
        assert _sign_in(second, "ana", PASSWORD).status_code == 303, "another address may"
        for n in range(auth.MAX_FAILURES_PER_ADDRESS - auth.MAX_FAILURES_PER_USER_AND_ADDRESS):
            assert _sign_in(first, f"someone{n}", "wrong").status_code == 401
        assert _sign_in(first, "nobody-else", "wrong").status_code == 429, "spraying stops"


def test_a_locked_username_slows_but_still_signs_in_from_a_clean_address(settings):
    """50 failures from anywhere locked any user, admin included, out for 15 renewable
    minutes, the right password too (D5); then, while they stayed, one mistyped password
    from a clean address locked that address out too. Now each try waits, and an address
    is refused by its own failures only."""
    user(settings, "ana")
    with db.session_scope(settings.sqlalchemy_url) as session:
        for n in range(auth.MAX_FAILURES_PER_USER):
            session.add(LoginFailure(username="ana", address=f"10.7.{n // 200}.{n % 200}"))
    assert auth.login_delay(settings, "ana") == auth.LOCKED_USER_DELAY_S
    assert auth.login_delay(settings, "bob") == 0
    with studio_client(settings, "10.7.0.1") as failed_once, \
            studio_client(settings, "10.8.0.1") as clean:
        assert _sign_in(clean, "ana", "wrong").status_code == 401
        assert _sign_in(clean, "ana", PASSWORD).status_code == 303, "a typo locks no one out"
        assert _sign_in(failed_once, "ana", PASSWORD).status_code == 303
    with db.session_scope(settings.sqlalchemy_url) as session:
        for _ in range(auth.MAX_FAILURES_PER_USER_AND_ADDRESS):
            session.add(LoginFailure(username="ana", address="10.9.0.1"))
    with studio_client(settings, "10.9.0.1") as over_its_own_limit:
        refused = _sign_in(over_its_own_limit, "ana", PASSWORD)
        assert refused.status_code == 429 and "too many failed logins" in refused.text


def test_the_forms_of_sign_in_and_sign_out_carry_csrf_tokens(client_and_creds):
    """The login form could be posted from another site, and sign-out was a GET (S4)."""
    client, creds = client_and_creds
    posted = {"username": "admin", "password": creds.password, "next": "/"}
    assert client.post("/login", data=posted).status_code == 403, "no form cookie"
    token = form_token(client)
    forged = client.post("/login", data={**posted, "csrf": token[::-1]})
    assert forged.status_code == 403 and "sign-in form was not this studio" in forged.text
    assert COOKIE not in client.cookies
    assert client.post("/login", data={**posted, "csrf": token}).status_code == 303
    assert client.get("/logout").status_code == 200, "a link shows the button, no more"
    assert client.get("/config").status_code == 200
    assert client.post("/logout", data={"csrf": "made-up"}).status_code == 403
    assert client.get("/config").status_code == 200, "still signed in"
    assert _sign_out(client).headers["location"] == "/login"
    assert client.get("/config").status_code == 401
    assert client.get("/logout").headers["location"] == "/login"


def test_only_the_studios_own_origin_may_read_the_ui_with_its_cookie(client_and_creds):
    """Gradio's CORS answered credentialed requests from any localhost port (S4)."""
    client, creds = client_and_creds
    assert _sign_in(client, "admin", creds.password).status_code == 303
    for origin in ("http://localhost:9999", "http://127.0.0.1:8000", "https://evil.example"):
        answer = client.get("/config", headers={"Origin": origin})
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers, origin
        preflight = client.options("/gradio_api/queue/join", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in preflight.headers, origin
    own = client.app.state.settings.web_url
    answer = client.get("/config", headers={"Origin": own})
    assert answer.headers["access-control-allow-origin"] == own
    assert answer.headers["access-control-allow-credentials"] == "true"


def test_a_disabled_user_is_stopped_at_once_and_a_role_change_applies_at_once(settings):
    root, ana = admin(settings), user(settings, "ana")
    token = auth.issue_token(settings, ana, "ci")["token"]
    bearer = {"Authorization": f"Bearer {token}"}
    with studio_client(settings) as client:
        assert _sign_in(client, "ana", PASSWORD).status_code == 303
        assert client.get("/api/v1/me", headers=bearer).json()["role"] == "member"
        auth.set_role(settings, root, "ana", "viewer")
        assert client.get("/api/v1/me", headers=bearer).json()["role"] == "viewer"
        auth.set_disabled(settings, root, "ana", True)
        assert client.get("/api/v1/me", headers=bearer).status_code == 401
        assert client.get("/config").status_code == 401, "the browser session ends too"
        assert _sign_in(client, "ana", PASSWORD).status_code == 401
        auth.set_disabled(settings, root, "ana", False)
        assert client.get("/api/v1/me", headers=bearer).status_code == 200


def test_tokens_list_and_revoke_are_the_users_own(api, settings):
    ana = user(settings, "ana")
    mine = auth.issue_token(settings, ana, "laptop")
    listed = api.get("/tokens").json()
    assert mine["id"] not in [t["id"] for t in listed], "an admin lists its own tokens"
    assert all("token" not in t and "token_hash" not in t for t in listed)
    made = api.post("/tokens", json={"name": "ci"}).json()
    assert made["token"].startswith(auth.TOKEN_PREFIX)
    assert made["token"] not in api.get("/tokens").text
    assert api.delete(f"/tokens/{mine['id']}").json()["revoked"], "an admin may revoke any"
    with pytest.raises(NotFound, match="does not exist among your tokens"):
        auth.revoke_token(settings, ana, made["id"])


@pytest.mark.parametrize("trusted", [None, "127.0.0.1"], ids=["socket", "trusted-proxy"])
def test_a_forged_forwarded_for_does_not_dodge_the_login_limit(settings, tmp_path, trusted):
    """The web app as `studio up` serves it: rotating X-Forwarded-For gave every wrong
    password a 401 and none a 429. Only a configured proxy's header is believed."""
    user(settings, "ana")
    port = free_port()
    web = settings.model_copy(update={"port": port, "trusted_proxies": trusted})
    env = studio_env(settings.resolved_data_dir, trusted_proxies=trusted)
    with open(tmp_path / "web.log", "w") as log:
        server = subprocess.Popen(launcher.web_command(web), env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        assert launcher.wait_until_serving(f"{base}/healthz", server, 60), "the web app serves"
        with httpx.Client(base_url=base) as browser:
            for n in range(auth.MAX_FAILURES_PER_USER_AND_ADDRESS):
                failed = post_sign_in(browser, "ana", "wrong",
                                      headers={"X-Forwarded-For": f"10.9.0.{n}"})
                assert failed.status_code == 401
            right = post_sign_in(browser, "ana", PASSWORD,
                                 headers={"X-Forwarded-For": "10.9.1.1"})
        assert right.status_code == (303 if trusted else 429)
    finally:
        stop(server)
