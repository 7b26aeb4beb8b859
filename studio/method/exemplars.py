"""Exemplar sets: read them, write them back, and check each one before it goes in a prompt.

method.md, "The prompt": each exemplar is "an example question followed by a
complete solution trace (think / search / information / answer)".  A broken
exemplar teaches the model a broken protocol, so :func:`validate_exemplars`
reports every problem with the exemplar's number (from 1) and what to fix.

Readers take text, not paths.  Malformed input raises
:class:`ExemplarFormatError` (a ``ValueError``) naming the line or example.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .json_values import UnstorableJson, decode_storable
from .reward import normalize_answer
from .tags import ANSWER, DEFAULT_TOOLS, TEXT, THINK, ToolSpec, count_tags, parse


@dataclass(frozen=True)
class Exemplar:
    """One worked example: a question, its tagged solution trace, and optionally the gold answer."""

    question: str
    solution: str
    answer: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"question": self.question, "solution": self.solution}
        if self.answer is not None:
            out["answer"] = self.answer
        return out

    @classmethod
    def coerce(cls, value: Exemplar | Mapping[str, object]) -> Exemplar:
        """Accept an Exemplar or a ``{"question", "solution", "answer"?}`` mapping."""
        if isinstance(value, Exemplar):
            return value
        if isinstance(value, Mapping):
            answer = value.get("answer")
            return cls(
                str(value["question"]),
                str(value["solution"]),
                None if answer is None else str(answer),
            )
        raise TypeError(f"expected an Exemplar or a mapping, got {type(value).__name__}")


class ExemplarFormatError(ValueError):
    """The exemplar file cannot be read; ``line`` or ``example`` (from 1) says where."""

    def __init__(self, message: str, *, line: int | None = None, example: int | None = None):
        super().__init__(message)
        self.line = line
        self.example = example


# ---------------------------------------------------------------- JSONL


def parse_jsonl(text: str) -> list[Exemplar]:
    """Read one ``{"question", "solution", "answer"?}`` object per non-blank line."""
    out: list[Exemplar] = []
    for lineno, line in enumerate(text.lstrip("\ufeff").splitlines(), 1):
        if not line.strip():
            continue
        where = f"line {lineno}"
        try:
            obj = decode_storable(line)
        except UnstorableJson as exc:
            raise ExemplarFormatError(f"{where}: {exc}", line=lineno) from None
        except RecursionError:
            raise ExemplarFormatError(
                f"{where}: nested too deeply (JSON more than about a thousand levels deep); "
                'each line must be one object like {"question": "...", "solution": "..."}',
                line=lineno,
            ) from None
        except json.JSONDecodeError as exc:
            raise ExemplarFormatError(
                f"{where}: not valid JSON ({exc.msg}); each line must be one object like "
                '{"question": "...", "solution": "..."}',
                line=lineno,
            ) from None
        if not isinstance(obj, dict):
            raise ExemplarFormatError(
                f'{where}: expected a JSON object with "question" and "solution", got '
                f"{type(obj).__name__}",
                line=lineno,
            )
        for key in ("question", "solution"):
            if key not in obj:
                raise ExemplarFormatError(
                    f'{where}: missing "{key}"; add it as a string', line=lineno
                )
            if not isinstance(obj[key], str) or not obj[key].strip():
                raise ExemplarFormatError(
                    f'{where}: "{key}" must be a non-empty string', line=lineno
                )
        answer = obj.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ExemplarFormatError(
                f'{where}: "answer" must be a string (the gold answer) or be left out, got '
                f"{type(answer).__name__}",
                line=lineno,
            )
        out.append(Exemplar(obj["question"].strip(), obj["solution"].strip(), answer))
    if not out:
        raise ExemplarFormatError("the file holds no exemplars; add one JSON object per line")
    return out


def dump_jsonl(exemplars: Iterable[Exemplar]) -> str:
    """The JSONL text :func:`parse_jsonl` reads back to the same exemplars."""
    return "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in exemplars)


# ---------------------------------------------------------------- text blocks

EXAMPLE_HEADER = re.compile(
    r"^[ \t]*=+[ \t]*Example[ \t]+(\d+)[ \t]*=+[ \t]*$", re.IGNORECASE | re.MULTILINE
)
"""The ``===== Example N =====`` line that starts each exemplar of the text block format."""
_PROBLEM = re.compile(r"^[ \t]*Example Problem:", re.IGNORECASE | re.MULTILINE)
_SOLUTION = re.compile(r"^[ \t]*Example Solution:", re.IGNORECASE | re.MULTILINE)


def format_text_block(exemplar: Exemplar, number: int) -> str:
    """One exemplar in the plain-text block format (also the inline prompt's default)."""
    return (
        f"===== Example {number} =====\n"
        f"Example Problem: {exemplar.question}\n"
        f"Example Solution: {exemplar.solution}"
    )


def dump_text_blocks(exemplars: Iterable[Exemplar]) -> str:
    """The block-format text :func:`parse_text_blocks` reads back (gold answers are not kept)."""
    return "\n\n".join(format_text_block(e, i) for i, e in enumerate(exemplars, 1)) + "\n"


def parse_text_blocks(text: str) -> list[Exemplar]:
    """Read ``===== Example N =====`` / ``Example Problem:`` / ``Example Solution:`` blocks."""
    text = text.lstrip("\ufeff")
    headers = list(EXAMPLE_HEADER.finditer(text))
    if not headers:
        raise ExemplarFormatError(
            "no '===== Example 1 =====' header found; start each exemplar with such a line, "
            "then 'Example Problem:' and 'Example Solution:'"
        )
    preamble = text[: headers[0].start()]
    if preamble.strip():
        first = len(preamble) - len(preamble.lstrip())
        line = preamble.count("\n", 0, first) + 1
        raise ExemplarFormatError(
            f"line {line}: text before the first '===== Example N =====' header; remove it",
            line=line,
        )
    out: list[Exemplar] = []
    line, counted_to = 1, 0  # lines counted as we go: a count from the start is quadratic
    for number, header in enumerate(headers, 1):
        end = headers[number].start() if number < len(headers) else len(text)
        block = text[header.end() : end]
        line += text.count("\n", counted_to, header.start())
        counted_to = header.start()
        where = f"example {number} (line {line})"
        problem = _PROBLEM.search(block)
        solution = _SOLUTION.search(block)
        if problem is None:
            raise ExemplarFormatError(
                f"{where}: missing the 'Example Problem:' line", example=number, line=line
            )
        if solution is None:
            raise ExemplarFormatError(
                f"{where}: missing the 'Example Solution:' line", example=number, line=line
            )
        if solution.start() < problem.start():
            raise ExemplarFormatError(
                f"{where}: 'Example Solution:' comes before 'Example Problem:'; put the "
                "problem first",
                example=number,
                line=line,
            )
        if block[: problem.start()].strip():
            raise ExemplarFormatError(
                f"{where}: unexpected text between the header and 'Example Problem:'",
                example=number,
                line=line,
            )
        question = block[problem.end() : solution.start()].strip()
        trace = block[solution.end() :].strip()
        if not question:
            raise ExemplarFormatError(f"{where}: the problem is empty", example=number, line=line)
        if not trace:
            raise ExemplarFormatError(f"{where}: the solution is empty", example=number, line=line)
        out.append(Exemplar(question, trace))
    return out


def read_exemplars(text: str, filename_or_format: str) -> list[Exemplar]:
    """Read an exemplar set; the format is ``"jsonl"``, ``"text"`` or guessed from a file name.

    ``.jsonl``/``.json`` -> JSONL, ``.txt``/``.md`` -> text blocks; ``"auto"``
    sniffs the content (``{`` first means JSONL).
    """
    if exemplar_format(filename_or_format, text) == "jsonl":
        return parse_jsonl(text)
    return parse_text_blocks(text)


def exemplar_format(filename_or_format: str, head: str) -> Literal["jsonl", "text"]:
    """The format :func:`read_exemplars` reads; ``head``: the start of the text, for ``"auto"``."""
    key = filename_or_format.strip().lower()
    if key in ("jsonl", "json") or key.endswith((".jsonl", ".json")):
        return "jsonl"
    if key in ("text", "txt", "blocks") or key.endswith((".txt", ".md")):
        return "text"
    if key == "auto":
        return "jsonl" if head.lstrip("\ufeff \t\r\n").startswith("{") else "text"
    raise ExemplarFormatError(
        f"unknown exemplar format {filename_or_format!r}; use a .jsonl file (one JSON object "
        "per line) "
        "or a .txt file in the '===== Example N =====' block format"
    )


# ---------------------------------------------------------------- validation

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem with one exemplar (numbered from 1); errors block use, warnings do not."""

    exemplar: int
    severity: Severity
    message: str

    def __str__(self) -> str:
        return f"Exemplar {self.exemplar} ({self.severity}): {self.message}"


LONG_EXEMPLAR_CHARS = 4000
"""Above this an exemplar gets a warning: three crowd the 5000-token prompt (method.md, GRPO)."""


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def validate_exemplar(
    exemplar: Exemplar,
    number: int,
    *,
    tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
    long_chars: int = LONG_EXEMPLAR_CHARS,
) -> list[Finding]:
    """Check one exemplar against method.md, "The prompt": a complete trace.

    Errors: balanced, un-nested tags; every search followed by a non-empty
    result block and at least one search; the trace ends with a non-empty
    answer; that answer matches ``exemplar.answer`` (normalised) when given.
    Warnings: very long, no ``<think>``, text outside tags, several answers,
    tags not in lower case.
    """
    findings: list[Finding] = []

    def error(msg: str) -> None:
        findings.append(Finding(number, "error", msg))

    def warn(msg: str) -> None:
        findings.append(Finding(number, "warning", msg))

    if not exemplar.question.strip():
        error("the question is empty; write the example question")
    sol = exemplar.solution
    segs = parse(sol, tools)
    calls = [t.call_tag for t in tools]
    results = {t.result_tag for t in tools}
    result_for = {t.call_tag: t.result_tag for t in tools}

    # balanced, un-nested tags
    for tag in (THINK, *calls, ANSWER):
        opening, closing = count_tags(sol, tag, tools, segs)
        if opening != closing:
            error(
                f"unbalanced <{tag}> tags: {opening} opening, {closing} closing; close every "
                f"<{tag}> with </{tag}>"
            )
        else:
            for s in segs:
                if s.kind == tag and not s.closed:
                    error(
                        f"<{tag}> on line {_line_of(sol, s.start)} is not closed before the "
                        "next tag opens; "
                        "tags must not nest"
                    )
    for s in segs:
        if s.kind in results and not s.closed:
            error(f"<{s.kind}> on line {_line_of(sol, s.start)} is never closed; add </{s.kind}>")
    for tag in sorted(results):
        _, stray = count_tags(sol, tag, tools, segs)
        if stray:
            error(
                f"{stray} stray </{tag}> outside any <{tag}> block; remove it or add the "
                "opening tag"
            )

    # every call answered by a non-empty result block, and at least one call
    meaningful = [s for s in segs if not (s.kind == TEXT and not s.text.strip())]
    n_calls = 0
    for i, s in enumerate(meaningful):
        if s.kind in result_for and s.closed:
            n_calls += 1
            line = _line_of(sol, s.start)
            if not s.body.strip():
                error(f"the <{s.kind}> on line {line} has an empty query")
            nxt = meaningful[i + 1] if i + 1 < len(meaningful) else None
            want = result_for[s.kind]
            if nxt is None or nxt.kind != want:
                error(
                    f"the <{s.kind}> on line {line} is not followed by an <{want}> block; "
                    "paste what the tool returned"
                )
            elif not nxt.body.strip():
                error(
                    f"the <{want}> block after the <{s.kind}> on line {line} is empty; paste "
                    "what the tool returned"
                )
    if n_calls == 0 and len(calls) == 1:
        error(
            f"no <{calls[0]}> call: an exemplar must show at least one, followed by its "
            f"<{result_for[calls[0]]}> block"
        )
    elif n_calls == 0 and calls:
        error(
            f"no tool call ({' or '.join(f'<{c}>' for c in calls)}): an exemplar must show at "
            "least one, followed by the block the tool returned"
        )

    # ends with a non-empty answer that matches the gold answer
    answers = [s for s in segs if s.kind == ANSWER and s.closed]
    if not answers:
        error("no <answer> ... </answer>: the solution must end with the final answer")
    else:
        last = meaningful[-1]
        if last.kind != ANSWER or not last.closed:
            error(
                "the solution must end with <answer> ... </answer>; remove the text after the "
                "last answer"
            )
        final = answers[-1].body.strip()
        if not final:
            error("the final <answer> is empty")
        elif exemplar.answer is not None and normalize_answer(final) != normalize_answer(
            exemplar.answer
        ):
            error(
                f"the final answer {final!r} does not match the gold answer "
                f"{exemplar.answer!r}; fix one of them"
            )
        if len(answers) > 1:
            warn(
                f"{len(answers)} <answer> blocks; only the last counts, keep a single answer "
                "at the end"
            )

    # warnings
    size = len(exemplar.question) + len(sol)
    if size > long_chars:
        warn(
            f"very long ({size} characters, about {size // 4} tokens); several such exemplars "
            "may not fit "
            "the prompt length limit; shorten the information blocks"
        )
    if count_tags(sol, THINK, tools, segs) == (0, 0):
        warn("no <think> block; the format reward penalises responses without one, so show one")
    if any(s.kind == TEXT and s.text.strip() for s in segs):
        warn("text outside any tag; the model may copy it, put reasoning inside <think>")
    names = {THINK, ANSWER, *calls, *results}
    for m in re.finditer(r"</?([A-Za-z][A-Za-z0-9_-]*)>", sol):
        if m.group(1).lower() in names and m.group(1) != m.group(1).lower():
            warn(f"tag {m.group(0)} is not in lower case; write <{m.group(1).lower()}>")
            break
    return findings


def validate_exemplars(
    exemplars: Sequence[Exemplar],
    *,
    tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
    long_chars: int = LONG_EXEMPLAR_CHARS,
) -> list[Finding]:
    """Validate a whole set, numbering exemplars from 1; also warns on repeated questions."""
    findings: list[Finding] = []
    seen: dict[str, int] = {}
    for number, ex in enumerate(exemplars, 1):
        findings.extend(validate_exemplar(ex, number, tools=tools, long_chars=long_chars))
        key = " ".join(ex.question.lower().split())
        if key in seen:
            findings.append(Finding(number, "warning", f"same question as exemplar {seen[key]}"))
        else:
            seen[key] = number
    return findings


def has_errors(findings: Iterable[Finding]) -> bool:
    """True when any finding is an error (the set must not be used as it is)."""
    return any(f.severity == "error" for f in findings)
