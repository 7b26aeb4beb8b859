"""A small in-process generation backend with the call shape of veRL's rollout server manager.

`await server.generate(request_id=..., prompt_ids=..., sampling_params=...)`
returns a veRL `TokenOutput` (token ids, log-probs, stop reason) from a tiny
transformers model on CPU, honouring what vLLM honours for the agent loop:
`max_tokens`, `stop` strings (the token that completes one is kept, the
rest of the turn is not generated), the EOS token, `temperature` and
`logprobs` (log-softmax of the temperature-scaled logits, vLLM's
`processed_logprobs`).

A random tiny model never writes a tag, so a test may script a turn: the
model then emits exactly the tokens of the scripted text (each one's
log-prob is still the model's), which is how a `<search>` call is forced.
Every call is recorded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch


@dataclass
class Call:
    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    log_probs: list[float]


class TinyGenerationServer:
    def __init__(self, model, tokenizer, scripted_turns: list[str] = (), seed: int = 0):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.scripted = deque(scripted_turns)
        self.generator = torch.Generator().manual_seed(seed)
        self.calls: list[Call] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        max_tokens = int(params.pop("max_tokens"))
        stops = list(params.pop("stop", []) or [])
        temperature = float(params.get("temperature", 1.0))
        script = self.tokenizer(self.scripted.popleft(), add_special_tokens=False)["input_ids"] \
            if self.scripted else []
        ids, logprobs = self._sample(list(prompt_ids), max_tokens, stops, temperature, script)
        self.calls.append(Call(request_id, list(prompt_ids), ids, logprobs))
        return TokenOutput(token_ids=ids, log_probs=logprobs if params.get("logprobs") else None,
                           stop_reason="completed")

    @torch.inference_mode()
    def _sample(self, context, max_tokens, stops, temperature, script):
        eos = self.tokenizer.eos_token_id
        out = self.model(torch.tensor([context]), use_cache=True)
        cache, ids, logprobs = out.past_key_values, [], []
        while len(ids) < max_tokens:
            logits = out.logits[0, -1].float() / max(temperature, 1e-6)
            logp = torch.log_softmax(logits, -1)
            if len(ids) < len(script):
                token = script[len(ids)]
            elif temperature == 0:
                token = int(logits.argmax())
            else:
                token = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
            ids.append(token)
            logprobs.append(float(logp[token]))
            if token == eos or any(s in self.tokenizer.decode(ids) for s in stops):
                break
            out = self.model(torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
        return ids, logprobs
