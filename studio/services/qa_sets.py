"""QA sets: questions with gold answers, for training or evaluation.

Uploads are parsed in full before anything is stored (a bad row is refused
with its number); the rows and the set are stored in one transaction.
"""

from __future__ import annotations

import hashlib
import json
from typing import BinaryIO

from sqlalchemy import insert
from sqlmodel import col, delete, select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.ingest import IngestError, QARow, read_qa, split_qa
from studio.services import uploads
from studio.services.access import Actor, require_member
from studio.services.errors import InvalidInput
from studio.services.records import (
    by_name_or_404,
    check_new_name,
    get_or_404,
    get_owned,
    usernames,
)
from studio.services.run_plans import pinned_ids
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import QAItem, QASet, utcnow

PURPOSES = ("train", "eval")
_BATCH = 5000
MAX_ROWS_PAGE = 500
MAX_PAGE_BYTES = 2_000_000
"""Bytes of rows (as JSON) a page of rows holds at most: past them it ends early and says
where the next page starts (500 rows of a set stored before questions were bounded made
115 MB). A row longer than that alone still makes a page of its own."""


def _check_purpose(purpose: str) -> str:
    if purpose not in PURPOSES:
        raise InvalidInput(f"purpose: '{purpose}' is not one of {', '.join(PURPOSES)}")
    return purpose


class QASetView(TypedDict):
    """A QA set as the API and the pages show it (times in ISO 8601, UTC)."""

    id: int
    name: str
    owner: str | None
    purpose: str  # train | eval
    source_filename: str
    format: str  # flashrag-jsonl | hotpotqa-json | musique-json | csv
    num_rows: int
    report: dict | None  # duplicates, empty answers, ...; a split's seed and source
    created_at: str


class QARowView(TypedDict):
    row: int  # from 1
    id: str | None  # the source's id
    question: str
    golden_answers: list[str] | None


class QARowsPage(TypedDict):
    total: int
    offset: int
    rows: list[QARowView]
    next_offset: int | None  # where the next page starts; None after the last row
    bytes_reached: bool  # the page ended before `limit` rows: it reached MAX_PAGE_BYTES


class SplitSets(TypedDict):
    """The two sets a split made."""

    train: QASetView
    eval: QASetView


def _view(qa_set: QASet, owners: dict[int, str]) -> QASetView:
    return {
        "id": qa_set.id, "name": qa_set.name, "owner": owners.get(qa_set.owner_id),
        "purpose": qa_set.purpose,
        "source_filename": qa_set.source_filename, "format": qa_set.source_format,
        "num_rows": qa_set.num_rows, "report": qa_set.report,
        "created_at": qa_set.created_at.isoformat(),
    }


def rows_hash(rows: list[QARow]) -> str:
    """The content hash of a set made from rows rather than a file (a split's halves)."""
    text = json.dumps([[r.id, r.question, list(r.golden_answers)] for r in rows],
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _store(session, qa_set: QASet, rows: list[QARow]) -> QASetView:
    """Insert the set and its rows; the set's view."""
    session.add(qa_set)
    session.flush()
    for start in range(0, len(rows), _BATCH):
        session.execute(insert(QAItem), [
            {"qa_set_id": qa_set.id, "position": start + i, "external_id": r.id,
             "question": r.question, "golden_answers": list(r.golden_answers), "meta": r.meta}
            for i, r in enumerate(rows[start:start + _BATCH])
        ])
    return _view(qa_set, usernames(session))


def create_qa_set(settings: Settings, actor: Actor, stream: BinaryIO, filename: str | None,
                  name: str, *, purpose: str = "train", fmt: str | None = None
                  ) -> QASetView:
    require_member(actor, "upload QA sets")
    _check_purpose(purpose)
    with session_scope(settings.sqlalchemy_url) as session:
        name = check_new_name(session, QASet, name)
    with uploads.stage_upload(stream, filename, settings) as staged:
        try:
            result = read_qa(staged.path, staged.filename, uploads.upload_limits(settings),
                             fmt=fmt)
        except IngestError as exc:
            raise InvalidInput(str(exc)) from None
        with uploads.kept_as_new(staged, settings, QASet, name) as (upload_path, session):
            qa_set = QASet(
                name=name, purpose=purpose, source_filename=staged.filename,
                content_hash=staged.sha256, source_format=result.fmt, upload_path=upload_path,
                num_rows=len(result.rows), report=result.report, owner_id=actor.id)
            return _store(session, qa_set, result.rows)


def _load(session, qa_set_id: int) -> QASet:
    return get_or_404(session, QASet, qa_set_id, "QA set")


def get_qa_set(settings: Settings, qa_set_id: int) -> QASetView:
    with session_scope(settings.sqlalchemy_url) as session:
        return _view(_load(session, qa_set_id), usernames(session))


def find_qa_set(settings: Settings, name: str) -> QASetView:
    with session_scope(settings.sqlalchemy_url) as session:
        return _view(by_name_or_404(session, QASet, name, "QA set"), usernames(session))


def list_qa_sets(settings: Settings) -> list[QASetView]:
    with session_scope(settings.sqlalchemy_url) as session:
        owners = usernames(session)
        return [_view(q, owners) for q in session.exec(
            select(QASet).where(QASet.retired_at.is_(None)).order_by(QASet.id))]


def set_purpose(settings: Settings, actor: Actor, qa_set_id: int, purpose: str
                ) -> QASetView:
    _check_purpose(purpose)
    with session_scope(settings.sqlalchemy_url) as session:
        qa_set = get_owned(session, QASet, qa_set_id, "QA set", actor, "change")
        qa_set.purpose = purpose
        session.add(qa_set)
        return _view(qa_set, usernames(session))


def _items_query(qa_set_id: int, offset: int = 0, limit: int | None = None):
    query = select(QAItem).where(QAItem.qa_set_id == qa_set_id).order_by(QAItem.position)
    query = query.offset(offset)
    return query if limit is None else query.limit(limit)


def _items(session, qa_set_id: int, offset: int = 0, limit: int | None = None) -> list[QAItem]:
    return list(session.exec(_items_query(qa_set_id, offset, limit)))


def qa_rows(settings: Settings, qa_set_id: int, offset: int = 0, limit: int = 20
            ) -> QARowsPage:
    """A page of at most `limit` rows and `MAX_PAGE_BYTES`, for previews; rows are read a
    few at a time, so a page that ends early has not read the rest."""
    if offset < 0 or not 1 <= limit <= MAX_ROWS_PAGE:
        raise InvalidInput(f"offset must be >= 0 and limit between 1 and {MAX_ROWS_PAGE}")
    rows: list[QARowView] = []
    size = 0
    with session_scope(settings.sqlalchemy_url) as session:
        qa_set = _load(session, qa_set_id)
        items = session.exec(_items_query(qa_set.id, offset, limit)
                             .execution_options(yield_per=16))
        for item in items:
            row = {"row": item.position + 1, "id": item.external_id, "question": item.question,
                   "golden_answers": item.golden_answers}
            size += len(json.dumps(row, ensure_ascii=False).encode())
            if rows and size > MAX_PAGE_BYTES:
                break
            rows.append(row)
        items.close()
    end = offset + len(rows)
    return {"total": qa_set.num_rows, "offset": offset, "rows": rows,
            "next_offset": end if end < qa_set.num_rows else None,
            "bytes_reached": len(rows) < limit and end < qa_set.num_rows}


def _qa_row(item: QAItem) -> QARow:
    return QARow(id=item.external_id or str(item.position), question=item.question,
                 golden_answers=list(item.golden_answers or []), meta=item.meta or {})


def load_rows(settings: Settings, qa_set_id: int, positions: list[int] | None = None
              ) -> list[QARow]:
    """Every row of a set, as the engines and evaluation read them (a retired set's too:
    the runs whose plan pins it still train and evaluate on it), or the rows at `positions`
    (from 0), in that order (the questions a try of an exemplar set chose)."""
    with session_scope(settings.sqlalchemy_url) as session:
        get_or_404(session, QASet, qa_set_id, "QA set", retired=True)
        if positions is None:
            return [_qa_row(i) for i in _items(session, qa_set_id)]
        found = {i.position: i for i in session.exec(select(QAItem).where(
            QAItem.qa_set_id == qa_set_id, col(QAItem.position).in_(positions)))}
        return [_qa_row(found[p]) for p in positions if p in found]


def _question_key(question: str) -> str:
    """A question as compared with another: case, spacing and a final '?' left out (the
    prompt adds the '?', `studio.method.prompt.normalize_question`)."""
    return " ".join(question.split()).casefold().rstrip("?").rstrip()


def questions_other_than(settings: Settings, qa_set_id: int, questions: list[str],
                         count: int, scan: int) -> tuple[list[QARowView], int]:
    """The first `count` rows of a set whose question is none of `questions` (compared
    without case and spacing), reading at most `scan` rows; and how many rows read were
    left out for being one of them."""
    taken = {_question_key(q) for q in questions}
    rows: list[QARowView] = []
    left_out = 0
    with session_scope(settings.sqlalchemy_url) as session:
        _load(session, qa_set_id)
        items = session.exec(_items_query(qa_set_id, 0, scan).execution_options(yield_per=64))
        for item in items:
            if _question_key(item.question) in taken:
                left_out += 1
                continue
            rows.append({"row": item.position + 1, "id": item.external_id,
                         "question": item.question, "golden_answers": item.golden_answers})
            if len(rows) == count:
                break
        items.close()
    return rows, left_out


def held_out_split(settings: Settings, qa_set_id: int) -> QASetView | None:
    """The evaluation set kept apart from a training set: a pack's `<name>-heldout`, or the
    `eval` half of the split that made it (or of a split of it); None for a set of purpose
    eval, or one with no such set."""
    source = get_qa_set(settings, qa_set_id)
    if source["purpose"] == "eval":
        return None
    made_by = source["report"] or {}
    for other in list_qa_sets(settings):
        split = other["report"] or {}
        if other["purpose"] != "eval" or other["id"] == source["id"]:
            continue
        if other["name"] == f"{source['name']}-heldout" or split.get("split_of") and (
                split["split_of"] == source["name"]
                or (split["split_of"], split.get("seed")) == (made_by.get("split_of"),
                                                              made_by.get("seed"))):
            return other
    return None


def sample_rows(settings: Settings, qa_set_id: int, limit: int) -> tuple[int, list[QARow]]:
    """The set's size and at most `limit` of its rows, evenly spaced through it (all of a
    smaller set), read without reading a large set whole (the data doctor's sample)."""
    with session_scope(settings.sqlalchemy_url) as session:
        size = get_or_404(session, QASet, qa_set_id, "QA set", retired=True).num_rows
        query = select(QAItem).where(QAItem.qa_set_id == qa_set_id)
        if size > limit:
            positions = [i * size // limit for i in range(limit)]
            query = query.where(col(QAItem.position).in_(positions))
        return size, [_qa_row(i) for i in session.exec(query.order_by(QAItem.position))]


def split_qa_set(settings: Settings, actor: Actor, qa_set_id: int, *,
                 eval_fraction: float = 0.2, seed: int = 0, train_name: str | None = None,
                 eval_name: str | None = None) -> SplitSets:
    """Split a set into a training and an evaluation set with a seed (both new sets, the
    actor's: any member may split a set of the team, which stays as it is)."""
    require_member(actor, "split QA sets")
    if not 0 < eval_fraction < 1:
        raise InvalidInput(f"eval_fraction: must be between 0 and 1, got {eval_fraction}")
    source = get_qa_set(settings, qa_set_id)
    rows = load_rows(settings, qa_set_id)
    train_rows, eval_rows = split_qa(rows, eval_fraction, seed)
    if not train_rows or not eval_rows:
        raise InvalidInput(f"eval_fraction: {eval_fraction} of {len(rows)} rows leaves one side "
                           "empty; choose a fraction that keeps rows on both sides")
    out = {}
    with session_scope(settings.sqlalchemy_url) as session:
        for purpose, part, new_name in (("train", train_rows, train_name),
                                        ("eval", eval_rows, eval_name)):
            name = check_new_name(session, QASet, new_name or f"{source['name']}-{purpose}")
            out[purpose] = _store(session, QASet(
                name=name, purpose=purpose, source_filename=source["source_filename"],
                content_hash=rows_hash(part), source_format=source["format"],
                num_rows=len(part), owner_id=actor.id,
                report={"split_of": source["name"], "seed": seed,
                        "eval_fraction": eval_fraction}), part)
    return out


def delete_qa_set(settings: Settings, actor: Actor, qa_set_id: int) -> None:
    """Remove the set and its rows; a set that a run's plan pins is retired instead (hidden,
    its name free) and removed with the last such run (`purge_retired`)."""
    with session_scope(settings.sqlalchemy_url) as session:
        qa_set = get_owned(session, QASet, qa_set_id, "QA set", actor, "delete")
        if qa_set_id in pinned_ids(session, QASet):
            qa_set.retired_at = utcnow()
            session.add(qa_set)
        else:
            _remove(session, qa_set)


def _remove(session, qa_set: QASet) -> None:
    session.exec(delete(QAItem).where(col(QAItem.qa_set_id) == qa_set.id))
    session.delete(qa_set)


def purge_retired(settings: Settings) -> None:
    """Remove the retired sets that no run's plan pins any more (after a run's deletion)."""
    with session_scope(settings.sqlalchemy_url) as session:
        pinned = pinned_ids(session, QASet)
        for qa_set in session.exec(select(QASet).where(QASet.retired_at.is_not(None))).all():
            if qa_set.id not in pinned:
                _remove(session, qa_set)
