"""Exemplar sets: worked tool-use examples that the curriculum puts into the prompt.

Every save re-validates the whole set with the method core and stores each
exemplar's findings, so the UI can list problems without recomputing them. A
file that cannot be parsed is refused with its line or example number. The tags
checked are every registered tool's (search, python, calculator): a set does not say
which tools it is for.

A set holds at most `max_exemplars_per_set` exemplars of at most `max_exemplar_chars`
characters each (settings), checked before any other work. The validation runs between
transactions, never in one that writes: a save of a large set does not hold the database's
write lock, and other requests go on being served meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import BinaryIO

from sqlmodel import select, update
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.ingest import IngestError, read_exemplar_file
from studio.method.exemplars import (
    Exemplar,
    ExemplarFormatError,
    validate_exemplar,
    validate_exemplars,
)
from studio.method.json_values import NUL_PROBLEM
from studio.method.tags import ToolSpec
from studio.method.tools import all_specs
from studio.services import uploads
from studio.services.access import Actor, require_member
from studio.services.errors import Conflict, InvalidInput, NotFound, TooLarge
from studio.services.records import (
    by_name_or_404,
    check_new_name,
    get_or_404,
    get_owned,
    usernames,
)
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Exemplar as ExemplarRow
from studio.storage.tables import ExemplarSet, utcnow

Entry = tuple[int | None, Exemplar]
"""An exemplar of a set being saved, with the id of the row that holds it (None: a new one)."""


def _rows(session, set_id: int) -> list[ExemplarRow]:
    return list(session.exec(select(ExemplarRow).where(ExemplarRow.exemplar_set_id == set_id)
                             .order_by(ExemplarRow.position)))


def _findings(exemplars: Sequence[Exemplar]) -> list[list[dict]]:
    """Each exemplar's findings as views show them, in one pass over the set."""
    found: list[list[dict]] = [[] for _ in exemplars]
    for f in validate_exemplars(exemplars, tools=all_specs()):
        found[f.exemplar - 1].append({"severity": f.severity, "message": f.message})
    return found


def _write_rows(session, set_id: int, entries: Sequence[Entry],
                findings: Sequence[list[dict]]) -> None:
    """Store `entries` as the set's exemplars, in order, with their findings: the rows not
    among them are deleted, the others updated, the new ones inserted."""
    rows = {row.id: row for row in _rows(session, set_id)}
    kept = {row_id for row_id, _ in entries}
    for row_id, row in rows.items():
        if row_id not in kept:
            session.delete(row)
    session.flush()
    for position, ((row_id, e), found) in enumerate(zip(entries, findings, strict=True)):
        row = rows[row_id] if row_id is not None else ExemplarRow(exemplar_set_id=set_id)
        row.position, row.question, row.solution, row.answer = (position, e.question,
                                                                e.solution, e.answer)
        row.findings = found
        session.add(row)


class ExemplarView(TypedDict):
    number: int  # from 1
    question: str
    solution: str
    answer: str | None
    findings: list[dict]  # {severity: error | warning, message}


class ExemplarSetSummary(TypedDict):
    """An exemplar set without its exemplars, as lists show it (times in ISO 8601, UTC)."""

    id: int
    name: str
    owner: str | None
    source_filename: str | None
    size: int
    errors: int  # findings that block training
    warnings: int
    updated_at: str


class ExemplarSetView(ExemplarSetSummary):
    """The set with each exemplar and its findings."""

    exemplars: list[ExemplarView]


def _view(session, exemplar_set: ExemplarSet) -> ExemplarSetView:
    rows = _rows(session, exemplar_set.id)
    items = [{"number": n, "question": r.question, "solution": r.solution, "answer": r.answer,
              "findings": r.findings or []} for n, r in enumerate(rows, 1)]
    severities = [f["severity"] for item in items for f in item["findings"]]
    return {
        "id": exemplar_set.id, "name": exemplar_set.name,
        "owner": usernames(session).get(exemplar_set.owner_id),
        "source_filename": exemplar_set.source_filename, "size": len(items),
        "errors": severities.count("error"), "warnings": severities.count("warning"),
        "exemplars": items, "updated_at": exemplar_set.updated_at.isoformat(),
    }


def _coerce(item: dict, where: str) -> Exemplar:
    if not isinstance(item, dict):
        raise InvalidInput(f"{where}: give an object {{question, solution, answer?}}")
    for field in ("question", "solution", "answer"):
        if "\x00" in str(item.get(field) or ""):
            raise InvalidInput(f"{where}: field '{field}': {NUL_PROBLEM}")
    question, solution = item.get("question"), item.get("solution")
    if not isinstance(question, str) or not question.strip():
        raise InvalidInput(f"{where}: field 'question' must be a non-empty text")
    if not isinstance(solution, str) or not solution.strip():
        raise InvalidInput(f"{where}: field 'solution' must be a non-empty text (the tagged trace)")
    answer = item.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise InvalidInput(f"{where}: field 'answer' must be a text or left out")
    return Exemplar(question, solution, answer)


def _check_count(settings: Settings, count: int, where: str) -> None:
    """Refuse a set of more than `max_exemplars_per_set` exemplars (before reading them)."""
    most = settings.max_exemplars_per_set
    if count > most:
        raise TooLarge(f"{where}: {count} exemplars; a set holds at most {most} (setting "
                       "STUDIO_MAX_EXEMPLARS_PER_SET): split them into several sets")


def _check_length(settings: Settings, exemplar: Exemplar, where: str) -> Exemplar:
    """The exemplar, refused when longer than `max_exemplar_chars` (before validating it)."""
    length = len(exemplar.question) + len(exemplar.solution) + len(exemplar.answer or "")
    most = settings.max_exemplar_chars
    if length > most:
        raise InvalidInput(f"{where}: {length} characters (question, solution and answer "
                           f"together); an exemplar holds at most {most} (setting "
                           "STUDIO_MAX_EXEMPLAR_CHARS): shorten its tool results")
    return exemplar


def _checked(settings: Settings, item: dict, where: str) -> Exemplar:
    """A JSON item as an exemplar of a set, within the length bound."""
    return _check_length(settings, _coerce(item, where), where)


def check_exemplar(settings: Settings, item: dict) -> list[dict]:
    """The findings of one exemplar being edited (nothing stored): what the set would report."""
    return exemplar_findings(_checked(settings, item, "exemplar"), 1, all_specs())


def exemplar_findings(exemplar: Exemplar, number: int, tools: Sequence[ToolSpec]) -> list[dict]:
    """The findings of exemplar `number` of a set checked against `tools`, as views show them."""
    return [{"severity": f.severity, "message": f.message}
            for f in validate_exemplar(exemplar, number, tools=tuple(tools))]


def _create(settings: Settings, actor: Actor, name: str, exemplars: list[Exemplar],
            source_filename: str | None) -> ExemplarSetView:
    findings = _findings(exemplars)
    with session_scope(settings.sqlalchemy_url) as session:
        exemplar_set = ExemplarSet(name=check_new_name(session, ExemplarSet, name),
                                   source_filename=source_filename, owner_id=actor.id)
        session.add(exemplar_set)
        session.flush()
        _write_rows(session, exemplar_set.id, [(None, e) for e in exemplars], findings)
        session.flush()
        return _view(session, exemplar_set)


def create_exemplar_set(settings: Settings, actor: Actor, name: str,
                        exemplars: list[dict] | None = None) -> ExemplarSetView:
    """A set from JSON items `{question, solution, answer?}` (an empty set is allowed), as
    the request sent them: their number is bounded before any of them is read."""
    require_member(actor, "create exemplar sets")
    exemplars = exemplars or []
    if not isinstance(exemplars, list):
        raise InvalidInput("exemplars: give a list of objects {question, solution, answer?}")
    _check_count(settings, len(exemplars), "exemplars")
    items = [_checked(settings, item, f"exemplars[{i}]") for i, item in enumerate(exemplars)]
    return _create(settings, actor, name, items, None)


def upload_exemplar_set(settings: Settings, actor: Actor, stream: BinaryIO,
                        filename: str | None, name: str) -> ExemplarSetView:
    """A set from a JSONL file or the text block format (`===== Example N =====`)."""
    require_member(actor, "upload exemplar sets")
    with session_scope(settings.sqlalchemy_url) as session:
        check_new_name(session, ExemplarSet, name)
    with uploads.stage_upload(stream, filename, settings) as staged:
        try:
            exemplars = read_exemplar_file(staged.path, staged.filename,
                                           uploads.upload_limits(settings))
        except (IngestError, ExemplarFormatError) as exc:
            message = str(exc)
            if isinstance(exc, ExemplarFormatError):
                message = f"{staged.filename}: {message}"
            raise InvalidInput(message) from None
        if not exemplars:
            raise InvalidInput(f"{staged.filename}: no exemplar found; each needs a question "
                               "and a solution")
        _check_count(settings, len(exemplars), staged.filename)
        for number, exemplar in enumerate(exemplars, 1):
            _check_length(settings, exemplar, f"{staged.filename}: exemplar {number}")
        return _create(settings, actor, name, exemplars, staged.filename)


def _load(session, set_id: int) -> ExemplarSet:
    return get_or_404(session, ExemplarSet, set_id, "exemplar set")


def get_exemplar_set(settings: Settings, set_id: int) -> ExemplarSetView:
    with session_scope(settings.sqlalchemy_url) as session:
        return _view(session, _load(session, set_id))


def find_exemplar_set(settings: Settings, name: str) -> ExemplarSetView:
    with session_scope(settings.sqlalchemy_url) as session:
        return _view(session, by_name_or_404(session, ExemplarSet, name, "exemplar set"))


def list_exemplar_sets(settings: Settings) -> list[ExemplarSetSummary]:
    with session_scope(settings.sqlalchemy_url) as session:
        views = [_view(session, s) for s in session.exec(select(ExemplarSet)
                                                          .order_by(ExemplarSet.id))]
    return [{k: v for k, v in view.items() if k != "exemplars"} for view in views]


def _owned(session, set_id: int, actor: Actor) -> ExemplarSet:
    return get_owned(session, ExemplarSet, set_id, "exemplar set", actor, "change")


def _save_edit(settings: Settings, actor: Actor, set_id: int,
               edit: Callable[[list[Entry]], list[Entry]]) -> ExemplarSetView:
    """The set with `edit` applied to its exemplars, stored with the findings of them all.

    The set is read in one transaction, validated outside any, and written in a second that
    first claims it: an edit stored meanwhile makes this one a 409 (nothing lost, send it
    again), where a lock held across the validation would keep every writer waiting."""
    with session_scope(settings.sqlalchemy_url) as session:
        read_at = _owned(session, set_id, actor).updated_at
        entries = edit([(row.id, Exemplar(row.question, row.solution, row.answer))
                        for row in _rows(session, set_id)])
    findings = _findings([exemplar for _, exemplar in entries])
    with session_scope(settings.sqlalchemy_url) as session:
        claimed = session.exec(update(ExemplarSet)
                               .where(ExemplarSet.id == set_id, ExemplarSet.updated_at == read_at)
                               .values(updated_at=utcnow()))
        if claimed.rowcount != 1:
            raise Conflict(f"exemplar set {set_id} changed while this edit was checked; "
                           "open it again and repeat the edit")
        _write_rows(session, set_id, entries, findings)
        session.flush()
        return _view(session, _load(session, set_id))


def add_exemplar(settings: Settings, actor: Actor, set_id: int, item: dict
                 ) -> ExemplarSetView:
    exemplar = _checked(settings, item, "exemplar")

    def append(entries: list[Entry]) -> list[Entry]:
        _check_count(settings, len(entries) + 1, f"exemplar set {set_id}")
        return [*entries, (None, exemplar)]

    return _save_edit(settings, actor, set_id, append)


def _numbered(entries: list[Entry], number: int) -> Entry:
    if not 1 <= number <= len(entries):
        raise NotFound(f"exemplar {number} does not exist; the set has {len(entries)} "
                       "(numbered from 1)")
    return entries[number - 1]


def update_exemplar(settings: Settings, actor: Actor, set_id: int, number: int,
                    item: dict) -> ExemplarSetView:
    """Replace exemplar `number` (from 1); fields left out keep their value."""

    def replace(entries: list[Entry]) -> list[Entry]:
        row_id, old = _numbered(entries, number)
        merged = {"question": old.question, "solution": old.solution, "answer": old.answer}
        merged.update({k: v for k, v in item.items() if k in merged})
        entries[number - 1] = (row_id, _checked(settings, merged, f"exemplar {number}"))
        return entries

    return _save_edit(settings, actor, set_id, replace)


def delete_exemplar(settings: Settings, actor: Actor, set_id: int, number: int
                    ) -> ExemplarSetView:
    def remove(entries: list[Entry]) -> list[Entry]:
        _numbered(entries, number)
        return entries[:number - 1] + entries[number:]

    return _save_edit(settings, actor, set_id, remove)


def delete_exemplar_set(settings: Settings, actor: Actor, set_id: int) -> None:
    with session_scope(settings.sqlalchemy_url) as session:
        exemplar_set = get_owned(session, ExemplarSet, set_id, "exemplar set", actor,
                                 "delete")
        for row in _rows(session, set_id):
            session.delete(row)
        session.delete(exemplar_set)


def load_exemplars(settings: Settings, set_id: int) -> list[Exemplar]:
    """The set as the method core takes it (for prompts and engines)."""
    with session_scope(settings.sqlalchemy_url) as session:
        _load(session, set_id)
        return [Exemplar(r.question, r.solution, r.answer) for r in _rows(session, set_id)]
