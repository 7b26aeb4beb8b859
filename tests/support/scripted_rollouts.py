"""Rollouts with a scripted model: each prompt's model turns are fixed strings, so a test
says exactly what the model writes and checks what the environment does with it.

`ScriptedLM` plays the model for the native engine's batched loop (through its KV cache
and masks); `scripted_turns` plays it for one-sample loops (veRL's `generate` shape).
Both read the same scripts, so the two engines' protocol tests can compare responses.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from studio.method import tags
from studio.method.tools import all_specs
from studio.retrieval import Passage
from tests.support.reverse_tool import REVERSE
from worker.engines.native.rollout import generate_rollouts

INFO_END = "</information>\n\n"
ENV_ENDS = tuple({f"</{spec.result_tag}>\n\n": None for spec in (*all_specs(), REVERSE)})
"""How each tool's environment block ends (every registered tool's, and the test tool's, which
is registered once its module is imported: each end once)."""

CORPUS = [
    Passage("1", "Moss lamp", "A moss lamp is a lantern filled with glowing moss, invented by Ida Varn."),
    Passage("2", "Ida Varn", "Ida Varn was a lamp maker from the island of Serrick."),
    Passage("3", "Serrick", "Serrick is a low, flat island with four towns and grey salt pans."),
    Passage("4", "Grey salt", "Grey salt from Serrick is the archipelago's chief export."),
]


class RecordingSearch:
    """A real BM25 search over the in-test corpus that records each call."""

    def __init__(self, index):
        self.index = index
        self.calls: list[list[str]] = []

    def __call__(self, queries: list[str]) -> list[list[tuple[str, str]]]:
        self.calls.append(list(queries))
        return [
            [(h.passage.title, h.passage.text) for h in hits]
            for hits in self.index.search(queries, 5)
        ]

    def expected(self, query: str, k: int) -> str:
        hits = self.index.search([query], k)[0]
        return tags.format_information([(h.passage.title, h.passage.text) for h in hits])


EOS = "<EOS>"  # a script turn ending with this emits the eos token after its text


def encode_turn(tokenizer, text: str) -> list[int]:
    """A script turn's ids; a turn ending with ``EOS`` ends with the eos token."""
    if text.endswith(EOS):
        return tokenizer(text[: -len(EOS)], add_special_tokens=False)["input_ids"] \
            + [tokenizer.eos_token_id]
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def filler_token(tokenizer) -> int:
    return tokenizer(" x", add_special_tokens=False)["input_ids"][-1]


class ScriptedLM(torch.nn.Module):
    """Forces, for each prompt, a list of model turns (strings).

    Turn i is written after the i-th environment block of the response; once a
    turn's text is out, the model emits the eos token (turn ends with
    ``EOS``) or the filler token forever (the turn budget must end it).
    """

    def __init__(self, tokenizer, scripts: dict[tuple[int, ...], list[str]]):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.tok = tokenizer
        self.vocab = len(tokenizer)
        self.filler = filler_token(tokenizer)
        self.scripts = {
            prompt: [encode_turn(tokenizer, t) for t in turns] for prompt, turns in scripts.items()
        }
        self.calls = 0
        self.config = SimpleNamespace()
        self.generation_config = None

    def _next(self, context: list[int]) -> int:
        prompt = next((p for p in self.scripts if tuple(context[: len(p)]) == p), None)
        if prompt is None:  # a prefill chunk inside the prompt: nothing is sampled from it
            return self.filler
        response = context[len(prompt) :]
        turns = self.scripts[prompt]
        # Where the last environment block ends (each ends with one of ENV_ENDS).
        start = next(
            (k for k in range(len(response), 0, -1)
             if self.tok.decode(response[:k]).endswith(ENV_ENDS)),
            0,
        )
        done = sum(self.tok.decode(response[:start]).count(end) for end in ENV_ENDS)
        progress = len(response) - start
        turn = turns[done] if done < len(turns) else []
        return turn[progress] if progress < len(turn) else self.filler

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=True, logits_to_keep=0):
        self.calls += 1
        as_keys = input_ids.to(torch.float32)[:, None, :, None]
        keys, _ = past_key_values.update(as_keys, as_keys, 0)
        logits = torch.full((input_ids.shape[0], 1, self.vocab), -1e9)
        for b in range(input_ids.shape[0]):
            seen = attention_mask[b, : keys.shape[2]].bool()
            context = keys[b, 0, seen, 0].long().tolist()
            # Position ids count real tokens only (holes in the cache do not count).
            assert int(position_ids[b, -1]) == len(context) - 1, (position_ids[b], len(context))
            logits[b, 0, self._next(context)] = 0.0
        return SimpleNamespace(logits=logits)


def prompt_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n",
                     add_special_tokens=False)["input_ids"]


def run_scripted(tokenizer, scripts: dict[str, list[str]], search, config, prompts=None):
    ids = {text: tuple(prompt_ids(tokenizer, text)) for text in scripts}
    model = ScriptedLM(tokenizer, {ids[t]: turns for t, turns in scripts.items()})
    order = prompts if prompts is not None else list(scripts)
    return generate_rollouts(model, tokenizer, [list(ids[t]) for t in order], search, config)


def scripted_turns(tokenizer, turns: list[str]):
    """An async `generate(context, max_tokens)` in the shape of veRL's rollout server that
    writes `turns` in order, one per call, as `ScriptedLM` does: a turn that ends with a stop
    string or EOS stops there (the server stops at stop strings), any other runs on with the
    filler to the budget. Log-prob -0.5 per token; `generate.contexts` records each call."""
    filler = filler_token(tokenizer)
    stops = tags.stop_strings(tuple({*all_specs(), REVERSE}))  # and </answer>
    contexts: list[list[int]] = []

    async def generate(context: list[int], max_tokens: int):
        contexts.append(list(context))
        text = turns[len(contexts) - 1] if len(contexts) <= len(turns) else ""
        ids = encode_turn(tokenizer, text)
        if not text.endswith((EOS, *stops)):
            ids += [filler] * max_tokens
        ids = ids[:max_tokens]
        return ids, [-0.5] * len(ids)

    generate.contexts = contexts
    return generate
