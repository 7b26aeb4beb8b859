"""Corpora: upload, status with progress, search, Search-R1's /retrieve, the data doctor."""

from __future__ import annotations

from fastapi import APIRouter, File, Form, Query, UploadFile
from pydantic import BaseModel, Field

from studio.api.deps import MAX_SQL_INT, CurrentUser, Id, JsonBodyRoute, SettingsDep
from studio.api.request_gate import UPLOAD_BOUND, BodyBound, bounded_body
from studio.services import corpora, data_doctor
from studio.services.corpora import CorpusView, RetrieveAnswer, SearchAnswer
from studio.services.data_doctor import ReachabilityReport, ReplayReport
from studio.services.errors import InvalidInput
from studio.services.json_input import decode_json_input

router = APIRouter(prefix="/corpora", tags=["corpora"], route_class=JsonBodyRoute)


@router.post("", status_code=201)
@bounded_body(UPLOAD_BOUND)
def upload(file: UploadFile = File(...), name: str = Form(...),
           backend: str = Form("bm25s"), params: str = Form("{}",
           description='BM25 settings as JSON, e.g. {"k1": 1.2, "b": 0.75, "stemmer": "english"}'),
           split_on_blank_lines: bool = Form(False), *, actor: CurrentUser,
           settings: SettingsDep) -> CorpusView:
    """Store a corpus file (JSONL, CSV/TSV, Parquet, .txt/.md, or a .zip of them) and index it."""
    parsed = decode_json_input(params, "params")
    if not isinstance(parsed, dict):
        raise InvalidInput("params: must be a JSON object")
    return corpora.create_corpus(settings, actor, file.file, file.filename, name, backend=backend,
                                 params=parsed, split_on_blank_lines=split_on_blank_lines)


@router.get("")
def list_all(settings: SettingsDep) -> list[CorpusView]:
    return corpora.list_corpora(settings)


@router.get("/{corpus_id}")
def get(corpus_id: Id, settings: SettingsDep) -> CorpusView:
    """The corpus with its `status` (pending, indexing, ready, failed) and progress."""
    return corpora.get_corpus(settings, corpus_id)


@router.delete("/{corpus_id}", status_code=204)
def delete(corpus_id: Id, actor: CurrentUser, settings: SettingsDep) -> None:
    """Its owner or an admin only; a corpus a run's plan pins is retired (hidden, kept)."""
    corpora.delete_corpus(settings, actor, corpus_id)


@router.get("/{corpus_id}/search")
def search(corpus_id: Id, settings: SettingsDep, q: str = Query(..., description="The query"),
           k: int = Query(3, ge=1, le=corpora.MAX_TOP_K, description="How many passages")
           ) -> SearchAnswer:
    """The top-k passages, and the information block the model would read."""
    return corpora.search(settings, corpus_id, q, k)


class RetrieveRequest(BaseModel):
    queries: list[str] = Field(..., description="One or more queries")
    topk: int = Field(3, ge=1, le=corpora.MAX_TOP_K)
    return_scores: bool = False


RETRIEVE_BOUND = BodyBound(
    # 12 bytes: the most one character takes in JSON (an escaped surrogate pair)
    lambda _settings: corpora.MAX_RETRIEVE_QUERIES * (corpora.MAX_QUERY_CHARS * 12 + 8)
    + (64 << 10),
    f"send at most {corpora.MAX_RETRIEVE_QUERIES} queries of {corpora.MAX_QUERY_CHARS} "
    "characters a request")
"""/retrieve's body: its largest request written in the longest JSON, about 6 MB."""


@router.post("/{corpus_id}/retrieve")
@bounded_body(RETRIEVE_BOUND)
def retrieve(corpus_id: Id, body: RetrieveRequest, settings: SettingsDep) -> RetrieveAnswer:
    """Search-R1's retriever contract: `{"result": [[{"document": {id, contents}, "score"}]]}`."""
    return corpora.retrieve(settings, corpus_id, body.queries, body.topk, body.return_scores)


TopK = Query(3, ge=1, le=corpora.MAX_TOP_K, description="Passages per search, as the run's "
             "grpo.top_k")


@router.get("/{corpus_id}/doctor/reachability")
def doctor_reachability(corpus_id: Id, settings: SettingsDep,
                        qa_set: int = Query(..., ge=1, le=MAX_SQL_INT,
                                            description="The QA set's id"),
                        k: int = TopK,
                        limit: int = Query(data_doctor.MAX_QUESTIONS, ge=1,
                                           le=data_doctor.MAX_QUESTIONS,
                                           description="Questions checked at most (a larger "
                                           "set is sampled evenly)")) -> ReachabilityReport:
    """The share of the QA set's questions whose gold answer is in the top-k passages of a
    search for the question itself, per hop where the set kept its supporting passages,
    and the worst questions (docs/data-doctor.md)."""
    return data_doctor.reachability(settings, corpus_id, qa_set, k=k, limit=limit)


@router.get("/{corpus_id}/doctor/exemplars")
def doctor_exemplars(corpus_id: Id, settings: SettingsDep,
                     exemplar_set: int = Query(..., ge=1, le=MAX_SQL_INT,
                                               description="The set's id"),
                     k: int = TopK) -> ReplayReport:
    """Each exemplar's searches run on this corpus: what it returns, and beside each
    exemplar the passages it shows that the corpus does not return (docs/data-doctor.md)."""
    return data_doctor.exemplar_replay(settings, corpus_id, exemplar_set, k=k)
