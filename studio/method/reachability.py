"""Can the corpus answer? The data doctor's pure checks (docs/data-doctor.md).

Answer reachability: given the passages a search returned for a question, the
rank of the first one that holds a gold answer (matched as the reward matches,
:func:`studio.method.reward.contains_answer`), and for multi-hop sets which
supporting passages (by title) came back. Exemplar replay: given what the
corpus returns for each of an exemplar's searches, the information blocks it
could not have produced and an answer none of its passages holds. An exemplar
written for another corpus teaches the model to expect passages it will never see.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .exemplars import Exemplar
from .reward import contains_answer, normalize_answer
from .tags import SEARCH_TOOL, final_answer, parse

Passage = tuple[str, str]
"""A passage as the model reads it: (title, text)."""


def _readable(passage: Passage) -> str:
    """The words the model reads of a passage: its title and its text."""
    return f"{passage[0]} {passage[1]}"


def answer_rank(passages: Sequence[Passage], golden_answers: Sequence[str]) -> int | None:
    """1-based rank of the first passage whose title or text holds a gold answer; None if none."""
    for rank, passage in enumerate(passages, 1):
        if contains_answer(_readable(passage), golden_answers):
            return rank
    return None


def hop_titles(meta: Mapping) -> list[str]:
    """The titles of a question's supporting passages, one per hop, in hop order.

    The QA reader keeps ``supporting_titles`` (HotpotQA's supporting facts, MuSiQue's
    supporting paragraphs in paragraph order); MuSiQue's ``question_decomposition``
    then gives the hop order: each hop names its paragraph by index, and the
    supporting paragraphs' indexes in ascending order match the titles' order.
    Empty when the set kept no supporting passages (a plain question/answer file).
    """
    titles = [t for t in meta.get("supporting_titles") or [] if isinstance(t, str)]
    hops = meta.get("question_decomposition")
    if not isinstance(hops, list):
        return titles
    indexes = [h.get("paragraph_support_idx") if isinstance(h, Mapping) else None for h in hops]
    if None in indexes or len(set(indexes)) != len(titles):
        return titles
    by_index = dict(zip(sorted(indexes), titles, strict=True))
    return [by_index[i] for i in indexes]


@dataclass(frozen=True)
class Reach:
    """One question's figures: the answer's rank (None: not in the top k) and, per hop,
    whether a passage with that hop's title was among the top k."""

    answer_rank: int | None
    hops: tuple[bool, ...] = ()

    @property
    def reachable(self) -> bool:
        return self.answer_rank is not None


def reach(passages: Sequence[Passage], golden_answers: Sequence[str],
          supporting: Sequence[str] = ()) -> Reach:
    """The figures of one question from the passages its own text retrieved."""
    titles = {normalize_answer(title) for title, _ in passages}
    return Reach(answer_rank(passages, golden_answers),
                 tuple(normalize_answer(t) in titles for t in supporting))


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def summarize(reaches: Sequence[Reach]) -> dict:
    """The set's figures: questions reachable, and per hop (for the questions with
    supporting passages) how many found that hop's passage, and all of them."""
    reachable = sum(r.reachable for r in reaches)
    with_hops = [r for r in reaches if r.hops]
    hops = []
    for i in range(max((len(r.hops) for r in with_hops), default=0)):
        having = [r.hops[i] for r in with_hops if len(r.hops) > i]
        hops.append({"hop": i + 1, "questions": len(having), "found": sum(having),
                     "share": _share(sum(having), len(having))})
    all_found = sum(all(r.hops) for r in with_hops)
    return {
        "questions": len(reaches), "reachable": reachable,
        "share": _share(reachable, len(reaches)),
        "questions_with_hops": len(with_hops), "hops": hops,
        "all_hops_found": all_found, "all_hops_share": _share(all_found, len(with_hops)),
    }


# --- exemplar replay ---------------------------------------------------------------------

_DOC = re.compile(r"^Doc \d+\(Title: ((?:[^()\n]|\([^()\n]*\))*?)\) ?", re.MULTILINE)
"""A passage's opening line; a title may hold balanced parentheses ("Serrick (island)")."""


def parse_information(body: str) -> list[Passage]:
    """The passages of an information block as the tool writes them (``Doc 1(Title: T) text``);
    a block written another way is one passage without a title."""
    starts = list(_DOC.finditer(body))
    if not starts:
        return [("", body.strip())] if body.strip() else []
    ends = [m.start() for m in starts[1:]] + [len(body)]
    return [(m.group(1).strip(), body[m.end():end].strip()) for m, end in zip(starts, ends,
                                                                              strict=True)]


@dataclass(frozen=True)
class WrittenSearch:
    """One search of an exemplar and the passages its author wrote after it."""

    query: str
    passages: tuple[Passage, ...]


def written_searches(solution: str) -> list[WrittenSearch]:
    """Each closed ``<search>`` of a solution with the information block that follows it
    (no passages when none follows before the next search)."""
    found: list[WrittenSearch] = []
    for segment in parse(solution):
        if segment.kind == SEARCH_TOOL.call_tag and segment.closed:
            found.append(WrittenSearch(segment.body.strip(), ()))
        elif segment.kind == SEARCH_TOOL.result_tag and found and not found[-1].passages:
            found[-1] = WrittenSearch(found[-1].query, tuple(parse_information(segment.body)))
    return found


def _produced(written: Passage, retrieved: Sequence[Passage]) -> bool:
    """The corpus returned this passage: same title, and the written text is (part of) its text."""
    title, text = normalize_answer(written[0]), normalize_answer(written[1])
    return any((not title or normalize_answer(t) == title) and text in normalize_answer(body)
               for t, body in retrieved)


def replay_findings(exemplar: Exemplar, retrieved: Sequence[Sequence[Passage]]) -> list[str]:
    """What an exemplar shows that the corpus would not: ``retrieved[i]`` is what the corpus
    returns for the exemplar's i-th search (:func:`written_searches`)."""
    searches = written_searches(exemplar.solution)
    findings = []
    for number, (search, got) in enumerate(zip(searches, retrieved, strict=True), 1):
        where = f"search {number} '{search.query}'"
        missing = [p for p in search.passages if not _produced(p, got)]
        if not got:
            findings.append(f"{where}: the corpus returns no passage for it")
        elif missing:
            titles = ", ".join(f"'{t}'" if t else "(untitled)" for t, _ in missing)
            findings.append(
                f"{where}: {len(missing)} of the {len(search.passages)} passages written after "
                f"it are not what the corpus returns ({titles}); it returns "
                + ", ".join(f"'{t}'" for t, _ in got))
    answer = exemplar.answer or final_answer(exemplar.solution)
    if answer and searches and not any(answer_rank(got, [answer]) for got in retrieved):
        findings.append(f"the answer '{answer}' is in none of the passages the corpus returns "
                        "for its searches")
    return findings
