"""The web app: the REST API with the Gradio UI mounted at `/`.

Run with `uvicorn frontend.server:create_app --factory` (what `studio up` and
`studio web` do). The API routes are declared before the mount, which Gradio
requires for a mount at `/`.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
from fastapi import FastAPI  # noqa: E402

from frontend import components, downloads, log_filters, login, shared  # noqa: E402
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
    with gr.Blocks(title="ICRL Studio") as ui:
        # Made outside gr.Tabs: a non-tab child there shifts the tabs' order in the browser.
        common = shared.Shared(ui, tuple(shared.page_id(page) for page in PAGES))
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


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    log_filters.install()
    app = create_api(settings)
    login.install(app, settings)
    app.include_router(downloads.routes(settings))
    return gr.mount_gradio_app(app, build_ui(settings), path="/",
                               auth_dependency=login.gradio_user(settings),
                               footer_links=[], show_error=True, css=CSS)
