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

from frontend.home import build_home, status_markdown  # noqa: E402
from frontend.pages import compare, evaluate, export, live_run, runs  # noqa: E402
from studio.api.app import create_api  # noqa: E402
from studio.db import session_scope  # noqa: E402
from studio.services.auth import authenticate  # noqa: E402
from studio.settings import Settings, get_settings  # noqa: E402

PAGES = [runs, live_run, compare, evaluate, export]
CSS = "\n".join(getattr(page, "CSS", "") for page in PAGES)


def build_ui(settings: Settings) -> gr.Blocks:
    with gr.Blocks(title="ICRL Studio") as ui:
        with gr.Tab("Home"):
            status = build_home(settings)
        for page in PAGES:
            with gr.Tab(page.TITLE, id=page.__name__.rsplit(".", 1)[1]):
                page.build(settings)
        ui.load(lambda: status_markdown(settings), outputs=status)
    return ui


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_api(settings)

    def login(username: str, password: str) -> bool:
        with session_scope(settings.sqlalchemy_url) as session:
            return authenticate(session, username, password) is not None

    return gr.mount_gradio_app(app, build_ui(settings), path="/", auth=login,
                               footer_links=[], show_error=True, css=CSS)
