"""The web app: the REST API with the Gradio UI mounted at `/`.

Run with `uvicorn frontend.server:create_app --factory` (what `studio up` and
`studio web` do). The API routes are declared before the mount, which Gradio
requires for a mount at `/`.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from gradio.route_utils import API_PREFIX as GRADIO_API  # noqa: E402
from starlette.middleware.cors import CORSMiddleware  # noqa: E402

from frontend import components, downloads, log_filters, login, shared, ui_uploads  # noqa: E402
from frontend.components import acting  # noqa: E402
from frontend.pages import (  # noqa: E402
    compare,
    curriculum,
    data,
    evaluate,
    exemplars,
    export,
    home,
    launch,
    live_run,
    runs,
    team,
)
from studio.api.app import create_api  # noqa: E402
from studio.api.request_gate import UPLOAD_BOUND  # noqa: E402
from studio.services.uploads import (  # noqa: E402
    UI_UPLOAD_MAX_AGE_S,
    UI_UPLOAD_SWEEP_S,
    ui_upload_folder,
)
from studio.settings import Settings, get_settings  # noqa: E402

# The tabs, in order: each module has TITLE and build(settings) (see frontend/pages).
PAGES = [
    home,
    data,
    exemplars,
    curriculum,
    launch,
    runs,
    live_run,
    compare,
    evaluate,
    export,
    team,
]
# The components' CSS and the pages' own (Gradio 6 takes it at the mount, not per Blocks).
CSS = "\n".join([components.CSS, *(getattr(page, "CSS", "") for page in PAGES)])


def build_ui(settings: Settings) -> gr.Blocks:
    # Gradio removes the files the browser uploaded once they are an hour old.
    with gr.Blocks(title="ICRL Studio",
                   delete_cache=(UI_UPLOAD_SWEEP_S, UI_UPLOAD_MAX_AGE_S)) as ui:
        # Made outside gr.Tabs: a non-tab child there shifts the tabs' order in the browser.
        common = shared.Shared(ui, tuple(shared.page_id(page) for page in PAGES),
                               refresh_seconds=settings.page_refresh_seconds)
        who = gr.Markdown(elem_id="signed-in")
        ui.load(acting(settings, lambda _settings, actor: team.who_markdown(actor)),
                outputs=who, show_progress="hidden")
        with gr.Tabs() as common.tabs:
            for page in PAGES:
                with gr.Tab(page.TITLE, id=shared.page_id(page)) as tab, \
                        shared.building(common, tab):
                    page.build(settings)
        common.follow_tabs()
    return ui


def own_origin(settings: Settings) -> str:
    """The scheme, host and port the studio's pages are served from (STUDIO_PUBLIC_URL)."""
    parts = urlsplit(settings.web_url)
    return f"{parts.scheme}://{parts.netloc}"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    log_filters.install()
    app = create_api(settings)
    # added before the login redirect, so inside it: an upload is signed in first
    app.add_middleware(ui_uploads.UploadOwners, settings=settings)
    login.install(app, settings)
    app.include_router(downloads.routes(settings))
    # Other sites' pages may not read the UI's answers with the user's cookie (Gradio's own
    # CORS would let any localhost port); Gradio steps aside when the app sets its own.
    app.add_middleware(CORSMiddleware, allow_origins=[own_origin(settings)],
                       allow_credentials=True, allow_methods=["*"], allow_headers=["*"])
    # Gradio reads its upload folder when the app is mounted.
    os.environ["GRADIO_TEMP_DIR"] = str(ui_upload_folder(settings))
    # Gradio bounds each file at max_file_size; the request gate bounds the whole upload.
    app.state.body_bounds.add({"POST"}, f"{GRADIO_API}/upload", UPLOAD_BOUND)
    return gr.mount_gradio_app(app, build_ui(settings), path="/",
                               auth_dependency=login.gradio_user(settings),
                               max_file_size=settings.max_upload_bytes,
                               footer_links=[], show_error=True, css=CSS)
