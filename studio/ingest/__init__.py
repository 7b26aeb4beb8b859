"""File readers for uploads: corpora to documents, QA files to rows, exemplar files to
exemplars (pure functions over files).

No database and no web here: the service layer stores the upload in a
temporary file and calls these readers. Everything a user can get wrong raises
``IngestError`` (a ``ValueError``) whose message names the file, the archive
member, the line/item/row and the field, and says how to fix it.

Policies (details in each module):

- Encoding (``textio``): a byte-order mark selects UTF-8/UTF-16/UTF-32;
  otherwise UTF-8 only. No silent Windows-1252/Latin-1 fallback: such files
  are refused with the line, the column and a hint to save as UTF-8.
- Corpus column/field names (``corpus``): text = ``TEXT_ALIASES`` (text,
  contents, body, passage, ...), title = ``TITLE_ALIASES``, id =
  ``ID_ALIASES`` (id, doc_id, ...), case-insensitive. Document ids must be
  unique in an upload; missing ones are generated from the file name and line.
- QA (``qa``): an empty question is an error; an empty answer is only
  reported (``report["empty_answers"]``); duplicate questions are reported
  with both rows. CSV aliases are separated by ``|``.
- Limits (``errors.Limits``): file size, rows, archive entries, unpacked
  bytes and one record's bytes, each message naming its setting
  (``STUDIO_MAX_UPLOAD_BYTES``, ``STUDIO_MAX_UPLOAD_ROWS``,
  ``STUDIO_MAX_ARCHIVE_MEMBERS``, ``STUDIO_MAX_UNPACKED_BYTES``,
  ``STUDIO_MAX_RECORD_BYTES``), enforced while reading. Every reader counts
  the rows in a first pass that keeps nothing and refuses the first row past
  the limit (``TooManyRows``), so memory stays bounded by a constant however
  long the file; only then does it read the rows it keeps. A line, CSV row,
  JSON array item, Parquet cell or paragraph longer than the record limit is
  refused (``RecordTooLong``) having read no more of it than the limit.
"""

from __future__ import annotations

from .corpus import (
    CORPUS_SUFFIXES,
    ID_ALIASES,
    TEXT_ALIASES,
    TITLE_ALIASES,
    Document,
    read_documents,
    split_contents,
)
from .errors import (
    SETTING_MAX_ARCHIVE_MEMBERS,
    SETTING_MAX_BYTES,
    SETTING_MAX_RECORD_BYTES,
    SETTING_MAX_ROWS,
    SETTING_MAX_UNPACKED_BYTES,
    IngestError,
    Limits,
    RecordTooLong,
    TooManyRows,
)
from .exemplars import read_exemplar_file
from .qa import (
    ALIAS_SEPARATOR,
    QA_FORMATS,
    QA_SUFFIXES,
    QAReadResult,
    QARow,
    detect_schema,
    normalize_question,
    read_qa,
    split_qa,
)
from .textio import decode_text

__all__ = [
    "ALIAS_SEPARATOR",
    "CORPUS_SUFFIXES",
    "ID_ALIASES",
    "QA_FORMATS",
    "QA_SUFFIXES",
    "SETTING_MAX_ARCHIVE_MEMBERS",
    "SETTING_MAX_BYTES",
    "SETTING_MAX_RECORD_BYTES",
    "SETTING_MAX_ROWS",
    "SETTING_MAX_UNPACKED_BYTES",
    "TEXT_ALIASES",
    "TITLE_ALIASES",
    "Document",
    "IngestError",
    "Limits",
    "QARow",
    "QAReadResult",
    "RecordTooLong",
    "TooManyRows",
    "decode_text",
    "detect_schema",
    "normalize_question",
    "read_documents",
    "read_exemplar_file",
    "read_qa",
    "split_contents",
    "split_qa",
]
