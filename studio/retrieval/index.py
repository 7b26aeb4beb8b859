"""BM25 search indexes: build, search, save, load, cache.

Two backends share one tokenisation (:mod:`.tokenizer`) and one scoring
function, Okapi BM25 with Robertson's idf ``log((N - df + 0.5) / (df + 0.5))``
floored at 0:

* ``"bm25s"`` (default): bm25s's eager sparse index - every (term, passage)
  BM25 contribution precomputed in a CSC matrix - with ``method="robertson"``.
  The matrix is built by a streaming numpy indexer that yields exactly the
  arrays ``bm25s.BM25(method="robertson").index()`` yields for the same
  tokens (a test checks it) in a fraction of the time and memory, and it is
  saved and loaded (memory-mapped) with bm25s's own ``save``/``load``.  A
  query sums its terms' columns with ``np.bincount``; the sums equal
  ``bm25s.BM25.get_scores`` (tested).  The query path is our own, not
  ``bm25s.BM25.retrieve``, for the hit semantics below: bm25s returns ``k``
  passages even when fewer hold a query term, raises when ``k`` exceeds the
  corpus, and orders ties arbitrarily.  Ours is no slower (median query
  0.5 vs 1.0 ms at 100k passages, 5.4 vs 5.8 ms at 1M, ours including
  tokenisation and fetching the passages).
* ``"rank-bm25"``: ``rank_bm25.BM25Okapi`` over the same tokens with the same
  k1 and b - the reference implementation - and ``epsilon=0``.  BM25Okapi
  replaces a negative idf (a term in more than half of the passages) by
  ``epsilon * mean idf``; with its default epsilon of 0.25 that floor lifts
  stop-word-like terms above rare ones and its top-3 agrees with bm25s only
  ~54% of the time on real passages (shared perf-notes, "BM25").  With
  ``epsilon=0`` the floor is 0, which is exactly Robertson's floored idf, so
  both backends compute the same function.

bm25s's Robertson scores lack the constant factor ``k1 + 1`` of the classic
Okapi formula; the bm25s backend multiplies it back in, so both backends
report the same scores.

Hits: the passages that contain at least one query term (as Lucene and
Search-R1's BM25 retriever behave), best score first, ties broken by corpus
order; at most ``k`` of them.  A query with no known term gives ``[]``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from itertools import pairwise
from pathlib import Path

import numpy as np

from .passages import Hit, Passage, PassageStore, PassageStoreBuilder
from .tokenizer import Bm25Params, Encoder, tokenize

BACKENDS = ("bm25s", "rank-bm25")
FORMAT = "studio-bm25/1"
META = "meta.json"
PROGRESS_EVERY = 10_000
CHUNK_CHARS = 1 << 22
"""A chunk of passages ends at ``PROGRESS_EVERY`` passages or this many characters of
text, whichever comes first: long passages (words of up to ``MAX_WORD_CHARS``) keep a
chunk's tokenisation within a few tens of megabytes."""
DEFAULT_PARAMS = Bm25Params()  # frozen, so safe as a default
BM25S_METHOD = "robertson"  # the variant rank-bm25's BM25Okapi(epsilon=0) computes


class IndexFormatError(ValueError):
    """A folder that is not a saved index of this format (or is damaged)."""


# --------------------------------------------------------------------------- search


def _top_k(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` of the candidates ``docs`` (ascending) by score, ties by corpus order."""
    m = len(docs)
    if m > k:
        kth = np.partition(scores, m - k)[m - k]  # the k-th largest score
        keep = np.flatnonzero(scores >= kth)
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))[:k]
    return docs[order], scores[order]


class SearchIndex(ABC):
    """A searchable BM25 index over passages (see the module docstring)."""

    backend: str
    params: Bm25Params

    def __init__(self, params: Bm25Params, store: PassageStore, vocab: dict[str, int]) -> None:
        self.params = params
        self._store = store
        self._vocab = vocab

    def __len__(self) -> int:
        return len(self._store)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} backend={self.backend!r} passages={len(self)} "
            f"vocabulary={self.vocab_size} params={asdict(self.params)}>"
        )

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def passage(self, i: int) -> Passage:
        """The ``i``-th passage, in the order they were indexed."""
        return self._store[i]

    def query_token_ids(self, query: str) -> np.ndarray:
        """The query's token ids in this index's vocabulary (unknown tokens dropped)."""
        get = self._vocab.get
        ids = [i for i in map(get, tokenize([query], self.params)[0]) if i is not None]
        return np.asarray(ids, dtype=np.int64)

    def titled_passages(self, queries: Sequence[str], k: int = 3) -> list[list[tuple[str, str]]]:
        """Per query its top-``k`` passages as ``(title, text)``: what the search tool returns
        (`studio.method.tools.SearchBackend`)."""
        return [[(h.passage.title, h.passage.text) for h in hits]
                for hits in self.search(queries, k)]

    def search(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """Top-``k`` hits for each query (see the module docstring for what a hit is).

        ``k`` larger than the index gives every matching passage; an empty
        query, or one whose words are all stop words or unknown, gives ``[]``.
        """
        if isinstance(queries, str):
            raise TypeError("search() takes a list of queries, not a single string")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"k must be a non-negative integer, got {k!r}")
        k = int(k)
        out: list[list[Hit]] = []
        for query in queries:
            if not isinstance(query, str):
                raise TypeError(f"queries must be strings, got {type(query).__name__}")
            ids = self.query_token_ids(query)
            if k == 0 or len(ids) == 0 or len(self) == 0:
                out.append([])
                continue
            docs, scores = self._candidates(ids)
            docs, scores = _top_k(docs, scores, k)
            out.append(
                [
                    Hit(self._store[int(d)], float(s))
                    for d, s in zip(docs.tolist(), scores.tolist(), strict=True)
                ]
            )
        return out

    @abstractmethod
    def _candidates(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Passages holding any of the token ``ids`` (ascending) and their BM25 scores."""

    @abstractmethod
    def _save_model(self, folder: Path) -> None: ...


def _union_with_sums(
    indices: np.ndarray, indptr: np.ndarray, data: np.ndarray | None, ids: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Union of the posting lists of ``ids`` (sorted), with the sums of ``data`` per passage."""
    starts, ends = indptr[ids], indptr[ids + 1]
    if len(ids) == 1:
        s, e = int(starts[0]), int(ends[0])
        return np.asarray(indices[s:e]), None if data is None else data[s:e].astype(np.float64)
    spans = [(int(s), int(e)) for s, e in zip(starts, ends, strict=True) if e > s]
    if not spans:
        return np.zeros(0, np.int64), None if data is None else np.zeros(0)
    idx = np.concatenate([indices[s:e] for s, e in spans])
    w = None if data is None else np.concatenate([data[s:e] for s, e in spans])
    if len(idx) * 16 < n:  # few postings: sort them rather than touch all n passages
        docs, inverse = np.unique(idx, return_inverse=True)
        sums = None if w is None else np.bincount(inverse, weights=w, minlength=len(docs))
        return docs, sums
    present = np.zeros(n, dtype=bool)
    present[idx] = True
    docs = np.flatnonzero(present)
    sums = None if w is None else np.bincount(idx, weights=w, minlength=n)[docs]
    return docs, sums


class Bm25sIndex(SearchIndex):
    """The default backend: bm25s's eager sparse BM25 matrix (Robertson variant)."""

    backend = "bm25s"

    def __init__(self, params: Bm25Params, store: PassageStore, retriever) -> None:
        super().__init__(params, store, retriever.vocab_dict)
        self.retriever = retriever  # a bm25s.BM25; its .scores hold the CSC arrays
        sc = retriever.scores
        self._data, self._indices, self._indptr = sc["data"], sc["indices"], sc["indptr"]
        self._scale = params.k1 + 1.0

    def _candidates(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        docs, sums = _union_with_sums(self._indices, self._indptr, self._data, ids, len(self))
        return docs, sums * self._scale

    def _save_model(self, folder: Path) -> None:
        self.retriever.save(str(folder), show_progress=False)


class RankBm25Index(SearchIndex):
    """The reference backend: rank_bm25.BM25Okapi(epsilon=0) over the same tokens."""

    backend = "rank-bm25"

    def __init__(
        self,
        params: Bm25Params,
        store: PassageStore,
        vocab: dict[str, int],
        tokens: np.ndarray,
        lengths: np.ndarray,
    ) -> None:
        super().__init__(params, store, vocab)
        self._tokens = tokens
        self._lengths = lengths
        self._words = [""] * len(vocab)
        for tok, i in vocab.items():
            self._words[i] = tok
        self.model = None
        self._indices = self._indptr = None
        if len(vocab) and len(store):
            from rank_bm25 import BM25Okapi

            bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
            words = self._words
            corpus = ([words[t] for t in tokens[a:b].tolist()] for a, b in pairwise(bounds))
            # epsilon=0: see the module docstring (why not rank-bm25's default 0.25).
            self.model = BM25Okapi(corpus, k1=params.k1, b=params.b, epsilon=0.0)
            # Posting lists, only to know which passages hold a query term.
            tok, doc, _ = _pairs(tokens, lengths)  # sorted by token, then passage
            self._indices = doc
            self._indptr = np.concatenate([[0], np.cumsum(np.bincount(tok, minlength=len(vocab)))])

    def _candidates(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.model is None:
            return np.zeros(0, np.int64), np.zeros(0)
        docs, _ = _union_with_sums(self._indices, self._indptr, None, ids, len(self))
        scores = self.model.get_scores([self._words[i] for i in ids.tolist()])
        return docs, scores[docs]

    def _save_model(self, folder: Path) -> None:
        np.save(folder / "tokens.npy", self._tokens)
        np.save(folder / "lengths.npy", self._lengths)
        (folder / "vocab.txt").write_text("\n".join(self._words), encoding="utf-8")


# --------------------------------------------------------------------------- build


def _pairs(tokens: np.ndarray, lengths: np.ndarray, doc_offset: int = 0):
    """Distinct (token, passage) pairs of a chunk with their term frequencies.

    Ordered by token, then passage (column-major, as the CSC matrix wants).
    Returns ``(token int32, passage int32, tf int32)``.
    """
    doc = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    keys = (tokens.astype(np.int64) << 32) | doc
    keys, tf = np.unique(keys, return_counts=True)
    tok = (keys >> 32).astype(np.int32)
    pdoc = ((keys & 0xFFFFFFFF) + doc_offset).astype(np.int32)
    return tok, pdoc, tf.astype(np.int32)


def _bm25s_arrays(
    chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    lengths: np.ndarray,
    n_vocab: int,
    k1: float,
    b: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bm25s's CSC arrays (data float32, indices int32, indptr int64), Robertson variant.

    ``chunks``: the (token, passage, tf) pairs of consecutive passage chunks,
    each sorted by token then passage (:func:`_pairs`); the list is consumed.
    Each chunk's pairs go straight to their final CSC positions (a chunk's
    pairs of one token follow the earlier chunks' ones, so passages stay
    ascending within a column): no global sort.  The scores mirror bm25s
    0.3's ``build_index_from_ids`` operation for operation (the same float64
    products and quotients, stored as float32), so the arrays are equal to
    the ones ``bm25s.BM25(method="robertson").index()`` makes (tested).
    """
    n_docs = len(lengths)
    avg_doc_len = lengths.mean() if n_docs else 0.0
    df = np.zeros(n_vocab, dtype=np.int64)
    for tok, _, _ in chunks:
        df += np.bincount(tok, minlength=n_vocab)
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    # Robertson's idf floored at 0, with math.log on Python floats as bm25s does
    # (np.log may differ in the last bit); one call per vocabulary entry.
    idf = np.array(
        [math.log(max((n_docs - d + 0.5) / (d + 0.5), 1.0)) for d in df.tolist()],
        dtype=np.float32,
    )
    data = np.empty(int(indptr[-1]), dtype=np.float32)
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    filled = indptr[:-1].copy()  # next free slot of each column
    chunks.reverse()
    while chunks:
        tok, doc, tf = chunks.pop()
        m = len(tok)
        if m == 0:
            continue
        new_group = np.empty(m, dtype=bool)
        new_group[0] = True
        np.not_equal(tok[1:], tok[:-1], out=new_group[1:])
        starts = np.flatnonzero(new_group)
        rank = np.arange(m) - np.repeat(starts, np.diff(np.append(starts, m)))
        pos = filled[tok] + rank
        filled[tok[starts]] += np.diff(np.append(starts, m))
        # bm25s: tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf), then idf * that
        tfc = tf.astype(np.float64)
        denom = lengths[doc].astype(np.float64)
        denom *= b
        denom /= avg_doc_len
        denom += 1 - b
        denom *= k1
        denom += tfc
        tfc /= denom
        tfc *= idf[tok]
        data[pos] = tfc
        indices[pos] = doc
    return data, indices, indptr


def _new_bm25s(params: Bm25Params):
    import bm25s

    return bm25s.BM25(
        k1=params.k1, b=params.b, method=BM25S_METHOD, dtype="float32", int_dtype="int32"
    )


def build_index(
    passages: Iterable[Passage],
    params: Bm25Params = DEFAULT_PARAMS,
    backend: str = "bm25s",
    on_progress: Callable[[int], None] | None = None,
) -> SearchIndex:
    """Index ``passages`` (title and text are indexed; the id is not).

    Streams the passages in chunks of :data:`PROGRESS_EVERY` (fewer when they are
    long, see :data:`CHUNK_CHARS`); their text goes to a temporary file, so the
    build holds the token pairs and the matrix, not the passages.
    ``on_progress(passages_indexed)`` is called after each full chunk (while
    more follow) and once at the very end with the total, when the index is
    ready: the counts strictly increase and end at ``len(index)``.  An
    exception raised by ``on_progress`` aborts the build (a way to cancel it).
    Passage ids are stored as given (their uniqueness is not checked).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if not isinstance(params, Bm25Params):
        raise TypeError(f"params must be a Bm25Params, got {type(params).__name__}")
    encoder = Encoder(params)
    store = PassageStoreBuilder()
    pair_chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    len_chunks: list[np.ndarray] = []
    raw_tokens: list[np.ndarray] = []
    keep_tokens = backend == "rank-bm25"
    chunk: list[Passage] = []
    chunk_chars = 0
    pending: int | None = None

    def flush() -> None:
        texts = []
        for p in chunk:
            store.add(p)
            texts.append(f"{p.title}\n{p.text}")
        tokens, lengths = encoder.encode(texts)
        len_chunks.append(lengths)
        if keep_tokens:
            raw_tokens.append(tokens)
        else:
            pair_chunks.append(_pairs(tokens, lengths, len(store) - len(chunk)))
        chunk.clear()

    for p in passages:
        if not isinstance(p, Passage):
            raise TypeError(f"passages must be Passage objects, got {type(p).__name__}")
        if pending is not None and on_progress is not None:
            on_progress(pending)
            pending = None
        chunk.append(p)
        chunk_chars += len(p.text)
        if len(chunk) >= PROGRESS_EVERY or chunk_chars >= CHUNK_CHARS:
            flush()
            chunk_chars = 0
            pending = len(store)
    if chunk:
        flush()
    n = len(store)
    if n >= 2**31 - 1:
        raise ValueError("more than 2^31 passages do not fit the int32 passage ids")
    lengths = np.concatenate(len_chunks) if len_chunks else np.zeros(0, np.int64)
    passage_store = store.finish()

    if backend == "bm25s":
        retriever = _new_bm25s(params)
        data, indices, indptr = _bm25s_arrays(
            pair_chunks, lengths, len(encoder.vocab), params.k1, params.b
        )
        retriever.scores = {"data": data, "indices": indices, "indptr": indptr, "num_docs": n}
        retriever.vocab_dict = encoder.vocab
        retriever.unique_token_ids_set = set(encoder.vocab.values())
        retriever.nonoccurrence_array = None
        index: SearchIndex = Bm25sIndex(params, passage_store, retriever)
    else:
        tokens = np.concatenate(raw_tokens) if raw_tokens else np.zeros(0, np.int32)
        index = RankBm25Index(params, passage_store, encoder.vocab, tokens, lengths)
    if on_progress is not None:
        on_progress(n)
    return index


# --------------------------------------------------------------------------- save / load


def save_index(index: SearchIndex, folder: Path) -> None:
    """Write ``index`` to ``folder`` (replacing what is there) via a temporary folder.

    The files go to a hidden sibling folder first, then renames swap it in:
    a reader never sees a half-written index (at worst, for a moment, none).
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        index._store.save(tmp)
        index._save_model(tmp)
        meta = {
            "format": FORMAT,
            "backend": index.backend,
            "params": asdict(index.params),
            "passages": len(index),
            "vocabulary": index.vocab_size,
            "bm25s_method": BM25S_METHOD,
            "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        old = None
        if folder.exists():
            old = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(folder, old)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_meta(folder: Path) -> dict:
    """The saved index's ``meta.json`` (backend, params, passage count, ...)."""
    path = Path(folder) / META
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexFormatError(f"{folder} holds no saved index ({META} missing)") from None
    except (OSError, ValueError) as e:
        raise IndexFormatError(f"{path}: unreadable ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise IndexFormatError(f"{path}: not a {FORMAT} index")
    return meta


def load_index(folder: Path) -> SearchIndex:
    """Load a saved index; passages and (bm25s) matrix are memory-mapped, not read."""
    folder = Path(folder)
    meta = read_meta(folder)
    params = Bm25Params.from_dict(meta["params"])
    store = PassageStore.load(folder)
    if meta["backend"] == "bm25s":
        import bm25s

        retriever = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        if retriever.method != BM25S_METHOD:
            raise IndexFormatError(f"{folder}: bm25s method {retriever.method!r} unexpected")
        index: SearchIndex = Bm25sIndex(params, store, retriever)
    elif meta["backend"] == "rank-bm25":
        words = (folder / "vocab.txt").read_text(encoding="utf-8")
        vocab = {w: i for i, w in enumerate(words.split("\n"))} if words else {}
        tokens = np.load(folder / "tokens.npy")
        lengths = np.load(folder / "lengths.npy")
        index = RankBm25Index(params, store, vocab, tokens, lengths)
    else:
        raise IndexFormatError(f"{folder}: unknown backend {meta['backend']!r}")
    if len(index) != meta["passages"]:
        raise IndexFormatError(f"{folder}: {len(index)} passages, meta says {meta['passages']}")
    return index


class IndexCache:
    """An LRU of loaded indexes keyed by folder path and the identity of its ``meta.json``.

    ``save_index`` replaces the whole folder, so a re-saved index has a new
    ``meta.json`` (inode and mtime) and is loaded afresh; the stale entry
    ages out.  Thread-safe; one load at a time.
    """

    def __init__(self, maxsize: int = 2) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self.maxsize = maxsize
        self._items: OrderedDict[tuple, SearchIndex] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(folder: Path) -> tuple:
        path = Path(folder).resolve()
        try:
            st = os.stat(path / META)
        except FileNotFoundError:
            raise IndexFormatError(f"{folder} holds no saved index ({META} missing)") from None
        return (str(path), st.st_ino, st.st_mtime_ns, st.st_size)

    def get(self, folder: Path) -> SearchIndex:
        key = self._key(folder)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            index = load_index(Path(key[0]))
            for old in [k for k in self._items if k[0] == key[0]]:
                del self._items[old]  # an older version of the same folder
            self._items[key] = index
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)
            return index

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


_default_cache = IndexCache()


def cached_index(folder: Path) -> SearchIndex:
    """Load ``folder`` once per process (LRU of 2, see :class:`IndexCache`)."""
    return _default_cache.get(folder)
