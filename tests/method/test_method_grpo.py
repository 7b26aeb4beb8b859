"""Group advantages (method.md, "GRPO")."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studio.method.grpo import group_advantages

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
