"""Exemplar files (JSONL, or ``===== Example N =====`` text blocks) to exemplars.

The method core parses the text (``studio.method.exemplars``); this reader
first counts the exemplars line by line, keeping nothing, so a file over the
row limit, or with an exemplar over the record limit, is refused at that
exemplar in constant memory, before the file is read whole.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

from studio.method.exemplars import EXAMPLE_HEADER, Exemplar, exemplar_format, read_exemplars

from .errors import DEFAULT_LIMITS, Limits, Source, check_file_size, refuse_past_max_rows
from .textio import decode_bytes, text_lines, utf8_length

_RECORD_HINT = "shorten the exemplar or raise the limit"


def read_exemplar_file(path: Path, filename: str, limits: Limits = DEFAULT_LIMITS
                       ) -> list[Exemplar]:
    """The exemplars of the file at ``path``, uploaded by the user as ``filename``.

    Raises ``IngestError`` (size, encoding, too many exemplars, one too long) or
    ``ExemplarFormatError`` (an unknown file type, a malformed exemplar).
    """
    src = Source.upload(filename)
    check_file_size(path, src, limits, "exemplars")
    with open(path, "rb") as stream:
        head = stream.peek(64)[:64].decode("utf-8", errors="ignore")
        fmt = exemplar_format(filename, head)
        refuse_past_max_rows(_exemplar_places(stream, src, fmt, limits), src, limits,
                             "exemplars", "split the file or raise the limit")
    return read_exemplars(decode_bytes(Path(path).read_bytes(), src), fmt)


def _exemplar_places(stream: io.BufferedReader, src: Source, fmt: str, limits: Limits
                     ) -> Iterator[tuple[int, None]]:
    """The line where each exemplar starts: a line that is not blank (JSONL; the parser
    also breaks lines at ``\\r`` and the other line separators), or a header line.

    A JSONL line, or a block of text from a header to the next, longer than
    ``limits.max_record_bytes`` is refused where it starts.
    """
    record = limits.record(_RECORD_HINT)
    if fmt == "jsonl":
        for number, line in text_lines(stream, src, record):
            for piece in line.splitlines():
                if piece.strip():
                    yield number, None
        return
    start, block_bytes = None, 0
    for number, line in text_lines(stream, src, record, keepends=True):
        if EXAMPLE_HEADER.match(line):
            start, block_bytes = number, 0
            yield number, None
        block_bytes += utf8_length(line)
        if block_bytes - line.endswith("\n") > record.max_bytes:
            what = "the text before the first exemplar" if start is None else "the exemplar"
            raise record.refuse(src, what, line=start or 1)
