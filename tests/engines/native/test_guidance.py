"""Guided ICRL on the native engine (`guidance`, studio.method.guidance): which prompt each
rollout is sampled with, which one it trains on, the share, the all-failed rule, luffy
shaping and the call bonus, on a tiny random model and the arithmetic pack."""

from __future__ import annotations

import math

import pytest
import torch

from studio.method.guidance import guided_count, luffy_weight
from studio.run_config import RunConfigError, parse_run_config
from studio.services import runs
from studio.services.demo import load_calc_pack
from tests.support.actors import admin
from tests.support.tiny_model import build_tiny_model
from tests.support.training import tiny_config
from worker.engines.native.grpo import GrpoConfig, grpo_loss
from worker.engines.native.trainer import Trainer, build_step_prompts


class BatchKeepingTrainer(Trainer):
    """Keeps each step's training batch and what it sampled (the test reads both)."""

    def step(self, step):
        self.kept = []
        self.metrics = super().step(step)
        return self.metrics

    def _reference_logprobs(self, batch):
        self.kept.append(batch)
        return super()._reference_logprobs(batch)

    def _sample(self, step, k):
        self.sampled = super()._sample(step, k)
        return self.sampled


def calc_config(model, guidance: dict | None, group_size: int = 4, **extra) -> dict:
    config = tiny_config(model, steps=2, group_size=group_size, micro_batch_size=4)
    config.update(tools=["calculator"], reward={"answer_match": "numeric"},
                  curriculum={"stages": [{"exemplars": 2, "steps": 1},
                                         {"exemplars": 0, "steps": 1}]},
                  data={"train": "calc", "exemplars": "calc"})
    config.update(extra)
    if guidance is not None:
        config["guidance"] = guidance
    config["engine"]["log_groups_per_step"] = 2
    return config


@pytest.fixture
def calc_studio(settings, tmp_path):
    load_calc_pack(settings, admin(settings))
    return settings, build_tiny_model(tmp_path / "tiny")


def trained_step(settings, config) -> BatchKeepingTrainer:
    run = runs.create_run(settings, admin(settings), config, start=False)
    trainer = BatchKeepingTrainer(settings, run["id"])
    trainer.setup()
    trainer.step(0)
    return trainer


def step_prompts(trainer, k):
    """The step-0 prompts of the trainer's batch with k exemplars each."""
    rows = trainer.sampled[1].rows
    return build_step_prompts(trainer.config, trainer.tokenizer, trainer.data, rows,
                              [k] * len(rows), 0)


def batch_prompts(batch) -> list[list[int]]:
    return [batch.input_ids[i, :int(batch.prompt_lengths[i])].tolist()
            for i in range(len(batch))]


def test_a_mixed_step_samples_with_two_prompts_and_trains_every_rollout_on_the_zero_shot_one(
        calc_studio):
    settings, model = calc_studio
    trainer = trained_step(settings, calc_config(model, {"mode": "mixed", "share": 0.5}))
    _, trained, _ = trainer.sampled
    hinted, plain = step_prompts(trainer, 2), step_prompts(trainer, 0)
    assert hinted.ids != plain.ids and all(n == 2 for n in map(len, hinted.shown))

    for q in range(len(trained.rows)):
        group = trained.rollouts[q * 4:(q + 1) * 4]
        assert [r.prompt_ids for r in group] == [hinted.ids[q]] * 2 + [plain.ids[q]] * 2, \
            "the guided half samples with the exemplars, the rest without"
        assert trained.hints[q * 4:(q + 1) * 4] == [hinted.shown[q]] * 2 + [None] * 2
    assert trained.prompt_ids == plain.ids
    batch = trainer.kept[0]  # the reference's log-probs, the loss and the update read it
    assert batch_prompts(batch) == [ids for ids in plain.ids for _ in range(4)]
    assert batch.guided.tolist() == [True, True, False, False] * len(trained.rows)

    stored = runs.run_rollouts(settings, trainer.run_id, limit=100)
    assert sorted((r["exemplars"], bool(r["hint_exemplars"])) for r in stored) == \
        [(0, False)] * 4 + [(2, True)] * 4
    metrics = runs.run_metrics(settings, trainer.run_id)[0]
    assert metrics["guided_share"] == 0.5
    for key in ("acc", "valid_search_rate", "answer_rate", "reward_mean"):
        assert f"zero_shot_{key}" in metrics and f"guided_{key}" in metrics


def test_a_shown_run_trains_on_the_prompt_each_rollout_was_sampled_with(calc_studio):
    """`shown` (the default) is the paper's objective, as before guidance existed: every
    rollout samples and trains on its stage's prompt, nothing is marked guided."""
    settings, model = calc_studio
    for guidance in (None, {"mode": "shown"}):
        trainer = trained_step(settings, calc_config(model, guidance))
        _, trained, _ = trainer.sampled
        hinted = step_prompts(trainer, 2)
        assert [r.prompt_ids for r in trained.rollouts] == \
            [ids for ids in hinted.ids for _ in range(4)]
        assert batch_prompts(trainer.kept[0]) == [ids for ids in hinted.ids for _ in range(4)]
        assert trainer.kept[0].guided is None and set(trained.hints) == {None}
        assert "guided_share" not in runs.run_metrics(settings, trainer.run_id)[0]


def test_all_failed_guides_only_questions_whose_unguided_rollouts_were_all_wrong(calc_studio):
    """The tiny random model never answers right, so every question is guided, the
    unguided part sampled first; a stage without exemplars samples as before."""
    settings, model = calc_studio
    trainer = trained_step(settings, calc_config(
        model, {"mode": "mixed", "share": 0.25, "when": "all-failed"}))
    _, trained, _ = trainer.sampled
    assert all(r.acc == 0 for r in trained.rewards)
    hinted, plain = step_prompts(trainer, 2), step_prompts(trainer, 0)
    for q in range(len(trained.rows)):
        group = trained.rollouts[q * 4:(q + 1) * 4]
        assert [r.prompt_ids for r in group] == [hinted.ids[q]] + [plain.ids[q]] * 3
    trainer._after_step(0, trainer.metrics)  # on to the stage without exemplars
    trainer.step(1)
    assert set(trainer.sampled[1].hints) == {None}
    assert batch_prompts(trainer.kept[0]) == [ids for ids in trainer.sampled[1].prompt_ids
                                              for _ in range(4)]


@pytest.mark.parametrize(("share", "group", "guided"), [
    (0.5, 4, 2), (0.25, 4, 1), (0.1, 4, 1), (0.9, 4, 3), (0.5, 2, 1), (0.375, 8, 3),
    (0.3, 8, 2)])
def test_the_share_is_rounded_to_whole_rollouts_and_leaves_one_of_each_kind(share, group,
                                                                             guided):
    assert guided_count(share, group) == guided


def test_a_mixed_run_needs_two_rollouts_a_group_and_no_soft_curriculum(tmp_path):
    base = calc_config(tmp_path, {"mode": "mixed"})
    with pytest.raises(RunConfigError, match="guidance.mode: mixed needs grpo.group_size"):
        parse_run_config({**base, "grpo": {**base["grpo"], "group_size": 1}})
    with pytest.raises(RunConfigError, match="curriculum.soft"):
        parse_run_config({**base, "curriculum": {**base["curriculum"], "soft": {}}})
    with pytest.raises(RunConfigError, match="guidance.share"):
        parse_run_config({**base, "guidance": {"mode": "mixed", "share": 1.0}})


def test_luffy_shapes_only_the_guided_rows_by_p_over_p_plus_gamma_without_a_clip():
    """Per token of a guided row the policy term is -A * p / (p + gamma), whose gradient in
    log p is -A * p * gamma / (p + gamma)^2; unguided rows keep the clipped ratio."""
    logp = torch.log(torch.tensor([[0.02, 0.5], [0.3, 0.9]], dtype=torch.float64))
    logp.requires_grad_(True)
    old = logp.detach() - torch.tensor([[0.0, 0.0], [0.5, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, 1.0], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    config = GrpoConfig(kl_coef=0.0, guided_shaping="luffy", luffy_gamma=0.1)
    loss, stats = grpo_loss(logp, old, None, adv, mask, config,
                            guided=torch.tensor([True, False]))
    loss.backward()
    p = torch.tensor([0.02, 0.5], dtype=torch.float64)
    assert logp.grad[0].tolist() == pytest.approx((-(p * 0.1) / (p + 0.1) ** 2 / 4).tolist())
    # the unguided row: ratio exp(0.5) > 1.2 is clipped (no gradient), ratio 1 is not
    assert logp.grad[1].tolist() == pytest.approx([0.0, -1 / 4])
    expected = (-sum(luffy_weight(float(x), 0.1) for x in p) - 1.2 - 1.0) / 4
    assert loss.item() == pytest.approx(expected)
    assert stats["clip_frac"] == 0.25

    plain, _ = grpo_loss(logp.detach(), old, None, adv, mask,
                         GrpoConfig(kl_coef=0.0, guided_shaping="none"),
                         guided=torch.tensor([True, False]))
    assert plain.item() == pytest.approx((-1 - 1 - 1.2 - 1) / 4)


def test_the_call_bonus_rewards_a_call_that_worked_and_never_lifts_a_wrong_answer_past_a_right_one(
        calc_studio, tmp_path):
    base = calc_config(tmp_path, None)
    with pytest.raises(RunConfigError, match=r"call_bonus: 0.6 .* below acc_weight - "
                                             r"format_weight \(0.6\)"):
        parse_run_config({**base, "reward": {"call_bonus": 0.6}})
    parse_run_config({**base, "reward": {"call_bonus": 0.59}})
    with pytest.raises(RunConfigError, match="call_bonus"):
        parse_run_config({**base, "reward": {"acc_weight": 0.5, "format_weight": 0.5,
                                             "call_bonus": 0.01}})

    settings, model = calc_studio
    trainer = trained_step(settings, calc_config(model, None, reward={
        "answer_match": "numeric", "call_bonus": 0.1}))
    from studio.method.rollouts import working_calls

    _, trained, _ = trainer.sampled
    for rollout, reward in zip(trained.rollouts, trained.rewards, strict=True):
        bonus = 0.1 if working_calls(rollout) else 0.0
        assert reward.call_bonus == bonus
        assert reward.score == pytest.approx(min(1.0, 0.8 * reward.acc + 0.2 * reward.format
                                                 + bonus))
    assert math.isfinite(runs.run_metrics(settings, trainer.run_id)[0]["reward_mean"])


def test_the_bonus_is_added_inside_the_clip_once_for_any_number_of_working_calls():
    from studio.method.reward import score
    from studio.method.tags import CALCULATOR_TOOL

    wrong = "<think> x </think><calc> 2 + 2 </calc><result>4</result><answer> 5 </answer>"
    right = "<think> x </think><answer> 4 </answer>"
    kwargs = {"tools": (CALCULATOR_TOOL,), "answer_match": "numeric", "call_bonus": 0.5}
    assert score(wrong, ["4"], working_calls=0, **kwargs).score == pytest.approx(0.2)
    assert score(wrong, ["4"], working_calls=3, **kwargs).score == pytest.approx(0.7)
    assert score(right, ["4"], working_calls=0, **kwargs).score > \
        score(wrong, ["4"], working_calls=1, **kwargs).score
    assert score(wrong.replace("5", "4"), ["4"], working_calls=1, **kwargs).score == 1.0
