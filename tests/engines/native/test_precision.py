"""`engine.dtype: bfloat16-autocast` against the float32 path on the same tiny model: the
log-probs and gradients agree within bfloat16's tolerance (stated here and in
docs/engine.md), the weights stay float32 and a 1e-6 update still moves them, and a rollout
runs. Each comparison also checks the bfloat16 path was taken (its figures differ)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from studio.run_config import BF16_AUTOCAST, EngineSpec
from tests.engines.native.test_grpo import (
    grouped_batch,
    one_thread,  # noqa: F401 (autouse: one thread)
    params_of,
)
from tests.support.tiny_model import build_tiny_model
from worker.engines.native import logprobs as L
from worker.engines.native.grpo import GrpoConfig, update_step
from worker.engines.native.optimizer import make_optimizer
from worker.engines.native.precision import bf16_compute, store_frozen_projections_in_bf16
from worker.engines.native.rollout import RolloutConfig, generate_rollouts

#: bfloat16 keeps 8 bits of mantissa (a relative step of 2^-8, 0.4%): per-token log-probs
#: agree to 0.05 nats at worst and 0.01 on average; the gradient points the same way
#: (cosine >= 0.995) with a norm within 3%.
LOGP_MAX_NATS, LOGP_MEAN_NATS = 0.05, 0.01
GRAD_COSINE, GRAD_NORM_SHARE = 0.995, 0.03


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    # wider than the other tests' tiny model: enough arithmetic per token for bfloat16's
    # rounding to show, as it does in a real model
    return build_tiny_model(tmp_path_factory.mktemp("tiny-bf16"), hidden_size=128)


def fresh_model(tiny_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)


def scores_and_gradient(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The scored tokens' log-probs and the gradient of their advantage-weighted sum."""
    model.zero_grad(set_to_none=True)
    logp, _ = L.forward_scores(model, batch.input_ids, batch.attention_mask, batch.loss_mask)
    (logp * batch.advantages[:, None]).sum().backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), grad


def test_the_run_setting_names_the_mixed_precision():
    assert EngineSpec(dtype=BF16_AUTOCAST).dtype == BF16_AUTOCAST


def test_bf16_autocast_log_probs_and_gradients_match_float32_within_tolerance(tiny_dir):
    model, batch = fresh_model(tiny_dir), grouped_batch(seed=1, groups=3, size=3)
    logp32, grad32 = scores_and_gradient(model, batch)
    with bf16_compute():
        logp16, grad16 = scores_and_gradient(model, batch)
    scored = batch.loss_mask > 0
    diff = (logp16 - logp32)[scored].abs()
    assert diff.max() > 0, "the bfloat16 path was not taken"
    assert diff.max() <= LOGP_MAX_NATS and diff.mean() <= LOGP_MEAN_NATS, diff
    assert (logp16[~scored] == 0).all()
    assert grad16.dtype == torch.float32 and not torch.equal(grad16, grad32)
    cosine = torch.nn.functional.cosine_similarity(grad16, grad32, dim=0)
    assert cosine >= GRAD_COSINE, cosine
    assert abs(grad16.norm() / grad32.norm() - 1) <= GRAD_NORM_SHARE


def test_a_small_update_under_bf16_autocast_moves_the_float32_weights(tiny_dir):
    model, batch = fresh_model(tiny_dir), grouped_batch(seed=2)
    optimizer, scheduler = make_optimizer(model, lr=1e-6)
    before = params_of(model)
    with bf16_compute():
        stats = update_step(model, optimizer, scheduler, batch, None,
                            GrpoConfig(kl_coef=0.0, micro_batch_size=3))
    assert stats["skipped_steps"] == 0
    after = list(model.parameters())
    assert all(p.dtype == torch.float32 for p in after)
    # 1e-6 is far below bfloat16's step near 1 (2^-8): bfloat16 weights would not move
    assert sum(not torch.equal(a, b) for a, b in zip(before, after, strict=True)) > len(after) // 2


def test_a_lora_base_kept_in_bf16_scores_exactly_as_autocast_casts_it(tiny_dir):
    """The trainer stores a LoRA run's frozen projections and head in bfloat16 (autocast
    would cast them at every forward); the log-probs are those of the float32 base under
    autocast, and the input embeddings stay float32."""
    from studio.run_config import LoraSpec
    from worker.lora import add_adapters, inner

    batch = grouped_batch(seed=3)
    lora = [inner(add_adapters(fresh_model(tiny_dir), LoraSpec(rank=4, alpha=8), 0))
            for _ in range(2)]
    assert store_frozen_projections_in_bf16(lora[1]) == 2 * 7 + 1  # 7 projections x 2, head
    assert lora[1].get_output_embeddings().weight.dtype == torch.bfloat16
    assert lora[1].get_input_embeddings().weight.dtype == torch.float32
    with bf16_compute():
        cast, stored = (L.forward_scores(m, batch.input_ids, batch.attention_mask,
                                         batch.loss_mask)[0] for m in lora)
    torch.testing.assert_close(stored, cast, atol=1e-6, rtol=0)
    assert {p.dtype for p in lora[1].parameters() if p.requires_grad} == {torch.float32}


def test_a_rollout_under_bf16_autocast_writes_its_tokens(tiny_dir):
    from transformers import AutoTokenizer

    model, tokenizer = fresh_model(tiny_dir), AutoTokenizer.from_pretrained(str(tiny_dir))
    config = RolloutConfig(max_turns=0, max_turn_tokens=12, max_response_tokens=12)
    # a prefix all rows share: the cascade attention (worker.engines.native.attention) runs
    shared = list(range(5, 45))
    prompts = [shared + [50], shared + [50], shared + [51, 52]]
    with bf16_compute():
        rollouts = generate_rollouts(model, tokenizer, prompts, lambda qs: [[] for _ in qs],
                                     config, generator=torch.Generator().manual_seed(0),
                                     eos_token_id=-1)
    assert [len(r.response_ids) for r in rollouts] == [12, 12, 12]
    assert all(0 <= t < model.config.vocab_size for r in rollouts for t in r.response_ids)
