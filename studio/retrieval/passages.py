"""Passages, hits, the wiki-18 splitter, the tool's text and Search-R1's result shape.

Also :class:`PassageStore`: all passages as one UTF-8 blob plus a numpy array
of offsets, written to an anonymous temporary file while building and
memory-mapped (that file, then the saved one), so a process builds and serves
a 1M-passage index without a million Python objects or the text in its heap.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.method.tags import SEARCH_TOOL, format_information


@dataclass(frozen=True)
class Passage:
    """One retrievable unit: a document chunk that keeps its document's title."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Hit:
    """A passage found for a query and its BM25 score (Okapi scale, higher is better)."""

    passage: Passage
    score: float


MAX_WORD_CHARS = 10_000
"""A longer run of characters without white space (a data URI, a minified file) is cut
into words of this length, so that a passage holds at most ``words`` times as many
characters whatever the document; no word of prose comes near it."""


def split_into_passages(doc_id: str, title: str, text: str, words: int = 100) -> list[Passage]:
    """Split a document into passages of ``words`` words that all keep the title (wiki-18).

    wiki-18 (DPR's ``psgs_w100``, which Search-R1 retrieves from) cuts every
    Wikipedia article into 100-word passages; each keeps the article title.
    Words are whitespace-separated and re-joined with single spaces, so
    newlines inside a document never reach the tool's one-line-per-passage
    text.  The last passage may be shorter.  Ids: ``doc_id`` when the
    document fits in one passage, otherwise ``f"{doc_id}#{i}"`` with
    ``i = 0, 1, ...``.  Empty (or blank) text gives ``[]``.  A word longer
    than ``MAX_WORD_CHARS`` is cut into words of that length.
    """
    return list(stream_passages(doc_id, title, (str(text),), words))


def stream_passages(doc_id: str, title: str, pieces: Iterable[str], words: int = 100
                    ) -> Iterator[Passage]:
    """``split_into_passages`` of the text that ``pieces`` make up, as they come.

    A word may straddle two pieces. Memory: one piece and one passage, so a
    document read in pieces (``studio.ingest.Document.pieces``) is split in
    memory that does not grow with its length.
    """
    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise ValueError(f"words must be a positive integer, got {words!r}")
    title = str(title).strip()
    pending: list[str] = []
    number = 0
    for found in _word_lists(pieces):
        pending += found
        start = 0
        while len(pending) - start > words:  # a passage with more after it
            yield Passage(f"{doc_id}#{number}", title, " ".join(pending[start:start + words]))
            number, start = number + 1, start + words
        del pending[:start]
    if pending:
        passage_id = str(doc_id) if number == 0 else f"{doc_id}#{number}"
        yield Passage(passage_id, title, " ".join(pending))


def _word_lists(pieces: Iterable[str]) -> Iterator[list[str]]:
    """The white-space separated words of the text ``pieces`` make up, a list per piece.

    A word cut between pieces is carried to the next one; a word longer than
    ``MAX_WORD_CHARS`` is cut into words of that length from its start.
    """
    carry = ""
    for piece in pieces:
        if not piece:
            continue
        found = piece.split()
        if carry:
            if found and not piece[0].isspace():
                found[0] = carry + found[0]
            else:
                found.insert(0, carry)
            carry = ""
        if found and not piece[-1].isspace():
            carry = found.pop()
        if len(carry) >= MAX_WORD_CHARS:  # a long word's whole parts go now
            whole = len(carry) - len(carry) % MAX_WORD_CHARS
            found.append(carry[:whole])
            carry = carry[whole:]
        yield _cut_long_words(found)
    if carry:
        yield [carry]


def _cut_long_words(found: list[str]) -> list[str]:
    if max(map(len, found), default=0) <= MAX_WORD_CHARS:
        return found
    size = MAX_WORD_CHARS
    return [w[i:i + size] for w in found for i in range(0, len(w), size)]


_INFO_OPEN = f"\n\n<{SEARCH_TOOL.result_tag}>"
_INFO_CLOSE = f"</{SEARCH_TOOL.result_tag}>\n\n"


def format_hits(hits: list[Hit]) -> str:
    """The tool's text for the model: ``Doc 1(Title: T) text\\nDoc 2(Title: ...) ...``.

    The body of :func:`studio.method.tags.format_information` (which the
    method core uses to wrap it in ``<information>`` tags), so the format and
    the defusing of a stray ``</information>`` inside a passage live in one
    place.  No hits give ``""``.
    """
    block = format_information((h.passage.title, h.passage.text) for h in hits)
    assert block.startswith(_INFO_OPEN) and block.endswith(_INFO_CLOSE)
    return block[len(_INFO_OPEN) : len(block) - len(_INFO_CLOSE)]


def search_r1_contents(passage: Passage) -> str:
    """wiki-18's ``contents`` field: the title in double quotes, a newline, the text."""
    return f'"{passage.title}"\n{passage.text}'


MAX_RETRIEVE_QUERIES = 256
"""Queries in one Search-R1 /retrieve request, so that its answer stays bounded (at most
256 x 50 passages, about 9 MB); a client with more sends several (the veRL retriever does)."""


def search_r1_result(hits: list[Hit], return_scores: bool) -> list[dict]:
    """One query's item of Search-R1's ``POST /retrieve`` answer (``result[i]``).

    Search-R1's retrieval server answers each query with its documents
    ``{"id", "contents": '"Title"\\ntext'}``; with ``return_scores`` every
    document is wrapped as ``{"document": doc, "score": s}`` (its clients -
    Search-R1's rollout and veRL's search tool - ask for scores and read
    ``item["document"]["contents"]``); without, the list holds the bare
    documents, as upstream does.
    """
    docs = [{"id": h.passage.id, "contents": search_r1_contents(h.passage)} for h in hits]
    if not return_scores:
        return docs
    return [{"document": d, "score": float(h.score)} for d, h in zip(docs, hits, strict=True)]


_COPY_CHUNK = 8 << 20  # bytes of a mapped blob that saving makes resident at a time


class PassageStore:
    """Passages as one UTF-8 blob and an int64 offsets array (3 fields per passage).

    Passage ``i``'s id, title and text are ``blob[o[3i]:o[3i+1]]``,
    ``blob[o[3i+1]:o[3i+2]]`` and ``blob[o[3i+2]:o[3i+3]]``.
    """

    BLOB = "passages.bin"
    OFFSETS = "passage_offsets.npy"

    def __init__(self, blob, offsets: np.ndarray, *, _mm: mmap.mmap | None = None) -> None:
        self._blob = blob
        self._offsets = offsets
        self._mm = _mm

    def __len__(self) -> int:
        return (len(self._offsets) - 1) // 3

    def __getitem__(self, i: int) -> Passage:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"passage {i} out of range (0..{n - 1})")
        a, b, c, d = (int(x) for x in self._offsets[3 * i : 3 * i + 4])
        blob = self._blob
        return Passage(
            bytes(blob[a:b]).decode("utf-8"),
            bytes(blob[b:c]).decode("utf-8"),
            bytes(blob[c:d]).decode("utf-8"),
        )

    def save(self, folder: Path) -> None:
        """Write the blob and the offsets; a mapped blob's pages are let go as they are
        copied, so saving does not make the text resident in this process."""
        end = int(self._offsets[-1])
        with open(folder / self.BLOB, "wb") as f:
            for at in range(0, end, _COPY_CHUNK):
                f.write(memoryview(self._blob)[at : min(end, at + _COPY_CHUNK)])
                if self._mm is not None:
                    self._mm.madvise(mmap.MADV_DONTNEED, at, min(end - at, _COPY_CHUNK))
        np.save(folder / self.OFFSETS, np.asarray(self._offsets))

    @classmethod
    def load(cls, folder: Path) -> PassageStore:
        offsets = np.load(folder / cls.OFFSETS, mmap_mode="r")
        path = folder / cls.BLOB
        if os.path.getsize(path) == 0:
            return cls(b"", offsets)
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(mm, offsets, _mm=mm)

    def nbytes(self) -> int:
        return len(self._blob) + self._offsets.nbytes


class PassageStoreBuilder:
    """Appends passages to an anonymous temporary file; ``finish`` maps it (once)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()
        self._size = 0
        self._offsets = array("q", [0])

    def add(self, p: Passage) -> None:
        for field in (p.id, p.title, p.text):
            self._size += self._file.write(field.encode("utf-8"))
            self._offsets.append(self._size)

    def __len__(self) -> int:
        return (len(self._offsets) - 1) // 3

    def finish(self) -> PassageStore:
        offsets = np.frombuffer(self._offsets, dtype=np.int64).copy()
        with self._file:
            if not self._size:
                return PassageStore(b"", offsets)
            self._file.flush()
            mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        return PassageStore(mm, offsets, _mm=mm)
