"""The tag protocol, one rollout at a time, for veRL's agent loop (no veRL import here).

method.md, "The tag protocol": the model generates until `</search>` or
`</answer>`; after a search the environment appends the information block
(the top-k passages from the studio's `/retrieve`, cut to `max_obs_tokens`);
a turn that ends with neither gets the corrective message; after
`max_turns` environment turns the model gets one last turn. The rules and
stop reasons are the native engine's (`worker/engines/native/rollout.py`),
so a veRL rollout and a native one differ only in who samples the tokens.

Model tokens are kept exactly as generated, with their log-probs; every
environment token has mask 0 and log-prob 0.0. The response never exceeds
`max_response_tokens` (veRL's `response_length`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import httpx
from pydantic import BaseModel

from studio.ingest.corpus import split_contents
from studio.method import tags
from studio.method.exemplars import Exemplar
from studio.method.prompt import derive_seed
from studio.run_config import RunConfig
from worker.engines.native.rollout import information_block

Generate = Callable[[list[int], int], Awaitable[tuple[list[int], list[float] | None]]]
"""(context ids, max new tokens) -> (new token ids, their log-probs or None)."""

Search = Callable[[str], Awaitable[list[tuple[str, str]]]]
"""A query -> its passages as (title, text), best first."""

STOP_STRINGS = list(tags.STOP_STRINGS)
RETRIEVE_ATTEMPTS = 3


class AgentSpec(BaseModel):
    """What the agent loop needs beyond veRL's config; the launcher writes it as JSON."""

    run_config: RunConfig
    exemplars: list[dict]
    retrieve_url: str
    token_file: str

    def exemplar_list(self) -> list[Exemplar]:
        return [Exemplar.coerce(e) for e in self.exemplars]

    def exemplars_for(self, split: str, global_steps: int) -> int:
        """Training rows show the curriculum's count at this step; validation rows none.

        veRL counts steps from 1; the studio's curriculum from 0.
        """
        if split != "train":
            return 0
        return self.run_config.curriculum.build().exemplars_at(max(global_steps - 1, 0))

    def sample_seed(self, global_steps: int, index: int) -> int:
        """The seed of a question's sampled exemplars: the same for all G samples of it."""
        return derive_seed(self.run_config.seed, max(global_steps - 1, 0), index)


@lru_cache(maxsize=4)
def load_agent_spec(path: str) -> AgentSpec:
    """One parse per Ray worker: veRL builds a new agent loop object for every sample."""
    return AgentSpec.model_validate(json.loads(Path(path).read_text()))


class RetrievalError(RuntimeError):
    """The studio's /retrieve could not answer; the message says what to check."""


class Retriever:
    """The studio's Search-R1-compatible `POST /retrieve` for the run's corpus."""

    def __init__(self, url: str, token: str, top_k: int):
        self.url, self.top_k = url, top_k
        self.headers = {"Authorization": f"Bearer {token}"}

    async def _post(self, client: httpx.AsyncClient, query: str) -> httpx.Response:
        body = {"queries": [query], "topk": self.top_k, "return_scores": False}
        for attempt in range(RETRIEVE_ATTEMPTS):
            try:
                response = await client.post(self.url, json=body, headers=self.headers,
                                             timeout=60)
            except httpx.TransportError as exc:
                if attempt + 1 == RETRIEVE_ATTEMPTS:
                    raise RetrievalError(
                        f"cannot reach the studio's /retrieve at {self.url} ({exc}); set "
                        "verl.studio_url to an address the Ray workers can reach") from None
            else:
                if response.status_code < 500 or attempt + 1 == RETRIEVE_ATTEMPTS:
                    return response
            await asyncio.sleep(2 ** attempt)
        raise AssertionError("unreachable")

    async def search(self, query: str) -> list[tuple[str, str]]:
        async with httpx.AsyncClient() as client:
            response = await self._post(client, query)
        if response.status_code != 200:
            raise RetrievalError(f"the studio's /retrieve at {self.url} answered "
                                 f"{response.status_code}: {response.text[:300]}")
        passages = []
        for doc in response.json()["result"][0]:
            title, text = split_contents(doc["contents"])
            passages.append((title or "", text))
        return passages


@dataclass(frozen=True)
class Limits:
    """The run's budgets (RunConfig.grpo), in tokens and turns."""

    max_turns: int
    max_turn_tokens: int
    max_response_tokens: int
    max_obs_tokens: int
    top_k: int

    @classmethod
    def of(cls, config: RunConfig, response_length: int | None = None) -> Limits:
        g = config.grpo
        return cls(g.max_turns, g.max_turn_tokens,
                   min(g.max_response_tokens, response_length or g.max_response_tokens),
                   g.max_obs_tokens, g.top_k)


@dataclass
class ProtocolRollout:
    """One response: ids, mask and log-probs of equal length; why and after what it stopped."""

    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    model_turns: int = 0
    env_turns: int = 0
    tool_calls: int = 0
    stop_reason: str = "length"

    def add(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.response_ids += list(ids)
        self.response_mask += [mask] * len(ids)
        self.response_logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


def _turn_end(text: str, ids: list[int], eos_ids: set[int]) -> str:
    lowered = text.lower()
    if f"</{tags.ANSWER}>" in lowered:
        return "answer"
    if f"</{tags.SEARCH_TOOL.call_tag}>" in lowered:
        return "search"
    if ids and ids[-1] in eos_ids:
        return "eos"
    return "budget"


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


async def roll_out(prompt_ids: list[int], generate: Generate, search: Search, tokenizer,
                   limits: Limits, eos_ids: set[int]) -> ProtocolRollout:
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
        end = _turn_end(text, new_ids, eos_ids)
        last_turn = out.env_turns >= limits.max_turns
        if end == "answer":
            out.stop_reason = "answer"
        elif len(out.response_ids) >= limits.max_response_tokens:
            out.stop_reason = "length"
        elif end == "search" and last_turn:
            out.stop_reason = "max_turns"
        elif last_turn:
            out.stop_reason = {"eos": "eos", "budget": "length"}.get(end, "max_turns")
        elif end == "search" and (queries := tags.search_queries(text)):
            passages = (await search(queries[-1]))[: limits.top_k]
            room = limits.max_response_tokens - len(out.response_ids) - 1
            block = information_block(tokenizer, passages, min(limits.max_obs_tokens, room))
            if block is not None:
                out.add(block[1], 0)
                out.env_turns += 1
                out.tool_calls += 1
                continue
            out.stop_reason = "length"
        else:
            corrective = _encode(tokenizer, tags.corrective_message(tags.SEARCH_TOOL))
            if len(out.response_ids) + len(corrective) < limits.max_response_tokens:
                out.add(corrective, 0)
                out.env_turns += 1
                continue
            out.stop_reason = "length"
        return out
