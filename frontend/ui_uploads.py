"""Files the browser uploads to the UI are their uploader's: Gradio's upload route answers
with each file's path, which is noted as the user's (`studio.services.uploads.mark_ui_upload`),
and Gradio's file route gives such a file to its uploader and admins only. Any signed-in
user could read another's upload by its path before.
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse
from gradio.route_utils import API_PREFIX as GRADIO_API
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from frontend.login import signed_in_actor
from studio.services.access import Actor, Forbidden
from studio.services.uploads import check_ui_upload_reader, mark_ui_upload
from studio.settings import Settings

UPLOAD_PATH = f"{GRADIO_API}/upload"
FILE_PREFIX = f"{GRADIO_API}/file="


class UploadOwners:
    """ASGI middleware: notes who uploads each UI file, and refuses a file's path to anyone
    else but an admin (403). Inside `frontend.login.LoginRedirect`, which refuses an upload
    without a session; Gradio answers a file request without one."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        uploading = method == "POST" and path == UPLOAD_PATH
        reading = method in ("GET", "HEAD") and path.startswith(FILE_PREFIX)
        actor = await run_in_threadpool(signed_in_actor, self.settings, Request(scope)) \
            if uploading or reading else None
        if actor is None:  # not an upload or a file, or Gradio's 401
            await self.app(scope, receive, send)
        elif uploading:
            await self._noting_uploads(actor, scope, receive, send)
        else:
            try:
                await run_in_threadpool(check_ui_upload_reader, self.settings,
                                        path[len(FILE_PREFIX):], actor)
            except Forbidden as exc:
                await JSONResponse({"detail": str(exc)}, exc.status_code)(scope, receive, send)
                return
            await self.app(scope, receive, send)

    async def _noting_uploads(self, actor: Actor, scope: Scope, receive: Receive,
                              send: Send) -> None:
        """Pass the upload on; once Gradio answers with its files' paths (a short JSON
        list), note them as `actor`'s before the answer goes out."""
        held: list[Message] = []

        def note(paths: list[str]) -> None:
            for uploaded in paths:
                mark_ui_upload(self.settings, uploaded, actor)

        async def noting(message: Message) -> None:
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                if held[0]["status"] == 200:
                    await run_in_threadpool(
                        note, json.loads(b"".join(m.get("body", b"") for m in held[1:])))
                for part in held:
                    await send(part)

        await self.app(scope, receive, noting)
