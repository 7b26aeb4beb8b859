"""What every run page needs: runs as dropdown choices, timers that tick only while their
page is shown."""

from __future__ import annotations

import gradio as gr

from frontend import shared
from frontend.components import plain
from studio.services import runs
from studio.settings import Settings


def run_label(run: dict) -> str:
    return f"#{run['id']} {run['name']} · {plain(run['state'])}"


def run_choices(settings: Settings, only=None) -> list[tuple[str, int]]:
    """(label, id) pairs for a run dropdown, newest first; `only(run)` filters."""
    return [(run_label(r), r["id"]) for r in runs.list_runs(settings) if only is None or only(r)]


def run_dropdown_update(settings: Settings, current, only=None, multiselect: bool = False):
    """Fresh choices. The selection is left alone unless a chosen run is gone: `current` was
    read when the event fired, and the user may have chosen a run since."""
    choices = run_choices(settings, only)
    ids = {value for _, value in choices}
    chosen = (current or []) if multiselect else [current]
    if all(value is None or value in ids for value in chosen):
        return gr.update(choices=choices)
    return gr.update(choices=choices,
                     value=[v for v in chosen if v in ids] if multiselect else None)


def tick_while_shown(timer: gr.Timer) -> None:
    """Each tick is a request: the page's timer runs only while its tab is the one shown."""
    common = shared.current()
    page = common.tab.id

    def follow(event: gr.SelectData):
        return gr.Timer(active=event.id == page)

    common.tabs.select(follow, outputs=timer, show_progress="hidden")


def utc_minute(iso: str | None) -> str:
    return f"{iso[:16].replace('T', ' ')} UTC" if iso else ""
