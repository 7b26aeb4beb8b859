"""Exemplar files (JSONL, or ``===== Example N =====`` text blocks) to exemplars.

The method core parses the text (``studio.method.exemplars``); this reader
first counts the exemplars line by line, keeping nothing, so a file over the
row limit is refused at its first exemplar past the limit in constant memory,
before the file is read whole.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

from studio.method.exemplars import EXAMPLE_HEADER, Exemplar, exemplar_format, read_exemplars

from .errors import DEFAULT_LIMITS, Limits, Source, check_file_size, refuse_past_max_rows
from .textio import decode_bytes, text_lines


def read_exemplar_file(path: Path, filename: str, limits: Limits = DEFAULT_LIMITS
                       ) -> list[Exemplar]:
    """The exemplars of the file at ``path``, uploaded by the user as ``filename``.

    Raises ``IngestError`` (size, encoding, too many exemplars) or
    ``ExemplarFormatError`` (an unknown file type, a malformed exemplar).
    """
    src = Source.upload(filename)
    check_file_size(path, src, limits, "exemplars")
    with open(path, "rb") as stream:
        head = stream.peek(64)[:64].decode("utf-8", errors="ignore")
        fmt = exemplar_format(filename, head)
        refuse_past_max_rows(_exemplar_places(stream, src, fmt), src, limits, "exemplars",
                             "split the file or raise the limit")
    return read_exemplars(decode_bytes(Path(path).read_bytes(), src), fmt)


def _exemplar_places(stream: io.BufferedReader, src: Source, fmt: str
                     ) -> Iterator[tuple[int, None]]:
    """The line where each exemplar starts: a line that is not blank (JSONL; the parser
    also breaks lines at ``\\r`` and the other line separators), or a header line."""
    if fmt == "jsonl":
        for number, line in text_lines(stream, src):
            for piece in line.splitlines():
                if piece.strip():
                    yield number, None
        return
    for number, line in text_lines(stream, src, keepends=True):
        if EXAMPLE_HEADER.match(line):
            yield number, None
