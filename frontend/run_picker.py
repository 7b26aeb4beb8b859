"""What every run page needs: runs as dropdown choices, user errors shown in plain words."""

from __future__ import annotations

import functools

import gradio as gr

from studio.services import runs
from studio.services.errors import UserError
from studio.settings import Settings


def plain(value) -> str:
    """A state enum member as its value (a str enum formats as `RunState.x` otherwise)."""
    return str(getattr(value, "value", value))


def run_label(run: dict) -> str:
    return f"#{run['id']} {run['name']} · {plain(run['state'])}"


def run_choices(settings: Settings, only=None) -> list[tuple[str, int]]:
    """(label, id) pairs for a run dropdown, newest first; `only(run)` filters."""
    return [(run_label(r), r["id"]) for r in runs.list_runs(settings) if only is None or only(r)]


def run_dropdown_update(settings: Settings, current, only=None, multiselect: bool = False):
    """Fresh choices, keeping the current selection when it still exists."""
    choices = run_choices(settings, only)
    ids = {value for _, value in choices}
    if multiselect:
        value = [v for v in current or [] if v in ids]
    else:
        value = current if current in ids else None
    return gr.update(choices=choices, value=value)


def shows_user_errors(fn):
    """A service's UserError (bad input, not found, conflict) becomes a plain-words pop-up."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise gr.Error(str(exc), title="That did not work", print_exception=False) from None

    return wrapper


def utc_minute(iso: str | None) -> str:
    return f"{iso[:16].replace('T', ' ')} UTC" if iso else ""
