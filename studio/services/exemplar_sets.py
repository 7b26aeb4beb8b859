"""Exemplar sets: worked tool-use examples that the curriculum puts into the prompt.

Every save re-validates the whole set with the method core and stores each
exemplar's findings, so the UI can list problems without recomputing them. A
file that cannot be parsed is refused with its line or example number. The tags
checked are every registered tool's (search, python, calculator): a set does not say
which tools it is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

from sqlmodel import select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.db import session_scope
from studio.ingest import IngestError, read_exemplar_file
from studio.method.exemplars import (
    Exemplar,
    ExemplarFormatError,
    validate_exemplar,
    validate_exemplars,
)
from studio.method.tags import ToolSpec
from studio.method.tools import all_specs
from studio.services import uploads
from studio.services.access import Actor, require_member
from studio.services.errors import InvalidInput, NotFound
from studio.services.records import (
    by_name_or_404,
    check_new_name,
    get_or_404,
    get_owned,
    usernames,
)
from studio.settings import Settings
from studio.tables import Exemplar as ExemplarRow
from studio.tables import ExemplarSet, utcnow


def _rows(session, set_id: int) -> list[ExemplarRow]:
    return list(session.exec(select(ExemplarRow).where(ExemplarRow.exemplar_set_id == set_id)
                             .order_by(ExemplarRow.position)))


def _revalidate(session, exemplar_set: ExemplarSet) -> None:
    rows = _rows(session, exemplar_set.id)
    findings = validate_exemplars([Exemplar(r.question, r.solution, r.answer) for r in rows],
                                  tools=all_specs())
    for number, row in enumerate(rows, 1):
        row.findings = [{"severity": f.severity, "message": f.message}
                        for f in findings if f.exemplar == number]
        session.add(row)
    exemplar_set.updated_at = utcnow()
    session.add(exemplar_set)


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
    question, solution = item.get("question"), item.get("solution")
    if not isinstance(question, str) or not question.strip():
        raise InvalidInput(f"{where}: field 'question' must be a non-empty text")
    if not isinstance(solution, str) or not solution.strip():
        raise InvalidInput(f"{where}: field 'solution' must be a non-empty text (the tagged trace)")
    answer = item.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise InvalidInput(f"{where}: field 'answer' must be a text or left out")
    return Exemplar(question, solution, answer)


def check_exemplar(item: dict) -> list[dict]:
    """The findings of one exemplar being edited (nothing stored): what the set would report."""
    return exemplar_findings(_coerce(item, "exemplar"), 1, all_specs())


def exemplar_findings(exemplar: Exemplar, number: int, tools: Sequence[ToolSpec]) -> list[dict]:
    """The findings of exemplar `number` of a set checked against `tools`, as views show them."""
    return [{"severity": f.severity, "message": f.message}
            for f in validate_exemplar(exemplar, number, tools=tuple(tools))]


def _create(settings: Settings, actor: Actor, name: str, exemplars: list[Exemplar],
            source_filename: str | None) -> ExemplarSetView:
    with session_scope(settings.sqlalchemy_url) as session:
        exemplar_set = ExemplarSet(name=check_new_name(session, ExemplarSet, name),
                                   source_filename=source_filename, owner_id=actor.id)
        session.add(exemplar_set)
        session.flush()
        for position, e in enumerate(exemplars):
            session.add(ExemplarRow(exemplar_set_id=exemplar_set.id, position=position,
                                    question=e.question, solution=e.solution, answer=e.answer))
        session.flush()
        _revalidate(session, exemplar_set)
        return _view(session, exemplar_set)


def create_exemplar_set(settings: Settings, actor: Actor, name: str,
                        exemplars: list[dict] | None = None) -> ExemplarSetView:
    """A set from JSON items `{question, solution, answer?}` (an empty set is allowed)."""
    require_member(actor, "create exemplar sets")
    items = [_coerce(item, f"exemplars[{i}]") for i, item in enumerate(exemplars or [])]
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


def add_exemplar(settings: Settings, actor: Actor, set_id: int, item: dict
                 ) -> ExemplarSetView:
    exemplar = _coerce(item, "exemplar")
    with session_scope(settings.sqlalchemy_url) as session:
        exemplar_set = _owned(session, set_id, actor)
        position = len(_rows(session, set_id))
        session.add(ExemplarRow(exemplar_set_id=set_id, position=position,
                                question=exemplar.question, solution=exemplar.solution,
                                answer=exemplar.answer))
        session.flush()
        _revalidate(session, exemplar_set)
        return _view(session, exemplar_set)


def _row(session, set_id: int, number: int) -> ExemplarRow:
    rows = _rows(session, set_id)
    if not 1 <= number <= len(rows):
        raise NotFound(f"exemplar {number} does not exist; the set has {len(rows)} "
                       "(numbered from 1)")
    return rows[number - 1]


def update_exemplar(settings: Settings, actor: Actor, set_id: int, number: int,
                    item: dict) -> ExemplarSetView:
    """Replace exemplar `number` (from 1); fields left out keep their value."""
    with session_scope(settings.sqlalchemy_url) as session:
        exemplar_set = _owned(session, set_id, actor)
        row = _row(session, set_id, number)
        merged = {"question": row.question, "solution": row.solution, "answer": row.answer}
        merged.update({k: v for k, v in item.items() if k in merged})
        exemplar = _coerce(merged, f"exemplar {number}")
        row.question, row.solution, row.answer = exemplar.question, exemplar.solution, \
            exemplar.answer
        session.add(row)
        _revalidate(session, exemplar_set)
        return _view(session, exemplar_set)


def delete_exemplar(settings: Settings, actor: Actor, set_id: int, number: int
                    ) -> ExemplarSetView:
    with session_scope(settings.sqlalchemy_url) as session:
        exemplar_set = _owned(session, set_id, actor)
        session.delete(_row(session, set_id, number))
        session.flush()
        for position, row in enumerate(_rows(session, set_id)):
            row.position = position
            session.add(row)
        _revalidate(session, exemplar_set)
        return _view(session, exemplar_set)


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
