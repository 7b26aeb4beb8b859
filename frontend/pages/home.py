"""The home page: what the studio is, and whether its parts are up."""

from __future__ import annotations

import gradio as gr

from studio.escaping import code_span, markdown_text
from studio.queue import QUEUE_JOBS
from studio.services import presets
from studio.services.health import NO_WORKER, health, start_a_worker
from studio.settings import Settings

TITLE = "Home"

INTRO = """
# ICRL Studio
Teach a language model to use a tool with **in-context reinforcement learning**: a few
worked examples in the prompt start the training, and a curriculum removes them
(3 → 2 → 0) until the model uses the tool on its own. The tools:
- **search**: a search engine over your own documents, for questions they answer;
- **calculator**: arithmetic handed to an exact calculator;
- **python**: short programs run in a sandbox, for questions that need computing.

**Quick start:** on the **Launch** page choose the ready-made run `{quick_start}` and press
**Launch this ready-made run**: {quick_start_words}

**Getting started with your own data**
1. **Data**: upload your documents, questions and worked examples, or load the demo pack.
2. **Exemplars**: check the worked examples and see the prompt the model will read.
3. **Curriculum**: choose how many examples each part of the training shows (3 → 2 → 0).
4. **Launch**: pick the model and settings, and start the run.
5. **Runs**: follow the run live, compare runs, evaluate and export the trained model.
"""


def status_markdown(settings: Settings) -> str:
    report = health(settings)
    mark = {True: "✓", False: "✗"}
    lines = [
        f"**Status: {markdown_text(report['status'])}**",
        "",
        f"- {mark[report['database']['ok']]} database {code_span(report['database']['url'])}",
        f"- {mark[report['broker']['ok']]} job queue {code_span(report['broker']['url'])}",
    ]
    if not report["workers"]:
        lines.append(f"- ✗ {NO_WORKER}")  # our own sentence: its `code` renders
        return "\n".join(lines)
    for queue, hostnames in report["queues"].items():
        jobs = QUEUE_JOBS.get(queue, "")
        if hostnames:
            lines.append(f"- ✓ queue {markdown_text(queue)} ({jobs}): worker "
                         + ", ".join(code_span(name) for name in hostnames))
        else:  # our own sentence: its `code` renders
            lines.append(f"- ✗ queue {queue} ({jobs}): no worker; {start_a_worker(queue)}")
    return "\n".join(lines)


def intro() -> str:
    """The page's opening, with what the quick start did when measured (its stored results:
    `presets.expectation`)."""
    return INTRO.format(quick_start=presets.CALCULATOR,
                        quick_start_words=markdown_text(presets.expectation(presets.CALCULATOR)))


def build(settings: Settings) -> None:
    gr.Markdown(intro())
    status = gr.Markdown(lambda: status_markdown(settings), elem_id="studio-status")
    refresh = gr.Button("Refresh status", size="sm")
    refresh.click(lambda: status_markdown(settings), outputs=status)
