"""GRPO group advantages in plain Python (method.md, "GRPO"); the torch loss lives in the engine."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence


def group_advantages(
    rewards: Sequence[float], group_ids: Sequence[Hashable], eps: float = 1e-6,
    *, norm_by_std: bool = True,
) -> list[float]:
    """``(R_i - mean(R)) / (std(R) + eps)`` over each response's group, in input order.

    method.md, "GRPO": std is the unbiased sample standard deviation (N - 1);
    a group of one gets mean 0 and std 1 (so its advantage is ``R / (1 + eps)``);
    a group whose rewards are all equal gets 0.  Responses with the same
    ``group_ids`` value (the prompt's uid) form a group; groups need not be contiguous.
    ``norm_by_std`` False (Dr. GRPO, veRL's ``norm_adv_by_std_in_grpo: false``):
    ``R_i - mean(R)``, not divided, so a group of one gets ``R``.
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
            out[idx[0]] = group[0] / (1.0 + eps) if norm_by_std else group[0]
            continue
        if all(v == group[0] for v in group):
            continue  # all equal: advantage 0
        mean = math.fsum(group) / len(group)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in group) / (len(group) - 1))
        scale = std + eps if norm_by_std else 1.0
        for i in idx:
            out[i] = (values[i] - mean) / scale
    return out


def _groups(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> dict[Hashable, list[float]]:
    """Each group's rewards, by group id, in first-seen order."""
    members: dict[Hashable, list[float]] = {}
    for reward, gid in zip(rewards, group_ids, strict=True):
        members.setdefault(gid, []).append(float(reward))
    return members


def _no_spread(group: list[float]) -> bool:
    return all(v == group[0] for v in group)


def groups_with_spread(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> list[Hashable]:
    """The ids of the groups (of two or more responses) whose rewards are not all equal, in
    first-seen order: the groups that teach the update something (DAPO's dynamic sampling
    keeps these; veRL's ``filter_groups`` drops a group whose rewards have std 0)."""
    return [gid for gid, g in _groups(rewards, group_ids).items()
            if len(g) > 1 and not _no_spread(g)]


def zero_spread_share(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> float:
    """The share of groups (of two or more responses) whose rewards are all equal: their
    advantages are all 0, so they teach the update nothing (the collapse sentinel's
    `no_learning_signal`). 0.0 when no group has two responses."""
    groups = [g for g in _groups(rewards, group_ids).values() if len(g) > 1]
    return sum(_no_spread(g) for g in groups) / len(groups) if groups else 0.0


#: veRL's ``kl_penalty_forward`` keeps k3 finite: the log-ratio is clamped to this range
#: and the estimate to at most ``KL_K3_MAX``.
KL_K3_LOG_RATIO_CLAMP = 20.0
KL_K3_MAX = 10.0


def kl_estimate(logp: float, ref_logp: float, estimator: str) -> float:
    """One token's KL estimate between the policy (``logp``) and the reference.

    k1 ``logp - ref``; k2 ``(logp - ref)^2 / 2``; k3 ``exp(ref - logp) - (ref - logp) - 1``
    (method.md's low-variance estimator), with veRL's clamps (``kl_penalty_forward``:
    the log-ratio to +-20, the estimate to at most 10).
    """
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    if estimator == "k3":
        d = min(max(ref_logp - logp, -KL_K3_LOG_RATIO_CLAMP), KL_K3_LOG_RATIO_CLAMP)
        return min(math.exp(d) - d - 1.0, KL_K3_MAX)
    raise ValueError(f"kl estimator {estimator!r}: use k1, k2 or k3")


def sequence_kl(logps: Sequence[float], ref_logps: Sequence[float], estimator: str) -> float:
    """A response's KL: the sum of :func:`kl_estimate` over its model-written tokens (give
    those only). ``kl_in: reward`` subtracts ``kl_coef`` times this from the response's
    reward before the advantages, as veRL's ``apply_kl_penalty`` followed by GRPO's
    advantage (which sums the token-level rewards) does."""
    if len(logps) != len(ref_logps):
        raise ValueError(f"{len(logps)} log-probs but {len(ref_logps)} reference log-probs")
    return math.fsum(kl_estimate(p, r, estimator) for p, r in zip(logps, ref_logps, strict=True))
