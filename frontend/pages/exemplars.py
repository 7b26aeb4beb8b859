"""The Exemplars page."""

from __future__ import annotations

import gradio as gr

from studio.settings import Settings

TITLE = "Exemplars"


def build(settings: Settings) -> None:
    gr.Markdown("## Exemplars")
