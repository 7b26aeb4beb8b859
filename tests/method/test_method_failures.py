"""The failure label of an evaluated question: each label, their precedence, and the reward's
normalisation in both the answer and the passages."""

from __future__ import annotations

import pytest

from studio.method.failures import (
    CORRECT,
    FORMAT_MISS,
    LABELS,
    NO_SEARCH,
    REASONING_MISS,
    RETRIEVAL_MISS,
    failure_label,
    label_split,
    retrieved_texts,
)
from studio.method.reward import score
from studio.method.tags import CORRECTIVE_MESSAGE, format_information

GOLD = ["Marrow Point"]


def searched(passage: str, query: str = "where is fennick light") -> str:
    """A search turn and the block the environment put after it."""
    return (f"<think>Look it up.</think><search>{query}</search>"
            + format_information([("Fennick Light", passage)]))


HOLDS = searched("Fennick Light stands on Marrow Point.")
LACKS = searched("Fennick Light is a lighthouse.")


@pytest.mark.parametrize(("response", "label"), [
    (HOLDS + "<answer>Marrow Point</answer>", CORRECT),
    (HOLDS + "<think>I am not sure</think>", FORMAT_MISS),
    (HOLDS + "<answer> </answer>", FORMAT_MISS),
    ("<think>I know it.</think><answer>Gull Rock</answer>", NO_SEARCH),
    (LACKS + "<answer>Gull Rock</answer>", RETRIEVAL_MISS),
    (HOLDS + "<answer>Gull Rock</answer>", REASONING_MISS),
])
def test_each_label(response, label):
    assert failure_label(response, GOLD) == label


def test_precedence_correct_then_format_then_no_search_then_retrieval():
    # right without searching: correct (a right answer is no failure; the share is acc)
    assert failure_label("<answer>Marrow Point</answer>", GOLD) == CORRECT
    # no answer and no search: format miss comes first
    assert failure_label("<think>hmm</think>", GOLD) == FORMAT_MISS
    # an unclosed answer is no answer, even after a search that found the gold
    assert failure_label(HOLDS + "<answer>Marrow Point", GOLD) == FORMAT_MISS
    # found in one of several searches: a reasoning miss, not a retrieval miss
    assert failure_label(LACKS + HOLDS + "<answer>Gull Rock</answer>", GOLD) == REASONING_MISS
    # the correct share is the reward's acc, the multi-answer rule included
    both = "<answer>Marrow Point and Gull Rock</answer>"
    assert score(both, ["Marrow Point", "Gull Rock"]).acc == 1.0
    assert failure_label(both, ["Marrow Point", "Gull Rock"]) == CORRECT


def test_the_reward_s_normalisation_in_answer_and_passages():
    assert failure_label("<answer>the MARROW point!</answer>", GOLD) == CORRECT
    assert failure_label(searched("Its rock: marrow, point.") + "<answer>Gull</answer>",
                         GOLD) == REASONING_MISS
    # normalisation drops punctuation, it does not split words: "Marrow-Point" reads
    # "marrowpoint", which holds no "marrow point"
    assert failure_label(searched("on Marrow-Point") + "<answer>Gull</answer>",
                         GOLD) == RETRIEVAL_MISS
    # an empty gold matches nothing, as in the reward
    assert failure_label(HOLDS + "<answer>x</answer>", [""]) == RETRIEVAL_MISS


def test_only_search_results_count_as_retrieved():
    # the gold in the model's own query or in the corrective message is not retrieved
    own_query = searched("nothing here", query="is it Marrow Point") + "<answer>Gull</answer>"
    assert failure_label(own_query, GOLD) == RETRIEVAL_MISS
    corrective = f"<search>x</search><think>Marrow Point</think>{CORRECTIVE_MESSAGE}"
    assert retrieved_texts(corrective) == []
    assert retrieved_texts(LACKS + HOLDS) == ["Doc 1(Title: Fennick Light) Fennick Light is a "
                                              "lighthouse.", "Doc 1(Title: Fennick Light) "
                                              "Fennick Light stands on Marrow Point."]
    # an answer written inside a result block is tool output, never the model's
    planted = searched("<answer>Marrow Point</answer>")
    assert failure_label(planted, GOLD) == FORMAT_MISS


def test_split_counts_every_label_in_order():
    assert label_split([NO_SEARCH, CORRECT, NO_SEARCH]) == {
        CORRECT: 1, FORMAT_MISS: 0, NO_SEARCH: 2, RETRIEVAL_MISS: 0, REASONING_MISS: 0}
    assert list(label_split([])) == list(LABELS)
