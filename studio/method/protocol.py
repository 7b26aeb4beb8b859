"""The tag protocol as a state machine: what the environment does after each model turn.

method.md, "The tag protocol": the model generates until it closes a tool call or an
answer; after a call the environment runs the tool and appends its observation (cut to
`max_obs_tokens`, its closing tag kept, masked from the loss); a turn that ends with
neither gets the corrective message; after `max_turns` environment turns the model gets
one last turn, in which a further call is not run. The response never exceeds
`max_response_tokens`, environment text included.

Both engines drive this machine and differ only in who samples the tokens: the native
engine for a batch (one decision per sequence per round, each tool's calls of the round
executed together), the veRL agent loop for one sample. The tokenizer is passed in
(anything with `__call__(texts, add_special_tokens=False)` and `decode`), so this
module stays free of torch and I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from . import tags
from .tags import ANSWER, corrective_message, tool_calls
from .tools import Tool, specs

StopReason = Literal["answer", "eos", "length", "max_turns"]
STOP_REASONS: tuple[StopReason, ...] = ("answer", "eos", "length", "max_turns")
TurnEnd = Literal["answer", "call", "eos", "budget"]


@dataclass(frozen=True)
class Limits:
    """A rollout's budgets (method.md; the run config's `grpo` section)."""

    max_turns: int = 6  # environment turns (tool calls, corrective messages); then one last
    max_turn_tokens: int = 512  # new tokens per model turn
    max_response_tokens: int = 2048  # the whole response, model and environment tokens
    max_obs_tokens: int = 500  # an observation is cut to this many tokens, its tags kept

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_turn_tokens", "max_response_tokens", "max_obs_tokens"):
            value = getattr(self, name)
            where = f"{type(self).__name__}.{name}"
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{where} must be an integer, got {value!r}")
            if value < (0 if name == "max_turns" else 1):
                raise ValueError(f"{where} must be positive, got {value}")


def stop_strings(tools: Sequence[Tool]) -> tuple[str, ...]:
    """What ends a model turn: each tool's closing call tag, and `</answer>`."""
    return tags.stop_strings(specs(tools))


def closed_by(text: str, tools: Sequence[Tool]) -> Literal["answer", "call"] | None:
    """Whether a turn's text closes an answer or a tool call (case-insensitive, as the
    tag parser reads them); the answer first."""
    lowered = text.lower()
    if f"</{ANSWER}>" in lowered:
        return "answer"
    if any(f"</{s.call_tag}>" in lowered for s in specs(tools)):
        return "call"
    return None


def turn_end(text: str, ended_with_eos: bool, tools: Sequence[Tool]) -> TurnEnd:
    """How a model turn ended: a closed answer or call, the model's EOS, or the budget."""
    return closed_by(text, tools) or ("eos" if ended_with_eos else "budget")


@dataclass(frozen=True)
class Next:
    """The environment's move after a turn: stop (with the reason), call `tool` with
    `input`, or correct (the corrective message)."""

    action: Literal["stop", "call", "correct"]
    reason: StopReason | None = None
    tool: Tool | None = None
    input: str | None = None


def after_turn(text: str, end: TurnEnd, *, response_tokens: int, env_turns: int,
               limits: Limits, tools: Sequence[Tool]) -> Next:
    """Decide what follows a model turn (`text`, ended as `end`) when the response holds
    `response_tokens` tokens after `env_turns` environment turns."""
    last_turn = env_turns >= limits.max_turns
    if end == "answer":
        return Next("stop", "answer")
    if response_tokens >= limits.max_response_tokens:
        return Next("stop", "length")
    if last_turn:
        return Next("stop", {"call": "max_turns", "eos": "eos"}.get(end, "length"))
    calls = tool_calls(text, specs(tools)) if end == "call" else []
    if calls:
        by_name = {t.spec.name: t for t in tools}
        return Next("call", tool=by_name[calls[-1].tool], input=calls[-1].query)
    return Next("correct")


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer([text], add_special_tokens=False)["input_ids"][0])


def fit_observation(tokenizer, tool: Tool, result: object, response_tokens: int,
                    limits: Limits) -> tuple[str, list[int]] | None:
    """The observation of `result` as text and ids, cut to what the budgets leave
    (`max_obs_tokens`, and one token of the response for the model after it): the tags and
    the blank lines around them kept, the body cut at a token boundary (a partial
    character dropped). None when not even the empty observation fits: the rollout stops
    for length."""
    limit = min(limits.max_obs_tokens, limits.max_response_tokens - response_tokens - 1)
    text = tool.observation(result)
    ids = _encode(tokenizer, text)
    if len(ids) <= limit:
        return text, ids
    opening, closing = f"\n\n<{tool.spec.result_tag}>", f"</{tool.spec.result_tag}>\n\n"
    assert text.startswith(opening) and text.endswith(closing), "observation without its tags"
    body_ids = _encode(tokenizer, text[len(opening):-len(closing)])
    keep = min(len(body_ids), limit - len(_encode(tokenizer, opening))
               - len(_encode(tokenizer, closing)))
    while keep > 0:
        text = opening + tokenizer.decode(body_ids[:keep]).rstrip("\ufffd") + closing
        ids = _encode(tokenizer, text)
        if len(ids) <= limit:
            return text, ids
        keep -= max(1, len(ids) - limit)
    text = opening + closing
    ids = _encode(tokenizer, text)
    return (text, ids) if len(ids) <= limit else None


def correction(tokenizer, tools: Sequence[Tool], response_tokens: int,
               limits: Limits) -> tuple[str, list[int]] | None:
    """The corrective message (naming the first tool) as text and ids; None when it does not
    fit the response budget with a token left for the model: the rollout stops for length."""
    text = corrective_message(tools[0].spec)
    ids = _encode(tokenizer, text)
    return (text, ids) if response_tokens + len(ids) < limits.max_response_tokens else None
