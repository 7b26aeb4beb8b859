"""Exemplar readers and validation messages (method.md, "The prompt": complete solution traces)."""

from __future__ import annotations

import json

import pytest

from studio.method.exemplars import (
    Exemplar,
    ExemplarFormatError,
    Finding,
    dump_jsonl,
    dump_text_blocks,
    has_errors,
    parse_jsonl,
    parse_text_blocks,
    read_exemplars,
    validate_exemplar,
    validate_exemplars,
)
from studio.method.tags import PYTHON_TOOL
from studio.method.tools import all_specs

INFO = "\n<information>Doc 1(Title: Jaws) Jaws was directed by Steven Spielberg.</information>\n"
GOOD_SOLUTION = (
    "<think>I need the director of Jaws.</think>\n<search>Jaws director</search>"
    + INFO
    + "<think>It is Steven Spielberg.</think>\n<answer>Steven Spielberg</answer>"
)
GOOD = Exemplar("Who directed Jaws?", GOOD_SOLUTION, "Steven Spielberg")


def test_good_exemplar_has_no_findings():
    assert validate_exemplar(GOOD, 1) == []
    assert validate_exemplars([GOOD, Exemplar("Who directed Jaws 2?", GOOD_SOLUTION)]) == []


# ---------------------------------------------------------------- JSONL


def test_parse_jsonl_reads_objects_and_skips_blank_lines():
    text = (
        "\ufeff"
        + json.dumps(GOOD.to_dict())
        + "\n\n"
        + json.dumps({"question": "Q", "solution": "S"})
        + "\n"
    )
    got = parse_jsonl(text)
    assert got == [GOOD, Exemplar("Q", "S")]
    assert parse_jsonl(dump_jsonl(got)) == got


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ('{"question": "Q", "solution": "S"}\n{not json}\n', 2, "not valid JSON"),
        ('["Q", "S"]\n', 1, "expected a JSON object"),
        ('\n\n{"solution": "S"}\n', 3, 'missing "question"'),
        ('{"question": "Q"}\n', 1, 'missing "solution"'),
        ('{"question": "  ", "solution": "S"}\n', 1, '"question" must be a non-empty string'),
        ('{"question": "Q", "solution": 3}\n', 1, '"solution" must be a non-empty string'),
        ('{"question": "Q", "solution": "S", "answer": ["a"]}\n', 1, '"answer" must be a string'),
    ],
)
def test_parse_jsonl_errors_name_the_line(text, line, fragment):
    with pytest.raises(ExemplarFormatError) as info:
        parse_jsonl(text)
    assert info.value.line == line
    assert f"line {line}:" in str(info.value)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_jsonl_empty_file():
    with pytest.raises(ExemplarFormatError, match="no exemplars"):
        parse_jsonl("\n  \n")


# ---------------------------------------------------------------- text blocks

BLOCKS = """===== Example 1 =====
Example Problem: Who directed Jaws?
Example Solution: <think>I need the director of Jaws.</think>
<search>Jaws director</search>
<information>Doc 1(Title: Jaws) Jaws was directed by Steven Spielberg.</information>
<answer>Steven Spielberg</answer>

===== Example 2 =====
Example Problem: What is the capital
of France?
Example Solution:
<think>x</think><search>capital of France</search>
<information>Paris.</information>
<answer>Paris</answer>
"""


def test_parse_text_blocks():
    got = parse_text_blocks(BLOCKS)
    assert [e.question for e in got] == ["Who directed Jaws?", "What is the capital\nof France?"]
    assert got[0].solution.startswith("<think>I need") and got[0].solution.endswith("</answer>")
    assert got[1].solution.startswith("<think>x</think>")
    assert parse_text_blocks(dump_text_blocks(got)) == got


@pytest.mark.parametrize(
    "text, fragment, example",
    [
        ("no headers here", "no '===== Example 1 =====' header", None),
        (
            "preamble\n===== Example 1 =====\nExample Problem: Q\nExample Solution: S\n",
            "line 1: text before",
            None,
        ),
        (
            "===== Example 1 =====\nExample Solution: S\n",
            "example 1 (line 1): missing the 'Example Problem:'",
            1,
        ),
        (
            "===== Example 1 =====\nExample Problem: Q\nExample Solution: S\n"
            "===== Example 2 =====\nExample Problem: Q2\n",
            "example 2 (line 4): missing the 'Example Solution:'",
            2,
        ),
        (
            "===== Example 1 =====\nExample Problem:\nExample Solution: S\n",
            "the problem is empty",
            1,
        ),
        (
            "===== Example 1 =====\nExample Problem: Q\nExample Solution:   \n",
            "the solution is empty",
            1,
        ),
        (
            "===== Example 1 =====\nExample Solution: S\nExample Problem: Q\n",
            "'Example Solution:' comes before 'Example Problem:'",
            1,
        ),
    ],
)
def test_parse_text_blocks_errors(text, fragment, example):
    with pytest.raises(ExemplarFormatError) as info:
        parse_text_blocks(text)
    assert fragment in str(info.value)
    assert info.value.example == example


@pytest.mark.parametrize(
    "name, kind",
    [
        ("set.jsonl", "jsonl"),
        ("SET.JSON", "jsonl"),
        ("jsonl", "jsonl"),
        ("x.txt", "text"),
        ("text", "text"),
    ],
)
def test_read_exemplars_dispatch(name, kind):
    text = dump_jsonl([GOOD]) if kind == "jsonl" else dump_text_blocks([GOOD])
    got = read_exemplars(text, name)
    assert [(e.question, e.solution) for e in got] == [(GOOD.question, GOOD.solution)]


def test_read_exemplars_auto_and_unknown():
    assert read_exemplars(dump_jsonl([GOOD]), "auto") == [GOOD]
    assert read_exemplars(BLOCKS, "auto")[0].question == "Who directed Jaws?"
    with pytest.raises(ExemplarFormatError, match="unknown exemplar format"):
        read_exemplars("x", "set.csv")


# ---------------------------------------------------------------- validation


def errors_of(solution: str, answer: str | None = None, question: str = "Q?") -> list[str]:
    findings = validate_exemplar(Exemplar(question, solution, answer), 4)
    assert all(f.exemplar == 4 for f in findings)
    return [f.message for f in findings if f.severity == "error"]


def warnings_of(solution: str) -> list[str]:
    return [
        f.message for f in validate_exemplar(Exemplar("Q?", solution), 1) if f.severity == "warning"
    ]


ERROR_CASES = [
    # (id, solution, gold, expected error fragment)
    (
        "unbalanced_think",
        "<think>a</think><think>b<search>q</search>" + INFO + "<answer>x</answer>",
        None,
        "unbalanced <think> tags: 2 opening, 1 closing",
    ),
    (
        "unclosed_answer",
        "<think>a</think><search>q</search>" + INFO + "<answer>x",
        None,
        "unbalanced <answer> tags: 1 opening, 0 closing",
    ),
    (
        "nested",
        "<think>a<search>q</search></think>" + INFO + "<answer>x</answer>",
        None,
        "<think> on line 1 is not closed before the next tag opens",
    ),
    (
        "unclosed_information",
        "<think>a</think><search>q</search>\n<information>r<answer>x</answer>",
        None,
        "<information> on line 2 is never closed",
    ),
    (
        "stray_information_close",
        "<think>a</think><search>q</search>" + INFO + "r</information><answer>x</answer>",
        None,
        "stray </information>",
    ),
    ("no_search", "<think>I know.</think><answer>x</answer>", None, "no <search> call"),
    (
        "search_without_information",
        "<think>a</think><search>q</search><think>b</think><answer>x</answer>",
        None,
        "the <search> on line 1 is not followed by an <information> block",
    ),
    (
        "empty_information",
        "<think>a</think>\n<search>q</search>\n<information>  </information><answer>x</answer>",
        None,
        "the <information> block after the <search> on line 2 is empty",
    ),
    (
        "empty_query",
        "<think>a</think><search> </search>" + INFO + "<answer>x</answer>",
        None,
        "has an empty query",
    ),
    ("no_answer", "<think>a</think><search>q</search>" + INFO, None, "no <answer> ... </answer>"),
    (
        "text_after_answer",
        "<think>a</think><search>q</search>" + INFO + "<answer>x</answer> done.",
        None,
        "the solution must end with <answer> ... </answer>",
    ),
    (
        "empty_answer",
        "<think>a</think><search>q</search>" + INFO + "<answer> </answer>",
        None,
        "the final <answer> is empty",
    ),
    (
        "wrong_gold",
        GOOD_SOLUTION,
        "George Lucas",
        "the final answer 'Steven Spielberg' does not match the gold answer 'George Lucas'",
    ),
    (
        "answer_only_in_information",
        "<think>a</think><search>q</search>\n<information><answer>x</answer></information>",
        None,
        "no <answer> ... </answer>",
    ),
]


@pytest.mark.parametrize(
    "solution, gold, fragment", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_validation_errors(solution, gold, fragment):
    errs = errors_of(solution, gold)
    assert any(fragment in e for e in errs), errs


def test_gold_matches_after_normalisation():
    assert errors_of(GOOD_SOLUTION, "steven spielberg.") == []


def test_empty_question_is_an_error():
    assert any("question is empty" in e for e in errors_of(GOOD_SOLUTION, question="  "))


@pytest.mark.parametrize(
    "solution, fragment",
    [
        ("<search>q</search>" + INFO + "<answer>x</answer>", "no <think> block"),
        (
            "Let me see. <think>a</think><search>q</search>" + INFO + "<answer>x</answer>",
            "text outside any tag",
        ),
        (
            "<think>a</think><search>q</search>" + INFO + "<answer>y</answer><answer>x</answer>",
            "2 <answer> blocks",
        ),
        ("<THINK>a</THINK><search>q</search>" + INFO + "<answer>x</answer>", "not in lower case"),
        (
            "<think>" + "a" * 5000 + "</think><search>q</search>" + INFO + "<answer>x</answer>",
            "very long",
        ),
    ],
)
def test_validation_warnings(solution, fragment):
    assert any(fragment in w for w in warnings_of(solution))
    assert errors_of(solution) == []  # warnings never block


def test_duplicate_question_warning_and_numbering():
    bad = Exemplar("Q?", "<think>a</think><answer>x</answer>")
    findings = validate_exemplars([GOOD, bad, Exemplar("who directed  JAWS?", GOOD_SOLUTION)])
    assert {f.exemplar for f in findings if f.severity == "error"} == {2}
    assert Finding(3, "warning", "same question as exemplar 1") in findings
    assert str(Finding(3, "warning", "x")) == "Exemplar 3 (warning): x"
    assert has_errors(findings)
    assert not has_errors([f for f in findings if f.severity == "warning"])


def test_code_tool_exemplar():
    solution = (
        "<think>compute</think><code>print(6*7)</code>\n<output>42</output>\n<answer>42</answer>"
    )
    assert validate_exemplar(Exemplar("6*7?", solution, "42"), 1, tools=(PYTHON_TOOL,)) == []
    errs = [
        f.message for f in validate_exemplar(Exemplar("6*7?", solution), 1) if f.severity == "error"
    ]
    assert any("no <search> call" in e for e in errs)


def test_validated_with_every_registered_tool():
    """The studio checks stored sets against every registered tool's tags: a code exemplar and
    a search exemplar both pass, one without any call names every tool, and a search
    exemplar's findings are the same as with the search tool alone."""
    code = Exemplar("6*7?", "<think>compute</think><code>print(6*7)</code>\n<output>42</output>"
                            "\n<answer>42</answer>", "42")
    every = all_specs()
    assert [t.call_tag for t in every][:2] == ["search", "code"]
    assert validate_exemplars([GOOD, code], tools=every) == []
    none = Exemplar("Q?", "<think>I know.</think><answer>x</answer>")
    errs = [f.message for f in validate_exemplar(none, 1, tools=every) if f.severity == "error"]
    tags = " or ".join(f"<{t.call_tag}>" for t in every)  # tests may register more tools
    assert errs == [f"no tool call ({tags}): an exemplar must show at least one, followed by "
                    "the block the tool returned"]
    assert tags.startswith("<search> or <code>")
    stray = Exemplar("Q?", "<think>a</think><search>q</search>" + INFO + "<Think>b</Think>"
                           "<answer>x</answer> trailing")
    for exemplar in (GOOD, stray):
        assert validate_exemplar(exemplar, 1, tools=every) == validate_exemplar(exemplar, 1)
