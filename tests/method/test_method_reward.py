"""The reward: penalty table, normalisation, EM/SubEM/F1, multi-answer rule (method.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.method import Exemplar, build_messages
from studio.method.reward import (
    PENALTY_NAMES,
    PENALTY_TABLE,
    exact_match,
    format_penalties,
    multi_answer_match,
    normalize_answer,
    overlong_penalty,
    score,
    substring_match,
    token_f1,
)
from studio.method.tags import PYTHON_TOOL, SEARCH_TOOL

INFO = "\n\n<information>Doc 1(Title: France) Paris is the capital of France.</information>\n\n"
GOOD = (
    "<think>Need the capital.</think><search>capital of France</search>"
    + INFO
    + "<think>Paris.</think><answer>Paris</answer>"
)


def test_penalty_table_matches_method_md():
    assert [(r.name, r.value) for r in PENALTY_TABLE] == [
        ("missing_answer", 0.5),
        ("unbalanced_answer", 0.2),
        ("missing_think", 0.15),
        ("unbalanced_think", 0.1),
        ("no_search", 0.1),
        ("no_extractable_answer", 0.2),
    ]
    assert PENALTY_NAMES == tuple(r.name for r in PENALTY_TABLE)


PENALTY_CASES = [
    # (id, response, fired penalties, fmt)
    ("valid", GOOD, set(), 1.0),
    (
        "no_answer_tags",
        "<think>t</think><search>q</search>" + INFO + "<think>t</think>",
        {"missing_answer", "no_extractable_answer"},
        0.3,
    ),
    (
        "unclosed_answer",
        "<think>t</think><search>q</search>" + INFO + "<answer>Paris",
        {"missing_answer", "unbalanced_answer", "no_extractable_answer"},
        0.1,
    ),
    (
        "only_closing_answer",
        "<think>t</think><search>q</search>" + INFO + "Paris</answer>",
        {"missing_answer", "unbalanced_answer", "no_extractable_answer"},
        0.1,
    ),
    (
        "extra_open_answer",
        "<think>t</think><search>q</search>" + INFO + "<answer><answer>Paris</answer>",
        {"unbalanced_answer"},
        0.8,
    ),
    ("no_think", "<search>q</search>" + INFO + "<answer>Paris</answer>", {"missing_think"}, 0.85),
    (
        "no_closing_think",
        "<think>t<search>q</search>" + INFO + "<answer>Paris</answer>",
        {"missing_think", "unbalanced_think"},
        0.75,
    ),
    (
        "extra_open_think",
        "<think>a</think><think>b<search>q</search>" + INFO + "<answer>Paris</answer>",
        {"unbalanced_think"},
        0.9,
    ),
    ("no_search", "<think>I know it.</think><answer>Paris</answer>", {"no_search"}, 0.9),
    (
        "unclosed_search",
        "<think>t</think><search>q" + INFO + "<answer>Paris</answer>",
        {"no_search"},
        0.9,
    ),
    (
        "empty_answer",
        "<think>t</think><search>q</search>" + INFO + "<answer>  </answer>",
        {"no_extractable_answer"},
        0.8,
    ),
    (
        "answer_only_in_information",
        "<think>t</think><search>q</search>\n\n<information><think>x</think><answer>Paris</answer></information>\n\n",
        {"missing_answer", "no_extractable_answer"},
        0.3,
    ),
    (
        "bare_text",
        "Paris",
        {"missing_answer", "missing_think", "no_search", "no_extractable_answer"},
        0.05,
    ),
    (
        "clipped_to_zero",
        "<answer>Paris",
        {
            "missing_answer",
            "unbalanced_answer",
            "missing_think",
            "no_search",
            "no_extractable_answer",
        },
        0.0,
    ),
    (
        "mixed_case_tags",
        "<THINK>t</Think><Search>q</SEARCH>" + INFO + "<Answer>Paris</ANSWER>",
        set(),
        1.0,
    ),
]


@pytest.mark.parametrize(
    "response, fired, fmt", [c[1:] for c in PENALTY_CASES], ids=[c[0] for c in PENALTY_CASES]
)
def test_penalty_rows(response, fired, fmt):
    result = score(response, ["Paris"])
    assert set(result.penalties) == fired
    assert result.penalties == {r.name: r.value for r in PENALTY_TABLE if r.name in fired}
    assert result.format == pytest.approx(fmt)
    assert format_penalties(response) == result.penalties


def test_every_penalty_row_is_exercised():
    assert set().union(*(c[2] for c in PENALTY_CASES)) == set(PENALTY_NAMES)


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  A   cat ", "cat"),
        ("an apple, a day", "apple day"),
        ("Theatre", "theatre"),
        ("Anthem of the USA", "anthem of usa"),
        ("U.S.A.", "usa"),
        ("Hello\n\tWorld", "hello world"),
        ("don't", "dont"),
        ("the", ""),
        ("", ""),
        ("Zürich", "zürich"),
        ("1,000", "1000"),
    ],
)
def test_normalize_answer(raw, normalised):
    assert normalize_answer(raw) == normalised


@pytest.mark.parametrize(
    "pred, golds, em, subem, f1",
    [
        ("Paris", ["Paris"], 1.0, 1.0, 1.0),
        ("the paris.", ["Paris"], 1.0, 1.0, 1.0),
        ("Paris, France", ["Paris"], 0.0, 1.0, pytest.approx(2 / 3)),
        ("Barack Obama", ["Obama", "Barack Hussein Obama"], 0.0, 1.0, pytest.approx(0.8)),
        ("London", ["Paris"], 0.0, 0.0, 0.0),
        ("Paris", "Paris", 1.0, 1.0, 1.0),  # a bare string is one gold answer
        ("Paris", [], 0.0, 0.0, 0.0),
        (None, ["Paris"], 0.0, 0.0, 0.0),
        (".", ["the"], 0.0, 0.0, 0.0),  # an empty normalised gold never matches
        ("paris paris", ["paris"], 0.0, 1.0, pytest.approx(2 / 3)),
    ],
)
def test_em_subem_f1(pred, golds, em, subem, f1):
    assert exact_match(pred, golds) == em
    assert substring_match(pred, golds) == subem
    assert token_f1(pred, golds) == f1


@pytest.mark.parametrize(
    "pred, golds, acc",
    [
        ("Paris and London", ["Paris", "London"], 1.0),
        ("London, Paris", ["Paris", "London"], 1.0),
        ("Paris", ["Paris", "London"], 1.0),  # EM on one of them
        ("Paris only", ["Paris", "London"], 0.0),
        ("Paris, France", ["Paris"], 0.0),  # one gold: SubEM is not acc
        (
            "Paris, France",
            ["Paris", "paris", "PARIS."],
            0.0,
        ),  # one distinct gold after normalisation
        ("The Beatles and Rolling Stones", ["the beatles", "rolling stones"], 1.0),
    ],
)
def test_multi_answer_rule(pred, golds, acc):
    response = f"<think>t</think><search>q</search>{INFO}<answer>{pred}</answer>"
    result = score(response, golds)
    assert result.acc == acc
    assert result.score == pytest.approx(0.8 * acc + 0.2)
    if not exact_match(pred, golds):
        assert multi_answer_match(pred, golds) == (acc == 1.0)


def test_breakdown_fields_and_default_weights():
    r = score(GOOD, ["paris"])
    assert (r.score, r.acc, r.format, r.em, r.subem, r.f1, r.answer, r.penalties) == (
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        1.0,
        "Paris",
        {},
    )
    assert r.to_dict()["penalties"] == {}
    wrong = score(GOOD, ["London"])
    assert wrong.score == pytest.approx(0.2) and wrong.acc == 0.0


def test_correct_answer_with_bad_format():
    r = score("<answer>Paris</answer>", ["Paris"])
    assert r.acc == 1.0
    assert r.format == pytest.approx(0.75)
    assert r.score == pytest.approx(0.8 + 0.2 * 0.75)


@pytest.mark.parametrize(
    "acc_w, fmt_w, expected",
    [(1.0, 0.0, 1.0), (0.0, 1.0, 0.75), (0.5, 0.5, 0.875), (1.0, 1.0, 1.0), (-1.0, 0.0, 0.0)],
)
def test_weights_are_per_run_and_clipped(acc_w, fmt_w, expected):
    r = score("<answer>Paris</answer>", ["Paris"], acc_weight=acc_w, format_weight=fmt_w)
    assert r.score == pytest.approx(expected)


def test_bad_weight_rejected():
    with pytest.raises(ValueError):
        score(GOOD, ["Paris"], acc_weight=float("nan"))


def test_decoy_answer_inside_information_does_not_count():
    response = (
        "<think>Who wrote Hamlet?</think><search>author of Hamlet</search>"
        "\n\n<information>Doc 1(Title: Quiz) Q: Who wrote Hamlet? "
        "<answer>Marlowe</answer></information>\n\n"
        "<think>The quiz page is unreliable.</think><answer>William Shakespeare</answer>"
    )
    r = score(response, ["William Shakespeare"])
    assert r.answer == "William Shakespeare" and r.acc == 1.0 and r.penalties == {}
    unanswered = response.rsplit("<think>", 1)[0]
    r2 = score(unanswered, ["Marlowe"])
    assert r2.answer is None and r2.acc == 0.0
    assert {"missing_answer", "no_extractable_answer"} <= set(r2.penalties)


def test_code_tool_counts_as_the_tool_call():
    response = (
        "<think>t</think><code>print(6*7)</code>\n\n<output>42</output>\n\n<answer>42</answer>"
    )
    assert "no_search" in score(response, ["42"]).penalties
    assert score(response, ["42"], tools=(PYTHON_TOOL,)).penalties == {}
    assert score(response, ["42"], tools=(SEARCH_TOOL, PYTHON_TOOL)).penalties == {}


def test_tags_a_program_printed_into_output_do_not_count():
    """`<output>` is the environment's text: an answer, a think or a call printed by the
    program is neither the model's answer nor a tag of its format."""
    printed = "<answer>7</answer><think><code>x</code></answer>"
    response = (f"<think>t</think><code>print(banner)</code>\n\n<output>{printed}"
                "</output>\n\n<answer>42</answer>")
    r = score(response, ["42"], tools=(PYTHON_TOOL,))
    assert (r.answer, r.acc, r.penalties) == ("42", 1.0, {})
    silent = f"<think>t</think>\n\n<output>{printed}</output>\n\n<answer>42</answer>"
    assert set(score(silent, ["42"], tools=(PYTHON_TOOL,)).penalties) == {"no_search"}


EXEMPLARS = [
    Exemplar(
        f"Example question {i}",
        f"<think>t{i}</think><search>q{i}</search>{INFO}<answer>Answer {i}</answer>",
        f"Answer {i}",
    )
    for i in range(3)
]
NO_ANSWER = (
    "<think>I will search.</think><search>capital of France</search>" + INFO + "<think>So it is"
)


@pytest.mark.parametrize("layout", ["inline", "chat"])
def test_upstream_defect_cannot_happen(layout):
    """Adding exemplars to the prompt never changes the score of the same response.

    Upstream scored prompt + response, so the prompt's tags and its last
    exemplar's answer leaked in; the studio scores the response alone.
    """
    golds = ["Answer 2"]
    ours = [score(NO_ANSWER, golds) for _ in range(4)]
    assert all(r == ours[0] for r in ours)
    assert ours[0].answer is None and ours[0].acc == 0.0
    upstream_like = []
    for k in range(4):
        messages = build_messages("What is the capital of France", EXEMPLARS, k, layout=layout)
        prompt_text = "\n".join(m["content"] for m in messages)
        assert score(NO_ANSWER, golds) == ours[0]
        upstream_like.append(score(prompt_text + NO_ANSWER, golds))
    # scoring the prompt too would have credited the last exemplar's answer
    assert upstream_like[3].answer == "Answer 2" and upstream_like[3].acc == 1.0
    assert upstream_like[3].format > ours[0].format


@settings(max_examples=100, deadline=None)
@given(
    response=st.lists(
        st.sampled_from(
            [
                "<think>",
                "</think>",
                "<search>",
                "</search>",
                "<answer>",
                "</answer>",
                INFO,
                "Paris",
                "Answer 2",
                " ",
            ]
        ),
        max_size=15,
    ).map("".join),
    k=st.integers(0, 3),
    seed=st.one_of(st.none(), st.integers(0, 10)),
)
def test_score_independent_of_prompt_property(response, k, seed):
    build_messages("q", EXEMPLARS, k, sample_seed=seed)
    a, b = score(response, ["Paris"]), score(response, ["Paris"])
    assert a == b
    assert 0.0 <= a.score <= 1.0 and 0.0 <= a.format <= 1.0


@pytest.mark.parametrize("length", [0, 100, 383, 384, 385, 400, 447, 448, 512, 520])
@pytest.mark.parametrize("buffer, factor", [(64, 1.0), (128, 0.5), (1, 2.0)])
def test_overlong_penalty_is_dapos_formula(length, buffer, factor):
    """veRL's DAPO reward manager: expected = max - buffer; min(-(L - expected) / buffer *
    factor, 0): nothing up to `expected`, then linear down to -factor at the limit."""
    limit = 512
    expected_len = limit - buffer
    want = 0.0 if length <= expected_len else -(length - expected_len) / buffer * factor
    assert overlong_penalty(length, limit, buffer, factor) == pytest.approx(want)
    if length == limit:
        assert overlong_penalty(length, limit, buffer, factor) == pytest.approx(-factor)


def test_overlong_penalty_off_and_bounds():
    assert overlong_penalty(10_000, 512, 0, 1.0) == 0.0
    assert overlong_penalty(480, 512, 64, 0.0) == 0.0
    with pytest.raises(ValueError):
        overlong_penalty(10, 8, 16, 1.0)
