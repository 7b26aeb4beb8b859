"""Corpora: upload, index with BM25 (a worker task, with progress), search.

An upload is read in full before its row is stored, so a malformed file is
refused with its line and nothing is kept; the index is built by a worker and
stored under `indexes/` in the data directory, and each process loads it once.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import BinaryIO

from sqlmodel import select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.ingest import IngestError, read_documents
from studio.jobs import heartbeats, lifecycle
from studio.jobs.lifecycle import ACTIVE_STATES, INDEX_BUILD_WORDS, CorpusStatus, JobTable, RunState
from studio.jobs.queue import SHORT_QUEUE, enqueue
from studio.method.tags import format_information
from studio.retrieval import (
    BACKENDS,
    MAX_RETRIEVE_QUERIES,
    Bm25Params,
    Passage,
    SearchIndex,
    build_index,
    cached_index,
    save_index,
    search_r1_result,
    stream_passages,
)
from studio.services import uploads
from studio.services.access import Actor, require_member
from studio.services.errors import Conflict, InvalidInput
from studio.services.lanes import add_waits
from studio.services.records import (
    by_name_or_404,
    check_new_name,
    get_or_404,
    get_owned,
    inserted_id,
    usernames,
)
from studio.services.run_plans import pinned_ids
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Corpus, utcnow

INDEX_TASK = "worker.build_corpus_index"
INDEX_BUILDS = JobTable("index build", Corpus, state="status", words=INDEX_BUILD_WORDS,
                        finished=None, touched="updated_at", heartbeat="heartbeat_at",
                        lost=RunState.failed)
"""An index build's life cycle (`studio.jobs.lifecycle`), in its corpus's words (a build
whose worker died fails: a corpus has no word for interrupted); a build starts over when a
worker takes it again."""
MAX_TOP_K = 50
MAX_QUERY_CHARS = 2000
_PROGRESS_EVERY_S = 1.0


def _params(backend: str, params: dict | None, split_on_blank_lines: bool) -> dict:
    if backend not in BACKENDS:
        raise InvalidInput(f"backend: '{backend}' is not one of {', '.join(BACKENDS)}")
    try:
        bm25 = Bm25Params.from_dict(params or {})
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"params: {exc}") from None
    return {"bm25": bm25.to_dict(), "split_on_blank_lines": split_on_blank_lines}


def create_corpus(settings: Settings, actor: Actor, stream: BinaryIO, filename: str | None,
                  name: str, *, backend: str = "bm25s", params: dict | None = None,
                  split_on_blank_lines: bool = False, start_indexing: bool = True
                  ) -> CorpusView:
    """Store an uploaded corpus and queue its index build; refuse bad files with their line."""
    require_member(actor, "upload corpora")
    index_params = _params(backend, params, split_on_blank_lines)
    with session_scope(settings.sqlalchemy_url) as session:
        name = check_new_name(session, Corpus, name)
    with uploads.stage_upload(stream, filename, settings) as staged:
        try:
            documents = sum(1 for _ in read_documents(
                staged.path, staged.filename, uploads.upload_limits(settings),
                split_text_on_blank_lines=split_on_blank_lines))
        except IngestError as exc:
            raise InvalidInput(str(exc)) from None
        with uploads.kept_as_new(staged, settings, Corpus, name) as (upload_path, session):
            corpus_id = inserted_id(session, Corpus(
                name=name, source_filename=staged.filename, content_hash=staged.sha256,
                upload_path=upload_path, backend=backend, index_params=index_params,
                num_documents=documents, owner_id=actor.id))
    if start_indexing:
        enqueue(settings, INDEX_TASK, corpus_id, queue=SHORT_QUEUE)
    return get_corpus(settings, corpus_id)


class IndexProgress(TypedDict):
    rows_read: int
    passages_indexed: int
    fraction: float  # 0..1; 1 once the index is ready


class CorpusView(TypedDict):
    """A corpus as the API and the pages show it (times in ISO 8601, UTC)."""

    id: int
    name: str
    owner: str | None
    status: str  # pending | indexing | ready | failed
    error: str | None
    source_filename: str
    backend: str
    params: dict | None  # {bm25: {k1, b, stemmer, ...}, split_on_blank_lines}
    num_documents: int
    num_passages: int
    progress: IndexProgress
    created_at: str
    updated_at: str
    waiting: str | None  # pending: the queue its index build waits in, and behind what


class SearchHit(TypedDict):
    id: str
    title: str
    text: str
    score: float


class SearchAnswer(TypedDict):
    """One query's hits and the information block the model would read."""

    query: str
    hits: list[SearchHit]
    tool_text: str


class RetrieveAnswer(TypedDict):
    """Search-R1's `/retrieve` answer: per query its documents `{id, contents}`, each
    wrapped as `{document, score}` when scores were asked for."""

    result: list[list[dict]]


def _view(corpus: Corpus, owners: dict[int, str]) -> CorpusView:
    total = max(corpus.num_documents, 1)
    return {
        "id": corpus.id, "name": corpus.name, "owner": owners.get(corpus.owner_id),
        "status": corpus.status, "error": corpus.error,
        "source_filename": corpus.source_filename, "backend": corpus.backend,
        "params": corpus.index_params, "num_documents": corpus.num_documents,
        "num_passages": corpus.num_passages,
        "progress": {"rows_read": corpus.rows_read, "passages_indexed": corpus.passages_indexed,
                     "fraction": 1.0 if corpus.status == CorpusStatus.ready
                     else round(min(corpus.rows_read / total, 1.0), 4)},
        "created_at": corpus.created_at.isoformat(), "updated_at": corpus.updated_at.isoformat(),
        "waiting": None,  # pending: the queue its index build waits in, and behind what
    }


def _with_waits(settings: Settings, views: list[CorpusView]) -> list[CorpusView]:
    return add_waits(settings, views, "corpus", "waiting", lambda _view: SHORT_QUEUE)


def _load(session, corpus_id: int) -> Corpus:
    return get_or_404(session, Corpus, corpus_id, "corpus")


def get_corpus(settings: Settings, corpus_id: int) -> CorpusView:
    with session_scope(settings.sqlalchemy_url) as session:
        view = _view(_load(session, corpus_id), usernames(session))
    return _with_waits(settings, [view])[0]


def find_corpus(settings: Settings, name: str) -> CorpusView:
    with session_scope(settings.sqlalchemy_url) as session:
        view = _view(by_name_or_404(session, Corpus, name, "corpus"), usernames(session))
    return _with_waits(settings, [view])[0]


def list_corpora(settings: Settings) -> list[CorpusView]:
    with session_scope(settings.sqlalchemy_url) as session:
        owners = usernames(session)
        views = [_view(c, owners) for c in session.exec(
            select(Corpus).where(Corpus.retired_at.is_(None)).order_by(Corpus.id))]
    return _with_waits(settings, views)


def delete_corpus(settings: Settings, actor: Actor, corpus_id: int) -> None:
    """Remove the row, its index, and its upload unless another corpus holds the same file;
    a corpus that a run's plan pins is retired instead (hidden, its name free) and removed
    with the last such run (`purge_retired`)."""
    with session_scope(settings.sqlalchemy_url) as session:
        corpus = get_owned(session, Corpus, corpus_id, "corpus", actor, "delete")
        if corpus.status == CorpusStatus.indexing:
            raise Conflict(f"corpus '{corpus.name}' is being indexed; delete it when it is done")
        if corpus_id in pinned_ids(session, Corpus):
            corpus.retired_at = utcnow()
            session.add(corpus)
            return
    _remove(settings, corpus_id)


def _remove(settings: Settings, corpus_id: int) -> None:
    root = settings.resolved_data_dir
    with session_scope(settings.sqlalchemy_url) as session:
        corpus = session.get(Corpus, corpus_id)
        shared = session.exec(select(Corpus).where(Corpus.upload_path == corpus.upload_path,
                                                   Corpus.id != corpus.id)).first()
        upload, index = corpus.upload_path, corpus.index_path
        session.delete(corpus)
    if index:
        shutil.rmtree(root / index, ignore_errors=True)
    if not shared:
        (root / upload).unlink(missing_ok=True)


def purge_retired(settings: Settings) -> None:
    """Remove the retired corpora that no run's plan pins any more (after a run's deletion)."""
    with session_scope(settings.sqlalchemy_url) as session:
        retired = session.exec(select(Corpus.id).where(Corpus.retired_at.is_not(None))).all()
        unpinned = set(retired) - pinned_ids(session, Corpus)
    for corpus_id in unpinned:
        _remove(settings, corpus_id)


# --- the index build (runs in a worker) -----------------------------------------------


def _update(settings: Settings, corpus_id: int, **values) -> None:
    with session_scope(settings.sqlalchemy_url) as session:
        corpus = _load(session, corpus_id)
        for key, value in values.items():
            setattr(corpus, key, value)
        corpus.updated_at = utcnow()
        session.add(corpus)


def _finish(settings: Settings, corpus_id: int, outcome: RunState, **values) -> None:
    with session_scope(settings.sqlalchemy_url) as session:
        lifecycle.finish(session, INDEX_BUILDS, corpus_id, outcome, **values)


def build_corpus_index(settings: Settings, corpus_id: int) -> CorpusView:
    """Read the corpus, split it into passages, build and save its BM25 index.

    Progress (rows read, passages indexed) is written about once a second; any
    failure ends in status `failed` with the reason, never in a silent stop. A corpus whose
    build has ended (a message delivered twice) is left as it is.
    """
    with session_scope(settings.sqlalchemy_url) as session:
        corpus = _load(session, corpus_id)
        source = settings.resolved_data_dir / corpus.upload_path
        filename, backend, opts = corpus.source_filename, corpus.backend, corpus.index_params
        folder = f"indexes/corpus-{corpus.id}-{corpus.content_hash[:16]}"
        claimed = lifecycle.claim(session, INDEX_BUILDS, corpus_id, leaving=ACTIVE_STATES,
                                  rows_read=0, passages_indexed=0)
    if not claimed:
        return get_corpus(settings, corpus_id)
    counts = {"rows_read": 0, "passages_indexed": 0}
    last_write = [time.monotonic()]

    def report(force: bool = False) -> None:
        if force or time.monotonic() - last_write[0] >= _PROGRESS_EVERY_S:
            last_write[0] = time.monotonic()
            _update(settings, corpus_id, **counts)

    def passages() -> Iterator[Passage]:
        for doc in read_documents(source, filename, uploads.upload_limits(settings),
                                  split_text_on_blank_lines=opts["split_on_blank_lines"]):
            counts["rows_read"] += 1
            yield from stream_passages(doc.id, doc.title, doc.pieces(), settings.passage_words)
            report()

    def indexed(n: int) -> None:
        counts["passages_indexed"] = n
        report()

    try:
        with heartbeats.keep_beating(settings, INDEX_BUILDS, corpus_id):
            index = build_index(passages(), Bm25Params.from_dict(opts["bm25"]), backend,
                                on_progress=indexed)
            save_index(index, settings.resolved_data_dir / folder)
    except Exception as exc:
        reason = str(exc) if isinstance(exc, (IngestError, ValueError)) else \
            f"{type(exc).__name__}: {exc}"
        _finish(settings, corpus_id, RunState.failed, error=reason, **counts)
        raise
    counts["passages_indexed"] = len(index)
    _finish(settings, corpus_id, RunState.succeeded, index_path=folder,
            num_passages=len(index), **counts)
    return get_corpus(settings, corpus_id)


# --- search -----------------------------------------------------------------------------


def open_index(settings: Settings, corpus_id: int) -> SearchIndex:
    """The corpus's index, loaded once per process; 409 until it is ready. A retired corpus
    is still searched: the runs whose plan pins it train and evaluate on it."""
    with session_scope(settings.sqlalchemy_url) as session:
        corpus = get_or_404(session, Corpus, corpus_id, "corpus", retired=True)
        if corpus.status != CorpusStatus.ready:
            detail = f": {corpus.error}" if corpus.error else ""
            raise Conflict(f"corpus '{corpus.name}' is {corpus.status}{detail}; search it when "
                           "its status is ready")
        folder = settings.resolved_data_dir / corpus.index_path
    return cached_index(folder)


def _check_k(k: int, field: str) -> None:
    if not 1 <= k <= MAX_TOP_K:
        raise InvalidInput(f"{field}: must be between 1 and {MAX_TOP_K}, got {k}")


def search(settings: Settings, corpus_id: int, query: str, k: int = 3) -> SearchAnswer:
    """One query; the hits and the exact text the model would read in its information block."""
    _check_k(k, "k")
    if not query.strip():
        raise InvalidInput("q: the query is empty; type words to search for")
    hits = open_index(settings, corpus_id).search([query], k)[0]
    return {
        "query": query,
        "hits": [{"id": h.passage.id, "title": h.passage.title, "text": h.passage.text,
                  "score": h.score} for h in hits],
        "tool_text": format_information((h.passage.title, h.passage.text) for h in hits),
    }


def retrieve(settings: Settings, corpus_id: int, queries: list[str], topk: int = 3,
             return_scores: bool = False) -> RetrieveAnswer:
    """Search-R1's `/retrieve` contract, which the veRL backend's agent loop calls."""
    _check_k(topk, "topk")
    if len(queries) > MAX_RETRIEVE_QUERIES:
        raise InvalidInput(f"queries: {len(queries)} in one request; at most "
                           f"{MAX_RETRIEVE_QUERIES}, send the rest in further requests")
    for number, query in enumerate(queries):
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidInput(f"queries[{number}]: {len(query)} characters; a query may have "
                               f"at most {MAX_QUERY_CHARS}")
    index = open_index(settings, corpus_id)
    return {"result": [search_r1_result(hits, return_scores)
                       for hits in index.search(queries, topk)]}

