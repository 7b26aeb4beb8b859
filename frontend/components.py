"""Small UI helpers every page uses: plain-words errors, empty states, tables, uploads.

Services raise `UserError`s whose messages already name the file, line or
field and say what to do; these helpers only lay them out for a reader.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import gradio as gr

from studio.escaping import html_text, markdown_text
from studio.services.access import Actor
from studio.services.auth import actor_named
from studio.services.errors import InvalidInput, UserError
from studio.services.uploads import check_ui_upload_reader
from studio.settings import Settings

_NEXT_FIELD = re.compile(r"; (?=[\w.\[\]-]+: )")
PAPER = ("*In-Context Reinforcement Learning for Tool Use in Large Language Models* "
         "([arXiv 2603.08068](https://arxiv.org/abs/2603.08068), 2026)")
"""The paper the method comes from: named and linked where a page first says "the paper"."""

CSS = """
/* Text wraps between words; only a token longer than its line is broken. Gradio breaks the
   highlighted text (rollouts) anywhere, a label in it ("SEARCH") too, and table headers
   inside a word ("questi-ons"). */
.textfield, .textfield span.text { word-break: normal; overflow-wrap: anywhere; }
.textfield span.label { white-space: nowrap; }
.table-wrap th span.header { word-break: normal; overflow-wrap: normal; }
.table-wrap td .cell-wrap { word-break: normal; overflow-wrap: anywhere; }
"""


def counted_from_one(text: str | None, problem: str) -> int | None:
    """A box for a whole number from 1 that may be left empty (None). Otherwise InvalidInput
    with `problem`, `{typed}` filled in with what was typed."""
    typed = (text or "").strip()
    if not typed:
        return None
    if not typed.isdigit() or int(typed) < 1:
        raise InvalidInput(problem.format(typed=typed))
    return int(typed)


def problems(message: str) -> list[str]:
    """A service message split into its problems.

    Services join several problems with '; ', each starting with its field
    (`data.train: ...; curriculum.stages[0]...`); a '; ' inside one problem
    ("line 2: field 'question' is empty; write the question") stays.
    """
    return [part.strip() for part in _NEXT_FIELD.split(message) if part.strip()]


def error_markdown(message: str, heading: str = "Could not do that") -> str:
    """An error for a reader: a heading, then one bullet per problem."""
    items = "\n".join(f"- {markdown_text(p)}" for p in problems(message))
    return f"**✗ {heading}:**\n\n{items}"


def ok_markdown(message: str) -> str:
    return f"**✓ {markdown_text(message)}**"


def empty_state(what: str, next_step: str) -> str:
    """What a page shows where a list is empty: what is missing and what to do next."""
    return f"*{what}* {next_step}"


def toast_user_errors(fn: Callable) -> Callable:
    """Turn a service's UserError into an error toast with its message (others stay bugs).
    Toasts render HTML: the message, which may quote names and values, is escaped."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise gr.Error(html_text(exc), print_exception=False) from None

    return wrapper


def signed_in(settings: Settings, request: gr.Request) -> Actor:
    """The user of a UI request, with its role as it is now."""
    if not request.username:
        raise UserError("you are not signed in; reload the page and sign in")
    return actor_named(settings, request.username)


def acting(settings: Settings, fn: Callable) -> Callable:
    """An event handler calling `fn(settings, actor, *inputs)`: every action of a page is
    made as the signed-in user, whose role and ownership the services check (Gradio passes
    the request to the first parameter by its annotation)."""

    def handler(request: gr.Request, *inputs):
        return fn(settings, signed_in(settings, request), *inputs)

    return handler


def plain(value: Any) -> Any:
    """An enum member as its value (str enums print as `Class.member` otherwise)."""
    return getattr(value, "value", value)


def table(rows: Sequence[dict], columns: Sequence[tuple[str, str]]) -> list[list]:
    """Rows of dicts as a Dataframe value, `columns` as (key, header) pairs."""
    return [[plain(row.get(key)) for key, _ in columns] for row in rows]


def dataframe(columns: Sequence[tuple[str, str]], **kwargs) -> gr.Dataframe:
    """A read-only table with the headers of `columns`."""
    return gr.Dataframe(headers=[header for _, header in columns], interactive=False,
                        wrap=True, **kwargs)


def choices(rows: Sequence[dict], label: Callable[[dict], str], value: str = "name"
            ) -> list[tuple[str, Any]]:
    """Dropdown choices (label, value) from service rows."""
    return [(label(row), row[value]) for row in rows]


def only_choice(options: Sequence) -> Any:
    """The value of a dropdown's single choice (a value or a (label, value) pair), else None:
    a picker with one thing to pick shows it picked."""
    if len(options) != 1:
        return None
    (option,) = options
    return option[1] if isinstance(option, (tuple, list)) else option


def picker(options: Sequence) -> gr.Dropdown:
    """New choices for a picker: its single choice picked, else the selection left alone."""
    single = only_choice(options)
    return gr.Dropdown(choices=options) if single is None else \
        gr.Dropdown(choices=options, value=single)


@contextmanager
def uploaded(settings: Settings, actor: Actor, path: str | None
             ) -> Iterator[tuple[BinaryIO, str]]:
    """A gr.File's temp path as the (stream, original filename) the services take: the
    acting user's own upload (an event may name any path)."""
    if not path:
        raise UserError("file: choose a file to upload first")
    check_ui_upload_reader(settings, path, actor)
    with open(path, "rb") as stream:
        yield stream, Path(path).name
