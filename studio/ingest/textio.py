"""Bytes to text, line by line, and JSON records (JSONL or a JSON array) as a stream.

Encoding policy (one for every reader): a byte-order mark picks UTF-8,
UTF-16 or UTF-32; without one the text must be UTF-8. Nothing falls back to
Windows-1252 or Latin-1 silently: those decode almost any bytes, so a wrong
guess would store garbled text without a word. Non-UTF-8 text is refused with
the line and column of the first bad byte, a note when the line reads as
Windows-1252/Latin-1, and how to save the file as UTF-8. NUL bytes in UTF-8
text (a binary file, or UTF-16 without its mark) are refused too.
"""

from __future__ import annotations

import codecs
import io
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from studio.method.json_values import (
    JSON_DECODER,
    UnstorableJson,
    check_storable,
    decode_storable,
)

from .errors import IngestError, RecordLimit, Source

SAVE_AS_UTF8 = ('save the file as UTF-8 (in Excel: Save As > "CSV UTF-8"; in a text editor: '
                'choose the UTF-8 encoding)')
_NUL_PROBLEM = ("the file holds NUL bytes: it looks like a binary file or UTF-16 text without "
                "a byte-order mark; " + SAVE_AS_UTF8)

_BOMS = (  # longest first: the UTF-32-LE mark starts with the UTF-16-LE one
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
READ_CHUNK = 1 << 20
"""Bytes read from a stream at a time where lines may be long (JSON arrays, whole texts)."""
TOO_DEEP = ("nested too deeply (JSON more than about a thousand levels deep); a {what} is "
            "an object of strings, numbers and short lists")
"""Python's JSON decoder gives up on deep nesting with a RecursionError: the refusal."""


def bom_encoding(head: bytes) -> str | None:
    """The encoding a byte-order mark at the start of ``head`` announces, else ``None``."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding
    return None


def _utf8_problem(raw: bytes, exc: UnicodeDecodeError, column_offset: int = 0) -> str:
    """Say where in the line ``raw`` the bad byte is, and what the line probably is.

    ``column_offset``: characters of the line before ``raw`` (read earlier).
    """
    column = column_offset + len(raw[:exc.start].decode("utf-8", errors="replace")) + 1
    problem = f"not UTF-8 text (byte 0x{raw[exc.start]:02X} at column {column})"
    try:
        raw.decode("cp1252")
        problem += "; it looks like Windows-1252/Latin-1 text"
    except UnicodeDecodeError:
        pass
    return f"{problem}; {SAVE_AS_UTF8}"


def decode_bytes(data: bytes, src: Source) -> str:
    """``decode_text`` for a file given as a ``Source`` (a member of an archive too)."""
    encoding = bom_encoding(data[:4])
    if encoding is not None:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise src.error(f"the text does not match its {encoding.upper()} byte-order mark "
                            f"(bad bytes at offset {exc.start}); {SAVE_AS_UTF8}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        end = data.find(b"\n", exc.start)
        raw = data[start:end if end >= 0 else len(data)]
        local = UnicodeDecodeError("utf-8", raw, exc.start - start, exc.end - start, exc.reason)
        raise src.error(_utf8_problem(raw, local), line=line) from None
    if "\x00" in text:
        raise src.error(_NUL_PROBLEM, line=text.count("\n", 0, text.index("\x00")) + 1)
    return text


def decode_text(data: bytes, filename: str) -> str:
    """Whole-file bytes to text by the module's encoding policy (see the module doc).

    A byte-order mark (UTF-8, UTF-16, UTF-32) is honoured and dropped; otherwise
    the bytes must be UTF-8. Raises ``IngestError`` naming the line and column
    of the first byte that is not UTF-8, or the first NUL byte.
    """
    return decode_bytes(data, Source.upload(filename))


class CountingReader(io.RawIOBase):
    """A raw stream over ``inner`` that calls ``charge(n)`` for every ``n`` bytes read."""

    def __init__(self, inner: BinaryIO, charge):
        self._inner = inner
        self._charge = charge

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._inner.read(len(buffer))
        n = len(data)
        if n:
            self._charge(n)
            buffer[:n] = data
        return n


def utf8_length(text: str) -> int:
    """Bytes of ``text`` in UTF-8, what a record limit counts (no copy for ASCII text)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _peek(stream: io.BufferedReader, n: int) -> bytes:
    return stream.peek(n)[:n]


def _text_stream(stream: io.BufferedReader, encoding: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(stream, encoding=encoding, errors="strict", newline="")


def text_lines(stream: io.BufferedReader, src: Source, record: RecordLimit, *,
               keepends: bool = False) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of a byte stream, one line in memory at a time.

    UTF-8 (the usual case) is decoded line by line, so an error names its exact
    line; text with a UTF-16/UTF-32 byte-order mark is decoded as a stream.
    Lines split at ``\\n``; ``\\r\\n`` endings lose the ``\\r`` unless ``keepends``.
    A line is read at most ``record.max_bytes`` (and its line break) at a time:
    a longer one is refused before the rest of it is read.
    """
    limit = record.max_bytes
    encoding = bom_encoding(_peek(stream, 4))
    if encoding is not None and encoding != "utf-8-sig":
        text = _text_stream(stream, encoding)
        number = 0
        try:
            while line := text.readline(limit + 1):  # characters, at least as many bytes
                number += 1
                if utf8_length(line) - line.endswith("\n") > limit:
                    raise record.refuse(src, "the line", line=number)
                yield number, line if keepends else line.rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise src.error(f"the text does not match its {encoding.upper()} byte-order mark "
                            f"(bad bytes after line {number}: {exc.reason}); {SAVE_AS_UTF8}",
                            line=number + 1) from None
        finally:
            if not stream.closed:  # else the generator outlived its file: nothing to keep open
                text.detach()
        return
    if encoding == "utf-8-sig":
        stream.read(3)
    number = 0
    while raw := stream.readline(limit + 1):
        number += 1
        if len(raw) - raw.endswith(b"\n") > limit:
            raise record.refuse(src, "the line", line=number)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise src.error(_utf8_problem(raw.rstrip(b"\r\n"), exc), line=number) from None
        if "\x00" in line:
            raise src.error(_NUL_PROBLEM, line=number)
        if not keepends:
            line = line.rstrip("\n")
            if line.endswith("\r"):
                line = line[:-1]
        yield number, line


def text_reader(stream: io.BufferedReader, src: Source) -> DecodedText:
    """A text stream over a byte stream (for the JSON array reader), by the encoding policy.

    Reads in chunks, not lines (a JSON array is often one line of hundreds of
    megabytes); a decode error still names its line and column.
    """
    encoding = bom_encoding(_peek(stream, 4)) or "utf-8"
    return DecodedText(stream, src, encoding)


class SpooledText:
    """Text written once, in pieces, and read back in pieces as often as needed.

    Kept as UTF-8 in memory up to ``in_memory`` bytes, in an anonymous temporary
    file beyond, so a document of any length costs a piece's worth of memory.
    What is read back is the written text stripped of the white space at its
    two ends (as ``str.strip`` would), without ever holding it whole.
    """

    def __init__(self, in_memory: int = READ_CHUNK):
        self._file = tempfile.SpooledTemporaryFile(max_size=in_memory)
        self._end = 0  # bytes up to the last character that is not white space

    def write(self, text: str) -> None:
        if not self._end:
            text = text.lstrip()
        if not text:
            return
        self._file.write(text.encode("utf-8"))
        kept = text.rstrip()
        if kept:
            self._end = self._file.tell() - len(text[len(kept):].encode("utf-8"))

    @property
    def blank(self) -> bool:
        """Nothing but white space was written."""
        return not self._end

    def pieces(self) -> Iterator[str]:
        """The text, in pieces of about ``READ_CHUNK`` bytes (a character is never cut)."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        at = 0
        while at < self._end:
            self._file.seek(at)
            data = self._file.read(min(READ_CHUNK, self._end - at))
            at += len(data)
            yield decoder.decode(data, final=at >= self._end)

    def read(self) -> str:
        """The whole text (for a short one; the index build reads ``pieces``)."""
        return "".join(self.pieces())


class DecodedText:
    """``read(n)``: up to about ``n`` bytes' worth of text; ``""`` only at the end."""

    def __init__(self, stream: io.BufferedReader, src: Source, encoding: str):
        self._stream, self._src, self._encoding = stream, src, encoding
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
        self._line, self._done = 1, False
        self._column = 0  # characters after the last line break read so far

    def read(self, size: int) -> str:
        text = ""
        while not text and not self._done:
            raw = self._stream.read(size)
            self._done = not raw
            try:
                text = self._decoder.decode(raw, final=self._done)
            except UnicodeDecodeError as exc:
                raise self._decode_error(exc) from None
        if "\x00" in text:
            raise self._src.error(_NUL_PROBLEM, line=self._line + text.count(
                "\n", 0, text.index("\x00")))
        breaks = text.count("\n")
        self._line += breaks
        self._column = len(text) - text.rfind("\n") - 1 if breaks else self._column + len(text)
        return text

    def _decode_error(self, exc: UnicodeDecodeError) -> IngestError:
        data = bytes(exc.object)
        if not self._encoding.startswith("utf-8"):
            return self._src.error(
                f"the text does not match its {self._encoding.upper()} byte-order mark; "
                f"{SAVE_AS_UTF8}", line=self._line)
        start = data.rfind(b"\n", 0, exc.start) + 1
        end = data.find(b"\n", exc.start)
        raw = data[start:end if end >= 0 else len(data)]
        local = UnicodeDecodeError("utf-8", raw, exc.start - start, exc.end - start, exc.reason)
        line = self._line + data.count(b"\n", 0, exc.start)
        offset = self._column if start == 0 else 0
        return self._src.error(_utf8_problem(raw, local, offset), line=line)


# --- JSON records ----------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One JSON value of a JSONL line or a JSON array item, with where it starts."""

    value: Any
    line: int
    item: int | None = None  # 1-based position in a JSON array; None for JSONL

    def error(self, src: Source, problem: str, field: str | None = None) -> IngestError:
        return src.error(problem, line=self.line, item=self.item, field=field)


def json_kind(stream: io.BufferedReader) -> str:
    """``"array"`` when the first character that is not a space is ``[``, else ``"lines"``."""
    head = _peek(stream, 4096)
    encoding = bom_encoding(head[:4])
    if encoding is not None:
        try:
            text = head.decode(encoding, errors="ignore")
        except UnicodeDecodeError:  # pragma: no cover - errors="ignore"
            text = ""
    else:
        text = head.decode("utf-8", errors="ignore")
    text = text.lstrip("\ufeff \t\r\n")
    return "array" if text.startswith("[") else "lines"


def json_records(stream: io.BufferedReader, src: Source, record: RecordLimit, *,
                 what: str = "object") -> Iterator[Record]:
    """JSON values of a JSONL file, or the items of a JSON array, as a stream.

    ``what`` names one record in messages (``"document"``, ``"question"``).
    Blank lines of JSONL are skipped. A line or an item longer than ``record``
    allows is refused, having read no more than the limit's worth of it.
    """
    if json_kind(stream) == "array":
        yield from _json_array(text_reader(stream, src), src, what, record)
        return
    for number, line in text_lines(stream, src, record):
        if not line.strip():
            continue
        try:
            value = decode_storable(line)
        except RecursionError:
            raise src.error(TOO_DEEP.format(what=what), line=number) from None
        except UnstorableJson as exc:
            raise src.error(str(exc), line=number) from None
        except json.JSONDecodeError as exc:
            hint = f"each line must hold one whole JSON object (one {what})"
            if number == 1 and line.lstrip().startswith("{") and src.suffix == ".json":
                hint = (f"a .json file must hold a JSON array [...] of {what}s or one JSON "
                        "object per line")
            raise src.error(f"not valid JSON ({exc.msg} at column {exc.colno}); {hint}",
                            line=number) from None
        yield Record(value, number)


def json_record_places(stream: io.BufferedReader, src: Source, record: RecordLimit, *,
                       what: str = "object") -> Iterator[tuple[int, int | None]]:
    """``(line, item)`` where each record of ``json_records`` starts, for counting them.

    JSONL lines are not decoded as JSON (a line that is not blank is a record,
    valid or not); the items of a JSON array are, one at a time.
    """
    if json_kind(stream) == "array":
        for rec in _json_array(text_reader(stream, src), src, what, record):
            yield rec.line, rec.item
        return
    for number, line in text_lines(stream, src, record):
        if line.strip():
            yield number, None


def _json_array(text: DecodedText, src: Source, what: str, record: RecordLimit
                ) -> Iterator[Record]:
    """Items of a top-level JSON array read in chunks; one item in memory at a time.

    An item still open is read on in chunks twice its length so far, but never
    past ``record.max_bytes`` characters: at more it is refused, whole or not.
    """
    decoder = JSON_DECODER
    limit = record.max_bytes
    buf, pos, line, eof = "", 0, 1, False

    def fill(want: int = READ_CHUNK) -> None:
        nonlocal buf, pos, eof
        buf = buf[pos:]
        pos = 0
        data = text.read(want)
        if data:
            buf += data
        else:
            eof = True

    def skip_space() -> str:
        """Move past white space; return the next character ("" at the end)."""
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                if buf[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buf):
                return buf[pos]
            if eof:
                return ""
            fill()

    def fail(problem: str, at_line: int, item: int | None = None) -> IngestError:
        return src.error(problem, line=at_line, item=item)

    def read_on() -> None:
        """Read more of the item at ``pos``, or refuse it past the record limit."""
        item_chars = len(buf) - pos
        if item_chars > limit:
            raise record.refuse(src, "the item", line=line, item=item)
        fill(min(max(2 * item_chars, READ_CHUNK), limit + 1 - item_chars))

    first = skip_space()
    if first != "[":  # pragma: no cover - json_kind checked it
        raise fail("expected a JSON array", line)
    pos += 1
    item = 0
    while True:
        ch = skip_space()
        if ch == "]" and item == 0:
            pos += 1
            break
        if ch == "":
            raise fail(f"the JSON array is not closed with ]; the file may be cut short "
                       f"(after {item} {what}s)", line)
        item += 1
        last_error: tuple[str, int] | None = None
        while True:
            try:
                value, end = decoder.raw_decode(buf, pos)
                if end < len(buf) or eof:
                    break
                read_on()  # the value may go on (a number cut in two)
                continue
            except RecursionError:
                raise src.error(TOO_DEEP.format(what=what), line=line, item=item) from None
            except UnstorableJson as exc:
                raise src.error(str(exc), line=line, item=item) from None
            except json.JSONDecodeError as exc:
                signature = (exc.msg, exc.pos - pos)
                if eof or (signature == last_error and not exc.msg.startswith("Unterminated")):
                    err_line = line + buf.count("\n", pos, exc.pos)
                    col = exc.pos - (buf.rfind("\n", 0, exc.pos) + 1) + 1
                    raise src.error(f"not valid JSON ({exc.msg} at line {err_line} column "
                                    f"{col}); fix the JSON or convert the file to JSONL, one "
                                    f"{what} per line", line=line, item=item) from None
                last_error = signature
                read_on()
        if 4 * (end - pos) > limit and utf8_length(buf[pos:end]) > limit:  # <= 4 bytes a char
            raise record.refuse(src, "the item", line=line, item=item)
        try:
            check_storable(value)
        except UnstorableJson as exc:
            raise src.error(str(exc), line=line, item=item) from None
        yield Record(value, line, item)
        line += buf.count("\n", pos, end)
        pos = end
        ch = skip_space()
        if ch == ",":
            pos += 1
            continue
        if ch == "]":
            pos += 1
            break
        if ch == "":
            raise fail(f"the JSON array is not closed with ]; the file may be cut short "
                       f"(after {item} {what}s)", line)
        raise fail(f"expected , or ] after {what} {item} of the JSON array, found {ch!r}", line)
    if skip_space() != "":
        raise fail("unexpected text after the closing ] of the JSON array; remove it", line)
