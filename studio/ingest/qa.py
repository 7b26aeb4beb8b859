"""QA files to rows: FlashRAG JSONL, HotpotQA JSON, MuSiQue JSON/JSONL, CSV/TSV; and splits.

Rules worth knowing:

- A question must be a non-empty string of at most ``Limits.max_question_chars``
  characters, and each gold answer at most ``Limits.max_answer_chars``, else
  ``IngestError`` with its line.
- Answers: strings (numbers are turned into strings), stripped; empty ones
  dropped; duplicates dropped, order kept. A row left with no answer is NOT
  an error: it is listed in ``report["empty_answers"]`` and kept with
  ``golden_answers == []`` (the studio may refuse to train on it later). A
  missing answer field or column, though, is an error.
- Ids: ``id`` (``_id`` for HotpotQA); missing or blank ids become
  ``<stem>-<line>`` (``<stem>-<item>`` in a JSON array). Ids must be unique.
- Duplicate questions (equal after case folding and collapsing white space)
  are reported in ``report["duplicate_questions"]`` with both rows; all rows kept.
- Rows are counted in a first pass that keeps nothing, so a file over the row
  limit is refused at its first row past the limit in constant memory, before
  any row is kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.method.json_values import UnstorableJson, decode_storable

from .corpus import json_type
from .errors import (
    DEFAULT_LIMITS,
    SETTING_MAX_ANSWER_CHARS,
    SETTING_MAX_QUESTION_CHARS,
    Limits,
    RecordLimit,
    Source,
    check_file_size,
    refuse_past_max_rows,
)
from .tabular import csv_rows, find_column, quoted_list
from .textio import Record, json_record_places, json_records

QA_FORMATS = ("flashrag-jsonl", "hotpotqa-json", "musique-json", "csv")
"""``fmt`` values of ``read_qa`` (and ``QAReadResult.fmt``): the schema of the records.
The three JSON schemas are each read from a JSON array or from JSONL alike."""

QA_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv")

QUESTION_ALIASES = ("question", "query", "question_text")
ANSWER_ALIASES = ("answer", "answers", "golden_answers", "golden_answer", "gold_answer")
ALIASES_ALIASES = ("aliases", "answer_aliases")
QID_ALIASES = ("id", "qid", "question_id", "_id")
"""CSV/TSV column names, case-insensitively; when several are present the first listed wins."""

ALIAS_SEPARATOR = "|"
"""Separates the answer aliases of a CSV cell; write ``\\|`` for a literal bar."""

_LIST_ANSWER_COLUMNS = ("answers", "golden_answers")

_TOO_MANY_HINT = "split the file or raise the limit"
_RECORD_HINT = ("shorten the question's fields or leave out those the studio does not need, "
                "or raise the limit")

REPORT_EXAMPLES = 1000
"""Most entries each list of ``QAReadResult.report`` holds; the ``*_count`` keys give totals."""


@dataclass(frozen=True)
class QARow:
    """One question with its gold answers; ``meta`` keeps the source's other fields (JSON)."""

    id: str
    question: str
    golden_answers: list[str]
    meta: dict = field(default_factory=dict)


@dataclass
class QAReadResult:
    """The rows of a QA file, the format read, and what the user should look at.

    ``report`` (JSON-ready): ``count``; ``duplicate_questions``: a list of
    ``{"row", "line", "first_row", "first_line", "question"}`` (``row`` is the
    1-based position in ``rows``, ``line`` the file line where it starts);
    ``empty_answers``: ``{"row", "line", "id"}`` for rows without any answer;
    ``unanswerable``: the same for MuSiQue rows marked ``"answerable": false``.
    Each list holds at most ``REPORT_EXAMPLES`` entries (the first ones);
    ``duplicate_question_count``, ``empty_answer_count`` and
    ``unanswerable_count`` give the totals. ``generated_ids``: how many ids the
    reader made up; ``answers_per_question``: the mean number of gold answers.
    """

    rows: list[QARow]
    fmt: str
    report: dict


def normalize_question(question: str) -> str:
    """The form duplicates are compared in: case-folded, white space collapsed."""
    return " ".join(question.split()).casefold()


# --- answers and fields ----------------------------------------------------------------


class _RowError(Exception):
    def __init__(self, problem: str, field: str | None = None):
        super().__init__(problem)
        self.problem, self.field = problem, field


def _answers(value: Any, name: str) -> list[str]:
    """A string, a number or a list of them -> stripped strings (empty ones kept for now)."""
    items = value if isinstance(value, list) else [value]
    out = []
    for v in items:
        if v is None:
            continue
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(str(v))
        else:
            kind = "a nested list" if isinstance(v, list) else (
                "an object" if isinstance(v, dict) else json_type(v))
            raise _RowError(f'field "{name}" must be a string or a list of strings, found '
                            f"{kind}", name)
    return out


def clean_answers(answers: Sequence[str]) -> list[str]:
    """Strip, drop empty ones, drop repeats (exact, after stripping), keep order."""
    seen, out = set(), []
    for a in answers:
        a = a.strip()
        if a and a not in seen:
            seen.add(a)
            out.append(a)
    return out


_NEEDS = {
    "flashrag-jsonl": '{"question": ..., "golden_answers": [...]}',
    "hotpotqa-json": '{"_id": ..., "question": ..., "answer": ...}',
    "musique-json": '{"id": ..., "question": ..., "answer": ..., "answer_aliases": [...]}',
}


def _question(obj: dict, schema: str, key: str = "question") -> str:
    if key not in obj:
        keys = quoted_list([str(k) for k in obj])
        raise _RowError(f'field "{key}" is missing (found {keys}); each row needs '
                        f"{_NEEDS[schema]}", key)
    value = obj[key]
    if not isinstance(value, str):
        raise _RowError(f'field "{key}" must be a string, found {json_type(value)}', key)
    if not value.strip():
        raise _RowError(f'field "{key}" is empty; write the question or remove the row', key)
    return value.strip()


def _id(obj: dict, keys: Sequence[str]) -> str | None:
    for key in keys:
        if key in obj and obj[key] is not None:
            value = obj[key]
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise _RowError(f'field "{key}" must be a string or a number, found '
                                f"{json_type(value)}", key)
            return str(value).strip() or None
    return None


def _supporting_titles_hotpot(facts: Any) -> list[str]:
    titles: list[str] = []
    if isinstance(facts, list):
        for fact in facts:
            if isinstance(fact, (list, tuple)) and fact and isinstance(fact[0], str):
                if fact[0] not in titles:
                    titles.append(fact[0])
    return titles


# --- the three JSON schemas ------------------------------------------------------------

_ANSWER_KEYS = ("golden_answers", "answers", "answer")


def _flashrag(obj: dict) -> tuple[str | None, str, list[str], dict]:
    question = _question(obj, "flashrag-jsonl")
    key = next((k for k in _ANSWER_KEYS if k in obj), None)
    if key is None:
        keys = quoted_list([str(k) for k in obj])
        raise _RowError(f'field "golden_answers" is missing (found {keys}); each row needs '
                        '{"question": ..., "golden_answers": [...]} (or "answer": "...")',
                        "golden_answers")
    answers = _answers(obj[key], key)
    return _id(obj, ("id",)), question, answers, _meta(obj, ("id", "question", key))


def _answer_field(obj: dict, rows_need: str) -> list[str]:
    """The answers of the row's "answer" field; a row without one is refused, saying what
    the schema's rows need."""
    if "answer" not in obj:
        raise _RowError(f'field "answer" is missing; {rows_need}', "answer")
    return _answers(obj["answer"], "answer")


def _meta(obj: dict, read: Sequence[str]) -> dict:
    """The row's fields other than those `read`: its `meta`."""
    return {k: v for k, v in obj.items() if k not in read}


def _hotpotqa(obj: dict) -> tuple[str | None, str, list[str], dict]:
    question = _question(obj, "hotpotqa-json")
    answers = _answer_field(obj, 'HotpotQA rows need "question" and "answer" (the test set '
                            "has no answers and cannot be used)")
    meta = _meta(obj, ("_id", "id", "question", "answer", "context"))
    if "supporting_facts" in obj:
        meta["supporting_titles"] = _supporting_titles_hotpot(obj["supporting_facts"])
    return _id(obj, ("_id", "id")), question, answers, meta


def _musique(obj: dict) -> tuple[str | None, str, list[str], dict]:
    question = _question(obj, "musique-json")
    answers = _answer_field(obj, 'MuSiQue rows need "question", "answer" and optionally '
                            '"answer_aliases"')
    if obj.get("answer_aliases") is not None:
        answers += _answers(obj["answer_aliases"], "answer_aliases")
    qid = _id(obj, ("id", "_id"))
    meta = _meta(obj, ("id", "_id", "question", "answer", "answer_aliases", "paragraphs"))
    paragraphs = obj.get("paragraphs")
    if isinstance(paragraphs, list):
        meta["supporting_titles"] = [
            p["title"] for p in paragraphs
            if isinstance(p, dict) and p.get("is_supporting") and isinstance(p.get("title"), str)]
    return qid, question, answers, meta


_SCHEMAS: dict[str, Callable[[dict], tuple[str | None, str, list[str], dict]]] = {
    "flashrag-jsonl": _flashrag,
    "hotpotqa-json": _hotpotqa,
    "musique-json": _musique,
}


def detect_schema(obj: dict) -> str:
    """The JSON schema a QA record looks like (by its keys)."""
    keys = set(obj)
    if keys & {"answer_aliases", "paragraphs", "question_decomposition"}:
        return "musique-json"
    if "supporting_facts" in keys or ("_id" in keys and "answer" in keys) or \
            {"context", "type", "level"} <= keys:
        return "hotpotqa-json"
    return "flashrag-jsonl"


# --- collecting rows -------------------------------------------------------------------


@dataclass
class _Collector:
    src: Source
    limits: Limits
    rows: list[QARow] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    questions: dict[str, int] = field(default_factory=dict)
    duplicates: list[dict] = field(default_factory=list)
    empty: list[dict] = field(default_factory=list)
    unanswerable: list[dict] = field(default_factory=list)
    generated: int = 0

    def add(self, qid: str | None, question: str, answers: list[str], meta: dict, *,
            line: int, item: int | None, item_unit: str = "item") -> None:
        where = {"line": line, "item": item, "item_unit": item_unit}
        if len(self.rows) >= self.limits.max_rows:
            raise self.src.too_many_rows(self.limits, "questions", _TOO_MANY_HINT, **where)
        answers = clean_answers(answers)
        self._check_lengths(question, answers, where)
        if qid is None:
            qid = f"{self.src.id_stem}-{item if item is not None else line}"
            self.generated += 1
        if qid in self.ids:
            first = self.ids[qid]
            raise self.src.error(
                f'id "{qid}" is already used by row {first + 1} (line {self.lines[first]}); '
                "ids must be unique: rename one, or leave out the ids and the studio numbers "
                "the rows", field="id", **where)
        row_no = len(self.rows) + 1
        self.ids[qid] = row_no - 1
        key = normalize_question(question)
        if key in self.questions:
            first = self.questions[key]
            self.duplicates.append({"row": row_no, "line": line, "first_row": first + 1,
                                    "first_line": self.lines[first], "question": question})
        else:
            self.questions[key] = row_no - 1
        if not answers:
            self.empty.append({"row": row_no, "line": line, "id": qid})
        if meta.get("answerable") is False:
            self.unanswerable.append({"row": row_no, "line": line, "id": qid})
        self.rows.append(QARow(id=qid, question=question, golden_answers=answers, meta=meta))
        self.lines.append(line)

    def _check_lengths(self, question: str, answers: list[str], where: dict) -> None:
        """Refuse a question or a gold answer longer than its limit: each is stored, shown
        and searched whole, so one of 0.6 MB made every page of rows that held it 0.6 MB."""
        bounds = [("the question", question, self.limits.max_question_chars, "question",
                   SETTING_MAX_QUESTION_CHARS)]
        bounds += [(f"gold answer {number}", answer, self.limits.max_answer_chars,
                    "golden_answers", SETTING_MAX_ANSWER_CHARS)
                   for number, answer in enumerate(answers, 1)]
        for what, text, most, field_name, setting in bounds:
            if len(text) > most:
                raise self.src.error(
                    f"{what} is {len(text)} characters, more than {most}, the limit (setting "
                    f"{setting}); shorten it or raise the limit", field=field_name, **where)

    def result(self, fmt: str) -> QAReadResult:
        if not self.rows:
            raise self.src.error("no questions found; the file holds only blank lines or a "
                                 "header")
        n = len(self.rows)
        report = {
            "count": n,
            "duplicate_questions": self.duplicates[:REPORT_EXAMPLES],
            "duplicate_question_count": len(self.duplicates),
            "empty_answers": self.empty[:REPORT_EXAMPLES],
            "empty_answer_count": len(self.empty),
            "unanswerable": self.unanswerable[:REPORT_EXAMPLES],
            "unanswerable_count": len(self.unanswerable),
            "generated_ids": self.generated,
            "answers_per_question": round(sum(len(r.golden_answers) for r in self.rows) / n, 3),
        }
        return QAReadResult(rows=self.rows, fmt=fmt, report=report)


def read_qa(path: Path, filename: str, limits: Limits = DEFAULT_LIMITS, fmt: str | None = None
            ) -> QAReadResult:
    """Questions and gold answers from the QA file at ``path`` (the user's ``filename``).

    ``fmt`` (one of ``QA_FORMATS``) or ``None`` to detect it: ``.csv``/``.tsv``
    are ``csv``; JSON (an array, or JSONL, whatever the suffix) by the keys of
    the first record: ``answer_aliases``/``paragraphs`` -> ``musique-json``,
    ``supporting_facts`` or ``_id`` + ``answer`` -> ``hotpotqa-json``, else
    ``flashrag-jsonl``.

    - ``flashrag-jsonl``: ``{"id", "question", "golden_answers": [...]}``;
      ``answers``/``answer`` (a string or a list) are accepted instead; every
      other field goes to ``meta``.
    - ``hotpotqa-json``: ``_id``, ``question``, ``answer``; ``meta`` keeps
      ``type``, ``level``, ``supporting_facts`` and adds ``supporting_titles``;
      ``context`` is dropped.
    - ``musique-json``: ``id``, ``question``, ``answer``, ``answer_aliases``
      (golden_answers = answer + aliases); ``meta`` keeps
      ``question_decomposition`` and ``answerable`` and adds
      ``supporting_titles`` (titles of paragraphs with ``is_supporting``);
      the paragraphs themselves are dropped.
    - ``csv``: a header with ``question`` and ``answer`` columns, optional
      ``aliases`` (separated by ``|``, ``\\|`` for a literal bar) and ``id``;
      other columns go to ``meta``. A column named ``answers`` or
      ``golden_answers`` may hold a JSON list (``["a", "b"]``).

    Raises ``IngestError``; see the module doc for what is an error and what
    is only reported.
    """
    src = Source.upload(filename)
    if fmt is not None and fmt not in QA_FORMATS:
        raise src.error(f"unknown QA format {fmt!r}; choose one of {', '.join(QA_FORMATS)} "
                        "or leave it out to detect it")
    check_file_size(path, src, limits, "questions")
    suffix = src.suffix
    is_csv = fmt == "csv" or (fmt is None and suffix in (".csv", ".tsv"))
    with open(path, "rb") as stream:
        if not is_csv and fmt is None and suffix not in QA_SUFFIXES:
            head = stream.peek(64)[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
            if not head.startswith((b"{", b"[")):
                found = f'"{suffix}"' if suffix else "a file without a suffix"
                raise src.error(f"unsupported file type ({found}); upload QA as JSONL (.jsonl), "
                                "JSON (.json) or CSV (.csv, .tsv)")
        refuse_past_max_rows(_row_places(stream, src, limits.record(_RECORD_HINT), is_csv), src,
                             limits, "questions", _TOO_MANY_HINT)
    with open(path, "rb") as stream:
        return _read_csv(stream, src, limits) if is_csv else _read_json(stream, src, limits, fmt)


def _row_places(stream: io.BufferedReader, src: Source, record: RecordLimit, is_csv: bool
                ) -> Iterator[tuple[int, int | None]]:
    """``(line, item)`` where each row starts, read in constant memory (for the count)."""
    if is_csv:
        _, rows = csv_rows(stream, src, record)
        for line, _cells in rows:
            yield line, None
    else:
        yield from json_record_places(stream, src, record, what="question")


def _read_json(stream: io.BufferedReader, src: Source, limits: Limits, fmt: str | None
               ) -> QAReadResult:
    out = _Collector(src, limits)
    schema = fmt
    rec: Record
    for rec in json_records(stream, src, limits.record(_RECORD_HINT), what="question"):
        obj = rec.value
        if not isinstance(obj, dict):
            kind = "a list" if isinstance(obj, list) else json_type(obj)
            each = "each line" if rec.item is None else "each item"
            raise rec.error(src, f"expected a JSON object, found {kind}; {each} needs "
                                 '{"question": ..., "golden_answers": [...]}')
        if schema is None:
            schema = detect_schema(obj)
        try:
            qid, question, answers, meta = _SCHEMAS[schema](obj)
        except _RowError as exc:
            raise rec.error(src, exc.problem, field=exc.field) from None
        out.add(qid, question, answers, meta, line=rec.line, item=rec.item)
    return out.result(schema or "flashrag-jsonl")


_ALIAS_SPLIT = re.compile(r"(?<!\\)\|")


def split_aliases(cell: str) -> list[str]:
    """``"NYC|New York City"`` -> ``["NYC", "New York City"]``; ``\\|`` is a literal bar."""
    return [part.replace("\\|", "|") for part in _ALIAS_SPLIT.split(cell)]


def _read_csv(stream: io.BufferedReader, src: Source, limits: Limits) -> QAReadResult:
    header, rows = csv_rows(stream, src, limits.record(_RECORD_HINT))
    q_col = find_column(header, QUESTION_ALIASES)
    a_col = find_column(header, ANSWER_ALIASES)
    missing = [name for name, col in (("question", q_col), ("answer", a_col)) if col is None]
    if missing:
        raise src.error(
            f"no {' and no '.join(repr(m).replace(chr(39), chr(34)) for m in missing)} column: "
            f"the header has {quoted_list(header)}; the first line must name the columns "
            'question,answer (and optionally aliases, separated by "|", and id)',
            line=1, field=missing[0])
    alias_col = find_column(header, ALIASES_ALIASES)
    id_col = find_column(header, QID_ALIASES)
    used = {q_col, a_col, alias_col, id_col}
    answer_is_list = header[a_col].casefold() in _LIST_ANSWER_COLUMNS
    out = _Collector(src, limits)
    for line, cells in rows:
        question = cells[q_col].strip()
        if not question:
            raise src.error(f'column "{header[q_col]}" is empty; write the question or remove '
                            "the row", line=line, field=header[q_col])
        cell = cells[a_col]
        answers = [cell]
        if answer_is_list and cell.strip().startswith("["):
            try:
                parsed = decode_storable(cell)
            except (json.JSONDecodeError, RecursionError):  # then the cell is the answer
                parsed = None
            except UnstorableJson as exc:
                raise src.error(str(exc), line=line, field=header[a_col]) from None
            if isinstance(parsed, list):
                try:
                    answers = _answers(parsed, header[a_col])
                except _RowError as exc:
                    raise src.error(exc.problem, line=line, field=header[a_col]) from None
        if alias_col is not None and cells[alias_col].strip():
            answers += split_aliases(cells[alias_col])
        qid = cells[id_col].strip() if id_col is not None else ""
        meta = {header[i]: cells[i] for i in range(len(header)) if i not in used}
        out.add(qid or None, question, answers, meta, line=line, item=None)
    return out.result("csv")


# --- splits ----------------------------------------------------------------------------


def split_qa(rows: Sequence[QARow], fraction: float, seed: int
             ) -> tuple[list[QARow], list[QARow]]:
    """Split rows into ``(train, eval)``; ``fraction`` is the share that goes to eval.

    Deterministic for a seed (the same on every machine and Python version:
    rows are ordered by a SHA-256 of the seed and the normalised question, not
    by ``random``), disjoint and complete. Rows with the same question (after
    ``normalize_question``) always land on the same side, so a question never
    leaks from training into evaluation. Eval gets ``round(len(rows) *
    fraction)`` rows when the duplicate groups allow it; each side keeps the
    input order. ``fraction`` must be within [0, 1].
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction: the eval share must be between 0 and 1, got {fraction}")
    rows = list(rows)
    target = round(len(rows) * fraction)
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(normalize_question(row.question), []).append(i)

    def rank(key: str) -> bytes:
        return hashlib.sha256(f"{seed}\x00{key}".encode()).digest()

    eval_idx: set[int] = set()
    for key in sorted(groups, key=lambda k: (rank(k), k)):
        members = groups[key]
        if len(eval_idx) + len(members) <= target:
            eval_idx.update(members)
        if len(eval_idx) == target:
            break
    train = [r for i, r in enumerate(rows) if i not in eval_idx]
    evaluation = [r for i, r in enumerate(rows) if i in eval_idx]
    return train, evaluation
