"""The native engine's GRPO loss and update (worker/engines/native/grpo.py), its log-probs
(logprobs.py), batch (policy_batch.py) and optimizer (optimizer.py).

Hand computations on small tensors for the loss; a tiny random Llama
(tests/support/tiny_model.py) for log-probs, masking and the update.
"""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from studio.run_config import GRPO_VARIANTS, GrpoSpec
from tests.support.tiny_model import build_tiny_model
from worker.engines.native import grpo as G
from worker.engines.native import logprobs as L
from worker.engines.native.grpo import GrpoConfig
from worker.engines.native.optimizer import make_optimizer
from worker.engines.native.policy_batch import PolicyBatch, make_batch

PAD = 2  # <|im_end|> in the tiny tokenizer


@pytest.fixture(autouse=True)
def one_thread():
    # perf-notes.md: two OpenMP threads make this machine ~50x slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-grpo"))


@pytest.fixture
def model(tiny_dir):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    return m.eval()


def rollouts(seed: int = 0, n: int = 5):
    """Prompts and responses of different lengths; responses hold env spans (mask 0)."""
    g = torch.Generator().manual_seed(seed)
    prompts, responses, masks = [], [], []
    for i in range(n):
        p = torch.randint(3, 400, (4 + (i * 3) % 7,), generator=g).tolist()
        r = torch.randint(3, 400, (6 + (i * 5) % 9,), generator=g).tolist()
        m = [1] * len(r)
        if i % 2 == 0:  # an environment span in the middle
            m[2:4] = [0, 0]
        prompts.append(p)
        responses.append(r)
        masks.append(m)
    return prompts, responses, masks


def batch_of(seed: int = 0, n: int = 5, advantages=None) -> PolicyBatch:
    prompts, responses, masks = rollouts(seed, n)
    adv = advantages if advantages is not None else [(-1.0) ** i * (1 + i / 2) for i in range(n)]
    return make_batch(prompts, responses, masks, adv, PAD)


def grouped_batch(seed: int = 0, groups: int = 3, size: int = 3) -> PolicyBatch:
    """GRPO-shaped: ``groups`` prompts x ``size`` responses of different lengths."""
    g = torch.Generator().manual_seed(seed)
    prompts, responses, masks = [], [], []
    for q in range(groups):
        p = torch.randint(3, 400, (5 + 3 * q,), generator=g).tolist()
        for k in range(size):
            r = torch.randint(3, 400, (4 + 2 * k + q,), generator=g).tolist()
            m = [1] * len(r)
            if k == 1:
                m[1:3] = [0, 0]
            prompts.append(p)
            responses.append(r)
            masks.append(m)
    adv = [(-1.0) ** i * 0.7 for i in range(groups * size)]
    return make_batch(prompts, responses, masks, adv, PAD)


def full_reference_logprobs(model, batch: PolicyBatch) -> torch.Tensor:
    """The plain way: full log_softmax over every position, gather the next token."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
    out = torch.zeros(batch.input_ids.shape)
    out[:, 1:] = logp[:, :-1].gather(2, batch.input_ids[:, 1:, None]).squeeze(2)
    return out


def params_of(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# --------------------------------------------------------------------------
# grpo_loss against hand computations
# --------------------------------------------------------------------------


def test_grpo_loss_matches_a_hand_computation():
    clip, kl_coef, ent_coef = 0.2, 0.1, 0.01
    cfg = G.GrpoConfig(clip=clip, kl_coef=kl_coef, entropy_coef=ent_coef)
    # ratios chosen to hit each branch: A > 0 with ratio above / below the band,
    # A < 0 with ratio below / above the band, and ratio inside the band.
    ratios = [[1.0, 1.5, 0.5, 1.1], [1.0, 0.5, 1.5, 1.0]]
    old = [[-1.0, -2.0, -0.5, -3.0], [-0.7, -1.2, -2.2, -0.1]]
    ref = [[-1.1, -1.0, -0.9, -2.0], [-0.7, -1.0, -3.0, -0.4]]
    ent = [[2.0, 1.5, 1.0, 0.5], [3.0, 2.5, 2.0, 9.0]]
    # sequence 0 has 3 scored tokens (first is prompt), sequence 1 two (last is padding)
    mask = [[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]]
    adv = [1.0, -2.0]
    logp = [[old[i][j] + math.log(ratios[i][j]) for j in range(4)] for i in range(2)]

    total, count, clipped_count, pgs, kls = 0.0, 0, 0, [], []
    for i in range(2):
        for j in range(4):
            if not mask[i][j]:
                continue
            r, a = ratios[i][j], adv[i]
            unclipped, clipped = -a * r, -a * min(max(r, 1 - clip), 1 + clip)
            pg = max(unclipped, clipped)
            clipped_count += clipped > unclipped
            d = ref[i][j] - logp[i][j]
            kl = math.exp(d) - d - 1
            total += pg + kl_coef * kl - ent_coef * ent[i][j]
            pgs.append(pg)
            kls.append(kl)
            count += 1
    assert count == 5 and clipped_count == 2  # (A>0, r=1.5) and (A<0, r=0.5)

    t = torch.tensor
    logp_t = t(logp, requires_grad=True)
    loss, stats = G.grpo_loss(logp_t, t(old), t(ref), t(adv), t(mask), cfg, entropy=t(ent))
    assert loss.item() == pytest.approx(total / count, rel=1e-5)
    assert stats["pg_loss"] == pytest.approx(sum(pgs) / count, rel=1e-5)
    assert stats["kl"] == pytest.approx(sum(kls) / count, rel=1e-5)
    assert stats["entropy"] == pytest.approx((1.5 + 1.0 + 0.5 + 2.5 + 2.0) / 5, rel=1e-6)
    assert stats["clip_frac"] == pytest.approx(2 / 5)
    assert stats["num_tokens"] == 5
    mean_ratio = (1.5 + 0.5 + 1.1 + 0.5 + 1.5) / 5
    assert stats["ratio_mean"] == pytest.approx(mean_ratio, rel=1e-5)

    # No gradient reaches masked positions; a clipped token passes no policy gradient.
    loss.backward()
    grad = logp_t.grad
    assert grad[0, 0] == 0 and grad[1, 0] == 0 and grad[1, 3] == 0
    d = t(ref)[0, 1] - t(logp)[0, 1]
    expected = kl_coef * (1 - math.exp(d.item())) / count  # only the KL term for (0, 1)
    assert grad[0, 1].item() == pytest.approx(expected, rel=1e-4)


def test_grpo_loss_without_reference_or_entropy_and_a_given_denominator():
    cfg = G.GrpoConfig(kl_coef=0.5)
    logp = torch.tensor([[0.0, -1.0, -2.0]])
    old = logp.clone()
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    loss, stats = G.grpo_loss(logp, old, None, torch.tensor([3.0]), mask, cfg)
    # ratio 1: the loss is -A, the token mean of -3 over 2 tokens
    assert loss.item() == pytest.approx(-3.0)
    assert stats["kl"] == 0.0 and math.isnan(stats["entropy"]) and stats["clip_frac"] == 0.0
    # the denominator of the whole mini-batch (gradient accumulation)
    loss, stats = G.grpo_loss(logp, old, None, torch.tensor([3.0]), mask, cfg, num_tokens=6)
    assert loss.item() == pytest.approx(-3.0 * 2 / 6)
    assert stats["pg_loss"] == pytest.approx(-3.0)  # stats stay per-token means
    # kl_coef 0 ignores the reference
    cfg0 = G.GrpoConfig(kl_coef=0.0)
    loss0, stats0 = G.grpo_loss(logp, old, logp - 5, torch.tensor([3.0]), mask, cfg0)
    assert loss0.item() == pytest.approx(-3.0) and stats0["kl"] == 0.0


def test_values_at_masked_positions_reach_neither_loss_nor_gradient():
    cfg = G.GrpoConfig(kl_coef=0.1, entropy_coef=0.1)
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([-1.5])

    def run(junk: float):
        logp = torch.tensor([[junk, -1.0, -2.0, junk]], requires_grad=True)
        ent = torch.tensor([[junk, 1.0, 2.0, junk]], requires_grad=True)
        old = torch.tensor([[junk, -1.1, -1.9, junk]])
        ref = torch.tensor([[junk, -0.9, -2.5, junk]])
        loss, stats = G.grpo_loss(logp, old, ref, adv, mask, cfg, entropy=ent)
        loss.backward()
        return loss.detach(), logp.grad, ent.grad, stats

    base = run(0.0)
    for junk in (float("nan"), float("-inf"), 1e30):
        got = run(junk)
        assert torch.equal(got[0], base[0])
        assert torch.equal(got[1], base[1]) and torch.equal(got[2], base[2])
        assert got[3] == base[3]
    assert base[1][0, 0] == 0 and base[1][0, 3] == 0 and base[1][0, 1] != 0


def test_kl_estimator_is_zero_at_equality_and_guarded_against_overflow():
    cfg = G.GrpoConfig(kl_coef=1.0)
    logp = torch.tensor([[0.0, -0.3, -200.0]], requires_grad=True)
    mask = torch.ones(1, 3)
    ref = torch.tensor([[0.0, -0.3, -0.1]])
    loss, stats = G.grpo_loss(logp, logp.detach(), ref, torch.zeros(1), mask, cfg)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    c = G.KL_LOG_RATIO_CLAMP
    assert stats["kl"] == pytest.approx((math.exp(c) - c - 1) / 3, rel=1e-5)


# --------------------------------------------------------------------------
# The GRPO family's options, each against a direct computation
# --------------------------------------------------------------------------

# Four sequences of six positions: 4, 2, 5 and 0 scored tokens (the last one fully
# masked); ratios chosen so that every clip branch is hit somewhere.
OPTION_MASK = [[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1], [0] * 6]
OPTION_RATIOS = [[1.0, 1.0, 1.25, 1.5, 0.7, 1.0], [1.0, 1.0, 4.0, 0.5, 1.0, 1.0],
                 [1.0, 0.9, 1.1, 1.3, 0.6, 1.0], [1.0] * 6]
OPTION_OLD = [[-0.3, -1.0, -2.0, -0.5, -3.0, -0.2], [-0.7, -1.2, -2.2, -0.1, -0.9, -1.5],
              [-1.4, -0.6, -0.8, -2.5, -1.1, -0.4], [-1.0] * 6]
OPTION_REF = [[-0.2, -1.3, -1.6, -0.9, -2.4, -0.1], [-0.5, -1.0, -1.9, -0.6, -1.0, -1.2],
              [-1.2, -0.9, -0.5, -2.0, -1.6, -0.7], [-1.0] * 6]
OPTION_ADV = [1.5, -2.0, -0.5, 1.0]


def option_inputs():
    """(logp as a leaf, old, ref, advantages, mask), float64."""
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    old = t(OPTION_OLD)
    logp = (old + torch.log(t(OPTION_RATIOS))).requires_grad_(True)
    return logp, old, t(OPTION_REF), t(OPTION_ADV), t(OPTION_MASK)


def direct_loss(logp, old, ref, adv, mask, cfg: G.GrpoConfig) -> torch.Tensor:
    """The objective written out token by token, as veRL 0.9.1's core_algos defines it."""
    high = cfg.clip if cfg.clip_high is None else cfg.clip_high
    sequences = []
    for i in range(len(OPTION_MASK)):
        tokens = [j for j in range(len(OPTION_MASK[i])) if mask[i, j] > 0]
        if not tokens:
            continue
        a = float(adv[i])
        seq_log_ratio = sum(float(logp[i, j].detach() - old[i, j]) for j in tokens) / len(tokens)
        terms = []
        for j in tokens:
            if cfg.ratio_level == "sequence":  # sg[s_i] * p / sg[p]
                r = math.exp(seq_log_ratio) * torch.exp(logp[i, j] - logp[i, j].detach())
            else:
                r = torch.exp(logp[i, j] - old[i, j])
            pg = torch.maximum(-a * r, -a * torch.clamp(r, 1 - cfg.clip, 1 + high))
            if cfg.dual_clip is not None and a < 0:
                pg = torch.minimum(pg, torch.tensor(-a * cfg.dual_clip, dtype=pg.dtype))
            log_q = ref[i, j] - logp[i, j]
            kl = {"k1": -log_q, "k2": log_q**2 / 2, "k3": torch.exp(log_q) - log_q - 1}
            if cfg.kl_in == "loss":
                pg = pg + cfg.kl_coef * kl[cfg.kl_estimator]
            terms.append(pg)
        sequences.append(terms)
    if cfg.loss_agg_mode == "token-mean":
        return sum(sum(terms) for terms in sequences) / sum(len(t) for t in sequences)
    if cfg.loss_agg_mode == "seq-mean-token-mean":
        return sum(sum(terms) / len(terms) for terms in sequences) / len(sequences)
    return sum(sum(terms) for terms in sequences) / len(sequences) / cfg.norm_length


OPTION_CASES = {
    "token-mean": {},
    "seq-mean-token-mean": {"loss_agg_mode": "seq-mean-token-mean"},
    "seq-mean-token-sum-norm": {"loss_agg_mode": "seq-mean-token-sum-norm", "norm_length": 8},
    "clip-high": {"clip_high": 0.28},
    "dual-clip": {"dual_clip": 3.0},
    "gspo": {"ratio_level": "sequence", "clip": 0.05},
    "gspo-seq-mean-token-mean": {"ratio_level": "sequence", "clip": 0.05, "clip_high": 0.5,
                                 "loss_agg_mode": "seq-mean-token-mean"},
    "k1": {"kl_estimator": "k1"},
    "k2": {"kl_estimator": "k2"},
    "k3": {"kl_estimator": "k3"},
    "kl-in-reward": {"kl_in": "reward"},
}


@pytest.mark.parametrize("case", OPTION_CASES)
def test_each_option_gives_the_loss_and_gradient_of_a_direct_computation(case):
    cfg = G.GrpoConfig(kl_coef=0.3, **OPTION_CASES[case])
    logp, old, ref, adv, mask = option_inputs()
    loss, stats = G.grpo_loss(logp, old, ref, adv, mask, cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    leaf = logp.detach().requires_grad_(True)
    want = direct_loss(leaf, old, ref, adv, mask, cfg)
    (want_grad,) = torch.autograd.grad(want, leaf)
    assert loss.item() == pytest.approx(want.item(), rel=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-15)
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-12)
    assert grad[3].abs().sum() == 0 and grad[:, 0].abs().sum() == 0  # masked: no gradient


def test_clip_high_widens_only_the_upper_bound():
    """A > 0 at ratio 1.25 is clipped by 0.2 (no gradient) but not by clip_high 0.28;
    A < 0 at ratio 0.6 stays clipped below (the lower bound is still clip)."""
    logp, old, ref, adv, mask = option_inputs()
    grads, stats = {}, {}
    for name, high in (("sym", None), ("high", 0.28)):
        cfg = G.GrpoConfig(kl_coef=0.0, clip_high=high)
        loss, stats[name] = G.grpo_loss(logp, old, ref, adv, mask, cfg)
        (grads[name],) = torch.autograd.grad(loss, logp)
    assert grads["sym"][0, 2] == 0 and grads["high"][0, 2] < 0
    assert grads["sym"][2, 4] == 0 and grads["high"][2, 4] == 0
    # clipped: (0,2) and (0,3) above, (1,3) and (2,4) below, out of 11 tokens
    assert stats["sym"]["clip_frac_high"] == pytest.approx(2 / 11)
    assert stats["high"]["clip_frac_high"] == pytest.approx(1 / 11)
    assert stats["sym"]["clip_frac_low"] == stats["high"]["clip_frac_low"] == pytest.approx(2 / 11)
    assert stats["sym"]["clip_frac"] == pytest.approx(4 / 11)


def test_dual_clip_bounds_a_negative_advantage_token_with_a_huge_ratio():
    """A = -2 at ratio 4: PPO's loss is -A * 4 = 8 with gradient; dual clip 3 caps it at 6, flat."""
    logp, old, ref, adv, mask = option_inputs()
    plain = G.GrpoConfig(kl_coef=0.0)
    dual = G.GrpoConfig(kl_coef=0.0, dual_clip=3.0)
    loss_p, stats_p = G.grpo_loss(logp, old, ref, adv, mask, plain)
    loss_d, stats_d = G.grpo_loss(logp, old, ref, adv, mask, dual)
    (grad_p,) = torch.autograd.grad(loss_p, logp)
    (grad_d,) = torch.autograd.grad(loss_d, logp)
    assert loss_p.item() - loss_d.item() == pytest.approx((8.0 - 6.0) / 11)
    assert grad_p[1, 2] > 0 and grad_d[1, 2] == 0
    assert stats_d["dual_clip_frac"] == pytest.approx(1 / 11) and stats_p["dual_clip_frac"] == 0


def test_sequence_ratio_is_the_length_normalised_ratio_with_token_gradients():
    """GSPO: every token of sequence i carries s_i = exp(mean log-ratio); unclipped, the
    gradient at each of its tokens is -A_i * s_i / (|y_i| * sequences) (seq-mean-token-mean)."""
    logp, old, ref, adv, mask = option_inputs()
    cfg = G.GrpoConfig(kl_coef=0.0, ratio_level="sequence", clip=10.0,
                       loss_agg_mode="seq-mean-token-mean")
    loss, stats = G.grpo_loss(logp, old, ref, adv, mask, cfg)
    (grad,) = torch.autograd.grad(loss, logp)
    for i, ratios in enumerate(OPTION_RATIOS[:3]):
        tokens = [j for j in range(6) if OPTION_MASK[i][j]]
        s = math.exp(sum(math.log(ratios[j]) for j in tokens) / len(tokens))
        for j in tokens:
            want = -OPTION_ADV[i] * s / (len(tokens) * 3)
            assert grad[i, j].item() == pytest.approx(want, rel=1e-12)
    assert stats["ratio_max"] == pytest.approx(math.sqrt(4.0 * 0.5), rel=1e-12)


def test_kl_in_the_reward_leaves_the_loss_without_kl_but_logs_it():
    logp, old, ref, adv, mask = option_inputs()
    in_loss, s_loss = G.grpo_loss(logp, old, ref, adv, mask, G.GrpoConfig(kl_coef=0.3))
    in_reward, s_reward = G.grpo_loss(logp, old, ref, adv, mask,
                                      G.GrpoConfig(kl_coef=0.3, kl_in="reward"))
    no_ref, _ = G.grpo_loss(logp, old, None, adv, mask, G.GrpoConfig(kl_coef=0.3))
    assert in_reward.item() == no_ref.item() != in_loss.item()
    assert s_reward["kl"] == s_loss["kl"] > 0
    assert in_loss.item() - in_reward.item() == pytest.approx(0.3 * s_loss["kl"], rel=1e-12)


@pytest.mark.parametrize("mode", G.LOSS_AGG_MODES)
def test_micro_batches_add_up_to_the_one_shot_aggregate(mode):
    """Each aggregation: the losses of row slices, given the whole batch's token and sequence
    counts, add up to the loss of all rows at once, and so do their gradients."""
    cfg = G.GrpoConfig(kl_coef=0.3, clip_high=0.28, dual_clip=3.0, loss_agg_mode=mode,
                       norm_length=8)
    logp, old, ref, adv, mask = option_inputs()
    whole, _ = G.grpo_loss(logp, old, ref, adv, mask, cfg)
    (whole_grad,) = torch.autograd.grad(whole, logp)
    tokens, sequences = float(mask.sum()), float((mask.sum(1) > 0).sum())
    parts = 0.0
    for rows in ([0], [1, 3], [2]):
        part, _ = G.grpo_loss(logp[rows], old[rows], ref[rows], adv[rows], mask[rows], cfg,
                              num_tokens=tokens, num_sequences=sequences)
        parts = parts + part
    (part_grad,) = torch.autograd.grad(parts, logp)
    assert parts.item() == pytest.approx(whole.item(), rel=1e-12)
    torch.testing.assert_close(part_grad, whole_grad, rtol=1e-12, atol=1e-15)


def test_options_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="norm_length"):
        G.GrpoConfig(loss_agg_mode="seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="loss_agg_mode"):
        G.GrpoConfig(loss_agg_mode="token-sum")
    with pytest.raises(ValueError, match="dual_clip"):
        G.GrpoConfig(dual_clip=1.0)
    with pytest.raises(ValueError, match="GSPO"):
        G.GrpoConfig(ratio_level="sequence", dual_clip=3.0)
    with pytest.raises(ValueError, match="kl_estimator"):
        G.GrpoConfig(kl_estimator="k4")
    with pytest.raises(ValueError, match="ppo_epochs"):
        G.GrpoConfig(ppo_epochs=0)

# --------------------------------------------------------------------------
# make_batch and the mask
# --------------------------------------------------------------------------


def test_make_batch_masks_prompt_env_tokens_and_padding():
    b = make_batch(
        prompts=[[11, 12, 13], [21]],
        responses=[[31, 32, 33, 34, 35], [41, 42]],
        response_masks=[[1, 0, 0, 1, 1], [1, 1]],
        advantages=[0.5, -0.5],
        pad_token_id=PAD,
    )
    assert b.input_ids.tolist() == [
        [11, 12, 13, 31, 32, 33, 34, 35],
        [21, 41, 42, PAD, PAD, PAD, PAD, PAD],
    ]
    assert b.attention_mask.tolist() == [[1] * 8, [1, 1, 1, 0, 0, 0, 0, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 0, 1, 0, 0, 1, 1], [0, 1, 1, 0, 0, 0, 0, 0]]
    assert b.loss_mask.dtype == torch.float32 and b.input_ids.dtype == torch.long
    assert b.advantages.tolist() == [0.5, -0.5]
    assert b.prompt_lengths.tolist() == [3, 1]


def test_make_batch_rejects_inconsistent_input():
    with pytest.raises(ValueError, match="mask entries"):
        make_batch([[1]], [[2, 3]], [[1]], [0.0], PAD)
    with pytest.raises(ValueError, match="one of each"):
        make_batch([[1], [2]], [[2]], [[1]], [0.0], PAD)
    with pytest.raises(ValueError, match="0 or 1"):
        make_batch([[1]], [[2]], [[2]], [0.0], PAD)
    with pytest.raises(ValueError, match="finite"):
        make_batch([[1]], [[2]], [[1]], [float("nan")], PAD)


def test_labels_at_trailing_masked_positions_change_neither_loss_nor_gradient(model):
    """Env tokens get no loss: a masked token that is context for no scored token is inert.

    (Env tokens in the middle of a response are context for the model's later
    tokens, so their ids do change later log-probs; what the mask promises is
    that they are never scored.) Here the responses end with an env span;
    changing the token ids there must leave loss and gradient bit-identical.
    """
    prompts, responses, masks = rollouts(1, 4)
    for r, m in zip(responses, masks, strict=True):
        r.extend([100, 101, 102])
        m.extend([0, 0, 0])
    adv = [1.0, -1.0, 0.5, -0.5]

    def loss_and_grads(batch):
        model.zero_grad(set_to_none=True)
        logp, ent = L.forward_scores(
            model, batch.input_ids, batch.attention_mask, batch.loss_mask, entropy="grad"
        )
        ref = logp.detach() - 0.1 * batch.loss_mask
        cfg = G.GrpoConfig(kl_coef=0.01, entropy_coef=0.01)
        old = logp.detach() + 0.05 * batch.loss_mask
        loss, _ = G.grpo_loss(logp, old, ref, batch.advantages, batch.loss_mask, cfg, entropy=ent)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss_a, grads_a = loss_and_grads(make_batch(prompts, responses, masks, adv, PAD))
    for r in responses:
        r[-3:] = [7, 8, 9]
    loss_b, grads_b = loss_and_grads(make_batch(prompts, responses, masks, adv, PAD))
    assert torch.equal(loss_a, loss_b)
    for a, b in zip(grads_a, grads_b, strict=True):
        assert torch.equal(a, b)
    assert any(g.abs().sum() > 0 for g in grads_a)


# --------------------------------------------------------------------------
# token_logprobs
# --------------------------------------------------------------------------


def test_token_logprobs_matches_a_full_log_softmax(model):
    b = batch_of(0, 5)
    expected = full_reference_logprobs(model, b)
    got, ent = L.token_logprobs(model, b, micro_batch_size=5, with_entropy=True)
    assert got.shape == b.input_ids.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, expected * b.loss_mask, atol=1e-5, rtol=1e-5)
    assert (got[b.loss_mask == 0] == 0).all()
    # entropy of the predicted distribution, by hand
    with torch.no_grad():
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        p = torch.softmax(logits, -1)
        h = -(p * torch.log_softmax(logits, -1)).sum(-1)
    want = torch.zeros_like(got)
    want[:, 1:] = h[:, :-1]
    torch.testing.assert_close(ent, want * b.loss_mask, atol=1e-4, rtol=1e-4)
    # any set of positions can be scored, e.g. every attended one
    every = b.attention_mask.float()
    got_all, none = L.token_logprobs(model, b, 2, score_mask=every)
    assert none is None
    every[:, 0] = 0
    torch.testing.assert_close(got_all, expected * every, atol=1e-5, rtol=1e-5)


def test_token_logprobs_micro_batching_and_padding_do_not_matter(model):
    b = batch_of(2, 6)
    whole, _ = L.token_logprobs(model, b, micro_batch_size=6)
    for size in (1, 4):
        part, _ = L.token_logprobs(model, b, micro_batch_size=size)
        torch.testing.assert_close(part, whole, atol=1e-5, rtol=1e-5)
    # each sequence alone (no padding at all) gives the same log-probs
    for i in range(len(b)):
        one = b.rows([i])
        n = int(one.attention_mask.sum())
        alone = PolicyBatch(
            one.input_ids[:, :n], one.attention_mask[:, :n], one.loss_mask[:, :n], one.advantages
        )
        got, _ = L.token_logprobs(model, alone, 1)
        torch.testing.assert_close(got[0], whole[i, :n], atol=1e-5, rtol=1e-5)
        assert (whole[i, n:] == 0).all()


def test_micro_batch_plan_keeps_groups_together():
    b = grouped_batch(0, groups=3, size=3)
    plan = list(L.micro_batches(b, torch.arange(9), 2, True))
    seen = sorted(r for rows, _, _ in plan for r in rows.tolist())
    assert seen == list(range(9))
    lengths = b.attention_mask.sum(1)
    for rows, width, prefix in plan:
        assert 1 <= len(rows) <= 2 and width == int(lengths[rows].max())
        if prefix is not None:  # one group, its prompt length
            assert len(rows) == 2 and len({int(r) // 3 for r in rows}) == 1
            assert prefix == int(b.prompt_lengths[rows[0]])
    assert sum(p is not None for _, _, p in plan) == 3  # one pair per group
    assert all(p is None for _, _, p in L.micro_batches(b, torch.arange(9), 4, False))


def test_shared_prompt_gives_the_same_log_probs(model):
    b = grouped_batch(1)
    expected = full_reference_logprobs(model, b) * b.loss_mask
    for size in (2, 3, 9):
        shared, ent_s = L.token_logprobs(model, b, size, with_entropy=True)
        plain, ent_p = L.token_logprobs(model, b, size, with_entropy=True, share_prompt=False)
        torch.testing.assert_close(shared, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(plain, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent_s, ent_p, atol=1e-5, rtol=1e-5)
    # without prompt_lengths the prompt is where the first scored token starts
    b.prompt_lengths = None
    torch.testing.assert_close(L.token_logprobs(model, b, 3)[0], expected, atol=1e-5, rtol=1e-5)


def test_shared_prompt_gives_the_same_update(tiny_dir):
    b = grouped_batch(2)
    cfg = dict(micro_batch_size=3, kl_coef=0.5, entropy_coef=0.05, max_grad_norm=None)
    shared, s_shared = run_sgd(tiny_dir, b, G.GrpoConfig(share_prompt=True, **cfg))
    plain, s_plain = run_sgd(tiny_dir, b, G.GrpoConfig(share_prompt=False, **cfg))
    for x, y in zip(shared, plain, strict=True):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-4)
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm", "num_tokens"):
        assert s_shared[key] == pytest.approx(s_plain[key], rel=1e-4, abs=1e-7), key


def step_batch(seed: int = 0, groups: int = 3, size: int = 3, shared: int = 48) -> PolicyBatch:
    """A step with exemplars: every prompt starts with the same ``shared`` tokens (instruction
    and exemplars), then its own question; ``size`` responses per question with env spans."""
    g = torch.Generator().manual_seed(seed)
    common = torch.randint(3, 400, (shared,), generator=g).tolist()
    prompts, responses, masks = [], [], []
    for q in range(groups):
        question = torch.randint(3, 400, (3 + 2 * q,), generator=g).tolist()
        for k in range(size):
            r = torch.randint(3, 400, (5 + 3 * k + q,), generator=g).tolist()
            m = [1] * len(r)
            if k != 0:
                m[2:4] = [0, 0]
            prompts.append(common + question)
            responses.append(r)
            masks.append(m)
    adv = [(-1.0) ** i * (0.4 + 0.1 * i) for i in range(groups * size)]
    return make_batch(prompts, responses, masks, adv, PAD)


class GradientRecorder(torch.optim.Optimizer):
    """An optimizer whose step only keeps a copy of each parameter's gradient (weights stay)."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.0})
        self.grads: list[torch.Tensor] = []

    def step(self, closure=None):
        self.grads += [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                       for group in self.param_groups for p in group["params"]]


def gradients(tiny_dir, batch, config, ref_logp):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    recorder = GradientRecorder(m.parameters())
    stats = G.update_step(m, recorder, None, batch, ref_logp, config)
    return recorder.grads, stats


def decoder_tokens(model, monkeypatch) -> list[int]:
    """Counts the tokens every decoder call runs on (how often the prefix is computed)."""
    decoder = model.get_decoder()
    seen: list[int] = []
    forward = decoder.forward

    def counting(*args, **kwargs):
        seen.append(int(kwargs["input_ids"].numel()))
        return forward(*args, **kwargs)

    monkeypatch.setattr(decoder, "forward", counting)
    return seen


def test_step_prefix_is_the_prompts_common_start_short_of_the_shortest(model):
    b = step_batch(0, shared=48)
    prefix = L.step_prefix(model, b, torch.arange(len(b)), grad=False)
    assert prefix is not None and prefix.length == 48  # the questions differ from token 48
    assert prefix.kv[0][0].shape[0] == 1 and prefix.kv[0][0].shape[2] == 48
    # one distinct prompt (one group), or a short common start: nothing to share per step
    assert L.step_prefix(model, b, torch.arange(3), grad=False) is None
    assert L.step_prefix(model, step_batch(0, shared=8), torch.arange(9), grad=False) is None


def test_step_prefix_gives_the_same_log_probs_and_runs_the_prefix_once(model, monkeypatch):
    b = step_batch(1, groups=3, size=3, shared=60)
    expected = full_reference_logprobs(model, b) * b.loss_mask
    seen = decoder_tokens(model, monkeypatch)
    shared, ent_s = L.token_logprobs(model, b, 3, with_entropy=True)
    shared_tokens = sum(seen)
    seen.clear()
    plain, ent_p = L.token_logprobs(model, b, 3, with_entropy=True, share_prompt=False)
    torch.testing.assert_close(shared, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(plain, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_s, ent_p, atol=1e-5, rtol=1e-5)
    # the 60 shared tokens run once, not once per row (9) or per group (3)
    assert sum(seen) - shared_tokens >= 8 * 60
    assert seen and shared_tokens < sum(seen)


def test_a_frozen_models_step_prefix_runs_once_while_its_tokens_stay(model, monkeypatch):
    """The reference's exemplars (the same every step of a stage) go through it once; the
    log-probs of every later step are those of running them again."""
    first, second = step_batch(5, shared=56), step_batch(6, shared=56)
    second.input_ids[:, :56] = first.input_ids[:, :56]  # the same instruction and exemplars
    expected = [L.reference_logprobs(model, b, 3) for b in (first, second)]
    reset = L.frozen_copy(model)  # another model: a reference reset at a stage
    frozen = L.FrozenPrefix()
    seen = decoder_tokens(model, monkeypatch)
    got = [L.reference_logprobs(model, b, 3, frozen) for b in (first, second)]
    assert seen.count(56) == 1  # the prefix pass, in the first step only
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    seen.clear()
    other = step_batch(7, shared=56)  # another draw: its prefix runs again
    torch.testing.assert_close(L.reference_logprobs(model, other, 3, frozen),
                               L.reference_logprobs(model, other, 3), atol=1e-5, rtol=1e-5)
    assert seen.count(56) == 2
    seen_by_reset = decoder_tokens(reset, monkeypatch)
    L.reference_logprobs(reset, other, 3, frozen)  # the same tokens, another model
    assert seen_by_reset.count(56) == 1


@pytest.mark.parametrize("mini_batch_size", [None, 6])
def test_step_prefix_gives_the_same_parameter_gradients(tiny_dir, mini_batch_size):
    """fp32: the shared step prefix's gradients equal running the prefix in every pass."""
    from transformers import AutoModelForCausalLM

    b = step_batch(2, groups=3, size=3, shared=50)
    other = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.02 * torch.randn_like(p, generator=torch.Generator().manual_seed(3)))
    ref_logp = L.reference_logprobs(L.frozen_copy(other), b, 2)
    cfg = dict(micro_batch_size=2, mini_batch_size=mini_batch_size, kl_coef=0.5,
               entropy_coef=0.05, max_grad_norm=None)
    shared, s_shared = gradients(tiny_dir, b, G.GrpoConfig(share_prompt=True, **cfg), ref_logp)
    plain, s_plain = gradients(tiny_dir, b, G.GrpoConfig(share_prompt=False, **cfg), ref_logp)
    assert any(float(g.abs().max()) > 1e-4 for g in plain)  # a real gradient to compare
    for x, y in zip(shared, plain, strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm", "num_tokens"):
        assert s_shared[key] == pytest.approx(s_plain[key], rel=1e-5, abs=1e-7), key


def test_step_prefix_with_frozen_layers_gives_the_same_gradients(tiny_dir):
    """Only the query projections train (as LoRA on q_proj would): the first layer's keys and
    values then have no graph, and the prefix's gradient still matches the unshared path."""
    from transformers import AutoModelForCausalLM

    b = step_batch(4, groups=2, size=2, shared=40)
    grads = {}
    for share in (True, False):
        m = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
        for name, p in m.named_parameters():
            p.requires_grad_("q_proj" in name)
        recorder = GradientRecorder([p for p in m.parameters() if p.requires_grad])
        G.update_step(m, recorder, None, b, None,
                      G.GrpoConfig(micro_batch_size=2, kl_coef=0.0, share_prompt=share))
        grads[share] = recorder.grads
    assert grads[True] and any(float(g.abs().max()) > 1e-5 for g in grads[False])
    for x, y in zip(grads[True], grads[False], strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_step_prefix_update_runs_the_prefix_once_per_mini_batch(tiny_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    b = step_batch(3, groups=4, size=2, shared=64)
    m = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    seen = decoder_tokens(m, monkeypatch)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    G.update_step(m, opt, None, b, None, G.GrpoConfig(micro_batch_size=2, kl_coef=0.0))
    assert seen.count(64) == 1  # the prefix pass, alone
    assert all(n < 64 for n in seen if n != 64)  # every other pass starts after it


def test_generic_logits_path_matches_the_plain_head(model, monkeypatch):
    b = batch_of(3, 4)
    plain, _ = L.token_logprobs(model, b, 3, with_entropy=False)
    monkeypatch.setattr(L, "_PLAIN_HEAD_MODEL_TYPES", frozenset())
    assert L._plain_head(model) is None
    generic, _ = L.token_logprobs(model, b, 3)
    torch.testing.assert_close(generic, plain, atol=1e-5, rtol=1e-5)


def test_small_chunks_give_the_same_log_probs(model, monkeypatch):
    b = batch_of(4, 3)
    whole, ent = L.token_logprobs(model, b, 3, with_entropy=True)
    monkeypatch.setattr(L, "_NO_GRAD_LOGITS_ELEMENTS", model.config.vocab_size * 3)
    small, ent_small = L.token_logprobs(model, b, 3, with_entropy=True)
    torch.testing.assert_close(small, whole, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ent_small, ent, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------
# update_step
# --------------------------------------------------------------------------


def seq_logprob(model, batch) -> torch.Tensor:
    logp, _ = L.token_logprobs(model, batch, len(batch))
    return logp.sum(dim=1)


def test_update_moves_probability_towards_positive_advantage(model):
    prompts, responses, masks = rollouts(5, 2)
    b = make_batch([prompts[0]] * 2, responses, masks, [1.0, -1.0], PAD)
    before = seq_logprob(model, b)
    opt, sched = make_optimizer(model, lr=1e-2)
    ref = L.reference_logprobs(L.frozen_copy(model), b, 2)
    stats = G.update_step(model, opt, sched, b, ref, G.GrpoConfig(micro_batch_size=1))
    after = seq_logprob(model, b)
    assert after[0] > before[0] + 0.1
    assert after[1] < before[1] - 0.1
    assert stats["optimizer_steps"] == 1 and stats["ratio_mean"] == pytest.approx(1.0)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-6)  # reference == policy before the step


def run_sgd(tiny_dir, batch, config, lr=0.5, ref=True):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    ref_logp = None
    if ref:  # a reference that differs from the policy, so the KL has a gradient
        other = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
        with torch.no_grad():
            for p in other.parameters():
                p.add_(0.02 * torch.randn_like(p, generator=torch.Generator().manual_seed(1)))
        ref_logp = L.reference_logprobs(L.frozen_copy(other), batch, 2)
    start = params_of(m)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    stats = G.update_step(m, opt, None, batch, ref_logp, config)
    deltas = [p.detach() - s for p, s in zip(m.parameters(), start, strict=True)]
    return deltas, stats


@pytest.mark.parametrize("mode", G.LOSS_AGG_MODES)
def test_gradient_accumulation_equals_one_big_batch(tiny_dir, mode):
    b = batch_of(6, 6)
    cfg = dict(kl_coef=0.5, entropy_coef=0.05, max_grad_norm=None, loss_agg_mode=mode,
               norm_length=16)
    big, s_big = run_sgd(tiny_dir, b, G.GrpoConfig(micro_batch_size=6, **cfg))
    for size in (1, 4):
        small, s_small = run_sgd(tiny_dir, b, G.GrpoConfig(micro_batch_size=size, **cfg))
        for x, y in zip(small, big, strict=True):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-4)
        for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm", "num_tokens"):
            assert s_small[key] == pytest.approx(s_big[key], rel=1e-4, abs=1e-7), key
    assert s_big["kl"] > 0 and s_big["num_tokens"] == float(b.loss_mask.sum())


def test_mini_batches_take_one_optimizer_step_each(tiny_dir):
    b = batch_of(7, 6)
    whole, s_whole = run_sgd(tiny_dir, b, G.GrpoConfig(micro_batch_size=2, mini_batch_size=6))
    none, _ = run_sgd(tiny_dir, b, G.GrpoConfig(micro_batch_size=2, mini_batch_size=None))
    for x, y in zip(whole, none, strict=True):
        torch.testing.assert_close(x, y)
    _, s = run_sgd(tiny_dir, b, G.GrpoConfig(micro_batch_size=2, mini_batch_size=2))
    assert s["optimizer_steps"] == 3 and s_whole["optimizer_steps"] == 1
    # old log-probs come from before the first step: later mini-batches see ratio != 1
    assert s["ratio_max"] > 1.0 + 1e-4 and s["approx_kl"] != 0.0
    assert s_whole["ratio_mean"] == pytest.approx(1.0) and s_whole["approx_kl"] == 0.0


def cat_batches(a: PolicyBatch, b: PolicyBatch) -> PolicyBatch:
    """``a``'s rows then ``b``'s (same width)."""
    return PolicyBatch(*(torch.cat([getattr(a, f), getattr(b, f)]) for f in (
        "input_ids", "attention_mask", "loss_mask", "advantages", "prompt_lengths")))


def test_ppo_epochs_pass_over_the_batch_again_with_the_old_log_probs_of_before(tiny_dir):
    """Two epochs over a batch = one epoch over the batch twice in two mini-batches: the old
    log-probs of both passes come from the weights before the first optimizer step."""
    b = batch_of(12, 4)
    cfg = dict(micro_batch_size=2, kl_coef=0.5, max_grad_norm=None, clip_high=0.28,
               loss_agg_mode="seq-mean-token-mean")
    epochs, s_epochs = run_sgd(tiny_dir, b, G.GrpoConfig(ppo_epochs=2, **cfg), lr=2.0)
    twice, s_twice = run_sgd(tiny_dir, cat_batches(b, b),
                             G.GrpoConfig(mini_batch_size=4, **cfg), lr=2.0)
    for x, y in zip(epochs, twice, strict=True):  # old log-probs from other micro-batches
        torch.testing.assert_close(x, y, atol=2e-5, rtol=1e-3)
    assert s_epochs["optimizer_steps"] == 2
    assert s_epochs["num_tokens"] == float(b.loss_mask.sum()) == s_twice["num_tokens"] / 2
    assert s_epochs["ratio_max"] > 1.0 + 1e-3  # the second pass sees the moved weights
    for key in ("loss", "pg_loss", "kl", "clip_frac", "ratio_mean", "approx_kl"):
        assert s_epochs[key] == pytest.approx(s_twice[key], rel=1e-4, abs=1e-7), key


def test_old_log_probs_from_the_caller_spare_the_update_its_own_pass(tiny_dir):
    """The trainer scores a step's batch once with the sampling weights (the KL in the reward,
    the logged token figures) and hands the log-probs over: the update then runs no pass
    without gradients and moves the weights as when it computes them itself."""
    from transformers import AutoModelForCausalLM

    b = batch_of(8, 8)
    config = G.GrpoConfig(micro_batch_size=2, mini_batch_size=4, kl_coef=0.0)
    assert G.update_needs_old_logprobs(config, 8)
    assert not G.update_needs_old_logprobs(G.GrpoConfig(mini_batch_size=8), 8)
    m = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    old, _ = L.token_logprobs(m, b, 2)
    with_grad = []
    m.get_input_embeddings().register_forward_hook(
        lambda *_: with_grad.append(torch.is_grad_enabled()))
    start = params_of(m)
    G.update_step(m, torch.optim.SGD(m.parameters(), lr=0.5), None, b, None, config,
                  old_logp=old)
    assert with_grad and all(with_grad)
    given = [p.detach() - s for p, s in zip(m.parameters(), start, strict=True)]
    own, _ = run_sgd(tiny_dir, b, config, ref=False)
    assert any(float(d.abs().max()) > 1e-4 for d in own)
    for x, y in zip(given, own, strict=True):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="old_logp has shape"):
        G.update_step(m, torch.optim.SGD(m.parameters(), lr=0.5), None, b, None, config,
                      old_logp=old[:, :-1])


def test_default_config_is_method_md_update_bit_for_bit(tiny_dir):
    """GrpoConfig() against method.md's update written plainly: token log-probs of the whole
    batch in one pass, ratio exp(logp - sg[logp]), PPO clip 0.2, k3 KL (clamped) at 0.001,
    token mean, gradient norm clipped to 1, one AdamW step: the same parameters, bit for bit."""
    from transformers import AutoModelForCausalLM

    prompts, responses, masks = rollouts(13, 4)
    order = sorted(range(4), key=lambda i: -(len(prompts[i]) + len(responses[i])))
    b = make_batch(*([x[i] for i in order] for x in (prompts, responses, masks)),
                   [0.9, -1.3, 0.4, -0.2], PAD)  # longest first: the engine's own order
    ref_logp = full_reference_logprobs(
        AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32), b) - 0.05

    engine = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32)
    optimizer, scheduler = make_optimizer(engine, lr=1e-3)
    stats = G.update_step(engine, optimizer, scheduler, b, ref_logp, G.GrpoConfig())

    plain = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32).train()
    optimizer, scheduler = make_optimizer(plain, lr=1e-3)
    scored = b.loss_mask[:, 1:] > 0
    hidden = plain.model(input_ids=b.input_ids, attention_mask=b.attention_mask,
                         use_cache=False).last_hidden_state[:, :-1][scored]
    logits = plain.lm_head(hidden).float()
    targets = b.input_ids[:, 1:][scored]
    logp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=-1)
    adv = b.advantages.unsqueeze(1).expand_as(scored)[scored]
    ratio = torch.exp(logp - logp.detach())
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - 0.2, 1 + 0.2))
    d = torch.clamp(ref_logp[:, 1:][scored] - logp, -10.0, 10.0)
    loss = (pg + 0.001 * (torch.exp(d) - d - 1.0)).sum() / float(scored.sum())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(plain.parameters()), 1.0)
    optimizer.step()
    scheduler.step()

    assert stats["optimizer_steps"] == 1 and stats["grad_norm"] > 0
    for x, y in zip(engine.parameters(), plain.parameters(), strict=True):
        assert torch.equal(x, y)
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-6)

def test_gradient_clipping_is_honoured(tiny_dir):
    b = batch_of(8, 4)
    lr, max_norm = 1.0, 1e-3
    deltas, stats = run_sgd(tiny_dir, b, G.GrpoConfig(max_grad_norm=max_norm), lr=lr)
    step_norm = torch.sqrt(sum((d.double() ** 2).sum() for d in deltas)).item()
    assert stats["grad_norm"] > 100 * max_norm  # reported before clipping
    assert step_norm == pytest.approx(lr * max_norm, rel=1e-3)
    # unclipped: the step is the whole gradient
    deltas, stats = run_sgd(tiny_dir, b, G.GrpoConfig(max_grad_norm=None), lr=lr)
    step_norm = torch.sqrt(sum((d.double() ** 2).sum() for d in deltas)).item()
    assert step_norm == pytest.approx(lr * stats["grad_norm"], rel=1e-3)


def test_stats_are_present_and_finite(model):
    b = batch_of(9, 5)
    opt, sched = make_optimizer(model, lr=1e-3, warmup_steps=2)
    ref = L.reference_logprobs(L.frozen_copy(model), b, 2)
    stats = G.update_step(model, opt, sched, b, ref, G.GrpoConfig(micro_batch_size=2))
    keys = {
        "loss",
        "pg_loss",
        "kl",
        "entropy",
        "clip_frac",
        "ratio_mean",
        "ratio_max",
        "approx_kl",
        "grad_norm",
        "grad_norm_max",
        "lr",
        "num_tokens",
        "num_sequences",
        "optimizer_steps",
        "skipped_steps",
        "advantage_mean",
        "advantage_abs_mean",
    }
    assert keys <= stats.keys()
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values()), stats
    assert stats["lr"] == pytest.approx(0.5e-3)  # first warmup step
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3)
    assert stats["entropy"] > 0
    env = sum(2 for i in range(5) if i % 2 == 0)
    response = int((b.attention_mask.sum(1) - b.prompt_lengths).sum())
    assert stats["num_tokens"] == response - env
    assert model.training is False  # the caller's mode is restored


def test_kl_is_zero_against_an_identical_reference_and_positive_after_an_update(model):
    b = batch_of(10, 4)
    ref_model = L.frozen_copy(model)
    assert not any(p.requires_grad for p in ref_model.parameters()) and not ref_model.training
    ref = L.reference_logprobs(ref_model, b, 4)
    cfg = G.GrpoConfig(micro_batch_size=2)
    logp, _ = L.token_logprobs(model, b, 4)
    _, stats = G.grpo_loss(logp, logp, ref, b.advantages, b.loss_mask, cfg)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-7)
    opt, sched = make_optimizer(model, lr=1e-2)
    G.update_step(model, opt, sched, b, ref, cfg)
    logp, _ = L.token_logprobs(model, b, 4)
    _, stats = G.grpo_loss(logp, logp, ref, b.advantages, b.loss_mask, cfg)
    assert stats["kl"] > 1e-4
    # the reference did not move
    torch.testing.assert_close(L.reference_logprobs(ref_model, b, 4), ref)


def test_non_finite_gradient_skips_the_step(model):
    b = batch_of(11, 2)
    opt, sched = make_optimizer(model, lr=1e-2)
    start = params_of(model)
    b.advantages = torch.tensor([float("inf"), 1.0])
    stats = G.update_step(model, opt, sched, b, None, G.GrpoConfig())
    assert stats["skipped_steps"] == 1 and stats["optimizer_steps"] == 0
    for p, s in zip(model.parameters(), start, strict=True):
        assert torch.equal(p.detach(), s)


def test_make_optimizer_warms_up_linearly_then_stays_constant(model):
    opt, sched = make_optimizer(model, lr=0.3, weight_decay=0.1, warmup_steps=3, total_steps=30)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3])
    assert isinstance(opt, torch.optim.AdamW)
    decays = {g["weight_decay"] for g in opt.param_groups}
    assert decays == {0.1, 0.0}  # matrices decay, norm weights do not
    opt, sched = make_optimizer(model, lr=0.3)
    assert opt.param_groups[0]["lr"] == 0.3
    with pytest.raises(ValueError):
        make_optimizer(model, lr=0.3, warmup_steps=5, total_steps=4)


def test_the_update_settings_are_the_run_configs_own():
    """Each GRPO option is declared once, in the run config: the update takes every field
    of the same name from it, with the same defaults, and the response budget as the fixed
    length of seq-mean-token-sum-norm."""
    spec = GrpoSpec()
    shared = {f.name for f in fields(GrpoConfig)} & set(GrpoSpec.model_fields)
    assert set(GRPO_VARIANTS) - {"norm_adv_by_std", "dynamic_sampling",
                                 "dynamic_sampling_max_batches", "overlong_buffer",
                                 "overlong_penalty"} <= shared  # (those act before the loss)
    assert {name: getattr(GrpoConfig(), name) for name in shared} == {
        name: getattr(spec, name) for name in shared}
    tuned = GrpoSpec(dual_clip=3.0, kl_estimator="k2", ppo_epochs=2, clip_high=0.28,
                     loss_agg_mode="seq-mean-token-sum-norm", max_response_tokens=96)
    config = GrpoConfig.from_spec(tuned)
    assert (config.dual_clip, config.kl_estimator, config.ppo_epochs, config.clip_high,
            config.loss_agg_mode, config.norm_length) == (
        3.0, "k2", 2, 0.28, "seq-mean-token-sum-norm", 96)
