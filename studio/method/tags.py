"""The tag protocol: split a response into think / tool call / tool result / answer / text.

method.md, "The tag protocol (search tool)": the model writes ``<think>``,
``<search>`` and ``<answer>`` spans; the environment inserts
``<information>`` blocks that the model did not write.  The same mechanics
serve any tool ("a call tag the model writes, a result tag the environment
fills"), so a tool here is data (:class:`ToolSpec`), not code.

Parsing rules (the whole module follows them):

* Tag names match case-insensitively, written exactly ``<name>`` / ``</name>``
  (no attributes, no inner spaces).
* A *result* block (``<information>``) is opaque: from its opening tag to its
  first closing tag - or to the end of the text when unclosed - is one
  environment segment; tags inside it are ignored.
* A *model* span (``<think>``, ``<answer>``, a tool call) ends at its own
  closing tag, or, when another known tag opens first, just before that tag
  (the span is then ``closed=False``), or at the end of the text.
* Everything else (stray closing tags included) is ``text``.

The segments always concatenate back to the input exactly and never raise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

THINK = "think"
ANSWER = "answer"
TEXT = "text"

_TAG_NAME = re.compile(r"[a-z][a-z0-9_-]*\Z")


@dataclass(frozen=True)
class ToolSpec:
    """A tool as data: the tag the model writes and the tag the environment fills.

    method.md, "The tag protocol": "a call tag the model writes, a result tag
    the environment fills and the loss ignores".
    """

    name: str
    call_tag: str
    result_tag: str

    def __post_init__(self) -> None:
        for field_name in ("call_tag", "result_tag"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not _TAG_NAME.match(value):
                raise ValueError(
                    f"ToolSpec.{field_name}: {value!r} must be a lower-case tag name "
                    "(letters, digits, '_' or '-', starting with a letter)"
                )
        if self.call_tag == self.result_tag:
            raise ValueError("ToolSpec: call_tag and result_tag must differ")
        if {self.call_tag, self.result_tag} & {THINK, ANSWER}:
            raise ValueError("ToolSpec: 'think' and 'answer' are reserved tag names")


SEARCH_TOOL = ToolSpec("search", "search", "information")
PYTHON_TOOL = ToolSpec("python", "code", "output")
CALCULATOR_TOOL = ToolSpec("calculator", "calc", "result")
DEFAULT_TOOLS: tuple[ToolSpec, ...] = (SEARCH_TOOL,)

SegmentKind = str  # "think" | "answer" | a call tag | a result tag | "text"


@dataclass(frozen=True)
class Segment:
    """One span of a response; ``text`` includes its tags; ``text == source[start:end]``.

    ``closed`` is False for a tagged span whose closing tag never came (always
    True for ``text``).  ``source`` says who wrote it: the environment writes
    result blocks, the model writes everything else.
    """

    kind: SegmentKind
    text: str
    start: int
    end: int
    closed: bool = True
    source: Literal["model", "environment"] = "model"

    @property
    def body(self) -> str:
        """The text between the tags (the whole text for ``text`` segments)."""
        if self.kind == TEXT:
            return self.text
        inner = self.text[len(self.kind) + 2 :]
        if self.closed:
            inner = inner[: -(len(self.kind) + 3)]
        return inner


@dataclass(frozen=True)
class _Grammar:
    token: re.Pattern[str]
    result_tags: frozenset[str]


def _check_tools(tools: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
    tools = tuple(tools)
    seen: set[str] = set()
    for tool in tools:
        if not isinstance(tool, ToolSpec):
            raise TypeError(f"tools must be ToolSpec instances, got {type(tool).__name__}")
        for tag in (tool.call_tag, tool.result_tag):
            if tag in seen:
                raise ValueError(f"tag <{tag}> is used by more than one tool")
            seen.add(tag)
    return tools


@lru_cache(maxsize=32)
def _grammar(tools: tuple[ToolSpec, ...]) -> _Grammar:
    calls = frozenset(t.call_tag for t in tools)
    results = frozenset(t.result_tag for t in tools)
    names = sorted({THINK, ANSWER} | calls | results, key=lambda s: (-len(s), s))
    token = re.compile(r"<(/?)(" + "|".join(map(re.escape, names)) + r")>", re.IGNORECASE)
    return _Grammar(token, results)


def parse(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[Segment]:
    """Split ``text`` into ordered segments that concatenate back to it exactly.

    method.md, "The tag protocol": model spans and environment result blocks;
    the parsing rules are in the module docstring.  Never raises on any string.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() needs a str, got {type(text).__name__}")
    g = _grammar(_check_tools(tools))
    tokens = [
        (m.start(), m.end(), m.group(1) == "/", m.group(2).lower()) for m in g.token.finditer(text)
    ]
    n = len(text)
    segments: list[Segment] = []
    pos = 0
    i = 0
    while i < len(tokens):
        start, _, is_close, name = tokens[i]
        if is_close:  # a stray closing tag is plain text
            i += 1
            continue
        if start > pos:
            segments.append(Segment(TEXT, text[pos:start], pos, start))
        j = i + 1
        end, closed = n, False
        if name in g.result_tags:
            while j < len(tokens):
                if tokens[j][2] and tokens[j][3] == name:
                    end, closed = tokens[j][1], True
                    break
                j += 1
        else:
            while j < len(tokens):
                _, t_end, t_close, t_name = tokens[j]
                if t_close and t_name == name:
                    end, closed = t_end, True
                    break
                if not t_close:
                    end = tokens[j][0]
                    break
                j += 1
        source = "environment" if name in g.result_tags else "model"
        segments.append(Segment(name, text[start:end], start, end, closed, source))
        pos = end
        i = j + 1 if closed else j  # tokens inside the segment are consumed with it
    if pos < n:
        segments.append(Segment(TEXT, text[pos:], pos, n))
    return segments


def count_tags(text: str, tag: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
               segments: Sequence[Segment] | None = None) -> tuple[int, int]:
    """Return ``(opening, closing)`` counts of ``<tag>`` / ``</tag>`` in model-written text.

    method.md, "The reward": "nothing inside an <information> block counts as
    a tag".  Result blocks, their own tags included, are skipped; matching is
    case-insensitive. ``segments``: ``parse(text, tools)``, where the caller has it (a
    caller counting several tags parses once).
    """
    pattern = re.compile(r"<(/?)" + re.escape(tag.lower()) + r">", re.IGNORECASE)
    opening = closing = 0
    segments = parse(text, tools) if segments is None else segments
    for seg in (s for s in segments if s.source == "model"):
        for m in pattern.finditer(seg.text):
            if m.group(1):
                closing += 1
            else:
                opening += 1
    return opening, closing


def answers(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[str]:
    """Bodies (stripped) of every closed ``<answer>`` the model wrote, in order."""
    return [s.body.strip() for s in parse(text, tools) if s.kind == ANSWER and s.closed]


def final_answer(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> str | None:
    """The last closed ``<answer>`` the model wrote, stripped; None when there is none.

    method.md, "The reward": acc uses "the last <answer>"; answers inside an
    ``<information>`` block are tool output and never count.  An unclosed
    ``<answer>`` is not an answer.  May return "" for ``<answer> </answer>``.
    """
    found = answers(text, tools)
    return found[-1] if found else None


@dataclass(frozen=True)
class ToolCall:
    """One closed tool call the model wrote: which tool, its stripped query, its offsets."""

    tool: str
    query: str
    start: int
    end: int


def tool_calls(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[ToolCall]:
    """Every closed tool call in the model's text, in order (method.md, "The tag protocol")."""
    by_tag = {t.call_tag: t.name for t in _check_tools(tools)}
    return [
        ToolCall(by_tag[s.kind], s.body.strip(), s.start, s.end)
        for s in parse(text, tools)
        if s.kind in by_tag and s.closed
    ]


def search_queries(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[str]:
    """The queries of every closed ``<search>`` call, stripped, in order."""
    return [c.query for c in tool_calls(text, tools) if c.tool == SEARCH_TOOL.name]


@dataclass(frozen=True)
class ResponseStats:
    """Per-response counts the engine logs and the UI charts.

    * ``search_calls``: closed ``<search>`` calls; ``tool_calls``: closed calls of any tool.
    * ``answers``: closed ``<answer>`` spans.
    * ``turns``: model turns - the model-written stretches between environment
      blocks (result blocks, corrective messages) - that hold non-blank text.
    * ``invalid_turns``: turns whose last non-blank segment is neither a closed
      tool call nor a closed answer (method.md, "A turn that ends with neither
      a search nor an answer"), e.g. a turn cut off mid-thought.
    """

    search_calls: int
    tool_calls: int
    answers: int
    turns: int
    invalid_turns: int


def model_turns(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[list[Segment]]:
    """Group the model's segments into turns split by environment blocks; blank turns dropped."""
    turns: list[list[Segment]] = [[]]
    for seg in parse(text, tools):
        if seg.source == "environment":
            turns.append([])
        else:
            turns[-1].append(seg)
    return [t for t in turns if any(s.text.strip() for s in t)]


def response_stats(text: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> ResponseStats:
    """Count calls, answers and invalid turns of one response (see :class:`ResponseStats`)."""
    tools = _check_tools(tools)
    calls = {t.call_tag for t in tools}
    search = {t.call_tag for t in tools if t.name == SEARCH_TOOL.name}
    segs = parse(text, tools)
    turns = model_turns(text, tools)
    invalid = 0
    for turn in turns:
        last = [s for s in turn if s.text.strip()][-1]
        if not (last.closed and (last.kind in calls or last.kind == ANSWER)):
            invalid += 1
    return ResponseStats(
        search_calls=sum(1 for s in segs if s.kind in search and s.closed),
        tool_calls=sum(1 for s in segs if s.kind in calls and s.closed),
        answers=sum(1 for s in segs if s.kind == ANSWER and s.closed),
        turns=len(turns),
        invalid_turns=invalid,
    )


def stop_strings(tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> tuple[str, ...]:
    """Strings generation stops at: each tool's closing call tag, then ``</answer>``.

    method.md, "The tag protocol", column "generation stops at".  The engine must
    keep the stop string in the response (re-append it if the backend drops it).
    """
    return tuple(f"</{t.call_tag}>" for t in _check_tools(tools)) + (f"</{ANSWER}>",)


STOP_STRINGS: tuple[str, ...] = stop_strings()


def result_block(body: str, tool: ToolSpec) -> str:
    """``\\n\\n<result tag>body</result tag>\\n\\n``: how the environment inserts a tool's output.

    A closing result tag inside the body would end the block early and expose the
    rest to the parser as model text, so it is defused by inserting a space
    (``</ information>``); nothing else is changed.
    """
    closing = re.compile(re.escape(f"</{tool.result_tag}>"), re.IGNORECASE)
    safe = closing.sub(lambda m: m.group(0)[:2] + " " + m.group(0)[2:], str(body))
    return f"\n\n<{tool.result_tag}>{safe}</{tool.result_tag}>\n\n"


def format_information(passages: Iterable[tuple[str, str]], tool: ToolSpec = SEARCH_TOOL) -> str:
    """The block the environment appends after ``</search>``.

    method.md, "The tag protocol": ``\\n\\n<information>Doc 1(Title: T) text\\nDoc 2(Title: ...)
    ...</information>\\n\\n`` (:func:`result_block`).  Truncation to ``max_obs_length``
    tokens is the protocol's job (`studio.method.protocol.fit_observation`); it keeps the
    closing tag.
    """
    lines = [f"Doc {i}(Title: {title}) {body}" for i, (title, body) in enumerate(passages, 1)]
    return result_block("\n".join(lines).strip(), tool)


def corrective_message(tool: ToolSpec = SEARCH_TOOL) -> str:
    """What the environment inserts after an invalid turn (method.md, "The tag protocol").

    The studio's own wording.  It is wrapped in the tool's result tag so the
    parser treats it as environment text: its example tags never count toward
    the format reward, and the loss mask already skips result blocks.
    """
    return (
        f"\n\n<{tool.result_tag}>Your last turn ended with neither a tool call nor an answer. "
        f"To use the {tool.name} tool write <{tool.call_tag}> ... </{tool.call_tag}>; "
        f"to finish write <{ANSWER}> your final answer </{ANSWER}>.</{tool.result_tag}>\n\n"
    )


CORRECTIVE_MESSAGE: str = corrective_message()
