"""The time estimate before launch: the pure cost model (hand-made calibration figures) and
the service that finds a queue's calibration, queues one, and says why an estimate waits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import delete

from studio.run_config import RunConfig
from studio.services import calibrations, run_validation
from studio.services.estimates import (
    LONG_RUN_SECONDS,
    TypicalResponse,
    duration_words,
    estimate_run,
    longest_row_factor,
    step_shape,
    steps_per_stage,
    worst_case_response,
)
from studio.storage import db
from studio.storage.tables import DeviceCalibration, Run, RunState, WorkerHeartbeat
from tests.support.actors import admin, user
from tests.support.calibrated import CPU, FIGURES, measured, worker_with
from tests.support.training import tiny_config


def config(**grpo) -> RunConfig:
    return RunConfig.model_validate({
        "name": "r", "data": {"corpus": "c", "train": "t", "exemplars": "e"},
        "curriculum": {"stages": [{"exemplars": 3, "steps": 10}, {"exemplars": 0, "steps": 20}]},
        "grpo": grpo})


def stages(prompt: int = 1500, shared: int = 1400, short: int = 150) -> list[dict]:
    return [{"stage": 1, "exemplars": 3, "steps": 10, "prompt_tokens": prompt,
             "shared_tokens": shared, "max_prompt_tokens": 5000},
            {"stage": 2, "exemplars": 0, "steps": 20, "prompt_tokens": short,
             "shared_tokens": short - 20, "max_prompt_tokens": 5000}]


def per_step(run: RunConfig, **kw) -> list[float]:
    return [s["seconds_per_step"] for s in estimate_run(FIGURES, run, stages(**kw))["stages"]]


@pytest.mark.parametrize("key, small, large", [
    ("batch_size", 2, 8), ("group_size", 2, 8), ("max_turn_tokens", 32, 256),
    ("max_response_tokens", 128, 1024), ("max_obs_tokens", 50, 500), ("max_turns", 0, 4)])
def test_more_work_per_step_takes_longer_in_every_stage(key, small, large):
    base = {"max_turn_tokens": 128, "max_response_tokens": 2048}
    fast, slow = per_step(config(**{**base, key: small})), per_step(config(**{**base, key: large}))
    assert all(a < b for a, b in zip(fast, slow, strict=True)), (fast, slow)


def test_longer_prompts_take_longer_and_a_shared_prefix_is_cheaper():
    run = config()
    assert per_step(run, prompt=1500)[0] < per_step(run, prompt=3000)[0]
    assert per_step(run, shared=1400)[0] < per_step(run, shared=0)[0]
    # prompts cut from the left share nothing: cut at the limit, but no prefix either
    over = [{**s, "max_prompt_tokens": 1000} for s in stages()]
    cut = estimate_run(FIGURES, config(), over)["stages"][0]
    kept = estimate_run(FIGURES, config(), stages(prompt=1000, shared=0))["stages"][0]
    assert cut["seconds_per_step"] == pytest.approx(kept["seconds_per_step"])


def test_the_total_is_the_sum_over_stages_of_steps_times_seconds():
    estimate = estimate_run(FIGURES, config(), stages())
    rows = estimate["stages"]
    assert [r["steps"] for r in rows] == [10, 20]
    assert estimate["total_seconds"] == pytest.approx(
        sum(r["steps"] * r["seconds_per_step"] for r in rows))
    for r in rows:
        assert r["seconds_per_step"] == pytest.approx(
            r["rollout_seconds"] + r["reference_seconds"] + r["update_seconds"])
    assert rows[0]["seconds_per_step"] > rows[1]["seconds_per_step"] > 0
    # grpo.steps cuts the plan, or extends its last stage
    assert [r["steps"] for r in estimate_run(FIGURES, config(steps=15), stages())["stages"]] \
        == [10, 5]
    assert steps_per_stage([10, 20], 5) == [5, 0]
    assert steps_per_stage([10, 20], 50) == [10, 40]


def test_a_mixed_step_pays_for_the_exemplars_in_the_hinted_sampling_only():
    """guidance.mode mixed: the reference pass and the update run on the prompt without
    exemplars; only the hinted half of the sampling sees the long prompt, and all-failed's
    second pass costs one more round of decoding forwards."""
    def mixed(when: str) -> RunConfig:
        return RunConfig.model_validate({**config().model_dump(mode="json"), "guidance": {
            "mode": "mixed", "share": 0.5, "when": when}})

    zero_shot = {"zero_shot_prompt_tokens": 150, "zero_shot_shared_tokens": 130}
    planned = [{**stage, **zero_shot} for stage in stages()]
    shown = estimate_run(FIGURES, config(), planned)["stages"]
    always = estimate_run(FIGURES, mixed("always"), planned)["stages"]
    all_failed = estimate_run(FIGURES, mixed("all-failed"), planned)["stages"]
    no_exemplars = estimate_run(FIGURES, config(), stages(prompt=150, shared=130))["stages"][0]
    for phase in ("reference_seconds", "update_seconds"):
        assert always[0][phase] == pytest.approx(no_exemplars[phase])
        assert always[0][phase] < shown[0][phase]
    assert no_exemplars["rollout_seconds"] < always[0]["rollout_seconds"] \
        < shown[0]["rollout_seconds"]
    model_tokens, _ = worst_case_response(config().grpo)
    assert all_failed[0]["rollout_seconds"] - always[0]["rollout_seconds"] == pytest.approx(
        model_tokens * FIGURES["rates"]["decode_forward"])
    assert always[1] == shown[1] == all_failed[1]  # a stage without exemplars is unchanged

def test_no_kl_skips_the_reference_pass_and_lora_makes_the_update_cheaper():
    """Without a KL term only the logged groups are scored again (their token figures);
    with LoRA the update is cheaper: by the operation count for an older calibration, at
    the rates measured with adapters in place where the calibration has them."""
    full = estimate_run(FIGURES, config(), stages())["stages"][0]
    no_kl = estimate_run(FIGURES, config(kl_coef=0), stages())["stages"][0]
    unlogged = estimate_run(FIGURES, config(kl_coef=0).model_copy(update={
        "engine": config().engine.model_copy(update={"log_groups_per_step": 0})}),
        stages())["stages"][0]
    lora_run = config().model_copy(update={"lora": {"rank": 8}})
    lora = estimate_run(FIGURES, lora_run, stages())["stages"][0]
    assert unlogged["reference_seconds"] == 0 < no_kl["reference_seconds"] \
        < full["reference_seconds"]
    assert lora["update_seconds"] < full["update_seconds"]
    assert lora["rollout_seconds"] == full["rollout_seconds"]
    slower = {key: value / 2 for key, value in FIGURES["rates"].items()}
    adapted = estimate_run({**FIGURES, "lora_rates": slower}, lora_run, stages())["stages"][0]
    assert adapted["rollout_seconds"] > lora["rollout_seconds"]
    assert adapted["update_seconds"] > lora["update_seconds"]
    assert estimate_run({**FIGURES, "lora_rates": slower}, config(), stages())["stages"][0] \
        == full, "a run without LoRA keeps the model's own rates"
    # several mini-batches: an optimizer step each, and a pass for the old log-probs
    mini = estimate_run(FIGURES, config(mini_batch_size=8), stages())["stages"][0]
    assert mini["update_seconds"] > full["update_seconds"]
    assert mini["reference_seconds"] > full["reference_seconds"]
    epochs = estimate_run(FIGURES, config(ppo_epochs=2), stages())["stages"][0]
    assert epochs["update_seconds"] > 2 * full["update_seconds"] - 1e-9


def test_the_longest_of_more_rows_is_longer():
    assert [round(longest_row_factor(n), 2) for n in (1, 2, 4, 8, 16)] == [
        1.0, 1.2, 1.4, 1.6, 1.8]


def test_the_expected_step_counts_the_measured_lengths_within_the_worst_case():
    """Responses of the measured lengths: each row's own work at those lengths, a rollout
    pass as long as its longest row and a micro-batch as wide as its longest sequence,
    neither beyond the budgets."""
    run = config(max_turn_tokens=64, max_response_tokens=512, max_turns=2,
                 max_obs_tokens=100)
    worst = estimate_run(FIGURES, run, stages())
    model, env = worst_case_response(run.grpo)
    alike = [TypicalResponse(model, env)] * 2
    assert estimate_run(FIGURES, run, stages(), alike) == worst, "the budgets' lengths"
    short = [TypicalResponse(40, 20)] * 2
    expected = estimate_run(FIGURES, run, stages(), short)
    assert expected["total_seconds"] < worst["total_seconds"]
    assert expected["response_tokens"] == worst["response_tokens"] == {"model": model,
                                                                      "env": env}
    step = step_shape(run, 150, 130, short[0])
    assert step.forwards == pytest.approx(longest_row_factor(step.rows) * 40)
    assert step.scored_width == pytest.approx(longest_row_factor(4) * 60)
    assert step_shape(run, 150, 130, TypicalResponse(180, 150)).forwards == model
    assert step_shape(run, 150, 130).forwards == model


def test_the_worst_case_response_fills_the_budget_with_model_tokens_first():
    assert worst_case_response(config().grpo) == (512, 0)  # 7 turns of 256 > 512
    assert worst_case_response(config(max_turn_tokens=64, max_response_tokens=2048,
                                      max_turns=2, max_obs_tokens=500).grpo) == (192, 1000)


def test_duration_words():
    assert [duration_words(s) for s in (0.2, 40, 720, 3 * 3600 + 600, 3 * 86400)] == [
        "1 s", "40 s", "12 min", "3 h 10 min", "3.0 days"]


# --- the service: which calibration, queued when missing, in words ---------------------------


def test_without_a_worker_there_is_no_estimate_and_nothing_is_queued(settings):
    timing = calibrations.time_estimate(settings, config(), stages())
    assert timing["state"] == "unavailable"
    assert "no worker listens on queue cpu" in timing["message"]
    assert calibrations.list_calibrations(settings) == []


def test_a_missing_calibration_is_measured_and_then_gives_seconds_per_stage(settings):
    worker_with(settings)
    waiting = calibrations.time_estimate(settings, config(), stages(), start=False)
    assert waiting["state"] == "unavailable" and "was not measured" in waiting["message"]
    queued = calibrations.request_calibration(settings, admin(settings), model=config().model, start=False)
    assert (queued["state"], queued["dtype"], queued["threads"]) == ("queued", "float32", 1)
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.add(Run(name="ahead", queue="cpu", state=RunState.running, config={}))
    timing = calibrations.time_estimate(settings, config(), stages())
    assert (timing["state"], timing["calibration"], timing["ahead"]) == (
        "measuring", queued["id"], 1)
    assert "waits behind 1 running and 0 queued run(s) on queue cpu" in timing["message"]
    assert len(calibrations.list_calibrations(settings)) == 1, "one measurement at a time"

    measured(settings, queued["id"])
    ready = calibrations.time_estimate(settings, config(), stages())
    assert ready["state"] == "ready" and ready["warnings"] == []
    assert [s["steps"] for s in ready["stages"]] == [10, 20]
    assert ready["message"].startswith("at most about ")
    assert "on queue cpu (Test CPU, 2 cores, 1 thread(s), float32; measured on cpu@test" \
        in ready["message"]
    assert "512 tokens from the model and 0 of search results" in ready["message"]


def test_a_run_in_bf16_autocast_is_estimated_from_a_calibration_in_bf16_autocast(settings):
    """The estimate measures the precision the run trains in (its float32 figures would
    overstate a faster bfloat16 step), on a worker and, without one, from the last figures."""
    worker_with(settings)
    fp32 = calibrations.request_calibration(settings, admin(settings), model=config().model,
                                            start=False)
    measured(settings, fp32["id"])
    mixed = config().model_copy(update={"engine": config().engine.model_copy(
        update={"dtype": "bfloat16-autocast"})})
    timing = calibrations.time_estimate(settings, mixed, stages())
    assert timing["state"] == "measuring" and timing["calibration"] != fp32["id"]
    (queued,) = [c for c in calibrations.list_calibrations(settings)
                 if c["id"] == timing["calibration"]]
    assert queued["dtype"] == "bfloat16-autocast"
    faster = {key: value * (2 if key in ("prefill", "decode", "reference", "update") else 1)
              for key, value in FIGURES["rates"].items()}  # work per second, not seconds
    measured(settings, queued["id"], figures={**FIGURES, "rates": faster})
    ready = calibrations.time_estimate(settings, mixed, stages())
    assert ready["state"] == "ready" and "bfloat16-autocast" in ready["message"]
    full = calibrations.time_estimate(settings, config(), stages())
    assert ready["total_seconds"] < full["total_seconds"]
    with db.session_scope(settings.sqlalchemy_url) as session:  # the worker is gone
        session.exec(delete(WorkerHeartbeat))
    for run, seen in ((mixed, ready), (config(), full)):
        last = calibrations.time_estimate(settings, run, stages())
        assert "no worker listens on queue cpu now" in last["message"]
        assert last["total_seconds"] == pytest.approx(seen["total_seconds"])


@pytest.mark.parametrize(("tools", "words"), [
    (["python"], "of program output"), (["calculator"], "of calculator results"),
    (["search", "calculator"], "of search results and calculator results")])
def test_the_estimate_names_what_the_runs_tools_insert(settings, tools, words):
    worker_with(settings)
    measured(settings, calibrations.request_calibration(
        settings, admin(settings), model=config().model, start=False)["id"])
    run = config().model_copy(update={"tools": tools})
    message = calibrations.time_estimate(settings, run, stages())["message"]
    assert f"512 tokens from the model and 0 {words})" in message
    assert ("search results" in message) == ("search" in tools)


def test_a_run_of_many_hours_is_warned_about(settings):
    worker_with(settings)
    measured(settings, calibrations.request_calibration(
        settings, admin(settings), model=config().model, start=False)["id"])
    run = config(steps=2000)
    timing = calibrations.time_estimate(settings, run, stages())
    assert timing["total_seconds"] > LONG_RUN_SECONDS
    (warning,) = timing["warnings"]
    assert warning.startswith("time: this run may take up to about ")
    assert "more than 3 hours" in warning and "or queue gpu" in warning


def test_new_hardware_is_measured_again_and_a_busy_measurement_is_said(settings):
    worker_with(settings)
    first = calibrations.request_calibration(settings, admin(settings), model=config().model, start=False)
    measured(settings, first["id"], busy=1)
    ready = calibrations.time_estimate(settings, config(), stages())
    assert "measured while 1 run(s) trained on that worker" in ready["message"]
    assert "`studio calibrate --model smollm2-135m-instruct --queue cpu`" in ready["message"]

    worker_with(settings, device={**CPU, "key": "cpu: Other CPU, 8 cores; torch 2.0"})
    assert calibrations.time_estimate(settings, config(), stages(), start=False)["state"] \
        == "unavailable"
    # another thread count is another calibration too
    other = config().model_copy(update={"engine": config().engine.model_copy(
        update={"threads": 4})})
    assert calibrations.time_estimate(settings, other, stages(), start=False)["state"] \
        == "unavailable"


def test_a_failed_calibration_is_not_queued_again_by_itself(settings):
    worker_with(settings)
    queued = calibrations.request_calibration(settings, admin(settings), model=config().model, start=False)
    assert calibrations.claim_calibration(settings, queued["id"], "cpu@test", CPU)
    assert calibrations.claim_calibration(settings, queued["id"], "cpu@other", CPU) is None
    calibrations.finish_calibration(settings, queued["id"], error="RuntimeError: no memory")
    timing = calibrations.time_estimate(settings, config(), stages())
    assert timing["state"] == "unavailable"
    assert "failed (RuntimeError: no memory); `studio calibrate" in timing["message"]
    assert len(calibrations.list_calibrations(settings)) == 1


def test_calibration_requests_name_the_wrong_field(settings):
    for kwargs, field in (({"queue": "tpu"}, "queue"), ({"threads": 0}, "threads"),
                          ({"dtype": "fp8"}, "dtype"), ({"model": " "}, "model")):
        with pytest.raises(calibrations.InvalidInput, match=f"^{field}: "):
            calibrations.request_calibration(settings, admin(settings), **{"model": "m", **kwargs}, start=False)


def test_a_calibration_queued_by_a_check_is_the_checking_users(studio):
    """The launch check queues a missing measurement: it belongs to the member whose check
    queued it, as a run or an evaluation does, and says so (issue 41 N7)."""
    settings, model = studio
    worker_with(settings)
    member = user(settings, "mallory")
    report = run_validation.validate_run(settings, member, tiny_config(model))
    (queued,) = calibrations.list_calibrations(settings)
    assert report["time_estimate"]["calibration"] == queued["id"]
    assert queued["owner"] == "mallory"
    with db.session_scope(settings.sqlalchemy_url) as session:
        assert session.get(DeviceCalibration, queued["id"]).owner_id == member.id
    asked = calibrations.request_calibration(settings, admin(settings), model="m", start=False)
    assert asked["owner"] == admin(settings).username


RECORDED = Path(__file__).parents[1] / "support" / "recorded"


@pytest.mark.parametrize("record", sorted(RECORDED.glob("estimate_check_*.json")),
                         ids=lambda path: path.stem)
def test_the_expected_step_is_within_1_3_times_of_the_recorded_runs(record):
    """bench/estimate_check.py's records (docs/engine.md, "Time estimate"): a calibration of
    this machine's CPU (one thread, float32, with the LoRA rates), a preset's stages as the
    launch check gave them, the typical responses of its measured steps and each stage's
    median step. The expected step of every stage is within 1.3 times of the measured one,
    below the worst case."""
    recorded = json.loads(record.read_text())
    for name, preset in recorded["presets"].items():
        config = RunConfig.model_validate(preset["config"])
        typical = [TypicalResponse(**t) for t in preset["typical"]]
        expected = estimate_run(recorded["figures"], config, preset["stages"], typical)
        worst = estimate_run(recorded["figures"], config, preset["stages"])
        for row, most, seen in zip(expected["stages"], worst["stages"], preset["measured"],
                                   strict=True):
            assert 1 / 1.3 <= row["seconds_per_step"] / seen["step"] <= 1.3, (name, row, seen)
            assert row["seconds_per_step"] < most["seconds_per_step"]
