"""CSV/TSV and Parquet basics shared by the corpus and QA readers: columns by alias, rows."""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Iterator, Sequence

from .errors import RecordLimit, Source
from .textio import text_lines, utf8_length

_OPEN_QUOTE_HINT = ('a quote (") is probably left open: check the quotes from this line on, '
                    "or raise the limit")


def find_column(names: Sequence[str], aliases: Sequence[str]) -> int | None:
    """Index of the first alias (in alias order) among ``names``, compared case-insensitively."""
    folded = [n.strip().lstrip("\ufeff").casefold() for n in names]
    for alias in aliases:
        if alias in folded:
            return folded.index(alias)
    return None


LISTED_NAMES, NAME_CHARS = 20, 60
"""A message lists at most 20 column names of at most 60 characters each (a 100,000-column
header made a 1.2 MB message)."""


def quoted_list(names: Sequence[str]) -> str:
    """The names quoted for a message, the first `LISTED_NAMES` of them, each cut short."""
    if not names:
        return "none"
    shown = [f'"{n[:NAME_CHARS]}{"..." if len(n) > NAME_CHARS else ""}"'
             for n in names[:LISTED_NAMES]]
    more = len(names) - LISTED_NAMES
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _delimiter(header_line: str, suffix: str) -> str:
    if suffix == ".tsv":
        return "\t"
    outside, quoted = [], False
    for ch in header_line:
        if ch == '"':
            quoted = not quoted
        elif not quoted:
            outside.append(ch)
    text = "".join(outside)
    counts = {d: text.count(d) for d in (",", ";", "\t")}
    if counts[","]:
        return ","
    best = max((";", "\t"), key=lambda d: counts[d])
    return best if counts[best] else ","


def csv_rows(stream: io.BufferedReader, src: Source, record: RecordLimit
             ) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header and an iterator of ``(line, cells)`` of a CSV or TSV file, streamed.

    The delimiter is a tab for ``.tsv``; for other files a comma, unless the
    header line holds no comma but semicolons or tabs (Excel in many locales
    writes semicolons). Quotes follow the CSV rules (``""`` inside a quoted
    cell); a quote left open is an error. Blank lines are skipped; a row with
    more or fewer cells than the header is an error. A row (its lines, a quoted
    cell's line breaks included) longer than ``record`` allows is refused before
    the line that takes it past the limit goes to the CSV parser, so no cell is
    ever longer.
    """
    if csv.field_size_limit() <= record.max_bytes:  # Python's default, 128 KiB, is too short
        csv.field_size_limit(record.max_bytes + 1)
    lines = text_lines(stream, src, record, keepends=True)
    first = next(lines, None)
    while first is not None and not first[1].strip():
        first = next(lines, None)
    if first is None:
        raise src.error("no header line found; the first line must name the columns")
    header_line_no, header_line = first
    delimiter = _delimiter(header_line, src.suffix)
    row_start, row_bytes = header_line_no, 0

    def chained() -> Iterator[str]:
        """The lines, counted against the record limit of the row they belong to (a row
        is its text without its last line break)."""
        nonlocal row_bytes
        for number, text in itertools.chain([first], lines):
            row_bytes += utf8_length(text)
            if row_bytes - text.endswith("\n") > record.max_bytes:
                raise record.refuse(src, "the row", line=row_start,
                                    hint=_OPEN_QUOTE_HINT if number > row_start else None)
            yield text

    reader = csv.reader(chained(), delimiter=delimiter, strict=True)
    offset = header_line_no - 1

    def next_row() -> tuple[int, list[str]] | None:
        nonlocal row_start, row_bytes
        start = row_start = reader.line_num + 1 + offset
        row_bytes = 0
        try:
            return start, next(reader)
        except StopIteration:
            return None
        except csv.Error as exc:
            message = str(exc)
            if "unexpected end of data" in message:
                problem = ("a quoted cell is not closed before the end of the file; check the "
                           "quotes (\") from this line on")
            else:
                problem = (f"not valid CSV ({message}); put cells holding quotes, "
                           f"{'tabs' if delimiter == chr(9) else 'commas'} or line breaks in "
                           'double quotes and double the quotes inside ("")')
            raise src.error(problem, line=start) from None

    head = next_row()
    assert head is not None
    header = [h.strip().lstrip("\ufeff") for h in head[1]]

    def rows() -> Iterator[tuple[int, list[str]]]:
        while (row := next_row()) is not None:
            line, cells = row
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                sep = "tab" if delimiter == "\t" else repr(delimiter)
                raise src.error(
                    f"{len(cells)} cells but the header has {len(header)} columns "
                    f"(separated by {sep}); put cells holding the separator in double quotes",
                    line=line)
            yield line, cells

    return header, rows()
