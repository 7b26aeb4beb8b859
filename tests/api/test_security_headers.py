"""Every response of the web app carries the Content-Security-Policy, X-Frame-Options and
X-Content-Type-Options: UI pages, API JSON, 401s, 404s, static files and a 500; a page's
inline scripts carry the nonce its policy names, a fresh one per response."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.api.security_headers import DOCS_ALLOWANCES
from studio.storage.tables import Role
from tests.support.actors import PASSWORD, user
from tests.support.web_sign_in import post_sign_in


def directives(policy: str) -> dict[str, list[str]]:
    parsed = {}
    for part in policy.split(";"):
        name, *sources = part.split()
        parsed[name] = sources
    return parsed


def assert_headers(response) -> dict[str, list[str]]:
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    return directives(response.headers["content-security-policy"])


@pytest.fixture
def client(settings):
    """A browser-like client of the web app, signed in (as a viewer) on the login page."""
    user(settings, "reader", Role.viewer)
    app = create_app(settings)

    def fail():
        raise RuntimeError("a bug")

    app.add_api_route("/api/v1/test-failure", fail)  # a 500 from inside the app, routed
    app.router.routes.insert(0, app.router.routes.pop())  # before the UI's mount at /
    with TestClient(app, raise_server_exceptions=False) as client:
        signed_in = post_sign_in(client, "reader", PASSWORD, follow_redirects=False)
        assert signed_in.status_code == 303 and "studio_session" in client.cookies
        yield client


def test_every_kind_of_response_carries_the_three_headers(api, client):
    page = client.get("/", headers={"accept": "text/html"})
    asset = re.search(r'src="\./(assets/index-[\w-]+\.js)"', page.text).group(1)
    client.cookies.clear()  # signed out from here on
    responses = {
        "UI page": page,
        "login page": client.get("/login"),
        "API JSON": client.get("/healthz"),
        "API JSON, logged in": api.get("/me"),
        "401": client.get("/api/v1/runs"),
        "UI's 401": client.get("/config"),
        "404": client.get("/api/v1/no-such-route", headers=api.headers),
        "static file": client.get(f"/{asset}"),
        "favicon": client.get("/favicon.ico"),
        "500": client.get("/api/v1/test-failure", headers=api.headers),
    }
    codes = {kind: r.status_code for kind, r in responses.items()}
    assert codes == {"UI page": 200, "login page": 200, "API JSON": 200, "API JSON, logged in": 200, "401": 401,
                     "UI's 401": 401, "404": 404, "static file": 200, "favicon": 200,
                     "500": 500}
    for kind, response in responses.items():
        policy = assert_headers(response)
        assert policy["default-src"] == ["'self'"], kind


def test_the_policy_runs_only_the_apps_own_scripts(client):
    policy = assert_headers(client.get("/"))
    script = policy["script-src"]
    assert script[0] == "'self'" and re.fullmatch(r"'nonce-[\w-]{20,}'", script[1])
    assert len(script) == 2, "no 'unsafe-inline', no 'unsafe-eval', no other origin"
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"] and policy["form-action"] == ["'self'"]
    assert not [s for sources in policy.values() for s in sources if "://" in s or s == "*"]


def test_a_pages_inline_scripts_carry_its_own_fresh_nonce(client):
    first, second = (client.get("/", headers={"accept": "text/html"}) for _ in range(2))
    nonces = []
    for page in (first, second):
        nonce = directives(page.headers["content-security-policy"])["script-src"][1][7:-1]
        tags = re.findall(r"<script\b[^>]*>", page.text, re.IGNORECASE)
        assert tags and all(f'nonce="{nonce}"' in tag for tag in tags), tags
        assert int(page.headers["content-length"]) == len(page.content)
        nonces.append(nonce)
    assert nonces[0] != nonces[1]


def test_only_the_api_docs_page_may_load_swagger_from_its_cdn(client):
    docs = assert_headers(client.get("/api/v1/docs"))
    for directive, sources in DOCS_ALLOWANCES.items():
        assert set(sources) <= set(docs[directive])
    spec = assert_headers(client.get("/api/v1/openapi.json"))
    assert not [s for sources in spec.values() for s in sources if "://" in s]
