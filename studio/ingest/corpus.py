"""Corpus files to documents: JSONL/JSON, CSV/TSV, Parquet, plain text, Markdown, zip.

``read_documents`` streams: it never holds more than one line, CSV row,
paragraph, Parquet batch or JSON array item in memory, besides the hashes of
the ids seen. Each is bounded by ``Limits.max_record_bytes``: a longer one is
refused where it starts, with no more of it read than the bound (a Parquet
batch has as many rows as fit in about the bound, and a cell is measured
before it becomes a Python string). It reads the file twice: a first pass
counts the documents and keeps nothing, so a file over the row limit is
refused at its first document past the limit in constant memory; the second
pass checks the ids and yields the documents. Checks that need no reading
(file type, size, empty file) run when it is called; the rest raise while
iterating, so a caller that stores documents should do so in a transaction.

A .txt/.md file read as one document may be as long as the unpacked limit
(a zip of a few megabytes unpacks to gigabytes of text). Its text is never
held whole: it is decoded a mebibyte at a time into a ``SpooledText`` (UTF-8,
in memory up to a mebibyte, in an anonymous temporary file beyond), and the
index build splits the document's ``pieces()`` into passages as they come.
The text is spooled before the document is yielded, not read from the upload
while it is split, because a Markdown file's title is its first heading,
which may come anywhere, and because the document outlives the reader's
position in the upload (a caller may keep the list of documents).
"""

from __future__ import annotations

import io
import re
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .errors import (
    DEFAULT_LIMITS,
    LIMIT_ERRORS,
    SETTING_MAX_ARCHIVE_MEMBERS,
    SETTING_MAX_UNPACKED_BYTES,
    IngestError,
    Limits,
    RecordLimit,
    Source,
    check_file_size,
    size_text,
    suffix_of,
)
from .tabular import csv_rows, find_column, quoted_list
from .textio import (
    READ_CHUNK,
    CountingReader,
    DecodedText,
    Record,
    SpooledText,
    json_record_places,
    json_records,
    text_lines,
    text_reader,
    utf8_length,
)


class Document:
    """A whole document as the user gave it; the studio splits it into passages later.

    Its text is a string, or for a text file read as one document a ``SpooledText``
    (see the module doc): ``pieces()`` gives it either way in pieces of at most
    about a mebibyte, which is how the index build reads it; ``text`` joins them.
    """

    __slots__ = ("id", "title", "_text")

    def __init__(self, id: str, title: str, text: str | SpooledText):  # noqa: A002
        self.id = id
        self.title = title
        self._text = text

    @property
    def text(self) -> str:
        return self._text if isinstance(self._text, str) else self._text.read()

    def pieces(self) -> Iterator[str]:
        if isinstance(self._text, str):
            return iter((self._text,))
        return self._text.pieces()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (self.id, self.title, self.text) == (other.id, other.title, other.text)

    __hash__ = None  # equal documents have equal text, which a hash would have to read

    def __repr__(self) -> str:
        text = self._text if isinstance(self._text, str) else "<spooled>"
        return f"Document(id={self.id!r}, title={self.title!r}, text={text!r})"


JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
TABLE_SUFFIXES = (".csv", ".tsv")
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
CORPUS_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet", ".txt", ".md",
                   ".markdown", ".zip")
"""File types ``read_documents`` reads (by the user's file name, case-insensitively)."""

TEXT_ALIASES = ("text", "contents", "content", "body", "passage", "passage_text", "paragraph",
                "paragraph_text", "document", "doc_text")
TITLE_ALIASES = ("title", "doc_title", "document_title", "page_title", "heading")
ID_ALIASES = ("id", "doc_id", "docid", "document_id", "passage_id", "pid", "_id")
"""Field/column names accepted for a document's text, title and id, case-insensitively;
when several are present the first in these lists wins."""

_SKIPPED_NAMES = {"thumbs.db", "desktop.ini"}
_PARQUET_BATCH = 2048
_SPOOL_IN_MEMORY = 32 << 20
_MAX_MARKDOWN_LINE = 10_000
_TOO_MANY_HINT = "split the corpus into several uploads or raise the limit"
_RECORD_HINT = "split the document into smaller ones or raise the limit"
_PARAGRAPH_HINT = ('put blank lines between its paragraphs, or upload the file as one document '
                   'of any length (leave "a blank line starts a new document", '
                   "split_on_blank_lines, off), or raise the limit")
_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MEMBER_TYPES = ".jsonl, .json, .csv, .tsv, .parquet, .txt, .md or .zip"
_SUPPORTED = ("JSONL (.jsonl), JSON (.json), CSV (.csv), TSV (.tsv), Parquet (.parquet), "
              "text (.txt), Markdown (.md) or a .zip of them")


@dataclass
class _Context:
    """What one upload has used so far, across the members of an archive.

    Ids already seen are kept as their 64-bit hashes (about 70 bytes a
    document, not the ids themselves) to find repeats in large corpora.
    ``count_only``: the first pass, which counts documents and yields none.
    """

    limits: Limits
    split_text: bool
    count_only: bool = False
    rows: int = 0
    members: int = 0
    unpacked: int = 0
    ids: set[int] = field(default_factory=set)

    def place(self, src: Source, line: int | None, item: int | None = None,
              item_unit: str = "item") -> None:
        """Count one document; refuse it if it is the first past the row limit."""
        self.rows += 1
        if self.rows > self.limits.max_rows:
            raise src.too_many_rows(self.limits, "documents", _TOO_MANY_HINT, line=line,
                                    item=item, item_unit=item_unit)

    def count(self, src: Source, doc: Document, line: int | None, item: int | None = None,
              item_unit: str = "item") -> Document:
        self.place(src, line, item, item_unit)
        key = hash(doc.id)
        if key in self.ids:
            raise src.error(
                f'id "{doc.id}" is already used by an earlier document; ids must be unique '
                'across the upload: rename it, or leave out the id and the studio numbers the '
                "documents", line=line, item=item, item_unit=item_unit, field="id")
        self.ids.add(key)
        return doc

    def record(self, src: Source) -> RecordLimit:
        """The bound on one line, row, item or paragraph of ``src``."""
        text = src.suffix in TEXT_SUFFIXES
        return self.limits.record(_PARAGRAPH_HINT if text else _RECORD_HINT)


def read_documents(path: Path, filename: str, limits: Limits = DEFAULT_LIMITS, *,
                   split_text_on_blank_lines: bool = False) -> Iterator[Document]:
    """Documents of the corpus file at ``path``, uploaded by the user as ``filename``.

    Formats, by ``filename``'s suffix (see ``CORPUS_SUFFIXES``):

    - ``.jsonl``/``.ndjson``/``.json``: one JSON object per line, or a JSON
      array of objects. Fields ``text`` (required), ``title`` and ``id``
      (aliases: ``TEXT_ALIASES`` ...). The Search-R1/FlashRAG form
      ``{"id", "contents": "\\"Title\\"\\ntext"}`` gives the title from the
      quoted first line of ``contents``.
    - ``.csv``/``.tsv``: a header line naming the columns, by the same names.
    - ``.parquet``: columns by the same names, read in batches.
    - ``.txt``/``.md``: the file is one document titled by the file's stem
      (``.md``: its first heading, which leaves the text); with
      ``split_text_on_blank_lines`` each paragraph is a document (``.md``:
      titled by the heading above it).
    - ``.zip``: any of these inside (folders too, and zips inside the zip one
      level deep); ``__MACOSX``, hidden files and desktop junk are skipped.

    A missing id becomes ``<stem>-<line>`` (``<stem>-<row>`` for Parquet,
    ``<stem>`` for a whole text file, with the member's path as the stem inside
    an archive). Ids must be unique across the upload. Raises ``IngestError``.
    """
    src = Source.upload(filename)
    suffix = src.suffix
    if suffix not in CORPUS_SUFFIXES:
        found = f'"{suffix}"' if suffix else "a file without a suffix"
        raise src.error(f"unsupported file type ({found}); upload {_SUPPORTED}")
    check_file_size(path, src, limits, "documents")
    return _read_upload(Path(path), src, limits, split_text_on_blank_lines)


def _read_upload(path: Path, src: Source, limits: Limits, split_text: bool
                 ) -> Iterator[Document]:
    """Count the documents (refusing too many), then read them (see the module doc).

    Only the row and record limits end the counting pass with an error; any
    other problem it meets is left to the reading pass, which reports the first
    one in file order (a repeated id, say, before a bad byte further on).
    """
    try:
        for _ in _upload_documents(path, src, _Context(limits, split_text, count_only=True)):
            raise AssertionError("the counting pass yields no documents")  # pragma: no cover
    except LIMIT_ERRORS:
        raise
    except IngestError:
        pass
    yield from _upload_documents(path, src, _Context(limits, split_text))


def _upload_documents(path: Path, src: Source, ctx: _Context):
    with open(path, "rb") as stream:
        if src.suffix == ".zip":
            found = yield from _zip_documents(stream, src, ctx, depth=0)
            if not found:
                raise src.error(f"no documents found: the archive holds no {_MEMBER_TYPES} "
                                "files (hidden files and __MACOSX are skipped)")
            return
        found = yield from _documents(stream, src, ctx)
        if not found:
            raise src.error("no documents found; the file holds only blank lines or a header")


def _documents(stream: BinaryIO, src: Source, ctx: _Context):
    """Dispatch on the suffix; yield documents (none when counting) and return how many."""
    suffix = src.suffix
    if suffix == ".parquet":
        return (yield from _parquet_documents(stream, src, ctx))
    buffered = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream)
    if not buffered.peek(1):
        raise src.error("the file is empty; upload a file with documents in it")
    if ctx.count_only:
        found = 0
        for line, item in _document_places(buffered, src, ctx):
            ctx.place(src, line, item)
            found += 1
        return found
    if suffix in JSON_SUFFIXES:
        return (yield from _json_documents(buffered, src, ctx))
    if suffix in TABLE_SUFFIXES:
        return (yield from _csv_documents(buffered, src, ctx))
    if suffix in TEXT_SUFFIXES:
        if ctx.split_text:
            return (yield from _paragraph_documents(buffered, src, ctx))
        return (yield from _whole_text_document(buffered, src, ctx))
    raise AssertionError(suffix)  # pragma: no cover - suffixes are checked before


def _document_places(stream: io.BufferedReader, src: Source, ctx: _Context
                     ) -> Iterator[tuple[int | None, int | None]]:
    """``(line, item)`` where each document would start, read in constant memory.

    Records are not decoded into documents: a JSONL line that is not blank, a
    CSV row, a paragraph; a text file read whole is one document, not read.
    """
    suffix = src.suffix
    if suffix in JSON_SUFFIXES:
        yield from json_record_places(stream, src, ctx.record(src), what="document")
    elif suffix in TABLE_SUFFIXES:
        _, rows = csv_rows(stream, src, ctx.record(src))
        for line, _cells in rows:
            yield line, None
    elif ctx.split_text:
        for start, _title, _text in _paragraphs(stream, src, ctx.record(src)):
            yield start, None
    else:
        yield None, None


# --- JSON ------------------------------------------------------------------------------


def _field_key(obj: Mapping[str, Any], aliases: tuple[str, ...]) -> str | None:
    exact = [a for a in aliases if a in obj]
    if exact:
        return exact[0]
    folded = {k.casefold(): k for k in obj if isinstance(k, str)}
    for alias in aliases:
        if alias in folded:
            return folded[alias]
    return None


def split_contents(contents: str) -> tuple[str | None, str]:
    """Search-R1/FlashRAG ``contents``: ``"Title"\\ntext`` -> (``Title``, ``text``).

    Without a double-quoted first line: (``None``, the whole string).
    """
    first, newline, rest = contents.partition("\n")
    first = first.strip()
    if newline and len(first) >= 2 and first[0] == '"' and first[-1] == '"':
        return first[1:-1].strip(), rest
    return None, contents


def _scalar(value: Any, rec: Record, src: Source, name: str, *, allow_number: bool) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if allow_number and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    kind = type(value).__name__
    kind = {"dict": "an object", "list": "a list", "bool": "true/false"}.get(kind, f"a {kind}")
    need = "a string or a number" if allow_number else "a string"
    raise rec.error(src, f'field "{name}" must be {need}, found {kind}', field=name)


def _json_documents(stream: io.BufferedReader, src: Source, ctx: _Context):
    found = 0
    for rec in json_records(stream, src, ctx.record(src), what="document"):
        obj = rec.value
        each = "each line" if rec.item is None else "each item"
        if not isinstance(obj, dict):
            kind = "a list" if isinstance(obj, list) else f"{json_type(obj)}"
            raise rec.error(src, f'expected a JSON object, found {kind}; {each} needs '
                                 '{"text": ...} or {"contents": ...}')
        text_key = _field_key(obj, TEXT_ALIASES)
        if text_key is None:
            keys = quoted_list([str(k) for k in obj])
            raise rec.error(src, f'field "text" is missing (found {keys}); {each} needs '
                                 '{"text": ...} or {"contents": ...}', field="text")
        text = _scalar(obj[text_key], rec, src, text_key, allow_number=False) or ""
        title_key = _field_key(obj, TITLE_ALIASES)
        title = _scalar(obj[title_key], rec, src, title_key, allow_number=True) \
            if title_key else None
        if text_key.casefold() == "contents":
            quoted_title, text = split_contents(text)
            title = title if title and title.strip() else quoted_title
        if not text.strip():
            raise rec.error(src, f'field "{text_key}" is empty; give the document text or '
                                 'remove it', field=text_key)
        id_key = _field_key(obj, ID_ALIASES)
        doc_id = _scalar(obj[id_key], rec, src, id_key, allow_number=True) if id_key else None
        number = rec.line if rec.item is None else rec.item
        doc = Document(id=_id_or(doc_id, f"{src.id_stem}-{number}"),
                       title=(title or "").strip(), text=text.strip())
        found += 1
        yield ctx.count(src, doc, rec.line, rec.item)
    return found


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    return f"a {type(value).__name__}"


def _id_or(doc_id: str | None, generated: str) -> str:
    doc_id = (doc_id or "").strip()
    return doc_id or generated


# --- CSV / TSV -------------------------------------------------------------------------


def _missing_text_column(src: Source, header: list[str]) -> IngestError:
    return src.error(
        f"no text column: the header has {quoted_list(header)}; name the column with the "
        f"documents' text one of {quoted_list(TEXT_ALIASES)} (and optionally a "
        f'"title" and an "id" column)', line=1, field="text")


def _csv_documents(stream: io.BufferedReader, src: Source, ctx: _Context):
    header, rows = csv_rows(stream, src, ctx.record(src))
    text_col = find_column(header, TEXT_ALIASES)
    if text_col is None:
        raise _missing_text_column(src, header)
    title_col = find_column(header, TITLE_ALIASES)
    id_col = find_column(header, ID_ALIASES)
    quoted_titles = text_col == find_column(header, ("contents",))
    found = 0
    for line, cells in rows:
        text = cells[text_col]
        title = cells[title_col] if title_col is not None else ""
        if quoted_titles:
            quoted_title, text = split_contents(text)
            title = title if title.strip() else (quoted_title or "")
        if not text.strip():
            raise src.error(f'column "{header[text_col]}" is empty; give the document text or '
                            "remove the row", line=line, field=header[text_col])
        doc_id = cells[id_col] if id_col is not None else None
        doc = Document(id=_id_or(doc_id, f"{src.id_stem}-{line}"), title=title.strip(),
                       text=text.strip())
        found += 1
        yield ctx.count(src, doc, line)
    return found


# --- Parquet ---------------------------------------------------------------------------


def _parquet_documents(stream: BinaryIO, src: Source, ctx: _Context):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(stream)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise src.error(f"not a valid Parquet file ({exc}); export it again with a Parquet "
                        "writer (pandas: df.to_parquet)") from None
    schema = pf.schema_arrow
    names = list(schema.names)
    text_col = find_column(names, TEXT_ALIASES)
    if text_col is None:
        raise src.error(
            f"no text column: the columns are {quoted_list(names)}; name the column with the "
            f"documents' text one of {quoted_list(TEXT_ALIASES)} (and optionally a "
            '"title" and an "id" column)', field="text")
    title_col = find_column(names, TITLE_ALIASES)
    id_col = find_column(names, ID_ALIASES)

    def is_text(t) -> bool:
        if pa.types.is_dictionary(t):
            t = t.value_type
        return pa.types.is_string(t) or pa.types.is_large_string(t) or (
            hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t))

    def is_int(t) -> bool:
        return pa.types.is_integer(t) or (pa.types.is_dictionary(t)
                                          and pa.types.is_integer(t.value_type))

    for col, kind in ((text_col, "text"), (title_col, "title"), (id_col, "id")):
        if col is None:
            continue
        col_type = schema.field(col).type
        if not (is_text(col_type) or (kind == "id" and is_int(col_type))):
            need = "strings or integers" if kind == "id" else "strings"
            raise src.error(f'column "{names[col]}" holds {col_type} values; the {kind} '
                            f"column must hold {need}", field=names[col])
    total = pf.metadata.num_rows
    if ctx.rows + total > ctx.limits.max_rows:  # the metadata says it: refused before reading
        raise src.too_many_rows(ctx.limits, "documents", _TOO_MANY_HINT,
                                item=ctx.limits.max_rows - ctx.rows + 1, item_unit="row")
    if ctx.count_only:
        ctx.rows += total
        return total
    wanted = [c for c in (text_col, title_col, id_col) if c is not None]
    columns = [names[c] for c in wanted]
    record = ctx.record(src)
    found, row = 0, 0
    try:
        batches = (batch for group in range(pf.num_row_groups)
                   for batch in pf.iter_batches(
                       batch_size=_parquet_batch_rows(pf.metadata.row_group(group), columns,
                                                      record.max_bytes),
                       row_groups=[group], columns=columns))
        for batch in batches:
            if (long := _first_long_cell(batch, record.max_bytes)) is not None:
                at, col = long
                raise record.refuse(src, f'the "{columns[col]}" cell', item=row + at + 1,
                                    item_unit="row", field=columns[col])
            values = {c: batch.column(i).to_pylist() for i, c in enumerate(wanted)}
            for k in range(batch.num_rows):
                row += 1
                text = values[text_col][k]
                title = values[title_col][k] if title_col is not None else None
                if names[text_col].casefold() == "contents" and text:
                    quoted_title, text = split_contents(text)
                    title = title if title and title.strip() else quoted_title
                if text is None or not text.strip():
                    raise src.error(f'column "{names[text_col]}" is empty; give the document '
                                    "text or remove the row", item=row, item_unit="row",
                                    field=names[text_col])
                doc_id = values[id_col][k] if id_col is not None else None
                doc = Document(id=_id_or(None if doc_id is None else str(doc_id),
                                         f"{src.id_stem}-{row}"),
                               title=(title or "").strip(), text=text.strip())
                found += 1
                yield ctx.count(src, doc, None, row, "row")
    except (pa.ArrowException, OSError) as exc:
        raise src.error(f"the Parquet file is damaged near row {row + 1} ({exc}); export it "
                        "again") from None
    return found


def _parquet_batch_rows(group, columns: list[str], max_bytes: int) -> int:
    """Rows to read at a time from a row group: ``_PARQUET_BATCH``, or fewer where its
    rows are long, so that a batch holds about a record limit's worth of text (by the
    sizes its metadata gives the columns read)."""
    size = sum(group.column(i).total_uncompressed_size for i in range(group.num_columns)
               if group.column(i).path_in_schema in columns)
    return max(1, min(_PARQUET_BATCH, max_bytes * group.num_rows // max(size, 1)))


def _first_long_cell(batch, max_bytes: int) -> tuple[int, int] | None:
    """``(row in the batch, column)`` of the first string cell over ``max_bytes`` bytes.

    Measured in Arrow's memory, before the batch becomes Python strings (which
    would take the cell's size again, or four times it).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for col, column in enumerate(batch.columns):
        coded = pa.types.is_dictionary(column.type)
        values = column.dictionary if coded else column
        if pa.types.is_integer(values.type):  # an id column
            continue
        lengths = pc.binary_length(values)
        if coded:
            lengths = pc.take(lengths, column.indices)
        at = pc.index(pc.greater(lengths, max_bytes), True).as_py()
        if at >= 0:
            return at, col
    return None


# --- plain text and Markdown -----------------------------------------------------------


def _heading(line: str) -> str | None:
    match = _MD_HEADING.match(line)
    return match.group(2).strip() if match else None


def _whole_text_document(stream: io.BufferedReader, src: Source, ctx: _Context):
    """The file as one document, its text spooled (see the module doc)."""
    text, spool, title = text_reader(stream, src), SpooledText(), None
    if src.suffix in (".md", ".markdown"):
        title = _spool_without_first_heading(text, spool)
    while piece := text.read(READ_CHUNK):
        spool.write(piece)
    if spool.blank:
        raise src.error("the file holds only white space; give it some text or remove it")
    doc = Document(id=src.id_stem, title=title or src.title_stem, text=spool)
    yield ctx.count(src, doc, None)
    return 1


def _spool_without_first_heading(text: DecodedText, spool: SpooledText) -> str | None:
    """Spool Markdown up to its first heading outside code fences; return that heading.

    The heading's line leaves the text; what follows it is left in ``text``.
    Lines are read into memory up to ``_MAX_MARKDOWN_LINE`` characters: a
    longer one is plain text (no heading or code fence is that long), spooled
    as it comes. Without a heading all the text is spooled and ``None`` returned.
    """
    buf, at, fence, long_line = "", 0, None, False
    while True:
        end = buf.find("\n", at)
        if end < 0:
            piece = text.read(READ_CHUNK)
            if piece:
                spool.write(buf[:at])  # whole lines, read and not headings
                rest = buf[at:]
                if long_line or len(rest) > _MAX_MARKDOWN_LINE:
                    spool.write(rest)
                    rest, long_line = "", True
                buf, at = rest + piece, 0
                continue
            end = len(buf)  # the last line, without a line break
        if not long_line and end - at <= _MAX_MARKDOWN_LINE:
            fence = _fence_state(line := buf[at:end], fence)
            if fence is None and (heading := _heading(line)):
                spool.write(buf[:at])
                spool.write(buf[end + 1:])
                return heading
        long_line = False
        if end == len(buf):
            spool.write(buf)
            return None
        at = end + 1


def _fence_state(line: str, fence: str | None) -> str | None:
    """Track Markdown code fences: the open fence's marker, or ``None`` outside one."""
    match = _MD_FENCE.match(line)
    if not match:
        return fence
    marker = match.group(1)
    if fence is None:
        return marker
    if marker[0] == fence[0] and len(marker) >= len(fence) and not line.strip()[len(marker):]:
        return None
    return fence


def _paragraph_documents(stream: io.BufferedReader, src: Source, ctx: _Context):
    found = 0
    for start, title, text in _paragraphs(stream, src, ctx.record(src)):
        found += 1
        yield ctx.count(src, Document(id=f"{src.id_stem}-{start}", title=title, text=text),
                        start)
    return found


def _paragraphs(stream: io.BufferedReader, src: Source, record: RecordLimit
                ) -> Iterator[tuple[int, str, str]]:
    """``(first line, title, text)`` of each paragraph; Markdown headings title those below.

    A paragraph is held whole, so one longer than ``record`` allows is refused
    at the line that takes it past the limit (a whole file without blank lines
    may be one paragraph; read as one document, it would stream).
    """
    markdown = src.suffix in (".md", ".markdown")
    title = src.title_stem
    block: list[str] = []
    block_bytes = 0
    start = 0
    fence: str | None = None

    def flush() -> tuple[int, str, str] | None:
        nonlocal block, block_bytes
        text = "\n".join(block).strip()
        block, block_bytes = [], 0
        return (start, title, text) if text else None

    def append(number: int, line: str) -> None:
        nonlocal start, block_bytes
        if not block:
            start = number
        block_bytes += utf8_length(line) + bool(block)  # and the line break before it
        if block_bytes > record.max_bytes:
            raise record.refuse(src, "the paragraph", line=start)
        block.append(line)

    for number, line in text_lines(stream, src, record):
        if markdown:
            was_in_fence = fence is not None
            fence = _fence_state(line, fence)
            if not was_in_fence and fence is None and (heading := _heading(line)):
                if (paragraph := flush()) is not None:
                    yield paragraph
                title = heading
                continue
            if was_in_fence or fence is not None:
                append(number, line)
                continue
        if not line.strip():
            if (paragraph := flush()) is not None:
                yield paragraph
            continue
        append(number, line)
    if (paragraph := flush()) is not None:
        yield paragraph


# --- zip archives ----------------------------------------------------------------------


def _zip_entry_count(stream: BinaryIO) -> int | None:
    """Entries a zip's end record announces, read before ``zipfile`` loads the directory."""
    stream.seek(0, io.SEEK_END)
    size = stream.tell()
    tail_len = min(size, 22 + 0xFFFF + 20)
    stream.seek(size - tail_len)
    tail = stream.read(tail_len)
    stream.seek(0)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return None
    count = struct.unpack("<H", tail[at + 10:at + 12])[0]
    if count != 0xFFFF or at < 20 or tail[at - 20:at - 16] != b"PK\x06\x07":
        return count
    (z64_offset,) = struct.unpack("<Q", tail[at - 12:at - 4])
    stream.seek(z64_offset)
    record = stream.read(56)
    stream.seek(0)
    if len(record) < 40 or record[:4] != b"PK\x06\x06":
        return None
    return struct.unpack("<Q", record[32:40])[0]


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    """A member stored as a symbolic link (``zip -y``): its Unix mode says so."""
    return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)


def _unsafe_member(name: str) -> bool:
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm) or "\x00" in norm:
        return True
    return ".." in norm.split("/")


def _skipped_member(name: str) -> bool:
    parts = [p for p in name.replace("\\", "/").split("/") if p]
    if not parts or name.endswith("/"):
        return True
    if any(p == "__MACOSX" or p.startswith(".") for p in parts):
        return True
    base = parts[-1]
    return base.casefold() in _SKIPPED_NAMES or base.startswith("~$")


def _members_problem(ctx: _Context, count: int) -> str:
    return (f"the archive holds {count} entries (nested archives included), more than the "
            f"limit of {ctx.limits.max_archive_members} (setting "
            f"{SETTING_MAX_ARCHIVE_MEMBERS}); upload fewer, larger files or raise the limit")


def _unpacked_problem(ctx: _Context, size: int, exact: bool = True) -> str:
    amount = size_text(size) if exact else "more than the declared sizes"
    return (f"the archive unpacks to {amount}, more than the limit of "
            f"{size_text(ctx.limits.max_unpacked_bytes)} (setting "
            f"{SETTING_MAX_UNPACKED_BYTES}); upload the files in several archives or raise "
            "the limit")


def _zip_documents(stream: BinaryIO, src: Source, ctx: _Context, depth: int):
    """Documents of every supported member; returns how many."""
    announced = _zip_entry_count(stream)
    if announced is not None and ctx.members + announced > ctx.limits.max_archive_members:
        raise src.error(_members_problem(ctx, ctx.members + announced))
    try:
        archive = zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise src.error(f"not a valid zip archive ({exc}); create it again with a zip tool "
                        "(or upload the files one by one)") from None
    with archive:
        infos = archive.infolist()
        ctx.members += len(infos)
        if ctx.members > ctx.limits.max_archive_members:
            raise src.error(_members_problem(ctx, ctx.members))
        for info in infos:
            if _unsafe_member(info.filename):
                raise src.error(
                    f'member "{info.filename}" has an unsafe path (absolute, or with ".."); '
                    "create the archive again from inside the folder, with relative paths")
            if _is_symlink(info):
                raise src.error(
                    f'member "{info.filename}" is a symbolic link; the studio reads only the '
                    "files themselves: create the archive again without links (zip without "
                    "-y, or with the linked files copied in)")
        members = [i for i in infos if not i.is_dir() and not _skipped_member(i.filename)]
        declared = sum(i.file_size for i in members)
        if ctx.unpacked + declared > ctx.limits.max_unpacked_bytes:
            raise src.error(_unpacked_problem(ctx, ctx.unpacked + declared))
        sources = []
        for info in members:  # every check that needs no reading, before the first document
            stem = info.filename.rsplit(".", 1)[0] if suffix_of(info.filename) else info.filename
            member_src = src.child(info.filename, stem)
            suffix = member_src.suffix
            if suffix not in CORPUS_SUFFIXES:
                found = f'"{suffix}"' if suffix else "no suffix"
                raise member_src.error(
                    f"unsupported file type ({found}); an archive may hold "
                    f"{_MEMBER_TYPES} files: remove this file from the archive (convert "
                    "PDF or Word files to text first)")
            if suffix == ".zip" and depth >= 1:
                raise member_src.error("archives inside archives are read one level deep; "
                                       "unpack this one into its parent archive")
            if info.flag_bits & 0x1:
                raise member_src.error("the member is encrypted; create the archive without a "
                                       "password")
            if info.file_size == 0:
                raise member_src.error("the file is empty; remove it from the archive")
            sources.append((info, member_src))
        total = 0
        for info, member_src in sources:
            found = yield from _zip_member(archive, info, member_src, ctx, depth)
            if not found:
                raise member_src.error("no documents found; the file holds only blank lines "
                                       "or a header: remove it from the archive")
            total += found
    return total


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, src: Source, ctx: _Context,
                depth: int):
    def charge(n: int) -> None:
        ctx.unpacked += n
        if ctx.unpacked > ctx.limits.max_unpacked_bytes:
            raise src.error(_unpacked_problem(ctx, ctx.unpacked, exact=False))

    try:
        with archive.open(info) as raw:
            counted = io.BufferedReader(CountingReader(raw, charge), buffer_size=1 << 16)
            if src.suffix in (".zip", ".parquet"):
                # Both need to seek: spool the member (memory, then an anonymous temp file).
                with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
                    while chunk := counted.read(1 << 20):
                        spool.write(chunk)
                    spool.seek(0)
                    if src.suffix == ".zip":
                        return (yield from _zip_documents(spool, src, ctx, depth + 1))
                    return (yield from _documents(spool, src, ctx))
            return (yield from _documents(counted, src, ctx))
    except NotImplementedError as exc:
        raise src.error(f"compressed with a method the studio cannot read ({exc}); create the "
                        'archive again with the standard "deflate" compression') from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise src.error(f"the archive is damaged here ({exc}); create it again") from None
