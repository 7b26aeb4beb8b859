"""The calculator's evaluator (studio.method.arithmetic): exact values, bounded work, and a
short, readable refusal of everything that is not arithmetic."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.method.arithmetic import (
    MAX_DIGITS,
    MAX_EXPRESSION_CHARS,
    CalculationError,
    calculate,
    evaluate,
    show,
)
from studio.method.tags import CALCULATOR_TOOL, parse
from studio.method.tools import TOOLS, CalculatorTool


@pytest.mark.parametrize("expression, value", [
    ("709 * 62", "43958"),
    ("(245 + 192) * 20", "8740"),
    ("8629 + 8402 - 620", "16411"),
    ("74 * 3.85", "284.9"),
    ("0.1 + 0.2", "0.3"),  # exact, not binary floating point
    ("7 / 2", "3.5"),
    ("1 / 3", "0.3333333333"),
    ("2 / 3", "0.6666666667"),
    ("22 / 7", "3.142857143"),
    ("1 / 8000", "0.000125"),
    ("1 / 7000", "0.0001428571429"),
    ("17 // 5", "3"),
    ("-17 // 5", "-4"),
    ("17 % 5", "2"),
    ("2 ** 10", "1024"),
    ("2 ** -2", "0.25"),
    ("(-3) ** 3", "-27"),
    ("-(4 - 10)", "6"),
    ("+5", "5"),
    ("-7 / 4", "-1.75"),
    ("10 / 4 * 2", "5"),
    ("709 × 62", "43958"),  # the sign a question writes
    ("9516 ÷ 13", "732"),
    ("5 − 8", "-3"),
    ("1,200 * 3", "3600"),  # thousands commas
    (" 12.50 * 4 ", "50"),
    ("1e3 + 1", "1001"),
    ("0 ** 0", "1"),
    ("55141 ÷ 67 =", "823"),  # as one presses = on a calculator
])
def test_values(expression, value):
    result = calculate(expression)
    assert (result.value, result.error) == (value, None)
    assert result.text == value


@pytest.mark.parametrize("expression, says", [
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("x + 1", "names cannot be used"),
    ("__import__('os').system('id')", "function calls cannot be used"),
    ("open('/etc/passwd').read()", "cannot be used"),
    ("(1).__class__", "attributes cannot be used"),
    ("'a' * 3", "only numbers"),
    ("[1, 2][0]", "cannot be used"),
    ("1 < 2", "comparisons cannot be used"),
    ("1 and 2", "and/or cannot be used"),
    ("1, 200", "commas cannot be used"),
    ("2 ^ 3", "^ (write ** for a power)"),
    ("~5", "~ cannot be used"),
    ("not 1", "not cannot be used"),
    ("lambda: 1", "lambdas cannot be used"),
    ("1 if 1 else 2", "cannot be used"),
    ("True + 1", "only numbers"),
    ("1j * 2", "only numbers"),
    ("print(6*7)", "function calls cannot be used"),
    ("5 / 0", "division by zero"),
    ("5 // 0", "division by zero"),
    ("5 % (3 - 3)", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("2 ** 0.5", "powers must be whole numbers"),
    ("9**9**9", "power larger than 100"),
    ("10 ** 99", "number too large"),
    ("99999999999 ** 5", "number too large"),
    ("1" * (MAX_DIGITS + 1), f"more than {MAX_DIGITS} digits"),
    ("1e400", "number too large"),
    ("1 +", "not an arithmetic expression"),
    ("import os", "not an arithmetic expression"),
    ("1; 2", "not an arithmetic expression"),
    ("a = 1", "without = and a result"),
    ("55141 ÷ 67 = 118.7491", "write the expression alone, without = and a result"),
    ("=", "empty expression"),
    ("1 == 1", "comparisons cannot be used"),
])
def test_refusals_say_why(expression, says):
    result = calculate(expression)
    assert result.value is None and says in result.error, result
    assert result.text == f"Error: {result.error}"
    with pytest.raises(CalculationError):
        evaluate(expression)


def test_bounds_are_checked_before_the_work():
    """Nothing here may take long or grow memory: each is refused (or computed) at once."""
    hostile = ["9**9**9", "(10**30) * (10**30)", "2**100 * 2**100 * 2**100",
               "(" * 100 + "1" + ")" * 100, "-" * 190 + "1", "1" + "*1" * 99,
               "9" * 30 + " ** 100", "1 / " + "3" * 29 + " / " + "7" * 29,
               "1" + " + 1" * (MAX_EXPRESSION_CHARS // 4 - 1)]
    for expression in hostile:
        start = time.perf_counter()
        result = calculate(expression)
        assert time.perf_counter() - start < 1.0, expression
        if result.value is not None:
            assert len(result.value.replace("-", "").split(".")[0]) <= MAX_DIGITS, expression


def test_long_input_is_refused_unread():
    assert calculate("1+" * MAX_EXPRESSION_CHARS + "1").error == (
        f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    assert calculate(None).error == "the input must be text"  # type: ignore[arg-type]


def test_deep_nesting_is_a_refusal_not_a_crash():
    result = calculate("(" * 99 + "1" + ")" * 99)
    assert result.value == "1" or result.error is not None


small = st.integers(min_value=-10**6, max_value=10**6)


@settings(max_examples=100, deadline=None)
@given(small, small, st.sampled_from(["+", "-", "*"]))
def test_agrees_with_integer_arithmetic(a, b, op):
    assert evaluate(f"{a} {op} ({b})") == Fraction(eval(f"{a} {op} ({b})"))  # noqa: S307


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_never_raises_on_any_text(text):
    result = calculate(text)
    assert (result.value is None) != (result.error is None)


@pytest.mark.parametrize("value, text", [
    (Fraction(5), "5"), (Fraction(-5, 2), "-2.5"), (Fraction(1, 3), "0.3333333333"),
    (Fraction(123456789, 1000), "123456.789"), (Fraction(10**12, 3), "333333333333"),
    (Fraction(1, 2 ** 20), "0.0000009536743164"),
])
def test_show(value, text):
    assert show(value) == text


def test_the_tool_in_the_registry():
    assert TOOLS["calculator"] is CalculatorTool
    assert CalculatorTool.spec == CALCULATOR_TOOL
    assert (CALCULATOR_TOOL.call_tag, CALCULATOR_TOOL.result_tag) == ("calc", "result")
    tool = CalculatorTool()
    good, bad = tool.execute(["709 * 62", "x"])
    assert tool.observation(good) == "\n\n<result>43958</result>\n\n"
    assert not tool.failed(good) and tool.failed(bad)
    assert tool.observation(bad).startswith("\n\n<result>Error: names cannot be used")
    # the result block is opaque to the parser: the model did not write it
    text = "<calc> 709 * 62 </calc>" + tool.observation(good) + "<answer> 43958 </answer>"
    kinds = [(s.kind, s.source) for s in parse(text, (CALCULATOR_TOOL,)) if s.text.strip()]
    assert kinds == [("calc", "model"), ("result", "environment"), ("answer", "model")]
