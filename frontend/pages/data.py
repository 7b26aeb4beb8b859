"""The Data page."""

from __future__ import annotations

import gradio as gr

from studio.settings import Settings

TITLE = "Data"


def build(settings: Settings) -> None:
    gr.Markdown("## Data")
