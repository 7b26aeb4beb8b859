"""The home page: what the studio is, and whether its parts are up."""

from __future__ import annotations

import gradio as gr

from frontend.components import PAPER
from frontend.shared import current, switch_to
from studio.escaping import code_span, markdown_text
from studio.jobs.queue import QUEUE_JOBS
from studio.services import presets
from studio.services.health import NO_WORKER, health, start_a_worker
from studio.settings import Settings

TITLE = "Home"

INTRO = """
# ICRL Studio
Teach a small language model to use a tool, with **in-context reinforcement learning**
(ICRL, from the paper {paper}): a few worked examples in the prompt show the model how to
call the tool, training rewards the answers that come out right, and a curriculum removes
the examples (3 → 2 → 0) until the model calls the tool on its own. What it can learn:
- **Search over your documents**: it looks things up in your own files (a search engine
  over them) before it answers, instead of making facts up. Ready-made run: `{search}`.
- **A calculator**: it hands the arithmetic to an exact calculator instead of guessing
  digits. Ready-made run: `{calculator}`, the quick start.
- **Sandboxed Python**: it writes a short program, runs it in a locked-down sandbox and
  reads what it prints, for questions that need computing. Ready-made run: `{math}`.

**Quick start:** the ready-made run `{quick_start}`, launched in one click on the **Launch**
page: {quick_start_words}
"""

OWN_DATA = """
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
    """The page's opening, with what the quick start did when measured and how long it took
    (its stored results: `presets.expectation`)."""
    return INTRO.format(
        paper=PAPER, search=presets.SEARCH_TOUR, calculator=presets.CALCULATOR,
        math=presets.MATH, quick_start=presets.RECOMMENDED,
        quick_start_words=markdown_text(presets.expectation(presets.RECOMMENDED)))


def build(settings: Settings) -> None:
    shared = current()
    gr.Markdown(intro(), elem_id="home-intro")
    quick_start = gr.Button(f"Open the quick start ({presets.RECOMMENDED}) on the Launch page",
                            variant="primary", elem_id="home-quick-start")
    gr.Markdown(OWN_DATA)
    # None first: asking again for the preset asked for last still reaches the Launch page
    quick_start.click(lambda: None, outputs=shared.preset, show_progress="hidden").then(
        lambda: (presets.RECOMMENDED, *switch_to("launch")),
        outputs=[shared.preset, *shared.switch], show_progress="hidden")
    status = gr.Markdown(lambda: status_markdown(settings), elem_id="studio-status")
    refresh = gr.Button("Refresh status", size="sm")
    refresh.click(lambda: status_markdown(settings), outputs=status)
