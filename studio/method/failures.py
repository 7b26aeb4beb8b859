"""Why an evaluated question went right or wrong: one label per question.

An evaluation's EM says how often the model was right; the labels say where the rest went
wrong, in the words of the evaluation's tools. They are checked in this order, and the first
that applies is the question's label:

1. ``correct``: the answer is right by the reward's own rule (acc: exact match after
   normalisation, or every one of several gold answers in it; numeric equivalence with
   ``answer_match="numeric"``). A right answer is never a failure, whatever the model
   called, so the share of ``correct`` is the evaluation's acc.
2. ``format_miss``: no answer (no closed ``<answer>``, or a blank one).
3. no call: an answer, but no call of the tool ran (search: ``no_search``).
4. call failed: every call that ran failed (a program that raised, an expression the
   calculator refused); only for a tool whose calls can fail.
5. result miss: no result of a call that worked holds a gold answer (search:
   ``retrieval_miss``, the calculator: ``wrong_expression``, python: ``wrong_program``).
6. answer miss: a result held a gold answer, and the answer is still wrong (search:
   ``reasoning_miss``, the calculator and python: ``copied_wrong``).

Each tool names its own labels 3-6 where it registers (`tools.Tool.failure_labels`); an
evaluation with several tools uses the generic ones (``no_call``, ``call_failed``,
``result_miss``, ``reasoning_miss``), over the calls of all its tools.

A result "holds" a gold answer as its tool says (`tools.Tool.holds_answer`): a passage or a
program's output when SubEM would find the answer in it, a calculator's value when acc
would count it right as the answer, each with the evaluation's answer matching (the
reward's normalisation: lowercase, no punctuation, no a/an/the, single spaces; or numbers
compared by value). Which calls failed is the engine's record, not the text's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from .reward import AnswerMatch, accuracy, numeric_substring_match, substring_match
from .tags import DEFAULT_TOOLS, SEARCH_TOOL, TEXT, ToolSpec, final_answer, parse
from .tools import TOOLS, FailureLabel, ToolMisses, results_words, using_words

CORRECT = "correct"
FORMAT_MISS = "format_miss"

ANSWER_LABELS: tuple[FailureLabel, ...] = (
    FailureLabel(CORRECT, "correct", "the answer matches a gold answer"),
    FailureLabel(FORMAT_MISS, "format miss", "the model gave no answer between <answer> tags"))
"""The labels every evaluation checks first, whatever its tools."""


@dataclass(frozen=True)
class ToolResult:
    """One closed call the model wrote, as an evaluation record keeps it: the tool, its input
    (stripped), the body of the result block the environment put right after it (None: it
    never ran, the turns ran out) and whether that run failed."""

    tool: str
    input: str
    result: str | None
    failed: bool = False


def tool_results(response: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
                 failed: Sequence[bool] | None = None) -> list[ToolResult]:
    """Every closed call in the response, in order, each with the result block right after
    it (blank text between skipped; a block after anything else, the corrective message,
    answers no call).

    ``failed``: for the calls that ran, in order, whether each failed, as the engine recorded
    it (`rollouts.Segment.failed`: a result's text does not always say); None: none did.
    """
    by_call = {t.call_tag: t for t in tools}
    found: list[ToolResult] = []
    waiting: ToolSpec | None = None  # the tool of the call just read, until its result comes
    for seg in parse(response, tools):
        if seg.kind == TEXT and not seg.text.strip():
            continue
        if waiting is not None and seg.kind == waiting.result_tag:
            found[-1] = replace(found[-1], result=seg.body)
        waiting = by_call.get(seg.kind) if seg.closed else None
        if waiting is not None:
            found.append(ToolResult(waiting.name, seg.body.strip(), None))
    if failed is None:
        return found
    ran = [i for i, call in enumerate(found) if call.result is not None]
    if len(failed) != len(ran):
        raise ValueError(f"{len(ran)} calls ran, but {len(failed)} say whether they failed")
    for i, flag in zip(ran, failed, strict=True):
        found[i] = replace(found[i], failed=bool(flag))
    return found


def retrieved_texts(response: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[str]:
    """The bodies of the result blocks that answer a closed ``<search>``, in order."""
    return [call.result for call in tool_results(response, tools)
            if call.tool == SEARCH_TOOL.name and call.result is not None]


def tool_misses(tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> ToolMisses:
    """Labels 3-6 of an evaluation with `tools` (the module docstring): its one tool's own,
    else the generic ones in the words of all of them."""
    registered = [TOOLS[t.name] for t in tools]
    if len(registered) == 1:
        return registered[0].failure_labels()
    names = [t.name for t in tools]
    return ToolMisses.generic(using_words(names), results_words(names),
                              any(tool.can_fail for tool in registered))


def label_set(tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> tuple[FailureLabel, ...]:
    """Every label an evaluation with `tools` gives, in the order they are checked."""
    misses = tool_misses(tools)
    return (*ANSWER_LABELS, misses.no_call, *filter(None, [misses.call_failed]),
            misses.result_miss, misses.answer_miss)


def holds_answer(call: ToolResult, golds: Sequence[str],
                 answer_match: AnswerMatch = "exact") -> bool:
    """Whether a call's result holds a gold answer, as its tool says (module docstring)."""
    if TOOLS[call.tool].holds_answer == "is":
        return bool(accuracy(call.result, golds, answer_match))
    found = numeric_substring_match if answer_match == "numeric" else substring_match
    return bool(found(call.result, golds))


def failure_label(response: str, golden_answers: str | Iterable[str],
                  tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
                  answer_match: AnswerMatch = "exact",
                  failed: Sequence[bool] | None = None) -> str:
    """The label of one evaluated response (a key of `label_set(tools)`; precedence above).

    ``response`` as the reward reads it: the model's turns with the environment's blocks,
    any pre-filled reply prefix put back in front; ``failed`` as `tool_results` takes it.
    """
    golds = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
    answer = final_answer(response, tools)
    if accuracy(answer, golds, answer_match):
        return CORRECT
    if answer is None or not answer.strip():
        return FORMAT_MISS
    misses = tool_misses(tools)
    ran = [call for call in tool_results(response, tools, failed) if call.result is not None]
    if not ran:
        return misses.no_call.key
    working = [call for call in ran if not call.failed]
    if not working and misses.call_failed is not None:
        return misses.call_failed.key
    if not any(holds_answer(call, golds, answer_match) for call in working):
        return misses.result_miss.key
    return misses.answer_miss.key


def label_split(labels: Iterable[str], tools: Sequence[ToolSpec] = DEFAULT_TOOLS
                ) -> dict[str, int]:
    """How many questions got each label of `label_set(tools)`, every one present (0 when
    none), in that order."""
    counts = {label.key: 0 for label in label_set(tools)}
    for label in labels:
        counts[label] += 1
    return counts
