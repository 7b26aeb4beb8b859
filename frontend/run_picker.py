"""What every run page needs: runs as dropdown choices."""

from __future__ import annotations

import gradio as gr

from frontend.components import only_choice, plain
from studio.services import runs
from studio.settings import Settings


def run_label(run: dict) -> str:
    return f"#{run['id']} {run['name']} · {plain(run['state'])}"


def run_choices(settings: Settings, only=None) -> list[tuple[str, int]]:
    """(label, id) pairs for a run dropdown, newest first; `only(run)` filters."""
    return [(run_label(r), r["id"]) for r in runs.list_runs(settings) if only is None or only(r)]


def run_dropdown_update(settings: Settings, current, only=None, multiselect: bool = False,
                        preselect: bool = True):
    """Fresh choices. The selection is left alone unless a chosen run is gone: `current` was
    read when the event fired, and the user may have chosen a run since. With nothing chosen
    and a single run to choose, that run is chosen (when `preselect`: choosing it may start
    work, as on the Export page, which a page out of view need not do)."""
    choices = run_choices(settings, only)
    ids = {value for _, value in choices}
    single = only_choice(choices) if preselect and not multiselect else None
    if current is None and single is not None:
        return gr.update(choices=choices, value=single)
    chosen = (current or []) if multiselect else [current]
    if all(value is None or value in ids for value in chosen):
        return gr.update(choices=choices)
    return gr.update(choices=choices,
                     value=[v for v in chosen if v in ids] if multiselect else single)


def usable_with_a_run(picker: gr.Dropdown, buttons: list[gr.Button]) -> None:
    """Make `buttons`, which act on the run chosen in `picker`, usable only while one is
    chosen: an empty list offers nothing to press (the page says what to do first), and no
    press fails for want of a run. Build them with `interactive=False`."""
    def usable(run_id):
        updates = [gr.Button(interactive=run_id is not None)] * len(buttons)
        return updates if len(buttons) > 1 else updates[0]

    picker.change(usable, inputs=picker, outputs=buttons, show_progress="hidden")


def utc_minute(iso: str | None) -> str:
    return f"{iso[:16].replace('T', ' ')} UTC" if iso else ""
