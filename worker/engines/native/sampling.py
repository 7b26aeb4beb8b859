"""Sampling for the rollout: temperature and top-p in one batched op on the model's device.

Inverse-CDF sampling with one uniform draw per row (several times cheaper than
``torch.multinomial`` on CPU); temperature 0 is greedy.
"""

from __future__ import annotations

import torch


def device_generator(generator: torch.Generator | None, device: torch.device):
    """`generator` when it lives on `device`; else a generator there, seeded from it."""
    if generator is None or (
        generator.device.type == device.type
        and (generator.device.index or 0) == (device.index or 0)
    ):
        return generator
    seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def sample(logits: torch.Tensor, temperature: float, top_p: float,
           generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row of `logits` [rows, vocab]."""
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_p < 1.0:
        sorted_logits, idx = logits.sort(-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs > top_p  # the first token always stays
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)
    # A float64 running sum; right=True never picks a token of probability zero.
    cdf = logits.softmax(-1).double().cumsum(-1)
    u = torch.rand((cdf.shape[0], 1), generator=generator, device=cdf.device,
                   dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)
