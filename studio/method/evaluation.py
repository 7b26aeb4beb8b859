"""The zero-shot evaluation protocol (method.md, "Evaluation protocol") as one typed value.

k = 0 exemplars, temperature 0.1, at most 512 new tokens per turn and 6 tool calls, top-3
passages, the search tool unless `tools` names others; answers matched as the run's reward
matches them (`answer_match`). The API checks a request's overrides against its fields
(`PROTOCOL_KEYS`), the evaluation process builds its rollouts from it (`limits`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .prompt import check_eval_prefix
from .protocol import Limits
from .reward import ANSWER_MATCHES, AnswerMatch
from .tools import DEFAULT_TOOL_NAMES, check_tool_names

MAX_TRIED_EXEMPLARS = 8


@dataclass(frozen=True)
class EvalConfig:
    """The zero-shot protocol; ``instruction`` None is the default instruction for ``tools``
    (an evaluation of a run's checkpoint calls the run's tools unless told otherwise)."""

    temperature: float = 0.1
    max_turn_tokens: int = 512
    max_turns: int = 6
    top_k: int = 3
    max_response_tokens: int = 4096
    max_obs_tokens: int = 500
    batch_size: int = 16
    layout: str = "chat"
    assistant_prefix: str | None = "<think>"
    instruction: str | None = None
    seed: int = 0
    answer_match: AnswerMatch = "exact"
    tools: tuple[str, ...] = DEFAULT_TOOL_NAMES
    exemplars: int = 0
    """Exemplars shown before each question: 0 is the protocol; a "try it" of an exemplar set
    before launch shows k of them, as a run's first stage would."""

    def __post_init__(self) -> None:
        check_eval_prefix(self.assistant_prefix)
        if not 0 <= self.exemplars <= MAX_TRIED_EXEMPLARS:
            raise ValueError(f"exemplars must be 0 to {MAX_TRIED_EXEMPLARS}, got "
                             f"{self.exemplars!r}")
        if self.answer_match not in ANSWER_MATCHES:
            raise ValueError(f"answer_match must be one of {', '.join(ANSWER_MATCHES)}, got "
                             f"{self.answer_match!r}")
        object.__setattr__(self, "tools", check_tool_names(self.tools))

    def limits(self) -> Limits:
        return Limits(max_turns=self.max_turns, max_turn_tokens=self.max_turn_tokens,
                      max_response_tokens=self.max_response_tokens,
                      max_obs_tokens=self.max_obs_tokens)


PROTOCOL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(EvalConfig))
"""What an evaluation request may override, key by key."""
