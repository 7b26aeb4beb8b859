"""Guided ICRL: exemplars as a hint while sampling, never in the prompt the model learns from.

The 3 -> 2 -> 0 curriculum (method.md, "The curriculum") shows every rollout of a
group the stage's exemplars, so every rollout copies the call and the call carries no
advantage; once the exemplars go, nothing taught "call without being shown" and the
habit dies (../docs/engine.md, "Guided ICRL"). In ``mixed`` guidance, a stage with
exemplars samples part of each group (``share``) on the prompt with them and the rest on
the prompt without; every rollout of the group is then scored, regularised and trained
on the prompt WITHOUT exemplars. Inside one group, a guided rollout that calls and is
right beats a zero-shot one that answers at once, and that difference is learned on the
zero-shot prompt. Stages with 0 exemplars are unchanged.

``when``: ``always`` guides every group of a stage with exemplars; ``all-failed``
(Guide-GRPO's rule) samples the zero-shot part first and guides only the questions whose
zero-shot rollouts were all wrong; the others get zero-shot rollouts in place of the
guided ones, so a group's size never changes.

``shaping`` of a guided rollout's tokens (whose log-probs under the zero-shot prompt can
be very low): ``none`` treats them as on-policy; ``luffy`` (LUFFY's policy shaping)
replaces the clipped ratio term by ``p / (p + gamma)`` of the token's probability under
the current policy, unclipped (:func:`luffy_weight`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

GuidanceMode = Literal["shown", "mixed"]
Shaping = Literal["none", "luffy"]
When = Literal["always", "all-failed"]

MODES: tuple[str, ...] = ("shown", "mixed")
SHAPINGS: tuple[str, ...] = ("none", "luffy")
WHENS: tuple[str, ...] = ("always", "all-failed")


def guided_count(share: float, group_size: int) -> int:
    """How many of a group's rollouts see the exemplars: ``share`` of ``group_size``,
    rounded half up, at least one and at most ``group_size - 1`` (a group needs both
    kinds for the mixture to teach anything). ValueError for a group of one."""
    if group_size < 2:
        raise ValueError(f"a mixed group needs at least 2 rollouts, got {group_size}")
    if not 0 < share < 1:
        raise ValueError(f"share must be between 0 and 1 (exclusive), got {share}")
    return min(group_size - 1, max(1, int(share * group_size + 0.5)))


def needs_guidance(zero_shot_accuracies: Sequence[float]) -> bool:
    """Guide-GRPO's rule (``when: all-failed``): guide a question when every zero-shot
    rollout of it was wrong (accuracy 0); none sampled counts as all wrong."""
    return not any(acc > 0 for acc in zero_shot_accuracies)


def luffy_weight(probability: float, gamma: float) -> float:
    """LUFFY's shaping of an off-policy token: ``p / (p + gamma)``, the function whose
    gradient replaces the ratio's (``gamma`` > 0; 0.1 in LUFFY). Its gradient in log p,
    ``p * gamma / (p + gamma)**2``, peaks at ``p = gamma`` and damps both the tokens the
    policy all but rules out and the ones it is already sure of."""
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    return probability / (probability + gamma)


def max_call_bonus(acc_weight: float, format_weight: float) -> float:
    """The call bonus must stay below this (``acc_weight - format_weight``) so that a right
    answer always beats a wrong one: the worst right answer scores ``acc_weight`` (no
    format, no call), the best wrong one ``format_weight + bonus``."""
    return round(acc_weight - format_weight, 12)  # 0.8 - 0.2 is 0.6000000000000001
