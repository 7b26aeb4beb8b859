"""What the drafts read from a question (studio/method/drafting.py)."""

from __future__ import annotations

import pytest

from studio.method.drafting import expression_of


@pytest.mark.parametrize(("question", "meta", "expression"), [
    ("What is (318 + 947) × 26?", {}, "(318 + 947) * 26"),
    ("What is 1,234 - 56?", {}, "1234 - 56"),
    ("Compute 2^10.", {}, "2**10"),
    ("What is 50985 ÷ 55?", {}, "50985 / 55"),
    ("How many sacks does Hugo fill?", {"expression": " 14595 / 15 "}, "14595 / 15"),
    ("How many towns are there on Myrrow?", {}, None),
    ("What is 12?", {}, None),
    ("What is 1999 to 2004?", {}, None),
])
def test_the_arithmetic_a_question_asks_for(question, meta, expression):
    assert expression_of(question, meta) == expression
