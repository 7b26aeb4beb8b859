"""The data doctor: before a run, can the corpus answer the QA set, and do the exemplars
show passages the corpus really returns? (docs/data-doctor.md)

Every question is searched with its own text on the corpus's BM25 index (the search
the model's first call would make if it copied the question), and the pure checks of
`studio.method.reachability` read the top k. A viewer may run it: it reads only.
"""

from __future__ import annotations

from collections.abc import Callable

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.ingest import QARow
from studio.method.reachability import (
    Reach,
    hop_titles,
    reach,
    replay_findings,
    summarize,
    written_searches,
)
from studio.retrieval import SearchIndex
from studio.services import corpora, exemplar_sets, qa_sets
from studio.services.errors import InvalidInput
from studio.settings import Settings

MAX_QUESTIONS = 5000  # more are sampled evenly: a figure on 5000 questions is close enough
WORST_SHOWN = 10
CHECK_QUESTIONS = 200  # the run check's sample: enough for "mostly", fast on a big corpus
MOSTLY_UNREACHABLE = 0.5  # the run check warns when fewer than this share are reachable
PROGRESS_EVERY = 100

Progress = Callable[[int, int], None]


class Unreachable(TypedDict):
    """A question whose gold answer is not in the top k of a search for itself."""

    id: str
    question: str
    golden_answers: list[str]
    hops_found: str | None  # "1 of 2": its supporting passages found; None without them
    retrieved: list[str]  # the titles of the passages found


class ReachabilityReport(TypedDict):
    """Can the corpus answer the QA set (docs/data-doctor.md)? Shares are 0..1, None of
    nothing."""

    corpus: str
    qa_set: str
    k: int
    set_size: int
    sampled: bool  # an even sample of a larger set was checked
    questions: int  # checked
    reachable: int
    share: float | None
    questions_with_hops: int  # that kept their supporting passages
    hops: list[dict]  # per hop: {hop, questions, found, share}
    all_hops_found: int
    all_hops_share: float | None
    ranks: list[dict]  # per rank 1..k: {rank, questions} whose first answer is there
    worst: list[Unreachable]


class ReplayedExemplar(TypedDict):
    number: int  # from 1
    question: str
    searches: list[dict]  # {query, retrieved: the titles the corpus returns}
    findings: list[str]  # what it shows that the corpus does not return


class ReplayReport(TypedDict):
    """Each exemplar's searches run on the corpus (docs/data-doctor.md)."""

    corpus: str
    exemplar_set: str
    k: int
    exemplars: list[ReplayedExemplar]
    flagged: int  # exemplars with findings


def _check_k(k: int) -> None:
    if not 1 <= k <= corpora.MAX_TOP_K:
        raise InvalidInput(f"k: must be between 1 and {corpora.MAX_TOP_K}, got {k}")


def _passages(index: SearchIndex, query: str, k: int) -> list[tuple[str, str]]:
    return index.titled_passages([query], k)[0]


def _reaches(index: SearchIndex, rows: list[QARow], k: int,
             on_progress: Progress | None) -> list[tuple[Reach, list[tuple[str, str]]]]:
    out = []
    for done, row in enumerate(rows, 1):
        got = _passages(index, row.question, k)
        out.append((reach(got, row.golden_answers, hop_titles(row.meta)), got))
        if on_progress and (done % PROGRESS_EVERY == 0 or done == len(rows)):
            on_progress(done, len(rows))
    return out


def _worst(rows: list[QARow], reaches, shown: int) -> list[Unreachable]:
    """The unreachable questions, those that found fewest of their supporting passages first."""
    missed = [(row, r, got) for row, (r, got) in zip(rows, reaches, strict=True)
              if not r.reachable]
    missed.sort(key=lambda m: sum(m[1].hops))
    return [{"id": row.id, "question": row.question, "golden_answers": row.golden_answers,
             "hops_found": f"{sum(r.hops)} of {len(r.hops)}" if r.hops else None,
             "retrieved": [title for title, _ in got]} for row, r, got in missed[:shown]]


def reachability(settings: Settings, corpus_id: int, qa_set_id: int, *, k: int = 3,
                 limit: int = MAX_QUESTIONS, worst: int = WORST_SHOWN,
                 on_progress: Progress | None = None) -> ReachabilityReport:
    """The share of questions whose gold answer is in the top-k passages of the question
    itself, per hop where the set kept its supporting passages, and the worst questions.
    `on_progress(done, total)` every hundred questions."""
    _check_k(k)
    if not 1 <= limit <= MAX_QUESTIONS:
        raise InvalidInput(f"limit: must be between 1 and {MAX_QUESTIONS}, got {limit}")
    index = corpora.open_index(settings, corpus_id)
    size, checked = qa_sets.sample_rows(settings, qa_set_id, limit)
    reaches = _reaches(index, checked, k, on_progress)
    figures = summarize([r for r, _ in reaches])
    return {"corpus": corpora.get_corpus(settings, corpus_id)["name"],
            "qa_set": qa_sets.get_qa_set(settings, qa_set_id)["name"], "k": k,
            "set_size": size, "sampled": len(checked) < size, **figures,
            "ranks": _rank_counts([r for r, _ in reaches], k),
            "worst": _worst(checked, reaches, worst)}


def _rank_counts(reaches: list[Reach], k: int) -> list[dict]:
    """How many questions have their first answer-holding passage at each rank 1..k."""
    return [{"rank": rank, "questions": sum(r.answer_rank == rank for r in reaches)}
            for rank in range(1, k + 1)]


def exemplar_replay(settings: Settings, corpus_id: int, exemplar_set_id: int, *,
                    k: int = 3) -> ReplayReport:
    """Each exemplar's searches run on the corpus: the passages it returns and, beside
    the exemplar, the blocks it could not produce and an answer none of them holds."""
    _check_k(k)
    index = corpora.open_index(settings, corpus_id)
    found = exemplar_sets.get_exemplar_set(settings, exemplar_set_id)
    exemplars = exemplar_sets.load_exemplars(settings, exemplar_set_id)
    items = []
    for number, exemplar in enumerate(exemplars, 1):
        searches = written_searches(exemplar.solution)
        got = [_passages(index, s.query, k) for s in searches]
        items.append({"number": number, "question": exemplar.question,
                      "searches": [{"query": s.query, "retrieved": [t for t, _ in g]}
                                   for s, g in zip(searches, got, strict=True)],
                      "findings": replay_findings(exemplar, got)})
    return {"corpus": corpora.get_corpus(settings, corpus_id)["name"],
            "exemplar_set": found["name"], "k": k, "exemplars": items,
            "flagged": sum(bool(item["findings"]) for item in items)}


def training_warning(settings: Settings, corpus_id: int, qa_set_id: int, k: int) -> str | None:
    """The run check's plain warning when most training questions cannot be answered from
    the passages their own text retrieves (on an even sample of the set)."""
    rows = qa_sets.sample_rows(settings, qa_set_id, CHECK_QUESTIONS)[1]
    if not rows:
        return None
    figures = summarize([r for r, _ in _reaches(corpora.open_index(settings, corpus_id), rows,
                                                k, None)])
    if figures["share"] >= MOSTLY_UNREACHABLE:
        return None
    return (f"data.train: only {figures['reachable']} of {len(rows)} training questions "
            f"({figures['share']:.0%}) have their answer in the top {k} passages that a "
            "search for the question itself returns; unless the model finds the rest with "
            "other searches, their answer reward stays 0. Check that the corpus holds the "
            "answers (the Data page's data doctor lists the worst questions)")


# --- the figures in words (the Data page and `studio doctor`) ------------------------------


def _of(part: int, whole: int) -> str:
    return f"{part} of {whole} ({part / whole:.0%})" if whole else "none"


def reachability_lines(report: dict) -> list[str]:
    """The reachability figures as sentences, plain text (escape them where shown)."""
    checked = report["questions"]
    lines = [f"Answer reachable: {_of(report['reachable'], checked)} questions of "
             f"'{report['qa_set']}' find a gold answer in the top {report['k']} passages "
             f"of '{report['corpus']}' when the question itself is the query"
             + (f" (an even sample of the set's {report['set_size']})." if report["sampled"]
                else ".")]
    if report["reachable"]:
        lines.append("First passage holding it: " + ", ".join(
            f"rank {r['rank']}: {r['questions']}" for r in report["ranks"]) + ".")
    if report["hops"]:
        lines.append("Supporting passages found (by title): " + "; ".join(
            f"hop {h['hop']}: {_of(h['found'], h['questions'])}" for h in report["hops"])
            + f"; all hops: {_of(report['all_hops_found'], report['questions_with_hops'])}.")
    else:
        lines.append("Per hop: this QA set kept no supporting passages (upload the original "
                     "HotpotQA or MuSiQue file for per-hop figures), so only the whole "
                     "question is counted.")
    return lines


def replay_lines(report: dict) -> list[str]:
    """The exemplar replay in words: a line per exemplar, then its findings."""
    lines = [f"Exemplar replay on '{report['corpus']}' (top {report['k']}): "
             f"{report['flagged']} of {len(report['exemplars'])} exemplars of "
             f"'{report['exemplar_set']}' show what this corpus does not return."]
    for item in report["exemplars"]:
        lines.append(f"{item['number']}. {item['question']}: "
                     + ("ok, the corpus returns what it shows" if not item["findings"]
                        else "; ".join(item["findings"])))
    return lines
