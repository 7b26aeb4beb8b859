"""A request's sender is known, and its body bounded by its route, before the body is read
(N4): the web app is called as a server calls it (ASGI), with a body that streams from a
generator, so the test sees how much of it the app took."""

from __future__ import annotations

import asyncio
import json

import pytest

from frontend.login import COOKIE
from frontend.server import create_app
from studio.api.request_gate import DEFAULT_BODY_BYTES, FORM_FIELDS_BYTES
from studio.api.routes.corpora import RETRIEVE_BOUND
from studio.services import auth
from tests.support.actors import PASSWORD, admin, user
from tests.support.api_client import bearer

MIB = 1 << 20
SENT = 32 * MIB  # what each client offers to send
MULTIPART = "multipart/form-data; boundary=b0undary"
FILE_PART = (b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"'
             b"\r\nContent-Type: application/octet-stream\r\n\r\n")


def _call(app, path: str, headers: dict, first: bytes = b"", length: int | None = None):
    """POST `path` with a body of `first` and then 1 MiB chunks of `{`, SENT bytes in all
    (chunked, unless `length` is declared); (status, JSON answer, bytes the app took)."""
    taken, answer = 0, {"body": b""}
    chunks = [first + b"{" * (MIB - len(first))] + [b"{" * MIB] * (SENT // MIB - 1)

    async def receive():
        nonlocal taken
        if not chunks:
            return {"type": "http.request", "body": b"", "more_body": False}
        chunk = chunks.pop(0)
        taken += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    framing = {"content-length": str(length)} if length is not None else \
        {"transfer-encoding": "chunked"}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000),
             "server": ("testserver", 80), "state": {},
             "headers": [(k.lower().encode(), v.encode()) for k, v in
                         {"host": "testserver", **headers, **framing}.items()]}
    asyncio.run(app(scope, receive, send))
    return answer["status"], json.loads(answer["body"]), taken


def _session_cookie(settings) -> dict:
    user(settings, "ana")
    session = auth.log_in(settings, "ana", PASSWORD, "127.0.0.1")
    return {"cookie": f"{COOKIE}={session}"}


@pytest.mark.parametrize(("path", "content_type", "first"), [
    ("/api/v1/corpora", MULTIPART, FILE_PART),
    ("/api/v1/corpora/1/retrieve", "application/json", b""),
    ("/gradio_api/upload", MULTIPART, FILE_PART),
    ("/gradio_api/queue/join", "application/json", b""),
])
def test_a_body_without_a_token_or_session_is_refused_before_it_is_read(
        settings, path, content_type, first):
    """An unauthenticated 300 MB POST grew the web process by 290 MB and wrote 280 MB to
    disk before its 401: the API and Gradio read a body before their sign-in checks."""
    app = create_app(settings)
    for framing in (None, SENT):
        status, answer, taken = _call(app, path, {"content-type": content_type}, first,
                                      length=framing)
        assert status == 401, answer
        assert taken == 0, f"{taken} bytes read before the 401"
        assert "sign in" in answer["detail"] or "API token" in answer["detail"]


def test_a_body_past_its_routes_bound_is_a_413_while_it_streams(settings):
    """A 200 MB body to /retrieve grew the web process by 430 MB before its limits applied.
    Each route's bound holds as the body arrives, chunked or declared."""
    small = settings.model_copy(update={"max_upload_bytes": MIB})
    app = create_app(small)
    token = bearer(small, admin(small))
    json_body = {**token, "content-type": "application/json"}
    retrieve_limit = RETRIEVE_BOUND.limit(small)
    cases = [  # path, headers, first bytes, the route's bound
        ("/api/v1/corpora/1/retrieve", json_body, b"", retrieve_limit),
        ("/api/v1/runs", json_body, b"", DEFAULT_BODY_BYTES),
        ("/api/v1/corpora", {**token, "content-type": MULTIPART}, FILE_PART,
         MIB + FORM_FIELDS_BYTES),
        ("/gradio_api/queue/join", {**_session_cookie(small), "content-type":
                                    "application/json"}, b"", DEFAULT_BODY_BYTES),
    ]
    for path, headers, first, limit in cases:
        status, answer, taken = _call(app, path, headers, first)
        assert status == 413, (path, answer)
        assert limit < taken <= limit + MIB, f"{path}: {taken} bytes read, bound {limit}"
        assert answer["detail"] == (f"body: larger than the {limit} bytes this route takes; "
                                    f"{answer['detail'].split('; ', 1)[1]}"), answer
        status, answer, taken = _call(app, path, headers, first, length=SENT)
        assert (status, taken) == (413, 0), (path, answer)
    assert "split the file, or raise STUDIO_MAX_UPLOAD_BYTES" in _call(
        app, "/api/v1/corpora", cases[2][1], FILE_PART)[1]["detail"]
    assert "send at most 256 queries of 2000 characters a request" in _call(
        app, "/api/v1/corpora/1/retrieve", json_body)[1]["detail"]
    root = small.resolved_data_dir
    assert [p for folder in ("tmp", "uploads") for p in (root / folder).rglob("*")
            if p.is_file()] == [], "nothing of the refused upload is kept"
