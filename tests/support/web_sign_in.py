"""Signing in to the web app as a browser does, for tests that drive it without one: open
the login page (which sets the form's CSRF cookie), then post the form with its token."""

from __future__ import annotations

import re

from frontend.login import FORM_COOKIE

_CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


def form_token(client) -> str:
    """The CSRF token of the sign-in form the login page gives `client` (httpx or
    TestClient), its cookie kept by the client. A client signed in already is sent on by
    the page; it has the form's cookie from the page it signed in on."""
    shown = _CSRF_FIELD.search(client.get("/login").text)
    token = client.cookies.get(FORM_COOKIE)
    assert token and (shown is None or shown.group(1) == token)
    return token


def post_sign_in(client, username: str, password: str, next_path: str = "/", **kw):
    """Post the sign-in form as the login page gives it; the answer (303 when signed in)."""
    return client.post("/login", data={"username": username, "password": password,
                                       "next": next_path, "csrf": form_token(client)}, **kw)
