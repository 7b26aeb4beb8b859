"""Passages, hits, the wiki-18 splitter, the tool's text and Search-R1's result shape.

Also :class:`PassageStore`: all passages as one UTF-8 blob plus a numpy array
of offsets, held in memory while building and memory-mapped after loading,
so a process can serve a 1M-passage index without a million Python objects.
"""

from __future__ import annotations

import mmap
import os
from array import array
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


def split_into_passages(doc_id: str, title: str, text: str, words: int = 100) -> list[Passage]:
    """Split a document into passages of ``words`` words that all keep the title (wiki-18).

    wiki-18 (DPR's ``psgs_w100``, which Search-R1 retrieves from) cuts every
    Wikipedia article into 100-word passages; each keeps the article title.
    Words are whitespace-separated and re-joined with single spaces, so
    newlines inside a document never reach the tool's one-line-per-passage
    text.  The last passage may be shorter.  Ids: ``doc_id`` when the
    document fits in one passage, otherwise ``f"{doc_id}#{i}"`` with
    ``i = 0, 1, ...``.  Empty (or blank) text gives ``[]``.
    """
    if isinstance(words, bool) or not isinstance(words, int) or words < 1:
        raise ValueError(f"words must be a positive integer, got {words!r}")
    tokens = str(text).split()
    if not tokens:
        return []
    title = str(title).strip()
    if len(tokens) <= words:
        return [Passage(str(doc_id), title, " ".join(tokens))]
    return [
        Passage(f"{doc_id}#{i}", title, " ".join(tokens[start : start + words]))
        for i, start in enumerate(range(0, len(tokens), words))
    ]


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
        with open(folder / self.BLOB, "wb") as f:
            f.write(memoryview(self._blob)[: int(self._offsets[-1])])
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
    """Appends passages to a growing bytearray (glibc grows large ones in place)."""

    def __init__(self) -> None:
        self._blob = bytearray()
        self._offsets = array("q", [0])

    def add(self, p: Passage) -> None:
        blob, off = self._blob, self._offsets
        for field in (p.id, p.title, p.text):
            blob += field.encode("utf-8")
            off.append(len(blob))

    def __len__(self) -> int:
        return (len(self._offsets) - 1) // 3

    def finish(self) -> PassageStore:
        offsets = np.frombuffer(self._offsets, dtype=np.int64).copy()
        store = PassageStore(self._blob, offsets)
        self._blob, self._offsets = bytearray(), array("q", [0])
        return store
