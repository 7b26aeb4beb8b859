"""What several pages share, made once per UI build.

Pages keep the `build(settings)` signature; one that reads or writes shared
state asks `current()` during its build. The server makes the `Shared` before
the tabs, builds each page inside `building(shared, tab)`, then calls
`follow_tabs()` once every page's timers are known.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import gradio as gr


@dataclass
class PageTimer:
    """A page's `gr.Timer`. Each tick is a request, so it ticks only while its page is the one
    shown and something on it moves (a run trains, an export runs): showing the page starts
    it (`Shared.follow_tabs`), its tick stops it (`follow`) once nothing moves or the page is
    left, and an action on the page that sets something moving starts it again (`start`).

    `shown` is `Shared.shown`'s value, read by the handler as an input."""

    timer: gr.Timer
    page: str

    def follow(self, shown: str, moving: bool) -> gr.Timer:
        """From the timer's own tick: keep ticking or stop."""
        return gr.Timer(active=moving and shown == self.page)

    def start(self, shown: str, moving: bool):
        """From any other handler: start the timer if it is needed, never stop it (that
        handler may have read `shown` just before a switch to this page; the tick decides)."""
        return gr.Timer(active=True) if moving and shown == self.page else gr.skip()


@dataclass
class Shared:
    blocks: gr.Blocks
    page_ids: tuple[str, ...]
    tabs: gr.Tabs | None = None
    """Switch pages with `switch_to(page_id)` as the value of the `switch` outputs."""
    curriculum: gr.State = field(default_factory=lambda: gr.State(None))
    """The curriculum designed on the Curriculum page (`RunConfig.curriculum` as a dict)."""
    guidance: gr.State = field(default_factory=lambda: gr.State(None))
    """How the exemplars teach, as the Launch page's fields hold it ({config path: value} of
    `curriculum.GUIDANCE_PATHS`; None before they change): the Curriculum page says it."""
    focus_run: gr.State = field(default_factory=lambda: gr.State(None))
    """The id of the run the user last chose to follow (*Watch it* after a launch, *Open live
    view* on Runs): the Live run page opens it (None before)."""
    preset: gr.State = field(default_factory=lambda: gr.State(None))
    """The ready-made run another page asked for (the Home page's quick start button): the
    Launch page chooses it (None before)."""
    shown: gr.State = field(init=False)
    """The id of the page shown in this browser tab (the first page on load)."""
    tab: gr.Tab | None = None
    """The tab of the page being built."""
    timers: list[PageTimer] = field(default_factory=list)
    refresh_seconds: float | None = None
    """Every page timer's period (`Settings.page_refresh_seconds`); None: each page's own."""

    def __post_init__(self) -> None:
        self.shown = gr.State(self.page_ids[0])

    @property
    def switch(self) -> list:
        """The outputs of a handler that switches pages (`switch_to`)."""
        return [self.tabs, self.shown]

    def follow_tabs(self) -> None:
        """Record the page shown, and let only its timers tick: on a click on a tab and on a
        switch made by a handler alike (each sets `shown`). Bound once, for every timer: one
        request per switch, whatever the number of pages with timers. Every switch is sent,
        in order, even while the one before is still being recorded: Gradio's default for a
        select drops it then (and "always_last" sends it again without the new tab), so
        `shown` kept naming the page left and the page shown never started its timers."""
        def record(event: gr.SelectData) -> str:
            return event.id

        self.tabs.select(record, outputs=self.shown, show_progress="hidden",
                         trigger_mode="multiple")
        if self.timers:
            self.shown.change(lambda page: [gr.Timer(active=t.page == page) for t in self.timers],
                              inputs=self.shown, outputs=[t.timer for t in self.timers],
                              show_progress="hidden")


def switch_to(page_id: str) -> tuple:
    """The value of `Shared.switch` that shows `page_id`."""
    return gr.Tabs(selected=page_id), page_id


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


def on_show(fn: Callable, inputs=None, outputs=None, with_page: bool = False, **kwargs):
    """Run `fn` when the page is shown: when the app loads and each time its tab is opened.

    `with_page`: `fn` takes the id of the page shown first, to know whether its own page is
    in view (on load, the first page is; when its tab is opened, `Shared.shown` may not say so
    yet, so this page's id is passed)."""
    shared = current()
    if not with_page:
        return gr.on([shared.blocks.load, shared.tab.select], fn, inputs=inputs,
                     outputs=outputs, **kwargs)
    page, inputs = shared.tab.id, list(inputs or [])
    shared.blocks.load(fn, inputs=[shared.shown, *inputs], outputs=outputs, **kwargs)
    return shared.tab.select(lambda *values: fn(page, *values), inputs=inputs, outputs=outputs,
                             **kwargs)


def page_timer(seconds: float) -> PageTimer:
    """A timer of the page being built, ticking every `seconds` (unless the studio sets every
    page's period), stopped until the page is shown (see `PageTimer`)."""
    shared = current()
    made = PageTimer(gr.Timer(shared.refresh_seconds or seconds, active=False), shared.tab.id)
    shared.timers.append(made)
    return made


def page_id(module) -> str:
    """The tab id of a page module: its short name."""
    return module.__name__.rsplit(".", 1)[-1]
