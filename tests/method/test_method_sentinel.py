"""The collapse sentinel on synthetic series: each signal fires on its collapse and nothing
fires on a healthy run; once per episode; rebuilt by replay; its rules' bounds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from studio.method.grpo import zero_spread_share
from studio.method.sentinel import (
    SIGNALS,
    WATCHED_METRICS,
    Rule,
    Sentinel,
    alarm_message,
    default_rules,
)

LIMIT = 512  # the response token limit of these series
STEPS, BREAK = 60, 30


def healthy(steps: int = STEPS, seed: int = 0) -> list[dict[str, float]]:
    """A noisy run that learns: format and searching rise, entropy eases, KL grows
    smoothly, a third to a half of the groups have no reward spread."""
    rng = random.Random(seed)
    return [{
        "format": min(1.0, 0.2 + 0.01 * t + rng.gauss(0, 0.05)),
        "search_calls": max(0.0, 0.6 + 0.01 * t + rng.gauss(0, 0.2)),
        "entropy": 1.5 - 0.005 * t + rng.gauss(0, 0.1),
        "response_length": 200 + rng.gauss(0, 30),
        "zero_spread_groups": rng.choice([0.25, 0.375, 0.5, 0.625]),
        "kl": 0.0 if t == 0 else 0.001 + 0.0003 * t * (1 + rng.gauss(0, 0.2)),
        "grad_norm": abs(0.5 + rng.gauss(0, 0.2)),
        "reward_mean": 0.1 + 0.005 * t,
    } for t in range(steps)]


def collapsed(signal: str) -> list[dict[str, float]]:
    """The healthy run with one metric breaking down from step BREAK on (a spike: at it)."""
    series = healthy()
    for t, m in enumerate(series):
        if t < BREAK:
            continue
        match signal:
            case "format_falling":
                m["format"] *= 0.3
            case "search_stopped":
                m["search_calls"] = 0.0
            case "entropy_collapse":
                m["entropy"] = 0.1
            case "length_at_limit":
                m["response_length"] = LIMIT - 2
            case "length_empty":
                m["response_length"] = 1.0
            case "no_learning_signal":
                m["zero_spread_groups"] = 1.0
            case "kl_spike" if t == BREAK:
                m["kl"] *= 30
            case "grad_norm_spike" if t == BREAK:
                m["grad_norm"] = 20.0
    return series


def fired(series, rules=None) -> list[tuple[int, str]]:
    sentinel = Sentinel(rules or default_rules(), LIMIT)
    return [(t, a.signal) for t, m in enumerate(series) for a in sentinel.observe(m)]


def test_a_healthy_run_raises_no_alarm():
    for seed in range(5):
        assert fired(healthy(seed=seed)) == [], seed


@pytest.mark.parametrize("signal", list(SIGNALS))
def test_each_signal_fires_once_on_its_collapse_and_soon(signal):
    alarms = fired(collapsed(signal))
    assert [name for _, name in alarms] == [signal]
    step = alarms[0][0]
    assert BREAK <= step < BREAK + SIGNALS[signal].window


RECORDED = Path(__file__).resolve().parents[1] / "support" / "recorded"


def recorded_alarms(run: dict) -> list[tuple[int, str]]:
    sentinel = Sentinel(default_rules(), run["max_response_tokens"])
    return [(t, a.signal) for t, m in enumerate(run["steps"]) for a in sentinel.observe(m)]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_recorded_icrl_effect_run_alarms_only_where_its_searching_collapsed(seed):
    """The ICRL-effect bench's curriculum arm, recorded (its `about` says how): 20 steps of
    SmolLM2 through 3 -> 2 -> 0 exemplars, every signal at its default. It searched while it
    had exemplars (noisy format, length, entropy and spread, KL growing, stage changes) and
    nothing fires there; with none it stopped searching from its first step (step 12) on,
    and `search_stopped` fires, alone, when its 5-step window has seen it: the step the
    premature-termination watch warned at, live, in the same run. Two seeds, the same
    story."""
    run = json.loads((RECORDED / f"icrl_effect_curriculum_seed{seed}.json").read_text())
    steps = run["steps"]
    assert [m["exemplars"] for m in steps] == [3] * 6 + [2] * 6 + [0] * 8
    assert min(m["search_calls"] for m in steps[:12]) > 0
    assert {m["search_calls"] for m in steps[12:]} == {0.0}
    assert recorded_alarms(run) == [(16, "search_stopped")]
    warned = [(e["step"], e["message"]) for e in run["events"] if e["kind"] == "warning"]
    assert [step for step, _ in warned] == [16, 16]
    assert "after the last stage change" in warned[0][1]  # the premature-termination watch
    assert warned[1][1].startswith("search_stopped: ")  # the sentinel, live

    searching = [*steps[:12], *(dict(m, search_calls=steps[11]["search_calls"])
                                for m in steps[12:])]  # the same run, had it kept searching
    assert recorded_alarms({**run, "steps": searching}) == []


def test_a_recorded_exemplar_free_run_raises_no_alarm():
    """The same bench's exemplar-free arm (seed 1): 20 real steps that move a lot without
    collapsing (format 0 -> 0.9, answers from 235 tokens down to 14 as it learns to answer at
    once, entropy up to 4.2, KL up to 0.6, grad norm up to 1.9, a few searches early on):
    no signal fires, and none fired live."""
    run = json.loads((RECORDED / "icrl_effect_exemplar_free_seed1.json").read_text())
    steps = run["steps"]
    assert len(steps) == 20 and {m["exemplars"] for m in steps} == {0}
    assert max(m["kl"] for m in steps) > 0.5 and max(m["format"] for m in steps) > 0.8
    assert recorded_alarms(run) == []
    assert [e for e in run["events"] if e["kind"] == "warning"] == []


def test_a_signal_fires_again_only_after_its_metric_recovered():
    series = collapsed("search_stopped")
    for m in series[45:50]:
        m["search_calls"] = 1.0
    for m in series[50:]:
        m["search_calls"] = 0.0
    assert [t for t, _ in fired(series)] == [30 + 4, 50 + 4]


def test_a_run_that_starts_on_the_wrong_side_is_not_a_collapse():
    """A tiny model with no reward spread and no search from step 0 never fires: the set-up
    is wrong, nothing collapsed."""
    flat = [{"format": 0.0, "search_calls": 0.0, "entropy": 6.2, "response_length": 12.0,
             "zero_spread_groups": 1.0, "kl": 0.0, "grad_norm": 0.0}] * 30
    assert fired(flat) == []


def test_off_is_not_watched_and_a_missing_metric_is_skipped():
    rules = {**default_rules(), "search_stopped": Rule("off", 5, 0.9)}
    assert fired(collapsed("search_stopped"), rules) == []
    without = [{k: v for k, v in m.items() if k != "zero_spread_groups"}
               for m in collapsed("no_learning_signal")]  # the veRL ingest of an empty dump
    assert fired(without) == []
    nulls = [{**m, "kl": None} for m in collapsed("kl_spike")]  # a stored non-finite value
    assert fired(nulls) == []


def test_replay_rebuilds_the_state_so_a_fired_signal_stays_fired():
    series = collapsed("entropy_collapse")
    live = Sentinel(default_rules(), LIMIT)
    for m in series[:40]:
        live.observe(m)
    resumed = Sentinel.replay(default_rules(), LIMIT, live.history)
    assert set(resumed.history[0]) <= set(WATCHED_METRICS)
    assert [resumed.observe(m) for m in series[40:]] == [live.observe(m) for m in series[40:]]
    assert all(a == [] for a in (live.observe(m) for m in series[40:]))


def test_windows_and_thresholds_are_the_runs():
    series = collapsed("format_falling")  # format at 30% of its level: a 70% fall
    assert fired(series, {"format_falling": Rule("warn", 5, 0.8)}) == []
    assert fired(series, {"format_falling": Rule("warn", 2, 0.5)})[0][0] == BREAK + 1


def test_the_message_says_what_fell_what_it_means_and_what_to_try():
    sentinel = Sentinel({"search_stopped": Rule("pause", 5, 0.9)}, LIMIT)
    alarms = [a for m in collapsed("search_stopped") for a in sentinel.observe(m)]
    message = alarm_message(alarms[0])
    assert message.startswith("search_stopped: search_calls averaged 0 over the last 5 steps, "
                              "down from ")
    assert "premature termination" in message and "Try: make the curriculum gentler" in message
    assert SIGNALS["search_stopped"].title == "Tool use stopped"
    assert "That is: calls of its tools per rollout fell to almost none after the model had " \
        "been using them: it has stopped calling its tools" in message  # any tool, not search
    assert message.endswith("The run is paused at a checkpoint; Resume continues it from there.")
    assert alarm_message(alarms[0].to_dict()) == message
    share = Sentinel({"length_at_limit": Rule("warn", 5, 0.95)}, LIMIT)
    alarm = [a for m in collapsed("length_at_limit") for a in share.observe(m)][0]
    assert "response_length averaged 100% over the last 5 steps (alarm at 95%)" in \
        alarm_message(alarm)
    assert "Resume" not in alarm_message(alarm)


@pytest.mark.parametrize("signal, rule, message", [
    ("format_falling", Rule("warn", 5, 1.0), "threshold: the share of the earlier high lost"),
    ("no_learning_signal", Rule("warn", 5, 1.5), "threshold: a share, above 0 and at most 1"),
    ("length_empty", Rule("warn", 5, -1.0), "threshold: a token count, 0 or more"),
    ("kl_spike", Rule("warn", 5, 1.0), "threshold: how many times the median"),
    ("kl_spike", Rule("warn", 0, 10.0), "window: must be a whole number of steps from 1"),
    ("kl_spike", Rule("stop", 5, 10.0), "action: must be one of off, warn, pause"),
    ("kl_spike", Rule("warn", 5, float("nan")), "threshold: must be a finite number"),
])
def test_rules_out_of_bounds_say_which_bound(signal, rule, message):
    errors = rule.errors(signal)
    assert len(errors) == 1 and errors[0].startswith(message), errors


def test_every_default_is_within_its_bounds():
    assert all(Rule.default(name).errors(name) == [] for name in SIGNALS)


def test_zero_spread_share_counts_groups_whose_rewards_are_all_equal():
    assert zero_spread_share([0.2, 0.2, 0.0, 1.0, 0.0, 0.0], [0, 0, 1, 1, 2, 2]) == 2 / 3
    assert zero_spread_share([0.5, 0.5], ["a", "b"]) == 0.0  # groups of one say nothing
    with pytest.raises(ValueError):
        zero_spread_share([0.5], [0, 1])


def test_a_recorded_calculator_run_alarms_where_its_zero_shot_text_broke_into_noise():
    """The ICRL-effect bench's curriculum arm on the arithmetic pack (seed 0, recorded: its
    `about` says how), stopped after 24 steps. With exemplars it called the calculator in most
    rollouts and nothing fires; at its first step without them its text broke into invented
    tags and runs of them (format 0.94 -> 0.35, entropy 0.7-1.0 -> 3.6, KL rising to 0.26).
    `format_falling` fires once its 5-step window has seen the fall, the step the
    premature-termination watch warned at, live. No KL or entropy level fires: KL 0.6 and
    entropy 4.2 were reached by the exemplar-free search run above without a collapse, and
    entropy rises at every removal of exemplars (copying is low-entropy)."""
    run = json.loads((RECORDED / "calc_curriculum_seed0.json").read_text())
    steps = run["steps"]
    assert [m["exemplars"] for m in steps] == [3] * 8 + [2] * 8 + [0] * 8
    assert min(m["format"] for m in steps[6:16]) > 0.8 > 0.45 > max(m["format"] for m in steps[16:])
    assert max(m["entropy"] for m in steps[:16]) < 1.1 and steps[-1]["entropy"] > 3
    assert recorded_alarms(run) == [(20, "format_falling")]
    warned = [(e["step"], e["message"]) for e in run["events"] if e["kind"] == "warning"]
    assert [step for step, _ in warned] == [20, 20]
    assert {message.split(":")[0] for _, message in warned} == {
        "format_falling", "tool calls per rollout fell from 0.7 to 0.1 (86%) after the last "
        "stage change"}


@pytest.mark.parametrize(("tools", "using"), [
    (["search"], "searching"), (["calculator"], "calling the calculator"),
    (["search", "python"], "searching or running Python")])
def test_the_premature_termination_words_name_the_run_s_tools(tools, using):
    """The sentinel's alarm, the premature-termination warning and the launch's short-stage
    warning say what the model stopped doing with the run's own tools."""
    from studio.method.curriculum import Curriculum, premature_message
    from studio.method.tools import using_words

    assert using_words(tools) == using
    alarm = {"signal": "search_stopped", "value": 0.0, "reference": 1.2, "window": 5,
             "action": "warn"}
    assert f"it has stopped {using} (premature termination)" in alarm_message(alarm, using)
    warning = {"before": 0.9, "after": 0.1, "drop": 0.89}
    assert f"answering without {using} (premature termination)" in premature_message(
        warning, using)
    (short,) = [w for w in Curriculum.from_counts((3, 0), 2).warnings(using=using)
                if "lasts only" in w]
    assert f"stop {using} and answer at once" in short
