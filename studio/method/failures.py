"""Why an evaluated question went right or wrong: one label per question.

An evaluation's EM says how often the model was right; the labels say where the rest went
wrong. They are checked in this order, and the first that applies is the question's label:

1. ``correct``: the answer is right by the reward's own rule (acc: exact match after
   normalisation, or every one of several gold answers in it). A right answer is never a
   failure, searched or not, so the share of ``correct`` is the evaluation's acc.
2. ``format_miss``: no answer (no closed ``<answer>``, or a blank one).
3. ``no_search``: an answer, but the model never wrote a closed ``<search>``.
4. ``retrieval_miss``: it searched, but no normalised gold answer appears in the
   normalised text of any search result it was shown.
5. ``reasoning_miss``: a search result held a gold answer, and the answer is still wrong.

Matching is the reward's (`reward.normalize_answer`): lowercase, no punctuation, no
a/an/the, single spaces; a passage "holds" a gold answer as SubEM would find it in a
prediction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .reward import AnswerMatch, accuracy, substring_match
from .tags import DEFAULT_TOOLS, SEARCH_TOOL, TEXT, ToolSpec, final_answer, parse, search_queries

CORRECT = "correct"
FORMAT_MISS = "format_miss"
NO_SEARCH = "no_search"
RETRIEVAL_MISS = "retrieval_miss"
REASONING_MISS = "reasoning_miss"

LABELS: tuple[str, ...] = (CORRECT, FORMAT_MISS, NO_SEARCH, RETRIEVAL_MISS, REASONING_MISS)
"""Every label, in the order they are checked (the module docstring's precedence)."""

TITLES: dict[str, str] = {
    CORRECT: "correct",
    FORMAT_MISS: "format miss",
    NO_SEARCH: "no search",
    RETRIEVAL_MISS: "retrieval miss",
    REASONING_MISS: "reasoning miss",
}
"""How a page names each label."""

MEANINGS: dict[str, str] = {
    CORRECT: "the answer matches a gold answer",
    FORMAT_MISS: "the model gave no answer between <answer> tags",
    NO_SEARCH: "the model answered without ever searching, and the answer is wrong",
    RETRIEVAL_MISS: "the model searched, but no passage it got back contains the gold answer",
    REASONING_MISS: "a passage the model got back contains the gold answer, yet its answer "
                    "is wrong",
}
"""Each label in plain words, for a reader who has not seen the tag protocol."""


def retrieved_texts(response: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[str]:
    """The bodies of the result blocks that answer a closed ``<search>``, in order.

    A result block that follows anything else (the corrective message after an invalid
    turn) is not a search result.
    """
    search_tags = {t.call_tag for t in tools if t.name == SEARCH_TOOL.name}
    result_tags = {t.result_tag for t in tools if t.name == SEARCH_TOOL.name}
    texts, after_search = [], False
    for seg in parse(response, tools):
        if seg.kind == TEXT and not seg.text.strip():
            continue
        if seg.kind in result_tags and after_search:
            texts.append(seg.body)
        after_search = seg.kind in search_tags and seg.closed
    return texts


def failure_label(response: str, golden_answers: str | Iterable[str],
                  tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
                  answer_match: AnswerMatch = "exact") -> str:
    """The label of one evaluated response (one of :data:`LABELS`; precedence above).

    ``response`` as the reward reads it: the model's turns with the environment's blocks,
    any pre-filled reply prefix put back in front.
    """
    golds = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
    answer = final_answer(response, tools)
    if accuracy(answer, golds, answer_match):
        return CORRECT
    if answer is None or not answer.strip():
        return FORMAT_MISS
    if not search_queries(response, tools):
        return NO_SEARCH
    if not any(substring_match(text, golds) for text in retrieved_texts(response, tools)):
        return RETRIEVAL_MISS
    return REASONING_MISS


def label_split(labels: Iterable[str]) -> dict[str, int]:
    """How many questions got each label, every label present (0 when none), in
    :data:`LABELS` order."""
    counts = dict.fromkeys(LABELS, 0)
    for label in labels:
        counts[label] += 1
    return counts
