"""The search tool's engine: BM25 over passages (bm25s by default, rank-bm25 as reference).

No database and no web here: the services wrap this.  See docs/retrieval.md.
"""

from __future__ import annotations

from .index import (
    BACKENDS,
    Bm25sIndex,
    IndexCache,
    IndexFormatError,
    RankBm25Index,
    SearchIndex,
    build_index,
    cached_index,
    load_index,
    read_meta,
    save_index,
)
from .passages import (
    MAX_RETRIEVE_QUERIES,
    Hit,
    Passage,
    format_hits,
    search_r1_contents,
    search_r1_result,
    split_into_passages,
    stream_passages,
)
from .tokenizer import STOPWORD_LANGUAGES, Bm25Params, tokenize

__all__ = [
    "BACKENDS",
    "STOPWORD_LANGUAGES",
    "Bm25Params",
    "Bm25sIndex",
    "Hit",
    "IndexCache",
    "IndexFormatError",
    "Passage",
    "RankBm25Index",
    "SearchIndex",
    "build_index",
    "cached_index",
    "format_hits",
    "load_index",
    "read_meta",
    "save_index",
    "search_r1_contents",
    "MAX_RETRIEVE_QUERIES",
    "search_r1_result",
    "split_into_passages",
    "stream_passages",
    "tokenize",
]
