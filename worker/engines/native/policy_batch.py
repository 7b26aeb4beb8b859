"""The batch a GRPO step scores and trains on: rollouts as right-padded tensors (method.md,
"Loss masking").

:func:`make_batch` turns rollouts (prompt ids, response ids, a per-token
response mask: 1 = sampled by the model, 0 = written by the environment)
and the group advantages (``studio.method.grpo.group_advantages``) into a
right-padded :class:`PolicyBatch` on CPU. It is a module of its own because
both halves of a training step read it: the log-probs
(:mod:`worker.engines.native.logprobs`) and the loss and update
(:mod:`worker.engines.native.grpo`).

The loss mask is 0 on prompt tokens, environment tokens (information blocks,
corrective messages) and padding; environment tokens stay in ``input_ids`` as
context for the model's later tokens, they are just never scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["PolicyBatch", "make_batch"]


@dataclass
class PolicyBatch:
    """Right-padded rollouts, on CPU.

    ``input_ids`` / ``attention_mask``: ``[N, T]`` prompt + response + padding.
    ``loss_mask``: ``[N, T]`` float, 1 on the response tokens the model
    sampled, 0 on prompt, environment tokens and padding.
    ``advantages``: ``[N]``, one per sequence (the same for all its tokens).
    ``prompt_lengths``: ``[N]``, where each response starts (filled by
    :func:`make_batch`; when ``None`` the response is taken to start at the
    first token with mask 1, which is right for rollouts since the model
    always writes a response's first token).
    ``guided``: ``[N]`` bool, True for a rollout sampled with exemplars as a hint
    and trained on the prompt without them (``studio.method.guidance``); None
    when the step guided none.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    prompt_lengths: torch.Tensor | None = None
    guided: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def rows(self, index: torch.Tensor | Sequence[int]) -> PolicyBatch:
        """The sequences at ``index`` (in that order), as a new batch."""
        index = torch.as_tensor(index, dtype=torch.long)
        return PolicyBatch(
            input_ids=self.input_ids[index],
            attention_mask=self.attention_mask[index],
            loss_mask=self.loss_mask[index],
            advantages=self.advantages[index],
            prompt_lengths=None if self.prompt_lengths is None else self.prompt_lengths[index],
            guided=None if self.guided is None else self.guided[index],
        )


def make_batch(
    prompts: list[list[int]],
    responses: list[list[int]],
    response_masks: list[list[int]],
    advantages: list[float],
    pad_token_id: int,
) -> PolicyBatch:
    """Concatenate prompt + response per rollout and right-pad to the longest.

    ``response_masks[i]`` has one entry per token of ``responses[i]``: 1 for a
    token the model sampled, 0 for one the environment inserted. The loss
    mask is that mask on the response, 0 on the prompt and on padding.
    """
    n = len(prompts)
    if not (len(responses) == len(response_masks) == len(advantages) == n):
        raise ValueError(
            f"{n} prompts, {len(responses)} responses, {len(response_masks)} response masks "
            f"and {len(advantages)} advantages: give one of each per rollout"
        )
    if n == 0:
        raise ValueError("an empty batch: give at least one rollout")
    lengths = []
    for i, (prompt, response, mask) in enumerate(
        zip(prompts, responses, response_masks, strict=True)
    ):
        if len(response) != len(mask):
            raise ValueError(
                f"rollout {i}: {len(response)} response tokens but {len(mask)} mask entries"
            )
        if any(m not in (0, 1) for m in mask):
            raise ValueError(f"rollout {i}: response mask entries must be 0 or 1")
        lengths.append(len(prompt) + len(response))
    width = max(max(lengths), 1)
    input_ids = torch.full((n, width), int(pad_token_id), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    for i, (prompt, response, mask) in enumerate(
        zip(prompts, responses, response_masks, strict=True)
    ):
        p, length = len(prompt), lengths[i]
        if length:
            input_ids[i, :length] = torch.tensor(list(prompt) + list(response), dtype=torch.long)
        attention_mask[i, :length] = 1
        if response:
            loss_mask[i, p:length] = torch.tensor(mask, dtype=torch.float32)
    adv = torch.tensor([float(a) for a in advantages], dtype=torch.float32)
    if not torch.isfinite(adv).all():
        raise ValueError("advantages must be finite numbers")
    return PolicyBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        advantages=adv,
        prompt_lengths=torch.tensor([len(p) for p in prompts], dtype=torch.long),
    )
