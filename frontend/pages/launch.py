"""The Launch page."""

from __future__ import annotations

import gradio as gr

from studio.settings import Settings

TITLE = "Launch"


def build(settings: Settings) -> None:
    gr.Markdown("## Launch")
