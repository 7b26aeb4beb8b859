"""Group advantages (method.md, "GRPO")."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.method.grpo import (
    group_advantages,
    groups_with_spread,
    kl_estimate,
    sequence_kl,
    zero_spread_share,
)

EPS = 1e-6
S = math.sqrt(1 / 3)  # unbiased std of [1, 0, 1, 0]


@pytest.mark.parametrize(
    "rewards, groups, expected",
    [
        ([1, 0, 1, 0], ["a"] * 4, [0.5 / (S + EPS), -0.5 / (S + EPS)] * 2),
        ([0.7], ["a"], [0.7 / (1 + EPS)]),  # group of one: mean 0, std 1
        ([0.0], ["a"], [0.0]),
        ([0.3, 0.3, 0.3], [1, 1, 1], [0.0, 0.0, 0.0]),  # all equal
        ([0.1, 0.1, 0.1, 0.1], [1, 1, 1, 1], [0.0] * 4),
        ([1.0, 2.0], ["x", "x"], [-0.5 / (math.sqrt(0.5) + EPS), 0.5 / (math.sqrt(0.5) + EPS)]),
        # interleaved groups keep input order
        (
            [1, 5, 0, 5, 0.4],
            ["a", "b", "a", "b", "c"],
            [
                0.5 / (math.sqrt(0.5) + EPS),
                0.0,
                -0.5 / (math.sqrt(0.5) + EPS),
                0.0,
                0.4 / (1 + EPS),
            ],
        ),
        ([], [], []),
    ],
)
def test_group_advantages(rewards, groups, expected):
    assert group_advantages(rewards, groups) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_eps_is_used():
    assert group_advantages([2.0], [0], eps=1.0) == [1.0]


def test_errors():
    with pytest.raises(ValueError):
        group_advantages([1.0, 2.0], [0])
    with pytest.raises(ValueError):
        group_advantages([float("nan"), 1.0], [0, 0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-10, 10), st.integers(0, 4)), max_size=30))
def test_group_properties(pairs):
    rewards = [r for r, _ in pairs]
    groups = [g for _, g in pairs]
    adv = group_advantages(rewards, groups)
    assert len(adv) == len(rewards)
    for g in set(groups):
        members = [a for a, gid in zip(adv, groups, strict=True) if gid == g]
        if len(members) > 1:
            assert abs(sum(members)) < 1e-6 * len(members) * 10  # centred within each group


@pytest.mark.parametrize(
    "rewards, groups",
    [
        ([1, 0, 1, 0], ["a"] * 4),
        ([1, 5, 0, 5, 0.4], ["a", "b", "a", "b", "c"]),
        ([0.2, 0.9, 0.4, 0.4], [0, 0, 1, 1]),
        ([0.7], ["a"]),
    ],
)
def test_without_std_the_advantage_is_reward_minus_the_group_mean(rewards, groups):
    """Dr. GRPO (veRL's norm_adv_by_std_in_grpo: false): R - mean(R), a group of one R."""
    expected = []
    for r, g in zip(rewards, groups, strict=True):
        members = [x for x, h in zip(rewards, groups, strict=True) if h == g]
        expected.append(r - (sum(members) / len(members) if len(members) > 1 else 0.0))
    got = group_advantages(rewards, groups, norm_by_std=False)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert group_advantages(rewards, groups) != got or all(e == 0 for e in expected)


def test_groups_with_spread_are_the_ones_dynamic_sampling_keeps():
    rewards = [1, 1, 0.5, 0.0, 0.3, 0.3, 0.9]
    groups = ["a", "a", "b", "b", "c", "c", "d"]  # d: a group of one teaches nothing either
    assert groups_with_spread(rewards, groups) == ["b"]
    assert zero_spread_share(rewards, groups) == pytest.approx(2 / 3)
    assert groups_with_spread([0.0, 1.0, 2.0, 2.0], [1, 1, 0, 0]) == [1]


@pytest.mark.parametrize("logp, ref", [(-1.2, -0.7), (-0.3, -2.5), (-4.0, -4.0), (-0.01, -9.0)])
def test_kl_estimates_are_the_k1_k2_k3_formulas(logp, ref):
    d = ref - logp
    assert kl_estimate(logp, ref, "k1") == pytest.approx(logp - ref)
    assert kl_estimate(logp, ref, "k2") == pytest.approx(0.5 * (logp - ref) ** 2)
    assert kl_estimate(logp, ref, "k3") == pytest.approx(math.exp(d) - d - 1)
    assert kl_estimate(logp, ref, "k3") >= 0 and kl_estimate(logp, ref, "k2") >= 0


def test_k3_is_clamped_as_verl_does():
    """veRL's kl_penalty_forward: log-ratio within +-20, estimate at most 10."""
    assert kl_estimate(-1000.0, 0.0, "k3") == 10.0  # exp(1000) would overflow
    assert kl_estimate(0.0, -15.0, "k3") == 10.0  # exp(-15) + 15 - 1 = 14
    assert kl_estimate(0.0, -5.0, "k3") == pytest.approx(math.exp(-5) + 4)
    with pytest.raises(ValueError):
        kl_estimate(0.0, 0.0, "k4")


def test_sequence_kl_sums_the_tokens():
    logps, refs = [-1.0, -0.5, -2.0], [-1.5, -0.5, -0.2]
    for estimator in ("k1", "k2", "k3"):
        want = sum(kl_estimate(p, r, estimator) for p, r in zip(logps, refs, strict=True))
        assert sequence_kl(logps, refs, estimator) == pytest.approx(want)
    assert sequence_kl(logps, refs, "k1") == pytest.approx(0.5 + 0.0 - 1.8)
    assert sequence_kl([], [], "k3") == 0.0
    with pytest.raises(ValueError):
        sequence_kl([-1.0], [], "k1")
