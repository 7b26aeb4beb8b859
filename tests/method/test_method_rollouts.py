"""The figures a step writes from its rollouts, defined once for both engines."""

from __future__ import annotations

import pytest

from studio.method.reward import PENALTY_NAMES, RewardBreakdown
from studio.method.rollouts import Rollout, Segment, rollout_metrics, rollout_segments


def rollout(*parts: tuple[str, int], calls: int = 0) -> Rollout:
    segments = [Segment(source, list(range(n)), f"{source}{n}") for source, n in parts]
    return Rollout([1, 2, 3], segments, "answer", calls)


def reward(score: float, answer: str | None = "x", penalties=()) -> RewardBreakdown:
    return RewardBreakdown(score, acc=score, format=1.0, em=score, subem=score, f1=score,
                           answer=answer, penalties={p: -0.1 for p in penalties})


def test_masked_fraction_is_the_environments_share_of_the_response_tokens():
    # 2 env tokens out of 7 response tokens (the prompt is not a response token)
    rollouts = [rollout(("model", 1), ("env", 2), ("model", 2), calls=1), rollout(("model", 2))]
    metrics = rollout_metrics(rollouts, [reward(1.0), reward(0.0, answer=None)])
    assert metrics["masked_fraction"] == pytest.approx(2 / 7)
    assert metrics["model_tokens"] == pytest.approx(5 / 2)
    assert metrics["response_length"] == pytest.approx(7 / 2)


def test_each_figure_is_written_once_under_one_name():
    penalty = PENALTY_NAMES[0]
    rollouts = [rollout(("model", 3), calls=2), rollout(("model", 3)), rollout(("model", 3))]
    metrics = rollout_metrics(rollouts, [reward(1.0), reward(0.5, penalties=[penalty]),
                                         reward(0.0, answer=None)])
    assert "score" not in metrics  # the mean reward is reward_mean
    assert metrics["reward_mean"] == pytest.approx(0.5)
    assert (metrics["reward_min"], metrics["reward_max"]) == (0.0, 1.0)
    assert metrics["search_calls"] == pytest.approx(2 / 3)
    assert metrics["valid_search_rate"] == pytest.approx(1 / 3)
    assert metrics["answer_rate"] == pytest.approx(2 / 3)
    assert metrics[f"penalty_{penalty}"] == pytest.approx(1 / 3)


def test_stored_segments_count_tokens_and_style_the_models_tags():
    r = Rollout([], [Segment("model", [1, 2], "<search> q </search>"),
                     Segment("env", [3, 4, 5], "\n\n<information>x</information>\n\n")],
                "length", 1)
    first, model, env = rollout_segments(r, "<think>")
    assert first == {"source": "prompt", "text": "<think>", "tokens": 0,
                     "parts": [{"kind": "think", "text": "<think>"}]}
    assert model["tokens"] == 2 and [p["kind"] for p in model["parts"]] == ["search"]
    assert env["tokens"] == 3 and env["parts"] == [{"kind": "information", "text": env["text"]}]
