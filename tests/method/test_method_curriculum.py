"""Curricula: presets, schedules, validation, JSON, adaptive advance (method.md, curriculum),
the soft mix."""

from __future__ import annotations

import json
import re

import pytest

from studio.method.curriculum import (
    PREMATURE_WINDOW,
    PRESETS,
    AdaptiveController,
    AdaptiveRule,
    Curriculum,
    CurriculumError,
    PrematureWatch,
    SoftMix,
    Stage,
    premature_message,
    should_advance,
)


@pytest.mark.parametrize(
    "name, counts",
    [("3-2-0", [3, 2, 0]), ("3-0", [3, 0]), ("3-2-1-0", [3, 2, 1, 0]), ("0", [0])],
)
def test_presets(name, counts):
    c = Curriculum.preset(name)
    assert [s.exemplars for s in c.stages] == counts
    assert all(s.steps == 100 for s in c.stages)
    assert c.total_steps == 100 * len(counts)
    assert c.spec == name
    assert name in PRESETS


def test_unknown_preset():
    with pytest.raises(CurriculumError, match="unknown preset"):
        Curriculum.preset("5-0")


@pytest.mark.parametrize(
    "step, stage, exemplars",
    [
        (0, 0, 3),
        (99, 0, 3),
        (100, 1, 2),
        (199, 1, 2),
        (200, 2, 0),
        (299, 2, 0),
        (300, 2, 0),
        (10**6, 2, 0),
    ],
)
def test_schedule_3_2_0(step, stage, exemplars):
    c = Curriculum.preset("3-2-0")
    assert c.stage_at(step) == stage
    assert c.exemplars_at(step) == exemplars


def test_uneven_stages_and_boundaries():
    c = Curriculum((Stage(3, 50), Stage(2, 1), Stage(0, 10)))
    assert c.boundaries() == [0, 50, 51]
    assert [c.exemplars_at(s) for s in (49, 50, 51, 60, 61)] == [3, 2, 0, 0, 0]
    assert c.max_exemplars == 3


@pytest.mark.parametrize("step", [-1, 1.5, "3"])
def test_bad_step(step):
    with pytest.raises(ValueError):
        Curriculum.preset("3-0").stage_at(step)


def test_parse_any_spec():
    assert Curriculum.parse("4-2-0", 30).stages == (Stage(4, 30), Stage(2, 30), Stage(0, 30))
    with pytest.raises(CurriculumError, match="spec"):
        Curriculum.parse("three-zero")


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Curriculum(()), "stages: needs at least one stage"),
        (
            lambda: Curriculum((Stage(3, 100), Stage(-1, 100))),
            "stages[1].exemplars: must be an integer >= 0",
        ),
        (
            lambda: Curriculum((Stage(3, 100), Stage(0, 0))),
            "stages[1].steps: must be an integer > 0",
        ),
        (lambda: Curriculum((Stage(3, -5),)), "stages[0].steps: must be an integer > 0"),
        (lambda: Curriculum((Stage(True, 5),)), "stages[0].exemplars"),
        (lambda: Curriculum((Stage(1, 2.5),)), "stages[0].steps"),
        (
            lambda: Curriculum.preset("3-0", adaptive=AdaptiveRule(metric="vibes")),
            "adaptive.metric: unknown",
        ),
        (
            lambda: Curriculum.preset("3-0", adaptive=AdaptiveRule(window=0)),
            "adaptive.window: must be an integer > 0",
        ),
        (
            lambda: Curriculum.preset("3-0", adaptive=AdaptiveRule(min_steps=50, max_steps=10)),
            "adaptive.max_steps: must be >= min_steps",
        ),
        (
            lambda: Curriculum.preset(
                "3-0", adaptive=AdaptiveRule(window=20, min_steps=5, max_steps=10)
            ),
            "adaptive.window: must be <= max_steps",
        ),
        (
            lambda: Curriculum.preset("3-0", adaptive=AdaptiveRule(threshold=float("nan"))),
            "adaptive.threshold",
        ),
        (
            lambda: Curriculum.preset("3-0", adaptive=AdaptiveRule(direction="up")),
            "adaptive.direction",
        ),
    ],
)
def test_invalid_curricula(build, message):
    with pytest.raises(CurriculumError) as info:
        build()
    assert any(message in e for e in info.value.errors), info.value.errors
    assert isinstance(info.value, ValueError)


def test_all_errors_reported_at_once():
    with pytest.raises(CurriculumError) as info:
        Curriculum((Stage(-1, 0), Stage(2, 0)))
    assert len(info.value.errors) == 3


def test_more_exemplars_than_the_set_holds():
    c = Curriculum.preset("3-2-0")
    assert c.validate(3) == []
    assert c.validate(2) == ["stages[0].exemplars: 3 exemplars, but the set holds only 2"]
    with pytest.raises(CurriculumError, match="holds only 2"):
        c.check(2)
    Curriculum.preset("0").check(0)


@pytest.mark.parametrize(
    "c",
    [
        Curriculum.preset("3-2-0"),
        Curriculum((Stage(4, 10), Stage(0, 7))),
        Curriculum.preset(
            "3-2-1-0", 50, AdaptiveRule("valid_search_rate", 0.8, 5, 10, 60, "at_least")
        ),
    ],
)
def test_json_round_trip(c):
    data = json.loads(json.dumps(c.to_dict()))
    assert Curriculum.from_dict(data) == c


@pytest.mark.parametrize(
    "data, message",
    [
        ([1, 2], "curriculum: must be a JSON object"),
        ({}, "stages: must be a list"),
        ({"stages": [{"exemplars": 3}]}, "stages[0].steps: missing"),
        ({"stages": [{"exemplars": 3, "steps": 10, "k": 1}]}, "stages[0].k: unknown field"),
        ({"stages": [5]}, "stages[0]: must be an object"),
        ({"stages": [{"exemplars": 3, "steps": "10"}]}, "stages[0].steps: must be an integer > 0"),
        (
            {"stages": [{"exemplars": 3, "steps": 10}], "adaptive": {"metrc": "format"}},
            "adaptive.metrc: unknown",
        ),
        (
            {"stages": [{"exemplars": 3, "steps": 10}], "adaptive": 7},
            "adaptive: must be an object or null",
        ),
        ({"stages": [], "extra": 1}, "extra: unknown field"),
    ],
)
def test_from_dict_errors(data, message):
    with pytest.raises(CurriculumError) as info:
        Curriculum.from_dict(data)
    assert any(message in e for e in info.value.errors), info.value.errors


@pytest.mark.parametrize(
    "c, fragments",
    [
        (Curriculum.preset("3-2-0"), []),
        (Curriculum.preset("3-0"), ["drops from 3 to 0 exemplars at once"]),
        (Curriculum.preset("3-2-1-0"), ["removes exemplars 3 times"]),
        (
            Curriculum.preset("3-2-0", 20),
            ["Stage 1 lasts only 20 steps", "Stage 2 lasts only 20 steps"],
        ),
        (Curriculum.preset("0"), []),
        (
            Curriculum((Stage(3, 100), Stage(1, 100))),
            ["last stage still shows 1 exemplars"],
        ),
        (Curriculum((Stage(4, 100), Stage(1, 100), Stage(0, 100))), ["drops from 4 to 1"]),
    ],
)
def test_warnings(c, fragments):
    warnings = c.warnings()
    assert len(warnings) == len(fragments)
    for fragment in fragments:
        assert any(fragment in w for w in warnings), warnings


def test_adaptive_warnings_follow_the_rule_and_the_run_length():
    rule = AdaptiveRule(window=10, min_steps=20, max_steps=200)
    assert Curriculum.preset("3-2-0", 100, rule).warnings() == []
    short = Curriculum.preset("3-2-0", 3, rule)
    plan, reach = short.warnings()
    assert plan.endswith("cannot follow the plan (stage 1: 3 steps; stage 2: 3 steps).")
    assert reach.startswith("In 9 steps the run never reaches stage 3 (0 exemplars)")
    assert "no further than stage 1 (3 exemplars). Plan at least 41 steps" in reach
    assert short.warnings(run_steps=41) == [plan]  # stage 3 can start at step 40
    assert "no further than stage 2" in short.warnings(run_steps=40)[1]
    long = Curriculum.preset("3-2-0", 300, rule)
    assert long.warnings() == ["The adaptive rule ends a stage after 20 to 200 steps, so the "
                               "run cannot follow the plan (stage 1: 300 steps; stage 2: 300 "
                               "steps)."]


@pytest.mark.parametrize("counts, fragment", [
    ((3, 2, 0), "paper's best"), ((3, 0), "did worse"), ((3, 2, 1, 0), "clearly worse"),
    ((0,), "exemplar-free baseline"), ((0, 0), "exemplar-free baseline"), ((4, 2, 0), None),
])
def test_about_says_what_a_schedule_is(counts, fragment):
    about = Curriculum.from_counts(counts).about()
    assert about is None if fragment is None else fragment in about


# ---------------------------------------------------------------- adaptive

RULE = AdaptiveRule(metric="format", threshold=0.8, window=3, min_steps=5, max_steps=10)


@pytest.mark.parametrize(
    "values, advance",
    [
        ([1.0] * 4, False),  # below min_steps
        ([1.0] * 5, True),  # min_steps reached, window mean 1.0
        ([0.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0], True),  # mean of the last 3 is 0.83
        ([0.0] * 6 + [0.7, 0.8, 0.89], False),
        ([0.0] * 9, False),
        ([0.0] * 10, True),  # max_steps forces the advance
    ],
)
def test_should_advance(values, advance):
    assert should_advance(RULE, values) is advance


def test_threshold_is_inclusive():
    rule = AdaptiveRule(threshold=0.75, window=3, min_steps=3, max_steps=10)
    assert should_advance(rule, [0.5, 0.75, 1.0]) is True
    assert should_advance(rule, [0.5, 0.75, 0.875]) is False


def test_should_advance_at_most():
    rule = AdaptiveRule(
        metric="search_calls",
        threshold=0.5,
        window=2,
        min_steps=2,
        max_steps=100,
        direction="at_most",
    )
    assert should_advance(rule, [1.0, 0.4, 0.5]) is True
    assert should_advance(rule, [0.0, 0.4, 0.7]) is False


def test_adaptive_controller_advances_and_holds_last_stage():
    c = Curriculum.preset("3-2-0", 100, RULE)
    ctl = AdaptiveController(c)
    seen = []
    metric = [0.2] * 4 + [0.9] * 3 + [0.1] * 10 + [0.9] * 30
    for value in metric:
        seen.append(ctl.exemplars)
        ctl.observe(value)
    # stage 0 ends after step 6, the first whose last-3 mean is >= 0.8 (steps 4, 5 were past
    # min_steps but below); stage 1 never crosses and is cut at max_steps = 10
    assert ctl.stage_starts == [0, 7, 17]
    assert seen[:7] == [3] * 7 and seen[7:17] == [2] * 10 and set(seen[17:]) == {0}
    assert ctl.stage == 2
    replayed = AdaptiveController.replay(c, metric)
    assert (replayed.stage, replayed.stage_starts, replayed.step) == (2, [0, 7, 17], len(metric))


def test_adaptive_controller_needs_metric():
    ctl = AdaptiveController(Curriculum.preset("3-0", adaptive=RULE))
    with pytest.raises(ValueError, match="format"):
        ctl.observe(None)
    with pytest.raises(ValueError):
        ctl.observe(float("nan"))


def test_fixed_controller_follows_schedule():
    c = Curriculum((Stage(3, 2), Stage(2, 3), Stage(0, 1)))
    ctl = AdaptiveController(c)
    seen, changes = [], []
    for _ in range(9):
        seen.append(ctl.exemplars)
        changes.append(ctl.observe())
    assert seen == [c.exemplars_at(s) for s in range(9)] == [3, 3, 2, 2, 2, 0, 0, 0, 0]
    assert ctl.stage_starts == c.boundaries() == [0, 2, 5]
    assert changes == [False, True, False, False, True, False, False, False, False]


def test_premature_watch_warns_once_when_searching_falls_after_a_stage_change():
    watch = PrematureWatch(drop=0.5)
    assert [watch.observe(1.0) for _ in range(PREMATURE_WINDOW)] == [None] * PREMATURE_WINDOW
    watch.stage_changed()
    seen = [watch.observe(0.2) for _ in range(PREMATURE_WINDOW + 3)]
    assert seen[:PREMATURE_WINDOW - 1] == [None] * (PREMATURE_WINDOW - 1)
    assert seen[PREMATURE_WINDOW - 1] == {"before": 1.0, "after": 0.2, "drop": 0.8}
    assert seen[PREMATURE_WINDOW:] == [None] * 3, "one warning per stage change"
    assert premature_message(seen[PREMATURE_WINDOW - 1]).startswith(
        "tool calls per rollout fell from 1.0 to 0.2 (80%)")  # of any tool: search or python

    steady = PrematureWatch(drop=0.5, history=[1.0] * PREMATURE_WINDOW)
    steady.stage_changed()
    assert [steady.observe(0.6) for _ in range(PREMATURE_WINDOW)] == [None] * PREMATURE_WINDOW


def test_a_rule_on_the_older_score_name_watches_reward_mean():
    rule = AdaptiveRule(metric="score")
    assert rule.metric == "reward_mean" and rule.errors() == []
    assert AdaptiveRule(metric="nonsense").errors()[0].startswith("adaptive.metric: unknown")


# --- soft mode: some questions zero-shot from the first step -----------------------------

SOFT = Curriculum((Stage(3, 10), Stage(2, 10), Stage(0, 20)), soft=SoftMix(0.25))


def test_soft_share_rises_linearly_to_all_when_the_last_stage_begins():
    assert [SOFT.zero_shot_share(step) for step in (0, 10, 19, 20, 39)] == [
        0.25, 0.25 + 0.75 * 10 / 20, 0.25 + 0.75 * 19 / 20, 1.0, 1.0]
    assert Curriculum((Stage(3, 10), Stage(0, 10))).zero_shot_share(5) == 0.0  # off


def test_soft_draws_each_question_with_its_seed():
    draws = [SOFT.question_exemplars(0, 3, seed) for seed in range(4000)]
    assert set(draws) == {0, 3}
    assert abs(draws.count(0) / len(draws) - 0.25) < 0.03
    assert draws == [SOFT.question_exemplars(0, 3, seed) for seed in range(4000)]  # seeded
    late = [SOFT.question_exemplars(19, 2, seed) for seed in range(4000)]
    assert abs(late.count(0) / len(late) - SOFT.zero_shot_share(19)) < 0.03
    assert {SOFT.question_exemplars(25, 0, seed) for seed in range(100)} == {0}
    hard = Curriculum((Stage(3, 10), Stage(0, 10)))
    assert {hard.question_exemplars(0, 3, seed) for seed in range(100)} == {3}


@pytest.mark.parametrize("data, message", [
    ({"stages": [{"exemplars": 3, "steps": 5}, {"exemplars": 0, "steps": 5}],
      "soft": {"start": 1.5}}, "soft.start: must be a number from 0 to 1"),
    ({"stages": [{"exemplars": 3, "steps": 5}, {"exemplars": 1, "steps": 5}],
      "soft": {"start": 0.2}}, "soft: needs at least two stages, the last with 0 exemplars"),
    ({"stages": [{"exemplars": 0, "steps": 5}], "soft": {}}, "soft: needs at least two stages"),
    ({"stages": [{"exemplars": 3, "steps": 5}, {"exemplars": 0, "steps": 5}],
      "soft": {"start": 0.2, "end": 1}}, "soft.end: unknown field"),
    ({"stages": [{"exemplars": 3, "steps": 5}, {"exemplars": 0, "steps": 5}],
      "soft": "yes"}, "soft: must be an object"),
    ({"stages": [{"exemplars": 3, "steps": 25}, {"exemplars": 0, "steps": 5}],
      "adaptive": {"metric": "acc"}, "soft": {"start": 0.2}}, "cannot be combined with an adaptive"),
])
def test_soft_errors_name_the_field(data, message):
    with pytest.raises(CurriculumError, match=re.escape(message)):
        Curriculum.from_dict(data)


def test_soft_round_trips_through_json():
    assert Curriculum.from_dict(json.loads(json.dumps(SOFT.to_dict()))) == SOFT
    assert "soft" not in Curriculum((Stage(3, 1), Stage(0, 1))).to_dict()
