"""The Curriculum page."""

from __future__ import annotations

import gradio as gr

from studio.settings import Settings

TITLE = "Curriculum"


def build(settings: Settings) -> None:
    gr.Markdown("## Curriculum")
