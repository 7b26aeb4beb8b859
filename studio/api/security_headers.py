"""Security headers on every response of the web app: UI pages, API, static files, errors.

A Content-Security-Policy that lets the browser run only the app's own scripts (and the
inline scripts of the pages it serves, marked with a per-response nonce), refuses framing,
and `X-Content-Type-Options: nosniff`. docs/ui.md explains each allowance. The nonce goes on
every `<script>` of an HTML response: the app's pages are its own templates, and what they
carry from users is escaped (Gradio's page writes its config as JSON with `<` escaped).

The middleware wraps the application outside Starlette's error middleware, so a 500 page
carries the headers too, and it covers the Gradio UI mounted in the same app.
"""

from __future__ import annotations

import re
import secrets

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# What Gradio 6 needs, found by loading every tab in Chromium with the policy on
# (tests/frontend/test_pages_text_and_csp.py keeps it that way); docs/ui.md says why. Fonts,
# fetches and workers fall back to default-src.
POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'", "'nonce-{nonce}'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
}
# FastAPI's interactive API docs load Swagger UI from its CDN: that page alone may.
DOCS_ALLOWANCES = {
    "script-src": ["https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/"],
    "style-src": ["https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/"],
    "img-src": ["https://fastapi.tiangolo.com/img/"],
}
_SCRIPT_TAG = re.compile(rb"<script(?=[\s>])", re.IGNORECASE)


def content_security_policy(nonce: str, docs_page: bool = False) -> str:
    parts = []
    for directive, sources in POLICY.items():
        extra = DOCS_ALLOWANCES.get(directive, []) if docs_page else []
        parts.append(" ".join([directive, *sources, *extra]).replace("{nonce}", nonce))
    return "; ".join(parts)


class SecurityHeaders:
    """ASGI middleware: the three headers on each response; a nonce on each page's scripts.

    An HTML page is read whole (pages are small; event streams and files pass as they
    come) so that its `<script>` tags get the response's nonce. Pages are asked for
    uncompressed (the request's Accept-Encoding is dropped when it accepts HTML), since a
    compressed body could not be marked.
    """

    def __init__(self, app: ASGIApp, docs_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.docs_paths = docs_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        marks_pages = scope["method"] != "HEAD"  # a HEAD answer keeps its page's length
        if marks_pages and "text/html" in Headers(scope=scope).get("accept", ""):
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"]
                                          if k.lower() != b"accept-encoding"]}
        nonce = secrets.token_urlsafe(18)
        policy = content_security_policy(nonce, scope["path"] in self.docs_paths)
        held: list[Message] = []  # an HTML page's start and body parts, until its last part

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = policy
                headers["X-Frame-Options"] = "DENY"
                headers["X-Content-Type-Options"] = "nosniff"
                if marks_pages and headers.get("content-type", "").startswith("text/html") \
                        and "content-encoding" not in headers:
                    held.append(message)
                    return
            elif message["type"] == "http.response.body" and held:
                held.append(message)
                if message.get("more_body"):
                    return
                await self._send_page(held, nonce, send)
                return
            await send(message)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    async def _send_page(held: list[Message], nonce: str, send: Send) -> None:
        start, *parts = held
        body = _SCRIPT_TAG.sub(b'<script nonce="' + nonce.encode() + b'"',
                               b"".join(part.get("body", b"") for part in parts))
        headers = MutableHeaders(scope=start)
        if "content-length" in headers:
            headers["content-length"] = str(len(body))
        await send(start)
        await send({"type": "http.response.body", "body": body})


def install_security_headers(app) -> None:
    """Wrap `app` (a FastAPI app, before it serves) outside its error middleware, so
    every response, a 500 included, goes through `SecurityHeaders`."""
    build = app.build_middleware_stack
    docs = frozenset([app.docs_url] if app.docs_url else [])
    app.build_middleware_stack = lambda: SecurityHeaders(build(), docs)
