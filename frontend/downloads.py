"""Files the UI links to, for a signed-in browser: a finished zip export, saved under the
name its link shows (`<run>-step-<N>.zip`).

Why not Gradio's file route: it names the download after the file on the server (`1.zip`),
whatever the link's `download` attribute says (its Content-Disposition wins), and its URL
carries the server's path. The REST API's download needs an API token, which a browser
session does not hold.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from frontend import login
from studio.api.deps import Id
from studio.services import exports
from studio.settings import Settings


def export_url(export_id: int) -> str:
    return f"/downloads/exports/{export_id}"


def routes(settings: Settings) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/downloads/exports/{export_id}")
    async def export_zip(export_id: Id, request: Request) -> Response:
        if not await run_in_threadpool(login.signed_in_user, settings, request):
            # a link followed after the session ended: sign in, then the download
            return RedirectResponse(f"/login?next={quote(request.url.path, safe='')}",
                                    status_code=303)
        path, filename = await run_in_threadpool(exports.download, settings, export_id)
        return FileResponse(path, media_type="application/zip", filename=filename)

    return router
