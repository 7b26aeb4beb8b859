"""Exemplar drafts written from a team's own QA pairs, for a team that cannot write a trace
in the tool's tags by hand.

A draft is a worked trace whose tool results are what the tool itself returned: the caller
runs the tool and hands its observation in; nothing here writes a result. Where a question
does not say what to compute, the draft keeps a marked gap (`GAP`) for the user to fill,
and the exemplar checks flag it until then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .exemplars import Exemplar
from .tags import ToolSpec

GAP = "[[write this part]]"
"""Where a draft leaves the user to write what the question does not say."""

_OPERATORS = {"×": "*", "x": "*", "÷": "/", "−": "-", "^": "**"}
_BARE = re.compile(r"^\s*(?:what\s+is|compute|calculate|evaluate)?\s*"
                   r"(?P<expr>[\d\s.,+\-*/()×÷−^x]+?)\s*[?=.]?\s*$", re.IGNORECASE)
_HAS_OPERATION = re.compile(r"[\d)]\s*[+\-*/×÷−^x]\s*[\d(]")


@dataclass(frozen=True)
class ToolStep:
    """One call of a draft and the observation the tool returned for it (its result block,
    as the environment inserts it)."""

    call: str
    observation: str


def expression_of(question: str, meta: Mapping[str, object]) -> str | None:
    """The arithmetic a question asks for: a QA row's `expression` field, or the question
    itself when it is a bare expression ("What is (318 + 947) × 26?"); None otherwise."""
    given = meta.get("expression")
    if isinstance(given, str) and given.strip():
        return given.strip()
    match = _BARE.match(question)
    if not match or not _HAS_OPERATION.search(match["expr"]):
        return None
    expression = match["expr"].replace(",", "")
    for written, operator in _OPERATORS.items():
        expression = expression.replace(written, operator)
    return " ".join(expression.split())


def _trace(opening: str, tool: ToolSpec, steps: Sequence[ToolStep], closing: str,
           answer: str) -> str:
    parts = [f"<think> {opening} </think>\n"]
    for step in steps:
        parts.append(f"<{tool.call_tag}> {step.call} </{tool.call_tag}>{step.observation}")
    parts.append(f"<think> {closing} </think>\n<answer> {answer} </answer>")
    return "".join(parts)


def search_draft(question: str, answer: str, tool: ToolSpec, steps: Sequence[ToolStep],
                 answer_title: str, answer_doc: int) -> Exemplar:
    """A search trace: the searches made and their real results, then a think line naming the
    passage (of the last search) that holds the answer, then the gold answer."""
    opening = ("I need to find this in the documents. I will search for the question."
               if len(steps) == 1 else
               "I need two facts from the documents. I will search for the question first.")
    closing = f"Doc {answer_doc} ({answer_title}) holds the answer."
    return Exemplar(question, _trace(opening, tool, steps, closing, answer), answer)


def computation_draft(question: str, answer: str, tool: ToolSpec,
                      step: ToolStep | None) -> Exemplar:
    """A calculator or python trace: the call and the tool's own output, or, where the question
    does not say what to compute, the call left as a gap (and no result: none was run)."""
    if step is None:
        solution = (f"<think> I need to work this out with the tool. </think>\n"
                    f"<{tool.call_tag}> {GAP} </{tool.call_tag}>\n\n"
                    f"<answer> {answer} </answer>")
        return Exemplar(question, solution, answer)
    return Exemplar(question, _trace("I need to compute this. I will use the tool.", tool,
                                     [step], "The tool's output is the answer.", answer), answer)
