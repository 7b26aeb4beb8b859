"""The studio's own login: a server-rendered page, a session cookie, and the check Gradio
calls on every request of the UI (`signed_in_user`).

Why not Gradio's login: its sessions live in the web process's memory and know nothing of
the studio's users, so a disabled user would stay signed in, a failed login could not be
rate-limited per user and address, and a restart would sign everyone out. Here a session is
a row (an `ApiToken` of kind session, stored hashed) that the user's role and state are
read with at each request.

Both forms carry a CSRF token: sign-in a random one the browser also holds as a
`SameSite=Strict` cookie, sign-out one derived from the session. A page of another site can
neither sign a user in as someone else nor sign them out.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import secrets
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from studio.api.request_gate import sends_body
from studio.api_paths import API_PREFIX
from studio.services import auth
from studio.services.access import Actor
from studio.services.auth import BadLogin, TooManyLogins
from studio.settings import Settings
from studio.storage.tables import TokenKind

COOKIE = "studio_session"
FORM_COOKIE = "studio_login_form"
FORM_COOKIE_AGE_S = 24 * 3600

FRAME = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · ICRL Studio</title>
<style>
body {{ font-family: system-ui, sans-serif; background: #f6f7fb; margin: 0; color: #1f2937; }}
main {{ max-width: 380px; margin: 12vh auto; background: #fff; padding: 32px 36px;
       border-radius: 12px; box-shadow: 0 2px 16px rgba(0,0,0,.08); }}
h1 {{ font-size: 1.5rem; margin: 0 0 6px; }}
h1 .mark {{ display: inline-block; width: 12px; height: 12px; border-radius: 3px;
           background: #ea580c; margin-right: 8px; vertical-align: 2px; }}
p.lead {{ margin: 0 0 6px; color: #374151; font-size: .98rem; line-height: 1.4; }}
p.steps {{ margin: 0 0 18px; color: #6b7280; font-size: .85rem; }}
label {{ display: block; font-size: .9rem; margin: 14px 0 6px; }}
input {{ width: 100%; box-sizing: border-box; padding: 9px 11px; font-size: 1rem;
        border: 1px solid #d1d5db; border-radius: 8px; }}
button {{ margin-top: 22px; width: 100%; padding: 10px; font-size: 1rem; border: 0;
         border-radius: 8px; background: #ea580c; color: #fff; cursor: pointer; }}
.error {{ background: #fef2f2; color: #991b1b; border: 1px solid #fecaca; padding: 9px 11px;
         border-radius: 8px; margin-bottom: 8px; font-size: .92rem; }}
.hint {{ margin-top: 18px; font-size: .85rem; color: #6b7280; }}
</style></head>
<body><main>
<h1><span class="mark"></span>ICRL Studio</h1>
{body}
</main></body></html>
"""
"""The pages' frame; every text put into it is escaped first."""

SIGN_IN = """<p class="lead">Teach a language model to search your own documents, with in-context
reinforcement learning.</p>
<p class="steps">Upload documents and questions · launch a run · watch it learn ·
evaluate · export the model</p>
{error}
<form method="post" action="/login">
<input type="hidden" name="next" value="{next}">
<input type="hidden" name="csrf" value="{csrf}">
<label for="username">Username</label>
<input id="username" name="username" autocomplete="username" value="{username}" required
       {focus_user}>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required
       {focus_password}>
<button type="submit" id="sign-in">Sign in</button>
</form>
<p class="hint">The first admin's password is printed once by <code>studio up</code>; an admin
adds users on the Team page or with <code>studio user add NAME --role member</code>.</p>"""

SIGN_OUT = """<p class="lead">Signed in as {username}.</p>
<form method="post" action="/logout">
<input type="hidden" name="csrf" value="{csrf}">
<button type="submit" id="sign-out">Sign out</button>
</form>
<p class="hint"><a href="/">Back to the studio</a></p>"""

def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (no open redirect)."""
    parts = urlsplit(target or "/")
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or \
            parts.path.startswith("//") or parts.path.startswith("/login"):
        return "/"
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _page(title: str, body: str, status_code: int = 200, headers: dict | None = None
          ) -> HTMLResponse:
    return HTMLResponse(FRAME.format(title=title, body=body), status_code=status_code,
                        headers=headers)


def login_page(csrf: str, next_path: str = "/", username: str = "", error: str | None = None,
               status_code: int = 200, headers: dict | None = None) -> HTMLResponse:
    body = SIGN_IN.format(
        next=html.escape(_safe_next(next_path)), username=html.escape(username),
        csrf=html.escape(csrf),
        error=f'<div class="error" role="alert">{html.escape(error)}</div>' if error else "",
        focus_user="" if username else "autofocus",
        focus_password="autofocus" if username else "")
    return _page("Sign in", body, status_code, headers)


def _form_token(request: Request) -> str:
    """The sign-in form's CSRF token: the browser's own (a cookie only this site's pages
    send, `SameSite=Strict`), or a new one. A form posted from another site lacks it."""
    return request.cookies.get(FORM_COOKIE) or secrets.token_urlsafe(24)


def _with_form_cookie(response: Response, token: str, request: Request) -> Response:
    response.set_cookie(FORM_COOKIE, token, max_age=FORM_COOKIE_AGE_S, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/login")
    return response


def sign_out_token(session_token: str) -> str:
    """The sign-out form's CSRF token: derived from the session, so only a page this site
    served to the signed-in browser can carry it."""
    return hmac.new(session_token.encode(), b"sign-out", hashlib.sha256).hexdigest()


def signed_in_actor(settings: Settings, request: Request) -> Actor | None:
    """The user of the request's session cookie, with its role now; None without a live
    session."""
    token = request.cookies.get(COOKIE)
    return auth.actor_for_token(settings, token, TokenKind.session) if token else None


def signed_in_user(settings: Settings, request: Request) -> str | None:
    """The username of the request's session cookie, None without a live session (Gradio's
    `auth_dependency`: it answers 401 to every UI request then)."""
    actor = signed_in_actor(settings, request)
    return actor.username if actor else None


def login_routes(settings: Settings) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/login")
    def show(request: Request, next: str = "/") -> Response:  # noqa: A002
        if signed_in_user(settings, request):
            return RedirectResponse(_safe_next(next), status_code=303)
        csrf = _form_token(request)
        return _with_form_cookie(login_page(csrf, next), csrf, request)

    @router.post("/login")
    async def sign_in(request: Request, username: str = Form(""), password: str = Form(""),
                      next: str = Form("/"), csrf: str = Form("")) -> Response:  # noqa: A002
        expected = request.cookies.get(FORM_COOKIE)
        if not expected or not hmac.compare_digest(expected, csrf):
            fresh = _form_token(request)
            return _with_form_cookie(login_page(
                fresh, next, username, "this sign-in form was not this studio's own or has "
                "expired; sign in again here", 403), fresh, request)
        address = request.client.host if request.client else "unknown"
        delay = await run_in_threadpool(auth.login_delay, settings, username)
        if delay:  # waited here, off the thread pool: a locked username slows, not stops
            await asyncio.sleep(delay)
        try:
            token = await run_in_threadpool(auth.log_in, settings, username, password, address)
        except TooManyLogins as exc:
            return login_page(csrf, next, username, str(exc), 429,
                              {"Retry-After": str(exc.retry_after)})
        except BadLogin as exc:
            return login_page(csrf, next, username, f"{exc}; try again", 401)
        response = RedirectResponse(_safe_next(next), status_code=303)
        response.set_cookie(COOKIE, token, max_age=int(auth.SESSION_LIFETIME.total_seconds()),
                            httponly=True, samesite="lax",
                            secure=request.url.scheme == "https", path="/")
        return response

    @router.get("/logout")
    def confirm_sign_out(request: Request) -> Response:
        """A page with the sign-out button: a link from another site signs no one out."""
        token = request.cookies.get(COOKIE)
        username = signed_in_user(settings, request)
        if not token or not username:
            return RedirectResponse("/login", status_code=303)
        return _page("Sign out", SIGN_OUT.format(username=html.escape(username),
                                                 csrf=sign_out_token(token)))

    @router.post("/logout")
    def sign_out(request: Request, csrf: str = Form("")) -> Response:
        token = request.cookies.get(COOKIE)
        if token and not hmac.compare_digest(sign_out_token(token), csrf):
            return _page("Sign out", '<div class="error" role="alert">This sign-out form was '
                         'not this studio\'s own; <a href="/logout">sign out here</a>.</div>',
                         403)
        if token:
            auth.log_out(settings, token)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    return router


def gradio_user(settings: Settings):
    """Gradio's `auth_dependency`: the session's user, looked up off the event loop."""

    async def user(request: Request) -> str | None:
        return await run_in_threadpool(signed_in_user, settings, request)

    return user


_FORMS = ("/login", "/logout")
"""The UI's paths that take a body without a session: the sign-in and sign-out forms."""


def _sends_the_ui_a_body(scope: Scope) -> bool:
    path = scope["path"]
    return path not in _FORMS and not path.startswith(API_PREFIX + "/") and sends_body(scope)


class LoginRedirect:
    """ASGI middleware: a page load of `/` without a live session goes to the login page
    (Gradio itself would answer it with a bare 401), and a body sent to the UI (Gradio's
    uploads and events) without one is a 401 before anything reads it (Gradio reads a body
    before it checks the session). Plain ASGI, not `@app.middleware`: every other request,
    a stream's chunks included, passes through untouched."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        page_load = scope["type"] == "http" and scope["method"] == "GET" and \
            scope["path"] == "/"
        if page_load or (scope["type"] == "http" and _sends_the_ui_a_body(scope)):
            request = Request(scope)
            if not await run_in_threadpool(signed_in_user, self.settings, request):
                await self._refusal(request, page_load)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _refusal(request: Request, page_load: bool) -> Response:
        if not page_load:
            return JSONResponse({"detail": "sign in first: the UI takes uploads and events "
                                 "from a signed-in browser only"}, status_code=401)
        target = quote(request.url.path + (f"?{request.url.query}" if request.url.query
                                           else ""), safe="")
        return RedirectResponse(f"/login?next={target}", status_code=303)


def install(app: FastAPI, settings: Settings) -> None:
    """The login routes, and the redirect to them."""
    app.include_router(login_routes(settings))
    app.add_middleware(LoginRedirect, settings=settings)
