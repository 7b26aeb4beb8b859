"""The failure label of an evaluated question: each label of each tool, their precedence, the
reward's matching in both the answer and the results, and the calls a response made."""

from __future__ import annotations

import pytest

from studio.method.arithmetic import calculate
from studio.method.failures import (
    CORRECT,
    FORMAT_MISS,
    ToolResult,
    failure_label,
    label_set,
    label_split,
    retrieved_texts,
    tool_results,
)
from studio.method.reward import score
from studio.method.tags import (
    CALCULATOR_TOOL,
    CORRECTIVE_MESSAGE,
    PYTHON_TOOL,
    SEARCH_TOOL,
    ToolSpec,
    corrective_message,
    format_information,
    result_block,
)
from studio.method.tools import CalculatorTool, ToolMisses, register_tool
from tests.support.reverse_tool import REVERSE

NO_SEARCH, RETRIEVAL_MISS, REASONING_MISS = "no_search", "retrieval_miss", "reasoning_miss"

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
    assert list(label_split([])) == [label.key for label in label_set()]
    assert label_split(["copied_wrong", "no_call"], CALC) == {
        CORRECT: 0, FORMAT_MISS: 0, "no_call": 1, "call_failed": 0, "wrong_expression": 0,
        "copied_wrong": 1}
    with pytest.raises(KeyError):
        label_split(["wrong_expression"])  # no label of a search evaluation


# The calculator, its misses as a trial's looked: "What is 3458 + 6582 - 922?" (9118)
CALC = (CALCULATOR_TOOL,)
SUM = ["9118"]


def calculated(*expressions: str) -> tuple[str, list[bool]]:
    """Calculator turns with the blocks the real tool puts after them, and whether each call
    failed, as the engine records it."""
    tool, text, failed = CalculatorTool(), "", []
    for expression in expressions:
        calculation = calculate(expression)
        text += ("<think>I need to evaluate an arithmetic expression using a calculator"
                 f"</think><calc> {expression} </calc>" + tool.observation(calculation))
        failed.append(tool.failed(calculation))
    return text, failed


def calc_label(expressions: tuple[str, ...], answer: str, golds=SUM,
               answer_match="numeric") -> str:
    turns, failed = calculated(*expressions)
    return failure_label(turns + answer, golds, CALC, answer_match, failed)


@pytest.mark.parametrize(("expressions", "answer", "label"), [
    (("3458 + 6582 - 922",), "<answer>9,118</answer>", CORRECT),
    (("3458 + 6582 - 922",), "<think>so the total is</think>", FORMAT_MISS),
    ((), "<think>I know it.</think><answer>10040</answer>", "no_call"),
    (("3458 plus 6582 minus 922", "sum(3458, 6582)"), "<answer>10040</answer>",
     "call_failed"),
    # an incomplete expression: the sum of the first two, answered as the calculator said
    (("3458 + 6582",), "<answer>10040</answer>", "wrong_expression"),
    # a failed call, then a wrong one that worked: the working one decides
    (("3458 plus 6582", "3458 + 6582"), "<answer>10040</answer>", "wrong_expression"),
    # the right result, and an answer copied from the question
    (("3458 + 6582 - 922",), "<answer>922</answer>", "copied_wrong"),
    (("3458 + 6582", "3458 + 6582 - 922"), "<answer>10040</answer>", "copied_wrong"),
])
def test_each_calculator_label(expressions, answer, label):
    assert calc_label(expressions, answer) == label


def test_a_calculator_result_holds_the_answer_by_the_evaluation_s_matching():
    """numeric: 0.5 is 1/2, so the result was right and the answer copied wrong; exact: the
    result is no gold answer. A result holds the answer when it is the answer (as acc
    matches it), not when it contains it."""
    assert calc_label(("1 / 2",), "<answer>2</answer>", ["1/2"]) == "copied_wrong"
    assert calc_label(("1 / 2",), "<answer>2</answer>", ["1/2"], "exact") == "wrong_expression"
    for match in ("numeric", "exact"):
        assert calc_label(("9118 * 10",), "<answer>91</answer>", SUM, match) == \
            "wrong_expression"


def test_the_calls_of_a_response_with_their_results():
    turns, failed = calculated("3458 plus 6582", "3458 + 6582 - 922")
    calls = tool_results(turns + "<answer>9118</answer>", CALC, failed)
    assert calls == [
        ToolResult("calculator", "3458 plus 6582", "Error: not an arithmetic expression; "
                   "write one such as 12 * (3 + 4)", True),
        ToolResult("calculator", "3458 + 6582 - 922", "9118", False)]
    # a call in the last allowed turn never ran; a corrective message answers no call
    unanswered = ("<think>hmm</think>" + corrective_message(CALCULATOR_TOOL)
                  + turns + "<calc>9118 - 1</calc>")
    assert [c.result for c in tool_results(unanswered, CALC, failed)] == [
        calls[0].result, "9118", None]
    with pytest.raises(ValueError, match="2 calls ran, but 1 say whether they failed"):
        tool_results(turns, CALC, [True])
    # without the engine's word, no call failed (a search never does)
    assert [c.failed for c in tool_results(turns, CALC)] == [False, False]


PYTHON = (PYTHON_TOOL,)


def ran(code: str, output: str) -> str:
    """A python turn and the block the environment put after it."""
    return f"<code>{code}</code>" + result_block(output, PYTHON_TOOL)


@pytest.mark.parametrize(("response", "failed", "label"), [
    ("<answer>41</answer>", [], "no_call"),
    (ran("print(6 * )", "SyntaxError: invalid syntax") + "<answer>41</answer>", [True],
     "call_failed"),
    (ran("print(6 + 7)", "13") + "<answer>13</answer>", [False], "wrong_program"),
    # a program's output holds the answer as SubEM finds it: among other words
    (ran("print('6 * 7 =', 6 * 7)", "6 * 7 = 42") + "<answer>6</answer>", [False],
     "copied_wrong"),
])
def test_each_python_label(response, failed, label):
    assert failure_label(response, ["42"], PYTHON, "numeric", failed) == label


def test_several_tools_share_the_generic_labels_over_all_their_calls():
    both = (SEARCH_TOOL, PYTHON_TOOL)
    labels = label_set(both)
    assert [label.key for label in labels] == [
        CORRECT, FORMAT_MISS, "no_call", "call_failed", "result_miss", "reasoning_miss"]
    assert labels[2].meaning == ("the model answered without searching or running Python, "
                                 "and the answer is wrong")
    assert failure_label("<answer>Gull</answer>", GOLD, both) == "no_call"
    failed_program = ran("print(x)", "NameError: name 'x' is not defined")
    assert failure_label(failed_program + "<answer>Gull</answer>", GOLD, both,
                         failed=[True]) == "call_failed"
    # a search that came back: not every call failed
    assert failure_label(failed_program + LACKS + "<answer>Gull</answer>", GOLD, both,
                         failed=[True, False]) == "result_miss"
    assert failure_label(failed_program + HOLDS + "<answer>Gull</answer>", GOLD, both,
                         failed=[True, False]) == "reasoning_miss"


def test_each_tool_names_its_labels_where_it_registers():
    keys = {name: [label.key for label in label_set(specs)] for name, specs in
            {"search": (SEARCH_TOOL,), "calculator": CALC, "python": PYTHON,
             "reverse": (REVERSE,)}.items()}
    assert keys == {
        "search": [CORRECT, FORMAT_MISS, NO_SEARCH, RETRIEVAL_MISS, REASONING_MISS],
        "calculator": [CORRECT, FORMAT_MISS, "no_call", "call_failed", "wrong_expression",
                       "copied_wrong"],
        "python": [CORRECT, FORMAT_MISS, "no_call", "call_failed", "wrong_program",
                   "copied_wrong"],
        # a tool that names none of its own gets the generic ones, in its words
        "reverse": [CORRECT, FORMAT_MISS, "no_call", "result_miss", "reasoning_miss"]}
    calculator = {label.key: label for label in label_set(CALC)}
    assert "without calling the calculator" in calculator["no_call"].meaning
    assert calculator["copied_wrong"].title == "copied wrong"
    assert "nothing in the reversed text" in label_set((REVERSE,))[3].meaning

    class Unsure(CalculatorTool):  # its calls can fail, and it names no label for that
        spec = ToolSpec("unsure", "unsure", "unsured")
        misses = ToolMisses(calculator["no_call"], None, calculator["wrong_expression"],
                            calculator["copied_wrong"])

    with pytest.raises(ValueError, match="a 'call failed' label exactly when its calls can"):
        register_tool(Unsure)
