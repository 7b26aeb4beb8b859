"""The studio's own login: a server-rendered page, a session cookie, and the check Gradio
calls on every request of the UI (`signed_in_user`).

Why not Gradio's login: its sessions live in the web process's memory and know nothing of
the studio's users, so a disabled user would stay signed in, a failed login could not be
rate-limited per user and address, and a restart would sign everyone out. Here a session is
a row (an `ApiToken` of kind session, stored hashed) that the user's role and state are
read with at each request.
"""

from __future__ import annotations

import html
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from studio.services import auth
from studio.services.auth import BadLogin, TooManyLogins
from studio.settings import Settings
from studio.tables import TokenKind

COOKIE = "studio_session"

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · ICRL Studio</title>
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
<p class="lead">Teach a language model to search your own documents, with in-context
reinforcement learning.</p>
<p class="steps">Upload documents and questions · launch a run · watch it learn ·
evaluate · export the model</p>
{error}
<form method="post" action="/login">
<input type="hidden" name="next" value="{next}">
<label for="username">Username</label>
<input id="username" name="username" autocomplete="username" value="{username}" required
       {focus_user}>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required
       {focus_password}>
<button type="submit" id="sign-in">Sign in</button>
</form>
<p class="hint">The first admin's password is printed once by <code>studio up</code>; an admin
adds users on the Team page or with <code>studio user add NAME --role member</code>.</p>
</main></body></html>
"""


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path of this site only (no open redirect)."""
    parts = urlsplit(target or "/")
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or \
            parts.path.startswith("//") or parts.path.startswith("/login"):
        return "/"
    return parts.path + (f"?{parts.query}" if parts.query else "")


def login_page(next_path: str = "/", username: str = "", error: str | None = None,
               status_code: int = 200, headers: dict | None = None) -> HTMLResponse:
    body = PAGE.format(
        next=html.escape(_safe_next(next_path)), username=html.escape(username),
        error=f'<div class="error" role="alert">{html.escape(error)}</div>' if error else "",
        focus_user="" if username else "autofocus",
        focus_password="autofocus" if username else "")
    return HTMLResponse(body, status_code=status_code, headers=headers)


def signed_in_user(settings: Settings, request: Request) -> str | None:
    """The username of the request's session cookie, None without a live session (Gradio's
    `auth_dependency`: it answers 401 to every UI request then)."""
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    actor = auth.actor_for_token(settings, token, TokenKind.session)
    return actor.username if actor else None


def login_routes(settings: Settings) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/login")
    def show(request: Request, next: str = "/") -> Response:  # noqa: A002
        if signed_in_user(settings, request):
            return RedirectResponse(_safe_next(next), status_code=303)
        return login_page(next)

    @router.post("/login")
    def sign_in(request: Request, username: str = Form(""), password: str = Form(""),
                next: str = Form("/")) -> Response:  # noqa: A002
        address = request.client.host if request.client else "unknown"
        try:
            token = auth.log_in(settings, username, password, address)
        except TooManyLogins as exc:
            return login_page(next, username, str(exc), 429,
                              {"Retry-After": str(exc.retry_after)})
        except BadLogin as exc:
            return login_page(next, username, f"{exc}; try again", 401)
        response = RedirectResponse(_safe_next(next), status_code=303)
        response.set_cookie(COOKIE, token, max_age=int(auth.SESSION_LIFETIME.total_seconds()),
                            httponly=True, samesite="lax",
                            secure=request.url.scheme == "https", path="/")
        return response

    @router.get("/logout")
    def sign_out(request: Request) -> Response:
        token = request.cookies.get(COOKIE)
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


class LoginRedirect:
    """ASGI middleware: a page load of `/` without a live session goes to the login page
    (Gradio itself would answer it with a bare 401). Plain ASGI, not `@app.middleware`:
    every other request, a stream's chunks included, passes through untouched."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == "/":
            request = Request(scope)
            if not await run_in_threadpool(signed_in_user, self.settings, request):
                target = quote(request.url.path + (f"?{request.url.query}"
                                                   if request.url.query else ""), safe="")
                redirect = RedirectResponse(f"/login?next={target}", status_code=303)
                await redirect(scope, receive, send)
                return
        await self.app(scope, receive, send)


def install(app: FastAPI, settings: Settings) -> None:
    """The login routes, and the redirect to them."""
    app.include_router(login_routes(settings))
    app.add_middleware(LoginRedirect, settings=settings)
