"""What several pages share, made once per UI build.

Pages keep the `build(settings)` signature; one that reads or writes shared
state asks `current()` during its build. The server makes the `Shared` before
the tabs and builds each page inside `building(shared, tab)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import gradio as gr


@dataclass
class Shared:
    blocks: gr.Blocks
    page_ids: tuple[str, ...]
    tabs: gr.Tabs | None = None
    """Switch pages with `gr.Tabs(selected=page_id(module))` as an event output."""
    curriculum: gr.State = field(default_factory=lambda: gr.State(None))
    """The curriculum designed on the Curriculum page (`RunConfig.curriculum` as a dict)."""
    focus_run: gr.State = field(default_factory=lambda: gr.State(None))
    """The id of the run the user last chose to follow (*Watch it* after a launch, *Open live
    view* on Runs): the Live run page opens it (None before)."""
    tab: gr.Tab | None = None
    """The tab of the page being built."""


_current: ContextVar[Shared] = ContextVar("studio_shared_components")


@contextmanager
def building(shared: Shared, tab: gr.Tab) -> Iterator[Shared]:
    """Make `shared` (with `tab` as the page's own) what `current()` answers."""
    shared.tab = tab
    token = _current.set(shared)
    try:
        yield shared
    finally:
        _current.reset(token)
        shared.tab = None


def current() -> Shared:
    """The shared components of the UI being built (call from a page's `build`)."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("shared.current() is only available while the UI is built") from None


def on_show(fn: Callable, inputs=None, outputs=None, **kwargs):
    """Run `fn` when the page is shown: when the app loads and each time its tab is opened."""
    shared = current()
    return gr.on([shared.blocks.load, shared.tab.select], fn, inputs=inputs, outputs=outputs,
                 **kwargs)


def page_id(module) -> str:
    """The tab id of a page module: its short name."""
    return module.__name__.rsplit(".", 1)[-1]
