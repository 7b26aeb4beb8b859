"""Loss-masked GRPO for the native engine (method.md, "Loss masking" and "GRPO"): the
loss and the update.

The pieces, in the order a training step uses them:

1. :func:`~worker.engines.native.policy_batch.make_batch` turns rollouts
   (prompt ids, response ids, a per-token response mask: 1 = sampled by the
   model, 0 = written by the environment) and the group advantages
   (``studio.method.grpo.group_advantages``) into a right-padded
   :class:`~worker.engines.native.policy_batch.PolicyBatch`.
2. :func:`~worker.engines.native.logprobs.reference_logprobs` scores the batch
   with the frozen reference (:func:`~worker.engines.native.logprobs.frozen_copy`
   of the initial weights), without gradients.
3. :func:`update_step` runs ``ppo_epochs`` (default one) PPO epochs over the
   batch: mini-batches (one optimizer step each), micro-batches inside them
   (gradient accumulation), the loss of :func:`grpo_loss`, gradient
   clipping, ``optimizer.step`` and ``scheduler.step`` (the optimizer:
   :func:`~worker.engines.native.optimizer.make_optimizer`).

This module holds the step's arithmetic (the config, the loss, the update
loop); how the log-probs are computed, and what that costs, is
:mod:`worker.engines.native.logprobs`.

The loss with the default :class:`GrpoConfig` (method.md), per unmasked
response token ``t`` of sequence ``i``::

    ratio   = exp(logp - old_logp)
    pg      = max(-A_i * ratio, -A_i * clip(ratio, 1 - clip, 1 + clip))
    kl      = exp(ref - logp) - (ref - logp) - 1          (low-variance "k3")
    loss_t  = pg + kl_coef * kl - entropy_coef * entropy

    loss    = sum_t(loss_t * mask_t) / sum_t(mask_t)       (token mean over the mini-batch)

The GRPO family's options (an upper clip range, dual clip, GSPO's sequence
ratio, the k1/k2 estimators, the KL in the reward instead, per-sequence
aggregations) follow veRL 0.9.1's ``core_algos``; :func:`grpo_loss` says how.

The mask (``PolicyBatch.loss_mask``) is 0 on prompt tokens, environment
tokens (information blocks, corrective messages) and padding, so none of the
three terms sees them. Environment tokens stay in ``input_ids``: they are
context for the model's later tokens, they are just never scored.

Dropout: the ratio assumes the same network computes the old and the new
log-probs; Hugging Face causal LMs default to dropout 0, keep it that way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import get_args

import torch

from studio.method.guidance import SHAPINGS
from studio.run_config import GrpoSpec, KlEstimator, LossAggMode
from worker.engines.native.logprobs import (
    forward_scores,
    micro_batches,
    model_device,
    step_prefix,
    token_logprobs,
)
from worker.engines.native.policy_batch import PolicyBatch

__all__ = [
    "GrpoConfig",
    "grpo_loss",
    "kl_estimate",
    "update_needs_old_logprobs",
    "update_step",
]

#: The low-variance KL estimator is ``exp(d) - d - 1`` with ``d = ref - logp``;
#: ``d`` is clamped to this range so that a token the policy has all but ruled
#: out cannot overflow ``exp`` (and turn the gradient into NaN).
KL_LOG_RATIO_CLAMP = 10.0


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


#: ``GrpoConfig.loss_agg_mode``'s values: veRL's ``actor.loss_agg_mode`` names.
LOSS_AGG_MODES = get_args(LossAggMode)
#: ``GrpoConfig.kl_estimator``'s values (Schulman's k1/k2/k3).
KL_ESTIMATORS = get_args(KlEstimator)


@dataclass
class GrpoConfig:
    """Hyper-parameters of one GRPO update (defaults: method.md, "GRPO").

    ``micro_batch_size``: sequences per forward/backward (gradient
    accumulation). ``mini_batch_size``: sequences per optimizer step; ``None``
    means the whole batch (one optimizer step per training step).
    ``max_grad_norm``: the total gradient norm is clipped to it (``None`` or
    ``<= 0``: measured, not clipped). ``share_prompt``: run the step's common
    prompt prefix once (:func:`step_prefix`) and the rest of a group's prompt
    once for all its responses in a micro-batch (see :func:`token_logprobs`);
    same result up to float rounding.

    The GRPO family's options (run config ``grpo.*``; :func:`grpo_loss` says
    what each computes): ``loss_agg_mode`` (one of :data:`LOSS_AGG_MODES`),
    ``norm_length`` (the fixed length of ``seq-mean-token-sum-norm``, required
    there: the run's ``max_response_tokens``), ``clip_high`` (upper clip
    range; None: ``clip``), ``dual_clip`` (None: none), ``ratio_level``
    (``token`` or ``sequence``), ``kl_estimator`` (one of
    :data:`KL_ESTIMATORS`), ``kl_in`` (``loss``: the KL is a loss term;
    ``reward``: the caller put it in the reward, the loss only logs it),
    ``ppo_epochs`` (passes of :func:`update_step` over the batch).

    Guided rollouts (``PolicyBatch.guided``; run config ``guidance``):
    ``guided_shaping`` "none" scores them like the others; "luffy" replaces
    their policy term by ``-A * p / (p + luffy_gamma)``, unclipped (LUFFY).
    """

    clip: float = 0.2
    kl_coef: float = 0.001
    entropy_coef: float = 0.0
    micro_batch_size: int = 4
    mini_batch_size: int | None = None
    max_grad_norm: float = 1.0
    share_prompt: bool = True
    loss_agg_mode: str = "token-mean"
    norm_length: int | None = None
    clip_high: float | None = None
    dual_clip: float | None = None
    ratio_level: str = "token"
    kl_estimator: str = "k3"
    kl_in: str = "loss"
    ppo_epochs: int = 1
    guided_shaping: str = "none"
    luffy_gamma: float = 0.1

    @classmethod
    def from_spec(cls, spec: GrpoSpec, **engine: object) -> GrpoConfig:
        """A run's update settings: each field of the run config's `grpo` section of the same
        name (declared and checked there once), the fixed length of
        ``seq-mean-token-sum-norm`` its response budget; `engine`: what the engine sets
        itself (``share_prompt``)."""
        names = {f.name for f in fields(cls)} & set(type(spec).model_fields)
        return cls(**{name: getattr(spec, name) for name in names},
                   norm_length=spec.limits().max_response_tokens, **engine)

    def __post_init__(self) -> None:
        if not self.clip >= 0:
            raise ValueError(f"clip must be >= 0, got {self.clip}")
        if self.clip_high is not None and not self.clip_high >= 0:
            raise ValueError(f"clip_high must be >= 0 or None, got {self.clip_high}")
        if not self.kl_coef >= 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if self.mini_batch_size is not None and self.mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be >= 1 or None, got {self.mini_batch_size}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode must be one of {LOSS_AGG_MODES}, "
                             f"got {self.loss_agg_mode!r}")
        if self.loss_agg_mode == "seq-mean-token-sum-norm" and not (
                self.norm_length is not None and self.norm_length >= 1):
            raise ValueError("seq-mean-token-sum-norm needs norm_length >= 1 (the run's "
                             f"max_response_tokens), got {self.norm_length}")
        if self.dual_clip is not None and not self.dual_clip > 1:
            raise ValueError(f"dual_clip must be > 1 or None, got {self.dual_clip}")
        if self.ratio_level not in ("token", "sequence"):
            raise ValueError(f"ratio_level must be 'token' or 'sequence', got {self.ratio_level!r}")
        if self.ratio_level == "sequence" and self.dual_clip is not None:
            raise ValueError("dual_clip is not used with ratio_level 'sequence' (GSPO has none)")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, "
                             f"got {self.kl_estimator!r}")
        if self.kl_in not in ("loss", "reward"):
            raise ValueError(f"kl_in must be 'loss' or 'reward', got {self.kl_in!r}")
        if self.ppo_epochs < 1:
            raise ValueError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}")
        if self.guided_shaping not in SHAPINGS:
            raise ValueError(f"guided_shaping must be one of {SHAPINGS}, "
                             f"got {self.guided_shaping!r}")
        if not self.luffy_gamma > 0:
            raise ValueError(f"luffy_gamma must be > 0, got {self.luffy_gamma}")


# --------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------


def kl_estimate(d: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from ``d = ref_logp - logp``.

    As veRL's ``kl_penalty``: ``k1`` = ``-d`` (unbiased, noisy, can be
    negative), ``k2`` = ``d**2 / 2``, ``k3`` = ``exp(d) - d - 1``
    (low-variance, never negative; method.md) with ``d`` clamped to
    :data:`KL_LOG_RATIO_CLAMP` (veRL clamps ``d`` to 20 and the estimate to
    10; both only guard overflow).
    """
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        d = torch.clamp(d, -KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
        return torch.exp(d) - d - 1.0
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


#: GSPO's log sequence ratio is clamped above at this value (veRL's ``compute_policy_loss_gspo``).
SEQUENCE_LOG_RATIO_MAX = 10.0


def _sequence_ratio(
    logp: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """GSPO's ratio ``[N, T]``: each sequence's length-normalised ratio, on each of its tokens.

    ``s_i = exp(mean_t(logp - old_logp))`` over the sequence's scored tokens;
    the token's value is ``sg[log s_i] + logp - sg[logp]``, exponentiated
    (the stop-gradient trick of veRL's gspo loss), so it equals ``s_i`` and
    its gradient is ``s_i * d logp`` per token (the sequence's gradient once
    token means are taken).
    """
    lengths = mask.sum(dim=-1).clamp(min=1.0)
    seq = (log_ratio * mask).sum(dim=-1) / lengths
    log_seq = logp - logp.detach() + seq.detach().unsqueeze(-1)
    return torch.exp(torch.clamp(log_seq, max=SEQUENCE_LOG_RATIO_MAX))


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    config: GrpoConfig,
    *,
    entropy: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    guided: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss + ``kl_coef`` * KL - ``entropy_coef`` * entropy, aggregated over the mask.

    ``logp``, ``old_logp``, ``ref_logp``, ``entropy``, ``loss_mask``: ``[N, T]``;
    ``advantages``: ``[N]`` (or already ``[N, T]``). ``ref_logp`` None (or
    ``kl_coef`` 0) drops the KL term; ``entropy`` None drops the bonus.

    Per token (veRL 0.9.1's ``compute_policy_loss_vanilla``; ``high`` is
    ``clip_high``, or ``clip`` when None)::

        pg = max(-A * ratio, -A * clamp(ratio, 1 - clip, 1 + high))
        pg = min(pg, -A * dual_clip)   where A < 0, when dual_clip is set

    ``ratio`` is ``exp(logp - old_logp)``; with ``ratio_level`` "sequence"
    it is GSPO's (:func:`_sequence_ratio`, veRL's ``compute_policy_loss_gspo``,
    no dual clip). The KL term is :func:`kl_estimate` of ``kl_estimator``,
    in the loss only when ``kl_in`` is "loss" (else it is only logged).

    ``guided`` (``[N]`` bool) with ``guided_shaping`` "luffy": those rows' policy
    term is ``-A * p / (p + luffy_gamma)`` with ``p = exp(logp)``, no clip
    (:func:`studio.method.guidance.luffy_weight`); their tokens count as never
    clipped.

    Aggregation (veRL's ``agg_loss``; the policy, KL and entropy terms alike):
    ``token-mean`` = sum over scored tokens / ``num_tokens``;
    ``seq-mean-token-mean`` = sum over sequences of each one's token mean /
    ``num_sequences``; ``seq-mean-token-sum-norm`` (Dr. GRPO) = sum over
    sequences of each one's token sum / ``num_sequences`` / ``norm_length``,
    a fixed length (veRL's ``loss_scale_factor``, whose default is the padded
    response length; the run gives its ``max_response_tokens``). Defaults:
    this call's scored tokens and the sequences with at least one (veRL's
    ``agg_loss`` without global counts; its trainer passes the mini-batch's
    size, the same number since every answer starts with a token the model
    wrote); gradient accumulation passes the whole mini-batch's counts so
    that the micro-batch losses add up to the mini-batch's aggregate.

    Stats (plain floats, means over this call's unmasked tokens): ``loss``
    (this call's own aggregate), ``pg_loss``, ``kl`` (0 without a
    reference), ``entropy`` (NaN when not given), ``clip_frac`` (share of
    tokens where the clipped term is the one used; ``clip_frac_low`` and
    ``clip_frac_high``: by the lower / upper bound), ``dual_clip_frac``
    (share bounded by the dual clip), ``ratio_mean``, ``ratio_max``,
    ``approx_kl`` (mean of ``old_logp - logp``, the drift from the sampling
    policy), ``num_tokens``.
    """
    mask = loss_mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    count = float(mask.sum().item())

    # Masked entries are replaced (not multiplied) by 0, so whatever a caller
    # leaves there (even inf or NaN) reaches neither the loss nor the gradient.
    valid = mask > 0
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    log_ratio = torch.where(valid, logp - old_logp, zero)
    if config.ratio_level == "sequence":
        ratio = _sequence_ratio(torch.where(valid, logp, zero), log_ratio, mask)
    else:
        ratio = torch.exp(log_ratio)
    high = config.clip if config.clip_high is None else config.clip_high
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - config.clip, 1.0 + high)
    pg = torch.maximum(unclipped, clipped)
    dual = None
    if config.dual_clip is not None:
        bound = -adv * config.dual_clip
        dual = (adv < 0) & (pg > bound)
        pg = torch.where(adv < 0, torch.minimum(pg, bound), pg)
    if guided is not None and config.guided_shaping == "luffy" and bool(guided.any()):
        shaped_rows = guided.to(torch.bool).unsqueeze(1) & valid
        p = torch.exp(torch.where(valid, logp, zero))
        pg = torch.where(shaped_rows, -adv * p / (p + config.luffy_gamma), pg)
        clipped = torch.where(shaped_rows, unclipped, clipped)
    per_token = pg

    use_kl = ref_logp is not None and config.kl_coef > 0
    if use_kl:
        kl = kl_estimate(torch.where(valid, ref_logp - logp, zero), config.kl_estimator)
        if config.kl_in == "loss":
            per_token = per_token + config.kl_coef * kl
    if entropy is not None and config.entropy_coef != 0:
        per_token = per_token - config.entropy_coef * entropy

    masked = torch.where(valid, per_token, zero) * mask
    if config.loss_agg_mode == "token-mean":
        denom = max(float(num_tokens) if num_tokens is not None else count, 1.0)
        loss = masked.sum() / denom
        own = max(count, 1.0)
    else:
        lengths = mask.sum(dim=-1)
        sequences = float((lengths > 0).sum().item())
        denom = max(float(num_sequences) if num_sequences is not None else sequences, 1.0)
        per_sequence = masked.sum(dim=-1)
        if config.loss_agg_mode == "seq-mean-token-mean":
            per_sequence = per_sequence / lengths.clamp(min=1.0)
        loss = per_sequence.sum() / denom
        if config.loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / config.norm_length
        own = max(sequences, 1.0)

    with torch.no_grad():
        n = max(count, 1.0)

        def mean(x: torch.Tensor) -> float:
            return float((torch.where(valid, x, zero) * mask).sum().item() / n)

        bounded_low = (clipped > unclipped) & (adv < 0)
        stats = {
            "loss": float(loss.item()) * denom / own,
            "pg_loss": mean(pg),
            "kl": mean(kl) if use_kl else 0.0,
            "entropy": mean(entropy) if entropy is not None else math.nan,
            "clip_frac": mean((clipped > unclipped).to(mask.dtype)),
            "clip_frac_low": mean(bounded_low.to(mask.dtype)),
            "clip_frac_high": mean(((clipped > unclipped) & ~bounded_low).to(mask.dtype)),
            "dual_clip_frac": mean(dual.to(mask.dtype)) if dual is not None else 0.0,
            "ratio_mean": mean(ratio),
            "ratio_max": float(ratio[valid].max().item()) if count else 1.0,
            "approx_kl": mean(old_logp - logp),
            "num_tokens": count,
        }
    return loss, stats

# --------------------------------------------------------------------------
# The update
# --------------------------------------------------------------------------


#: The stats of :func:`grpo_loss` that :func:`update_step` averages over all scored tokens.
_TOKEN_MEAN_STATS = ("pg_loss", "kl", "entropy", "clip_frac", "clip_frac_low", "clip_frac_high",
                     "dual_clip_frac", "ratio_mean", "approx_kl")


def update_needs_old_logprobs(config: GrpoConfig, num_sequences: int) -> bool:
    """Whether :func:`update_step` takes more than one optimizer step over the batch (several
    mini-batches or PPO epochs): then the sampling policy's log-probs must be computed before
    the first one."""
    mini = num_sequences if config.mini_batch_size is None else config.mini_batch_size
    return num_sequences > mini or config.ppo_epochs > 1


def update_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    batch: PolicyBatch,
    ref_logp: torch.Tensor | None,
    config: GrpoConfig,
    *,
    old_logp: torch.Tensor | None = None,
) -> dict[str, float]:
    """``config.ppo_epochs`` PPO epochs of GRPO over ``batch``; returns the step's stats.

    The batch is cut, in order, into mini-batches of ``config.mini_batch_size``
    sequences (all of it when None); each gets one optimizer step, and each
    epoch goes through them all in the same order. A
    mini-batch is run in micro-batches of ``config.micro_batch_size``
    sequences (a group's sequences together, sharing one pass over their
    prompt when ``config.share_prompt``; the others sorted by length), whose
    gradients accumulate; with ``share_prompt`` the mini-batch's common prompt
    prefix runs once before them and takes its gradient once after them
    (:class:`~worker.engines.native.logprobs.StepPrefix`). Each micro-batch's
    loss is divided by the token (or, for the ``seq-mean-*`` aggregations,
    sequence) count of the *whole*
    mini-batch, so the accumulated gradient is the gradient of the
    mini-batch's aggregate (:func:`grpo_loss`). Then the gradient norm is clipped to
    ``max_grad_norm``, ``optimizer.step()`` and ``scheduler.step()`` run (a
    non-finite gradient norm skips both and is counted in ``skipped_steps``).

    Old log-probs: with one mini-batch and one PPO epoch, the policy that
    sampled the rollouts *is* the current one, so ``old_logp`` is the
    detached log-prob of the same forward: the ratio is exactly 1 and no
    extra forward pass is spent. With several mini-batches or epochs the
    weights move between them, so ``old_logp`` is computed once for the
    whole batch, without gradients, before the first optimizer step, unless
    the caller passes it (``[N, T]`` from :func:`token_logprobs` of the same
    weights: the trainer's one pass that also serves other figures).

    ``ref_logp``: ``[N, T]`` from
    :func:`~worker.engines.native.logprobs.reference_logprobs`, or None to drop
    the KL term (also dropped when ``kl_coef`` is 0).

    Stats: ``pg_loss``, ``kl``, ``entropy``, ``clip_frac``,
    ``clip_frac_low``, ``clip_frac_high``, ``dual_clip_frac``,
    ``ratio_mean``, ``ratio_max``, ``approx_kl`` (token means over the whole
    batch and all epochs); ``loss`` (each mini-batch's aggregate, their mean
    weighted by tokens); ``grad_norm`` (before clipping; mean over the
    optimizer steps), ``grad_norm_max``, ``lr`` (of the first optimizer
    step), ``num_tokens`` (scored tokens of the batch), ``num_sequences``,
    ``optimizer_steps``, ``skipped_steps``, ``advantage_mean``,
    ``advantage_abs_mean``. (The share of tokens the environment
    wrote is the rollouts' figure: `studio.method.rollouts.rollout_metrics`.)
    """
    n, t = batch.input_ids.shape
    if ref_logp is not None and tuple(ref_logp.shape) != (n, t):
        raise ValueError(f"ref_logp has shape {tuple(ref_logp.shape)}, expected {(n, t)}")
    if old_logp is not None and tuple(old_logp.shape) != (n, t):
        raise ValueError(f"old_logp has shape {tuple(old_logp.shape)}, expected {(n, t)}")
    use_ref = ref_logp is not None and config.kl_coef > 0
    mini = n if config.mini_batch_size is None else min(config.mini_batch_size, n)
    starts = list(range(0, n, mini))
    device = model_device(model)
    want_entropy = config.entropy_coef != 0

    was_training = model.training
    model.train()
    old_all = None
    if update_needs_old_logprobs(config, n):
        old_all = old_logp if old_logp is not None else token_logprobs(
            model, batch, config.micro_batch_size, share_prompt=config.share_prompt
        )[0]

    params = [p for p in model.parameters() if p.requires_grad]
    sums: dict[str, float] = {}
    total_tokens = 0.0
    grad_norms: list[float] = []
    lrs: list[float] = []
    skipped = 0
    try:
        for start in starts * config.ppo_epochs:
            rows_all = torch.arange(start, min(start + mini, n))
            mb_tokens = float(batch.loss_mask[rows_all].sum().item())
            mb_sequences = float((batch.loss_mask[rows_all].sum(dim=1) > 0).sum().item())
            optimizer.zero_grad(set_to_none=True)
            plan = micro_batches(batch, rows_all, config.micro_batch_size, config.share_prompt)
            context = (step_prefix(model, batch, rows_all, grad=True)
                       if config.share_prompt else None)
            for rows, width, prefix_len in plan:
                ids = batch.input_ids[rows, :width].to(device)
                att = batch.attention_mask[rows, :width].to(device)
                lmask = batch.loss_mask[rows, :width].to(device)
                if not bool((lmask > 0).any()):
                    continue
                logp, entropy = forward_scores(
                    model,
                    ids,
                    att,
                    lmask,
                    entropy="grad" if want_entropy else "stats",
                    prefix_len=prefix_len,
                    context=context,
                )
                if old_all is None:
                    old = logp.detach()
                else:
                    old = old_all[rows, :width].to(device)
                ref = ref_logp[rows, :width].to(device) if use_ref else None
                loss, stats = grpo_loss(
                    logp,
                    old,
                    ref,
                    batch.advantages[rows].to(device),
                    lmask,
                    config,
                    entropy=entropy if want_entropy else None,
                    num_tokens=max(mb_tokens, 1.0),
                    num_sequences=max(mb_sequences, 1.0),
                    guided=None if batch.guided is None else batch.guided[rows].to(device),
                )
                loss.backward()
                if not want_entropy:  # logged, not in the loss
                    stats["entropy"] = float((entropy * lmask).sum().item()) / max(
                        stats["num_tokens"], 1.0
                    )
                k = stats["num_tokens"]
                total_tokens += k
                for key in _TOKEN_MEAN_STATS:
                    sums[key] = sums.get(key, 0.0) + stats[key] * k
                sums["loss"] = sums.get("loss", 0.0) + float(loss.item()) * max(mb_tokens, 1.0)
                sums["ratio_max"] = max(sums.get("ratio_max", -math.inf), stats["ratio_max"])
            if context is not None:
                context.backward()
            lrs.append(float(optimizer.param_groups[0]["lr"]))
            max_norm = (
                config.max_grad_norm
                if config.max_grad_norm and config.max_grad_norm > 0
                else math.inf
            )
            norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm).item()) if params else 0.0
            grad_norms.append(norm)
            if math.isfinite(norm):
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
            else:
                skipped += 1
            optimizer.zero_grad(set_to_none=True)
    finally:
        model.train(was_training)

    denom = max(total_tokens, 1.0)
    out = {key: sums.get(key, 0.0) / denom for key in ("loss", *_TOKEN_MEAN_STATS)}
    if total_tokens == 0:
        out["ratio_mean"] = 1.0
    out.update(
        ratio_max=sums.get("ratio_max", 1.0),
        grad_norm=sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
        grad_norm_max=max(grad_norms) if grad_norms else 0.0,
        lr=lrs[0] if lrs else float(optimizer.param_groups[0]["lr"]),
        num_tokens=total_tokens / config.ppo_epochs,
        num_sequences=float(n),
        optimizer_steps=float(len(grad_norms) - skipped),
        skipped_steps=float(skipped),
        advantage_mean=float(batch.advantages.mean().item()),
        advantage_abs_mean=float(batch.advantages.abs().mean().item()),
    )
    return out

