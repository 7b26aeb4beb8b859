"""The reward: penalty table, normalisation, EM/SubEM/F1, multi-answer rule (method.md)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.method import Exemplar, build_prompt
from studio.method.reward import (
    PENALTY_NAMES,
    PENALTY_TABLE,
    accuracy,
    exact_match,
    format_penalties,
    multi_answer_match,
    normalize_answer,
    numbers,
    numeric_match,
    numeric_substring_match,
    numeric_token_f1,
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
        messages = build_prompt("What is the capital of France", EXEMPLARS, k, layout=layout).messages
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
    build_prompt("q", EXEMPLARS, k, sample_seed=seed)
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


NUMERIC_CASES = [
    # (prediction, golds, numeric acc, why)
    ("12", ["12"], 1.0, "the same"),
    ("12.0", ["12"], 1.0, "a zero decimal"),
    ("12.000", ["12.0"], 1.0, "zero decimals on both sides"),
    ("12 apples", ["12"], 1.0, "a unit after it"),
    ("$12", ["12"], 1.0, "a currency sign"),
    ("$12.50", ["12.5"], 1.0, "cents"),
    ("1,200", ["1200"], 1.0, "thousands commas"),
    ("1200", ["1,200"], 1.0, "thousands commas in the gold"),
    ("$1,234,567.5", ["1234567.50"], 1.0, "several groups"),
    ("0.5", [".5"], 1.0, "a leading-dot decimal"),
    ("1/2", ["0.5"], 1.0, "a fraction equals its decimal"),
    ("-7", ["-7.0"], 1.0, "a negative number"),
    ("50%", ["50"], 1.0, "a percent sign is a unit"),
    ("The answer is 42.", ["42"], 1.0, "a sentence's full stop is not a decimal"),
    ("12", ["7", "12"], 1.0, "any gold number"),
    ("twelve", ["twelve", "12"], 1.0, "a text gold is matched exactly"),
    ("12", ["120"], 0.0, "12 is not 120"),
    ("120", ["12"], 0.0, "120 is not 12"),
    ("1.2", ["12"], 0.0, "1.2 is not 12 (exact match would say it is: '.' is dropped)"),
    ("12 or 13", ["12"], 0.0, "two numbers: a hedge"),
    ("12 and 12", ["12"], 0.0, "two numbers, even equal ones"),
    ("1,2", ["1.2"], 0.0, "a decimal comma is two numbers"),
    ("1,2345", ["12345"], 0.0, "commas group exactly three digits"),
    ("0.3333", ["1/3"], 0.0, "no tolerance: exact values"),
    ("0.5", ["50%"], 0.0, "50% is 50, not 0.5"),
    ("twelve", ["12"], 0.0, "numbers in words are not read"),
    ("3 1/2", ["3.5"], 0.0, "a mixed number is two numbers"),
    ("1/0", ["1"], 0.0, "no number"),
    ("", ["12"], 0.0, "empty"),
    (None, ["12"], 0.0, "no answer"),
    ("12", ["12 or 13"], 0.0, "a gold of two numbers is text, matched exactly"),
]


@pytest.mark.parametrize("pred, golds, acc, why", NUMERIC_CASES)
def test_numeric_match_table(pred, golds, acc, why):
    assert numeric_match(pred, golds) == acc, why
    assert accuracy(pred, golds, "numeric") == acc, why
    response = None if pred is None else f"<think>t</think><code>print(1)</code>" \
        f"\n\n<output>1</output>\n\n<answer>{pred}</answer>"
    if response is not None and pred.strip():
        result = score(response, golds, tools=(PYTHON_TOOL,), answer_match="numeric")
        assert (result.acc, result.em, result.score) == (acc, acc, pytest.approx(0.8 * acc + 0.2))


@pytest.mark.parametrize("text, values", [
    ("$1,200.50 for 3 days", [Fraction(120_050, 100), 3]),
    ("1,200, and 7", [1200, 7]),
    ("from 3-4 km", [3, 4]),
    ("version 1.2.3", []),
    ("x2 or 2x", [2]),
    ("1e3 grams", [1000]),
    (".25 of -1/4", [Fraction(1, 4), Fraction(-1, 4)]),
])
def test_numbers_read_from_text(text, values):
    assert numbers(text) == values


@settings(max_examples=200, deadline=None)
@given(cents=st.integers(-10**9, 10**9), unit=st.sampled_from(["", " apples", " km", "%"]),
       scale=st.sampled_from([10, 100, Fraction(1, 10)]))
def test_numeric_match_is_value_equality(cents, unit, scale):
    """Against a direct computation: any spelling of a value matches it, and the value scaled
    by ten never does."""
    value = Fraction(cents, 100)
    sign = "-" if value < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    spellings = [f"{sign}{whole}.{frac:02d}", f"{sign}{whole:,}.{frac:02d}{unit}",
                 f"{sign}${whole:,}.{frac:02d}"]
    if frac == 0:
        spellings += [f"{sign}{whole}", f"{sign}{whole:,}{unit}"]
    gold = f"{sign}{whole}.{frac:02d}"
    for spelling in spellings:
        assert numbers(spelling) == [value], spelling
        assert numeric_match(spelling, [gold]) == 1.0, (spelling, gold)
    if value:
        assert numeric_match(str(float(value * scale)), [gold]) == 0.0


def test_numeric_em_subem_f1_and_exact_mode_unchanged():
    golds = ["1200"]
    assert (numeric_match("1,200 apples", golds), numeric_substring_match("1,200 apples", golds),
            numeric_token_f1("1,200 apples", golds)) == (1.0, 1.0, pytest.approx(2 / 3))
    assert (numeric_match("1200 or 1300", golds),
            numeric_substring_match("1200 or 1300", golds)) == (0.0, 1.0)
    assert numeric_token_f1("1,200.0", golds) == 1.0
    response = "<think>t</think><search>q</search>" + INFO + "<answer>1,200.0</answer>"
    exact, numeric = score(response, golds), score(response, golds, answer_match="numeric")
    # exact mode reads "12000": not 1200, though 1200 is inside it
    assert (exact.acc, exact.em, exact.subem, exact.f1) == (0.0, 0.0, 1.0, 0.0)
    assert (numeric.acc, numeric.em, numeric.subem, numeric.f1) == (1.0, 1.0, 1.0, 1.0)
    assert score(response, golds, answer_match="exact") == exact
    with pytest.raises(ValueError, match="answer_match"):
        accuracy("12", ["12"], "fuzzy")
