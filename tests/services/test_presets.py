"""The ready-made runs (studio/services/presets.py): each one launches as it is, on the data
it stores itself, and says beside it what it did when it was measured."""

from __future__ import annotations

import json

import pytest

from studio.services import presets, runs
from tests.support.actors import admin, user
from tests.support.api_client import bearer
from tests.support.tiny_model import build_tiny_model


@pytest.mark.parametrize("name", list(presets.RUN_PRESETS))
def test_a_preset_launches_on_the_data_it_stores(settings, tmp_path, name):
    """`prepare_preset` stores the demo pack; the run it gives is stored as queued, training
    on the preset's questions and evaluating on held-out ones it never trains on."""
    settings = settings.model_copy(
        update={"default_model": str(build_tiny_model(tmp_path / "tiny"))})
    config = presets.prepare_preset(settings, admin(settings), name)
    run = runs.create_run(settings, admin(settings), config, start=False)
    assert run["state"] == "queued" and run["name"] == name
    assert run["config"]["data"]["train"] not in run["config"]["data"]["eval"]
    assert run["config"]["engine"]["evaluate_at_end"] is True
    shown = [s["exemplars"] for s in run["config"]["curriculum"]["stages"]]
    assert shown[0] == 3 and shown == sorted(shown, reverse=True)
    assert presets.data_ready(settings, name)


def test_the_search_tour_trains_on_short_spans_and_is_judged_on_both_held_out_sets(settings):
    config = presets.preset_config(presets.SEARCH_TOUR, settings)
    assert config["data"]["train"] == "demo-span" and config["tools"] == ["search"]
    assert config["data"]["eval"] == ["demo-span-heldout", "demo-heldout"]


def test_the_calculator_preset_trains_with_guidance_on_the_arithmetic_pack(settings):
    config = presets.preset_config(presets.CALCULATOR, settings)
    assert config["tools"] == ["calculator"] and config["data"]["train"] == "calc"
    assert config["guidance"]["mode"] == "mixed"
    assert not presets.data_ready(settings, presets.CALCULATOR)
    presets.prepare_preset(settings, admin(settings), presets.CALCULATOR)
    assert presets.data_ready(settings, presets.CALCULATOR)


def _measured(seed: int, config: dict, valid: float, em: float, minutes: float) -> dict:
    """A stored bench result as bench/icrl_effect.py writes it (the parts the presets read)."""
    figures = {"valid_search_rate": valid, "em": em, "answer_rate": 1.0, "questions": 60}
    return {"args": {"seed": str(seed)}, "held_out": "calc-heldout", "command": "bench ...",
            "date": "2026-12-06", "configs": {"curriculum": config, "base": config},
            "results": {"base": {**figures, "valid_search_rate": 0.03, "em": 0.0},
                        "curriculum": figures}, "minutes": {"all": minutes}}


def test_what_a_preset_did_is_written_from_its_stored_results_and_only_its_own(
        settings, tmp_path, monkeypatch):
    """The words beside a preset come from bench/icrl_effect.py's stored results, one file a
    seed; a result measured with other settings than the preset's does not count."""
    monkeypatch.setattr(presets, "MEASURED", tmp_path)
    folder = tmp_path / presets.CALCULATOR
    folder.mkdir()
    own = {**presets.RUN_PRESETS[presets.CALCULATOR], "seed": 4, "name": "bench-arm",
           "engine": {"checkpoint_every": 8, "evaluate_at_end": False}}
    for seed, valid, em, minutes in ((0, 0.93, 0.5, 19.2), (1, 1.0, 0.25, 22.6)):
        (folder / f"seed{seed}.json").write_text(json.dumps(
            _measured(seed, {**own, "seed": seed}, valid, em, minutes)))
    other = {**own, "grpo": {**own["grpo"], "lr": 1e-3}}
    (folder / "seed2.json").write_text(json.dumps(_measured(2, other, 0.1, 0.9, 5)))

    assert [run["seed"] for run in presets.measured_runs(presets.CALCULATOR)] == [0, 1]
    words = presets.expectation(presets.CALCULATOR)
    assert "2 seeds" in words and "60 held-out questions (calc-heldout)" in words
    assert "93%, 100%" in words and "50%, 25% right" in words and "90%" not in words
    assert "untrained model used it on 3%, 3% and answered 0%, 0% right" in words and "19-23 minutes" in words
    assert presets.expectation(presets.SEARCH_TOUR).startswith("not measured")


def test_the_api_lists_every_preset_with_what_it_did_to_any_signed_in_user(api):
    viewer = bearer(api.settings, user(api.settings, "vera", "viewer"))
    assert api.client.get("/api/v1/run-presets").status_code == 401
    listed = api.client.get("/api/v1/run-presets", headers=viewer)
    assert listed.status_code == 200, listed.text
    assert [p["name"] for p in listed.json()] == list(presets.RUN_PRESETS)
    for preset in listed.json():
        assert preset["expectation"] == presets.expectation(preset["name"])
        assert preset["config"]["name"] == preset["name"] and preset["tools"]
        assert preset["needs"] == presets.needs(preset["name"]) and not preset["data_ready"]
    by_name = {preset["name"]: preset for preset in listed.json()}
    # a ready-made run for each tool pack: the calculator's measured, the math pack's not yet
    calculator, math = by_name["calculator"], by_name["math"]
    assert calculator["tools"] == ["calculator"] and calculator["pack"] == "calc"
    assert calculator["needs"].startswith("the arithmetic pack")
    assert [seed["training_minutes"] > 0 for seed in calculator["measured"]] == [True] * 3
    assert {seed["model"] for seed in calculator["measured"]} == {"smollm2-135m-instruct"}
    assert math["tools"] == ["python"] and math["pack"] == "math" and math["measured"] == []
    assert "math pack" in math["needs"] and "bubblewrap" in math["needs"]
    assert math["expectation"].startswith("not measured with these settings yet")
    assert math["config"]["data"] == {"train": "math", "eval": ["math-heldout"],
                                      "exemplars": "math"}
    assert math["config"]["reward"]["answer_match"] == "numeric"


def _seed(minutes: float, training: float, machine: str = "2 CPU cores, busy",
          model: str = "smollm2-135m-instruct", step: float = 180.0) -> dict:
    return {"minutes": minutes, "training_minutes": training, "machine": machine,
            "model": model, "steps": [{"stage": 0, "time_step": step, "model_tokens": 60,
                                       "response_length": 90}]}


def test_the_launch_estimate_stands_beside_the_measured_time_and_says_why_they_differ():
    """Within 1.5 times of each other the two stand side by side; further apart, the page
    says why: a worst-case estimate over shorter measured answers, or the stored figures'
    busy machine and another model."""
    runs = [_seed(72.4, 68.8), _seed(74.7, 67.9, step=200.0)]
    ready = {"state": "ready", "device": "cpu", "worker": "worker-1"}
    same = presets.time_beside_measured(presets.CALCULATOR, {**ready, "total_seconds": 95 * 60},
                                        "smollm2-135m-instruct", runs)
    assert same == ("Measured: 68-69 minutes of training (190 s per step), 72-75 with its "
                    "evaluation, on 2 seeds (2 CPU cores, busy).")
    worst = presets.time_beside_measured(presets.CALCULATOR, {**ready, "total_seconds": 6000 * 60},
                                         "smollm2-135m-instruct", runs)
    assert worst.startswith(same) and "Why the two differ by over 1.5 times: the " \
        "estimate is the most a run can take, every answer using its whole token budget" in worst
    fast = presets.time_beside_measured(presets.CALCULATOR, {**ready, "total_seconds": 60},
                                        "tiny", runs)
    assert "the stored figures came from 2 CPU cores, busy, the estimate from the speed this " \
        "studio's worker measured (cpu on worker-1); the runs were measured with " \
        "smollm2-135m-instruct, the estimate is for tiny." in fast
    waiting = presets.time_beside_measured(presets.CALCULATOR, {"state": "measuring"}, "m", runs)
    assert waiting == same
    assert presets.time_beside_measured(presets.MATH, ready, "m", []).startswith(
        "Measured: not yet")


def test_the_expected_step_stands_beside_the_measured_one_with_their_ratio():
    """With the measured answers' lengths the estimate is the expected step: about so many
    seconds a step beside the measured step and the machine that ran it, and their ratio;
    far apart, the busy machine is why (not the worst case)."""
    runs = [_seed(72.4, 68.8), _seed(74.7, 67.9, step=200.0)]
    ready = {"state": "ready", "device": "cpu", "worker": "worker-1", "total_seconds": 9e4}
    expected = {"total_seconds": 22 * 171.0, "total_steps": 22}
    close = presets.time_beside_measured(presets.CALCULATOR, ready, "smollm2-135m-instruct",
                                         runs, expected)
    assert close.startswith("Estimate: about 171 s per step (1 h 3 min for the run), "
                            "measured: 190 s per step on 2 CPU cores, busy (estimate / "
                            "measured: 0.90), the answers as long as the measured ones.\n\n"
                            "Measured: 68-69 minutes of training (190 s per step)")
    assert "Why" not in close, "the worst case (90,000 s) is not what is compared"
    loaded = presets.time_beside_measured(presets.CALCULATOR, ready, "smollm2-135m-instruct",
                                          runs, {**expected, "total_seconds": 22 * 60.0})
    assert "(estimate / measured: 0.32)" in loaded
    assert "Why the two differ by over 1.5 times: the stored figures came from 2 CPU cores, " \
        "busy" in loaded


def test_the_measured_steps_give_each_stage_its_typical_response():
    runs = presets.measured_runs(presets.CALCULATOR)
    steps = [step for run in runs for step in run["steps"]]
    typical = presets.typical_responses(steps, 3)
    assert len(typical) == 3 and all(t.model_tokens > 0 and t.env_tokens >= 0 for t in typical)
    assert typical[0].model_tokens > typical[2].model_tokens, "answers shorten as it learns"
    assert presets.typical_responses(steps, 4) is None, "a stage never measured"
    assert presets.typical_responses([], 3) is None
