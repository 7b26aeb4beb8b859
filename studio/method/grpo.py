"""GRPO group advantages in plain Python (method.md, "GRPO"); the torch loss lives in the engine."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence


def group_advantages(
    rewards: Sequence[float], group_ids: Sequence[Hashable], eps: float = 1e-6
) -> list[float]:
    """``(R_i - mean(R)) / (std(R) + eps)`` over each response's group, in input order.

    method.md, "GRPO": std is the unbiased sample standard deviation (N - 1);
    a group of one gets mean 0 and std 1 (so its advantage is ``R / (1 + eps)``);
    a group whose rewards are all equal gets 0.  Responses with the same
    ``group_ids`` value (the prompt's uid) form a group; groups need not be contiguous.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids")
    values = [float(r) for r in rewards]
    if not all(math.isfinite(v) for v in values):
        raise ValueError("rewards must be finite numbers")
    members: dict[Hashable, list[int]] = {}
    for i, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(i)
    out = [0.0] * len(values)
    for idx in members.values():
        group = [values[i] for i in idx]
        if len(group) == 1:
            out[idx[0]] = (group[0] - 0.0) / (1.0 + eps)
            continue
        if all(v == group[0] for v in group):
            continue  # all equal: advantage 0
        mean = math.fsum(group) / len(group)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in group) / (len(group) - 1))
        for i in idx:
            out[i] = (values[i] - mean) / (std + eps)
    return out


def zero_spread_share(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> float:
    """The share of groups (of two or more responses) whose rewards are all equal: their
    advantages are all 0, so they teach the update nothing (the collapse sentinel's
    `no_learning_signal`). 0.0 when no group has two responses."""
    members: dict[Hashable, list[float]] = {}
    for reward, gid in zip(rewards, group_ids, strict=True):
        members.setdefault(gid, []).append(float(reward))
    groups = [g for g in members.values() if len(g) > 1]
    return sum(all(v == g[0] for v in g) for g in groups) / len(groups) if groups else 0.0
