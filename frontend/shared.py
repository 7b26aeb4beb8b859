"""Components several pages share, made once per UI build.

Pages keep the `build(settings)` signature; one that reads or writes shared
state asks `current()` during its build. The server makes the `Shared` before
the tabs and builds the pages inside `building(shared)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import gradio as gr


@dataclass(frozen=True)
class Shared:
    tabs: gr.Tabs
    """Switch pages with `gr.Tabs(selected=page_id(module))` as an event output."""
    curriculum: gr.State
    """The curriculum designed on the Curriculum page (a `RunConfig.curriculum` dict)."""
    focus_run: gr.State
    """The id of the run the user last launched or opened (None before)."""

    @classmethod
    def create(cls, tabs: gr.Tabs) -> Shared:
        return cls(tabs=tabs, curriculum=gr.State(None), focus_run=gr.State(None))


_current: ContextVar[Shared] = ContextVar("studio_shared_components")


@contextmanager
def building(shared: Shared) -> Iterator[Shared]:
    token = _current.set(shared)
    try:
        yield shared
    finally:
        _current.reset(token)


def current() -> Shared:
    """The shared components of the UI being built (call from a page's `build`)."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("shared.current() is only available while the UI is built") from None


def page_id(module) -> str:
    """The tab id of a page module: its short name."""
    return module.__name__.rsplit(".", 1)[-1]
