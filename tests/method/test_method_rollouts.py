"""The figures a step writes from its rollouts, defined once for both engines."""

from __future__ import annotations

import pytest

from studio.method.reward import PENALTY_NAMES, RewardBreakdown
from studio.method.rollouts import (
    Rollout,
    Segment,
    answer_metrics,
    reward_turns,
    rollout_metrics,
    rollout_segments,
    stored_tools,
)
from studio.method.tags import CALCULATOR_TOOL, SEARCH_TOOL
from studio.method.token_arrays import TokenArrays, char_counts, packed_size, token_ends, token_view


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


def test_an_evaluations_figures_are_means_over_its_records_and_none_is_zero():
    records = [{"em": 1.0, "subem": 1.0, "f1": 1.0, "acc": 1.0, "format": 1.0,
                "prediction": "Paris", "search_calls": 2},
               {"em": 0.0, "subem": 1.0, "f1": 0.5, "acc": 0.0, "format": 0.0,
                "prediction": None, "search_calls": 0}]
    metrics = answer_metrics(records)
    assert metrics == pytest.approx({"em": 0.5, "subem": 1.0, "f1": 0.75, "acc": 0.5,
                                     "format": 0.5, "search_calls": 1.0,
                                     "valid_search_rate": 0.5, "answer_rate": 0.5,
                                     "questions": 2})
    assert answer_metrics([])["questions"] == 0 and answer_metrics([])["em"] == 0.0


def test_stored_segments_count_tokens_and_style_the_models_tags():
    r = Rollout([], [Segment("model", [1, 2], "<search> q </search>"),
                     Segment("env", [3, 4, 5], "\n\n<information>x</information>\n\n")],
                "length", 1)
    first, model, env = rollout_segments(r, "<think>")
    assert first == {"source": "prompt", "text": "<think>", "tokens": 0,
                     "parts": [{"kind": "think", "text": "<think>"}]}
    assert model["tokens"] == 2 and [p["kind"] for p in model["parts"]] == ["search"]
    assert env["tokens"] == 3 and env["parts"] == [{"kind": "information", "text": env["text"]}]


def test_token_arrays_pack_to_nine_bytes_a_token_and_come_back_within_float16():
    arrays = TokenArrays(logprob=[-0.1234567, -7.5, 0.0], entropy=[2.345678, 0.0, 0.0],
                         advantage=[-1.2345, -1.2345, 0.0], mask=[1, 1, 0], chars=[3, 1, 70000])
    data = arrays.pack()
    assert len(data) == packed_size(3) == 5 + 27
    back = TokenArrays.unpack(data)
    for got, want in zip(back.logprob + back.entropy + back.advantage,
                         arrays.logprob + arrays.entropy + arrays.advantage, strict=True):
        assert abs(got - want) <= 2 ** -11 * abs(want)
    assert back.mask == [1, 1, 0] and back.chars == [3, 1, 0xFFFF]
    with pytest.raises(ValueError, match="version 1 arrays of 3 tokens"):
        TokenArrays.unpack(data[:-1])
    with pytest.raises(ValueError, match="one entry per response token"):
        TokenArrays([0.0], [0.0], [0.0], [1, 0], [1, 1])


def test_token_ends_follow_the_decoded_prefixes_and_wait_out_a_split_character():
    # the 2nd token holds half of "é": its prefix decodes with a replacement mark
    assert token_ends("ab é!", ["ab", "ab \ufffd", "ab é", "ab é!"]) == [2, 3, 4, 5]
    assert char_counts([2, 3, 4, 5]) == [2, 1, 1, 1]
    # a decoding that never quite matches (an environment text re-encoded) still ends whole
    assert token_ends("xy", ["X", "XY"]) == [0, 2]


def test_the_token_view_cuts_the_segments_text_and_hides_figures_of_masked_tokens():
    segments = [{"source": "prompt", "text": "<think>", "tokens": 0},
                {"source": "model", "text": "ab", "tokens": 2},
                {"source": "env", "text": "<information>x</information>", "tokens": 1}]
    arrays = TokenArrays(logprob=[-0.5, -1.0, 0.0], entropy=[1.0, 2.0, 0.0],
                         advantage=[0.5, 0.5, 0.0], mask=[1, 1, 0], chars=[1, 1, 28])
    view = token_view(segments, arrays)
    assert view["text"] == ["a", "b", "<information>x</information>"]
    assert view["segment"] == [1, 1, 2] and view["mask"] == [1, 1, 0]
    assert view["logprob"] == [-0.5, -1.0, None] and view["entropy"] == [1.0, 2.0, None]
    assert view["advantage"] == [0.5, 0.5, 0.0]
    assert view["recorded"] and view["tokens"] == 3 and view["bytes"] == packed_size(3)
    empty = token_view(segments, None)
    assert not empty["recorded"] and empty["text"] == [] and empty["bytes"] == 0


def test_reward_turns_say_what_each_model_turn_did():
    segments = [
        {"source": "prompt", "text": "<think>", "tokens": 0},
        {"source": "model", "text": "hm</think><search> moss lamp </search>", "tokens": 9},
        {"source": "env", "text": "\n\n<information>Doc 1</information>\n\n", "tokens": 6},
        {"source": "model", "text": "<answer> Ida </answer><answer> Ida Varn </answer>",
         "tokens": 8},
    ]
    first, second = reward_turns(segments)
    assert first == {"turn": 1, "tokens": 9, "think": True, "calls": [("search", "moss lamp")],
                     "answers": [], "returned": 6, "scored": False}
    assert second == {"turn": 2, "tokens": 8, "think": False, "calls": [],
                      "answers": ["Ida", "Ida Varn"], "returned": 0, "scored": True}


def test_reward_turns_read_the_calls_of_the_tools_the_stored_parts_show():
    """A calculator run's stored parts hold `calc` and `result`: its calls are read (a search
    run's `<calc>` is text, as the reward read it)."""
    text = "<calc> 709 * 62 </calc>"
    calc = [{"source": "model", "text": text, "tokens": 7,
             "parts": [{"kind": "calc", "text": text}]},
            {"source": "env", "text": "\n\n<result>43958</result>\n\n", "tokens": 5,
             "parts": [{"kind": "result", "text": "\n\n<result>43958</result>\n\n"}]}]
    assert stored_tools(calc) == (CALCULATOR_TOOL,)
    assert reward_turns(calc)[0]["calls"] == [("calculator", "709 * 62")]
    searched = [{"source": "model", "text": text, "tokens": 7,
                 "parts": [{"kind": "text", "text": text}]}]
    assert stored_tools(searched) == (SEARCH_TOOL,) and reward_turns(searched)[0]["calls"] == []
