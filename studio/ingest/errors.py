"""The one error the readers raise, the upload limits, and where an error happened.

Every message starts with where the problem is (the user's file name, the
member of an archive, the line, item or row) and ends with how to fix it, so
the web layer can return it as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

SETTING_MAX_BYTES = "STUDIO_MAX_UPLOAD_BYTES"
SETTING_MAX_ROWS = "STUDIO_MAX_UPLOAD_ROWS"
SETTING_MAX_ARCHIVE_MEMBERS = "STUDIO_MAX_ARCHIVE_MEMBERS"
SETTING_MAX_UNPACKED_BYTES = "STUDIO_MAX_UNPACKED_BYTES"
SETTING_MAX_RECORD_BYTES = "STUDIO_MAX_RECORD_BYTES"
SETTING_MAX_QUESTION_CHARS = "STUDIO_MAX_QUESTION_CHARS"
SETTING_MAX_ANSWER_CHARS = "STUDIO_MAX_ANSWER_CHARS"


class IngestError(ValueError):
    """A file the studio cannot read, with where and how to fix it.

    Attributes: ``filename`` (the user's file name), ``member`` (the path inside
    an archive, ``None`` outside one), ``line`` (1-based line of the file where
    the record starts, or ``None``), ``item`` (1-based position of the record
    in a JSON array or a Parquet file, else ``None``), ``field`` (the field or
    column concerned, or ``None``) and ``problem`` (the message without the place).
    """

    def __init__(self, filename: str, problem: str, *, line: int | None = None,
                 item: int | None = None, item_unit: str = "item", field: str | None = None,
                 member: str | None = None):
        self.filename = filename
        self.member = member
        self.line = line
        self.item = item
        self.field = field
        self.problem = problem
        where = filename
        if member:
            where += f": {member}"
        if item is not None:
            where += f" {item_unit} {item}"
            if line is not None:
                where += f" (line {line})"
        elif line is not None:
            where += f" line {line}"
        super().__init__(f"{where}: {problem}")


class TooManyRows(IngestError):
    """The upload holds more rows than ``Limits.max_rows``; raised at the first row past it."""


class RecordTooLong(IngestError):
    """A record is longer than ``Limits.max_record_bytes``; raised having read no more of it
    than that."""


LIMIT_ERRORS = (TooManyRows, RecordTooLong)
"""The refusals that end a counting pass (any other problem is left to the reading pass)."""


@dataclass(frozen=True)
class Limits:
    """What one upload may hold; the service fills it from the settings.

    ``max_bytes``: size of the uploaded file (``STUDIO_MAX_UPLOAD_BYTES``);
    ``max_rows``: documents or questions in the upload (``STUDIO_MAX_UPLOAD_ROWS``);
    ``max_archive_members``: entries in a zip archive, nested ones included
    (``STUDIO_MAX_ARCHIVE_MEMBERS``); ``max_unpacked_bytes``: bytes a zip archive
    unpacks to, nested ones included (``STUDIO_MAX_UNPACKED_BYTES``);
    ``max_record_bytes``: bytes of UTF-8 text one record may hold, a line, a CSV
    row, a JSON array item, a Parquet cell or a paragraph (``STUDIO_MAX_RECORD_BYTES``);
    ``max_question_chars`` and ``max_answer_chars``: characters of one question and of one
    gold answer of a QA set (``STUDIO_MAX_QUESTION_CHARS``, ``STUDIO_MAX_ANSWER_CHARS``).
    """

    max_bytes: int = 2_000_000_000
    max_rows: int = 5_000_000
    max_archive_members: int = 10_000
    max_unpacked_bytes: int = 2_000_000_000
    max_record_bytes: int = 64 << 20
    max_question_chars: int = 8000
    max_answer_chars: int = 2000

    def record(self, hint: str) -> RecordLimit:
        """The record bound, with what a reader tells the user to do about a longer record."""
        return RecordLimit(self.max_record_bytes, hint)


@dataclass(frozen=True)
class RecordLimit:
    """The most bytes one record may hold, and what to do about a longer one.

    A reader holds one record at a time (and several times its size while
    parsing it), so this bound is what keeps its memory bounded. The line and
    JSON readers take it and refuse a record as soon as it passes the bound,
    having read at most a bound's worth of it.
    """

    max_bytes: int
    hint: str

    def refuse(self, src: Source, record: str, *, line: int | None = None,
               item: int | None = None, item_unit: str = "item", field: str | None = None,
               hint: str | None = None) -> RecordTooLong:
        """The refusal of ``record`` (``"the line"``, ``"the paragraph"``...) where it starts."""
        return RecordTooLong(
            src.filename, f"{record} is longer than {size_text(self.max_bytes)}, the limit for "
            f"one record (setting {SETTING_MAX_RECORD_BYTES}); {hint or self.hint}", line=line,
            item=item, item_unit=item_unit, field=field, member=src.member)


DEFAULT_LIMITS = Limits()
"""The limits a reader uses when the caller passes none (the settings' defaults)."""


def check_file_size(path, src: Source, limits: Limits, what: str) -> None:
    """Refuse a file over ``limits.max_bytes`` or an empty one; ``what``: "documents"."""
    size = os.stat(path).st_size
    if size > limits.max_bytes:
        raise src.error(
            f"the file is {size_text(size)}, more than the upload limit of "
            f"{size_text(limits.max_bytes)} (setting {SETTING_MAX_BYTES}); split it into "
            "smaller uploads or raise the limit")
    if size == 0:
        raise src.error(f"the file is empty; upload a file with {what} in it")


def refuse_past_max_rows(places: Iterable[tuple[int | None, int | None]], src: Source,
                         limits: Limits, what: str, hint: str) -> None:
    """Count rows (``(line, item)`` where each starts) and refuse the first past the limit.

    The counting pass a reader makes before the pass that keeps rows, ids or
    questions: it holds one row at a time, so a file with too many rows is
    refused at the first row past ``limits.max_rows`` in constant memory,
    whatever its length; so is a record past ``limits.max_record_bytes`` (the
    ``places`` reader raises it). Any other problem met while counting ends the
    count without a word: the reading pass then reports the file's first problem.
    """
    try:
        for count, (line, item) in enumerate(places, start=1):
            if count > limits.max_rows:
                raise src.too_many_rows(limits, what, hint, line=line, item=item)
    except LIMIT_ERRORS:
        raise
    except IngestError:
        return


def size_text(n: int) -> str:
    """``41`` -> ``"41 bytes"``; ``2500000000`` -> ``"2.5 GB (2500000000 bytes)"``."""
    return f"{n} bytes" if n < 1000 else f"{human_bytes(n)} ({n} bytes)"


def human_bytes(n: int) -> str:
    """``1234567`` -> ``"1.2 MB"`` (decimal units, as file managers show them)."""
    value = float(n)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Source:
    """The file being read: the upload's name, and the member path inside archives.

    ``name`` is this file's own name (for its suffix and title), ``id_stem`` the
    prefix of generated ids: the upload's stem, or the member path without its
    suffix inside an archive (``docs/a`` for ``docs/a.jsonl``).
    """

    filename: str
    member: str | None
    name: str
    id_stem: str

    @classmethod
    def upload(cls, filename: str) -> Source:
        return cls(filename=filename, member=None, name=filename, id_stem=stem_of(filename))

    def child(self, member_path: str, id_path: str) -> Source:
        member = member_path if self.member is None else f"{self.member}: {member_path}"
        stem = id_path if self.member is None else f"{self.id_stem}/{id_path}"
        return Source(filename=self.filename, member=member,
                      name=member_path.rsplit("/", 1)[-1], id_stem=stem)

    @property
    def suffix(self) -> str:
        return suffix_of(self.name)

    @property
    def title_stem(self) -> str:
        return stem_of(self.name)

    def error(self, problem: str, *, line: int | None = None, item: int | None = None,
              item_unit: str = "item", field: str | None = None) -> IngestError:
        return IngestError(self.filename, problem, line=line, item=item, item_unit=item_unit,
                           field=field, member=self.member)

    def too_many_rows(self, limits: Limits, what: str, hint: str, *, line: int | None = None,
                      item: int | None = None, item_unit: str = "item") -> TooManyRows:
        """The refusal of the first row past ``limits.max_rows``; ``what``: "documents"."""
        return TooManyRows(
            self.filename, f"more than {limits.max_rows} {what}, the limit for one upload "
            f"(setting {SETTING_MAX_ROWS}); {hint}", line=line, item=item, item_unit=item_unit,
            member=self.member)


def suffix_of(name: str) -> str:
    """Lower-case suffix of the last path component (``""`` when there is none)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return base[dot:].lower() if dot > 0 else ""


def stem_of(name: str) -> str:
    """The last path component without its suffix."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return base[:dot] if dot > 0 else base
