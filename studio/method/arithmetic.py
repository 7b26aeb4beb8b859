"""The calculator tool's evaluator: an arithmetic expression to its exact value, or a short
error the model can read.

Python's own parser reads the expression (`ast.parse`, which runs nothing); this module then
walks the tree and computes with exact fractions, allowing only what a pocket calculator
has: numbers, ``+ - * / // % **``, parentheses and unary signs. Names, calls, attributes,
strings, comparisons and everything else are refused by name, never evaluated. Everything is
bounded before it is computed (the text's length, a number's digits, a power's size), so no
expression makes it do unbounded work: ``9**9**9`` is refused at once.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass
from fractions import Fraction

MAX_EXPRESSION_CHARS = 200
"""Longer input is refused unread: a calculator's expression is a line, not a program."""
MAX_DIGITS = 30
"""Digits a number may have, written or computed (integer part and denominator alike)."""
MAX_EXPONENT = 100
"""The largest power ``**`` takes (its size is also bounded by `MAX_DIGITS`)."""
DECIMALS = 10
"""Significant digits a value that is no short decimal is rounded to when shown."""

SPELLINGS = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-"})
"""What a question writes that Python does not: multiplication and division signs and
typographic minus signs, read as ``*``, ``/`` and ``-``."""
_THOUSANDS = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d,])")
_DIGIT_RUN = re.compile(r"\d+")

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: None}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_REFUSED = {ast.Name: "names", ast.Call: "function calls", ast.Attribute: "attributes",
            ast.Subscript: "indexing", ast.Compare: "comparisons", ast.BoolOp: "and/or",
            ast.Tuple: "commas", ast.List: "lists", ast.Lambda: "lambdas",
            ast.BitXor: "^ (write ** for a power)", ast.BitAnd: "&", ast.BitOr: "|",
            ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@", ast.Invert: "~",
            ast.Not: "not"}


class CalculationError(ValueError):
    """An expression the calculator will not or cannot compute; the message is what the model
    reads after "Error: "."""


@dataclass(frozen=True)
class Calculation:
    """One expression's outcome: its value shown as text, or the error."""

    expression: str
    value: str | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        """What the result block holds."""
        return self.value if self.error is None else f"Error: {self.error}"


def calculate(expression: str) -> Calculation:
    """`evaluate` as a result that never raises: the value shown, or the error's message."""
    try:
        return Calculation(expression, value=show(evaluate(expression)))
    except CalculationError as error:
        return Calculation(expression, error=str(error))


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression; CalculationError says what is wrong."""
    if not isinstance(expression, str):
        raise CalculationError("the input must be text")
    text = expression.strip()
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = _THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text.translate(SPELLINGS))
    text = text.removesuffix("=").rstrip()  # "55141 / 67 =", as one presses = on a calculator
    if not text:
        raise CalculationError("empty expression; write one such as 12 * (3 + 4)")
    if "=" in text.replace("==", ""):
        raise CalculationError("write the expression alone, without = and a result, such as "
                               "55141 / 67")
    if any(len(run) > MAX_DIGITS for run in _DIGIT_RUN.findall(text)):
        raise CalculationError(f"a number has more than {MAX_DIGITS} digits")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalculationError("not an arithmetic expression; write one such as "
                               "12 * (3 + 4)") from None
    try:
        return _value(tree.body)
    except RecursionError:
        raise CalculationError("expression nested too deeply") from None


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant):
        return _literal(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            return _bounded(_power(left, right))
        if right == 0 and isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            raise CalculationError("division by zero")
        return _bounded(Fraction(_BINARY[type(node.op)](left, right)))
    what = _REFUSED.get(type(getattr(node, "op", node))) or _REFUSED.get(type(node))
    raise CalculationError(f"{what or 'that'} cannot be used; only numbers, + - * / // % ** "
                           "and parentheses")


def _literal(value: object) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculationError("only numbers, + - * / // % ** and parentheses")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("number too large")
    # repr gives the shortest text of a float: 0.1 is read as 1/10, not its binary neighbour.
    return _bounded(Fraction(repr(value)) if isinstance(value, float) else Fraction(value))


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    """``base ** exponent`` for a whole exponent, refused before computing when too large."""
    if exponent.denominator != 1:
        raise CalculationError("powers must be whole numbers (no roots)")
    n = exponent.numerator
    if abs(n) > MAX_EXPONENT:
        raise CalculationError(f"power larger than {MAX_EXPONENT}")
    if base == 0:
        if n < 0:
            raise CalculationError("division by zero")
        return Fraction(0 if n else 1)
    size = max(_digits(base.numerator), _digits(base.denominator))
    if (size - 1) * abs(n) > MAX_DIGITS:
        raise CalculationError("number too large")
    return base ** n


def _digits(n: int) -> int:
    return len(str(abs(n)))


def _bounded(value: Fraction) -> Fraction:
    if _digits(value.numerator // value.denominator) > MAX_DIGITS:
        raise CalculationError("number too large")
    if _digits(value.denominator) > MAX_DIGITS:
        raise CalculationError("number too small to show")
    return value


def show(value: Fraction) -> str:
    """A value as a calculator shows it: an integer as such (``43958``), a short decimal
    exactly (``12.75``), anything else to `DECIMALS` significant digits (``0.3333333333``)."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    value = abs(value)
    places = _terminating_places(value.denominator)
    if places is None or places > DECIMALS:
        magnitude = value.numerator // value.denominator
        places = max(DECIMALS - (_digits(magnitude) if magnitude else 0), 0)
        if not magnitude:  # 0.000123...: keep significant digits after the zeros
            places = DECIMALS + _leading_zeros(value)
    scaled = round(value * 10 ** places)
    whole, frac = divmod(scaled, 10 ** places)
    digits = str(frac).rjust(places, "0").rstrip("0") if places else ""
    return sign + (f"{whole}.{digits}" if digits else str(whole))


def _terminating_places(denominator: int) -> int | None:
    """Decimal places of 1/denominator when it ends (only 2s and 5s in it), else None."""
    twos = fives = 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    return max(twos, fives) if denominator == 1 else None


def _leading_zeros(value: Fraction) -> int:
    """Zeros right after the decimal point of a value below 1 (0.00123 -> 2)."""
    zeros = 0
    while value * 10 ** (zeros + 1) < 1:
        zeros += 1
    return zeros
