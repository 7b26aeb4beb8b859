"""The arithmetic pack (studio/demo/calc): the calculator's world. Every answer is what the
calculator makes of the row's expression, every number of that expression is one the question
states, the split is fixed and disjoint, and the exemplars' results are the tool's own."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

from studio import demo
from studio.method.arithmetic import evaluate
from studio.method.exemplars import parse_jsonl, validate_exemplars
from studio.method.reward import normalize_answer, numbers, score
from studio.method.tags import CALCULATOR_TOOL, tool_calls
from studio.method.tools import CalculatorTool, all_specs
from tests.support.scripts import SCRIPTS, load_script

QA = [json.loads(line) for line in demo.CALC_QA.read_text(encoding="utf-8").splitlines()]
TRAIN = [q for q in QA if q["split"] == "train"]
HELDOUT = [q for q in QA if q["split"] == "heldout"]


def test_shape_split_and_answers():
    assert (len(QA), len(TRAIN), len(HELDOUT)) == (320, 260, 60)
    assert [q["id"] for q in QA] == [f"calc-q{i:03d}" for i in range(1, 321)]
    kinds = Counter(q["kind"] for q in QA)
    assert len(kinds) == 10 and set(kinds.values()) == {32}
    assert Counter(q["kind"] for q in HELDOUT) == {kind: 6 for kind in kinds}
    for q in QA:
        assert set(q) == {"id", "question", "golden_answers", "kind", "expression", "values",
                          "split"}, q["id"]
        assert q["question"].endswith("?")
        (gold,) = q["golden_answers"]
        assert numbers(gold) == [evaluate(q["expression"])], q["id"]
        stated = set(numbers(q["question"].replace("×", " ").replace("÷", " ")))
        assert set(numbers(q["expression"])) <= stated, q["id"]
        assert {Fraction(str(v)) for v in q["values"].values()} <= stated, q["id"]
    assert not {q["question"] for q in TRAIN} & {q["question"] for q in HELDOUT}


def test_numbers_are_too_large_to_do_in_ones_head():
    """Every answer has at least three digits, and most have four or more."""
    digits = [len(q["golden_answers"][0].replace(".", "").lstrip("-")) for q in QA]
    assert min(digits) >= 3 and sum(d >= 4 for d in digits) > 0.7 * len(QA)
    decimals = sum("." in q["golden_answers"][0] for q in QA)
    assert 0 < decimals < 0.3 * len(QA)


def test_files_are_what_the_script_writes(capsys):
    assert load_script(SCRIPTS / "calc_pack.py").main(["--check"]) == 0, capsys.readouterr().out


def test_exemplars_hold_the_calculators_own_results():
    exemplars = parse_jsonl(demo.CALC_EXEMPLARS.read_text(encoding="utf-8"))
    assert len(exemplars) == 3
    assert validate_exemplars(exemplars, tools=(CALCULATOR_TOOL,)) == []
    assert validate_exemplars(exemplars, tools=all_specs()) == []
    tool = CalculatorTool()
    asked = {normalize_answer(q["question"]) for q in QA}
    for ex in exemplars:
        (call,) = tool_calls(ex.solution, (CALCULATOR_TOOL,))
        (result,) = tool.execute([call.query])
        assert ex.solution[call.end:].startswith(tool.observation(result)), call.query
        assert result.value == ex.answer
        assert normalize_answer(ex.question) not in asked
        scored = score(ex.solution, [ex.answer], tools=(CALCULATOR_TOOL,), answer_match="numeric")
        assert (scored.acc, scored.format) == (1.0, 1.0), ex.question
