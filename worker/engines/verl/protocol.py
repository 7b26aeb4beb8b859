"""The tag protocol, one rollout at a time, for veRL's agent loop (no veRL import here).

`studio.method.protocol` decides every move (answer, call a tool, correct, stop) as it
does for the native engine's batched loop, so a veRL rollout and a native one differ
only in who samples the tokens. The search tool's backend here is the studio's
`/retrieve` for the run's corpus (`Retriever`), run off the event loop.

Model tokens are kept exactly as generated, with their log-probs; every
environment token has mask 0 and log-prob 0.0. The response never exceeds
`max_response_tokens` (veRL's `response_length`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import httpx
from pydantic import BaseModel

from studio.ingest.corpus import split_contents
from studio.method import protocol
from studio.method.exemplars import Exemplar
from studio.method.guidance import guided_count
from studio.method.prompt import derive_seed
from studio.method.tools import Passages, Tool, run_tool
from studio.retrieval.passages import MAX_RETRIEVE_QUERIES
from studio.run_config import RunConfig

Generate = Callable[[list[int], int], Awaitable[tuple[list[int], list[float] | None]]]
"""(context ids, max new tokens) -> (new token ids, their log-probs or None)."""

RunTool = Callable[[Tool, str], Awaitable[object]]
"""(tool, its input) -> the tool's result for it."""

RETRIEVE_ATTEMPTS = 3


async def run_in_thread(tool: Tool, text: str) -> object:
    """A tool's `execute` is blocking (a search, a sandbox): run it off the event loop."""
    [result] = await asyncio.to_thread(run_tool, tool, [text])
    return result


class AgentSpec(BaseModel):
    """What the agent loop needs beyond veRL's config; the launcher writes it as JSON."""

    run_config: RunConfig
    exemplars: list[dict]
    retrieve_url: str | None  # None: the run does not search
    token_file: str

    def exemplar_list(self) -> list[Exemplar]:
        return [Exemplar.coerce(e) for e in self.exemplars]

    def exemplars_for(self, split: str, global_steps: int, index: int) -> int:
        """Training rows show the curriculum's count at this step (in a soft curriculum, 0
        for some questions: a draw seeded by the step and the row's `index`); validation rows
        none.

        veRL counts steps from 1; the studio's curriculum from 0.
        """
        if split != "train":
            return 0
        step = max(global_steps - 1, 0)
        curriculum = self.run_config.curriculum.build()
        return curriculum.question_exemplars(step, curriculum.exemplars_at(step),
                                             derive_seed(self.run_config.seed, step, index, "soft"))

    def sample_seed(self, global_steps: int, index: int) -> int:
        """The seed of a question's sampled exemplars: the same for all G samples of it (and,
        with `prompt.exemplar_draw: per-step`, for every question of the step)."""
        return self.run_config.exemplar_seed(max(global_steps - 1, 0), index)

    def trained_exemplars(self, exemplars: int) -> int:
        """The exemplar count of the prompt a sample trains on: the stage's, or none in
        mixed guidance (where the stage's are only a hint while sampling, `guided`)."""
        return 0 if self.run_config.guidance.mode == "mixed" else exemplars

    def guided(self, exemplars: int, session: int, group_size: int) -> bool:
        """Whether a sample rolls out with its stage's `exemplars` as a hint and trains on the
        prompt without them (`guidance.mode: mixed`, `studio.method.guidance`): the first
        `guided_count` samples of each group, as the native engine orders a group. veRL's V1
        trainer numbers a group's samples 0..n-1 (`session`, its `session_id`)."""
        guidance = self.run_config.guidance
        return (guidance.mode == "mixed" and exemplars > 0
                and session < guided_count(guidance.share, group_size))


@lru_cache(maxsize=4)
def load_agent_spec(path: str) -> AgentSpec:
    """One parse per Ray worker: veRL builds a new agent loop object for every sample."""
    return AgentSpec.model_validate(json.loads(Path(path).read_text()))


class RetrievalError(RuntimeError):
    """The studio's /retrieve could not answer; the message says what to check."""


class Retriever:
    """The studio's Search-R1-compatible `POST /retrieve` for the run's corpus, as a search
    backend: queries -> per query its passages as (title, text)."""

    def __init__(self, url: str, token: str, top_k: int):
        self.url, self.top_k = url, top_k
        self.headers = {"Authorization": f"Bearer {token}"}

    def _post(self, client: httpx.Client, queries: list[str]) -> httpx.Response:
        body = {"queries": queries, "topk": self.top_k, "return_scores": False}
        for attempt in range(RETRIEVE_ATTEMPTS):
            try:
                response = client.post(self.url, json=body, headers=self.headers, timeout=60)
            except httpx.TransportError as exc:
                if attempt + 1 == RETRIEVE_ATTEMPTS:
                    raise RetrievalError(
                        f"cannot reach the studio's /retrieve at {self.url} ({exc}); set "
                        "verl.studio_url to an address the Ray workers can reach") from None
            else:
                if response.status_code < 500 or attempt + 1 == RETRIEVE_ATTEMPTS:
                    return response
            time.sleep(2 ** attempt)
        raise AssertionError("unreachable")

    def __call__(self, queries: list[str]) -> list[Passages]:
        """All the queries' passages, in requests of at most the studio's bound each."""
        queries, found = list(queries), []
        with httpx.Client() as client:
            for start in range(0, len(queries), MAX_RETRIEVE_QUERIES):
                response = self._post(client, queries[start:start + MAX_RETRIEVE_QUERIES])
                if response.status_code != 200:
                    raise RetrievalError(f"the studio's /retrieve at {self.url} answered "
                                         f"{response.status_code}: {response.text[:300]}")
                found += [[(title or "", text) for title, text in
                           (split_contents(doc["contents"]) for doc in docs)]
                          for docs in response.json()["result"]]
        return found


@dataclass
class ProtocolRollout:
    """One response: ids, mask and log-probs of equal length; why and after what it stopped;
    its tool calls whose result came in, and how many of those failed (`Tool.failed`)."""

    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    model_turns: int = 0
    env_turns: int = 0
    tool_calls: int = 0
    failed_calls: int = 0
    stop_reason: str = "length"

    @property
    def working_calls(self) -> int:
        """The calls whose result came back without an error (`reward.call_bonus`)."""
        return self.tool_calls - self.failed_calls

    def add(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.response_ids += list(ids)
        self.response_mask += [mask] * len(ids)
        self.response_logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


async def roll_out(prompt_ids: list[int], generate: Generate, tools: Sequence[Tool], tokenizer,
                   limits: protocol.Limits, eos_ids: set[int],
                   execute: RunTool = run_in_thread) -> ProtocolRollout:
    """Run one rollout of the protocol (see the module docstring)."""
    out = ProtocolRollout()
    while True:
        room = limits.max_response_tokens - len(out.response_ids)
        new_ids, logprobs = await generate(prompt_ids + out.response_ids,
                                           min(limits.max_turn_tokens, room))
        new_ids = list(new_ids)[:room]
        if logprobs is not None:
            logprobs = list(logprobs)[: len(new_ids)]
        out.add(new_ids, 1, logprobs)
        out.model_turns += 1
        text = tokenizer.decode(new_ids)
        end = protocol.turn_end(text, bool(new_ids) and new_ids[-1] in eos_ids, tools)
        move = protocol.after_turn(text, end, response_tokens=len(out.response_ids),
                                   env_turns=out.env_turns, limits=limits, tools=tools)
        if move.action == "stop":
            out.stop_reason = move.reason
            return out
        if move.action == "call":
            result = await execute(move.tool, move.input)
            fitted = protocol.fit_observation(tokenizer, move.tool, result,
                                              len(out.response_ids), limits)
        else:
            fitted = protocol.correction(tokenizer, tools, len(out.response_ids), limits)
        if fitted is None:
            out.stop_reason = "length"
            return out
        out.add(fitted[1], 0)
        out.env_turns += 1
        if move.action == "call":
            out.tool_calls += 1
            out.failed_calls += int(move.tool.failed(result))
