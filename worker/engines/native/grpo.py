"""Loss-masked GRPO for the native engine (method.md, "Loss masking" and "GRPO").

The pieces, in the order a training step uses them:

1. :func:`make_batch` turns rollouts (prompt ids, response ids, a per-token
   response mask: 1 = sampled by the model, 0 = written by the environment)
   and the group advantages (``studio.method.grpo.group_advantages``) into a
   right-padded :class:`PolicyBatch`.
2. :func:`reference_logprobs` scores the batch with the frozen reference
   (:func:`frozen_copy` of the initial weights), without gradients.
3. :func:`update_step` runs ``ppo_epochs`` (default one) PPO epochs over the
   batch: mini-batches (one optimizer step each), micro-batches inside them
   (gradient accumulation), the loss of :func:`grpo_loss`, gradient
   clipping, ``optimizer.step`` and ``scheduler.step``.

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

Cost: the model's full-vocabulary logits are only computed for the scored
positions (the positions whose *next* token has mask 1), never for the prompt,
and log-probabilities are ``gather(logits) - logsumexp(logits)`` without a
full log-softmax tensor. The prompts of a step share their first tokens
(instruction and exemplars: most of a prompt with exemplars); that common
prefix goes through the model once per step in the reference pass and once
per mini-batch in the update (:class:`StepPrefix`: its keys and values are
reused by every micro-batch and its gradient flows back through it once), not
once per group. The responses of a group share micro-batches and the rest of
their prompt (the question) goes through the model once per micro-batch (its
KV cache repeated over the responses), not once per response. Both give the
unshared computation's log-probs and gradients up to float rounding
(tests/engines/native/test_grpo.py). Other sequences are
sorted by length and each micro-batch is cut to its own longest sequence, so
padding costs little. The device (and bf16 autocast on CUDA) is taken from the model; the
batch tensors live on CPU and are moved one micro-batch at a time; returned
log-prob tensors are float32 on CPU.

Dropout: the ratio assumes the same network computes the old and the new
log-probs; Hugging Face causal LMs default to dropout 0, keep it that way.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from studio.method.prompt import common_prefix_length

__all__ = [
    "GrpoConfig",
    "PolicyBatch",
    "frozen_copy",
    "grpo_loss",
    "make_batch",
    "make_optimizer",
    "reference_logprobs",
    "token_logprobs",
    "update_needs_old_logprobs",
    "update_step",
]

#: The low-variance KL estimator is ``exp(d) - d - 1`` with ``d = ref - logp``;
#: ``d`` is clamped to this range so that a token the policy has all but ruled
#: out cannot overflow ``exp`` (and turn the gradient into NaN).
KL_LOG_RATIO_CLAMP = 10.0

#: Upper bound, in elements, of one fp32 block of full-vocabulary logits when
#: scoring without gradients (token_logprobs): 2**26 floats = 256 MiB.
_NO_GRAD_LOGITS_ELEMENTS = 1 << 26

#: Model types whose causal-LM head is exactly ``lm_head(decoder(x))`` (no
#: logit soft-capping or scaling): for them the head is applied to the scored
#: positions only. Any other model goes through its own forward with
#: ``logits_to_keep`` (the union of the scored columns of the micro-batch).
_PLAIN_HEAD_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


# --------------------------------------------------------------------------
# Configuration and batch
# --------------------------------------------------------------------------


#: ``GrpoConfig.loss_agg_mode``'s values: veRL's ``actor.loss_agg_mode`` names.
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
#: ``GrpoConfig.kl_estimator``'s values: veRL's ``kl_loss_type`` names (Schulman's k1/k2/k3).
KL_ESTIMATORS = ("k1", "k2", "k3")


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


@dataclass
class PolicyBatch:
    """Right-padded rollouts, on CPU.

    ``input_ids`` / ``attention_mask``: ``[N, T]`` prompt + response + padding.
    ``loss_mask``: ``[N, T]`` float, 1 on the response tokens the model
    sampled, 0 on prompt, environment tokens and padding.
    ``advantages``: ``[N]``, one per sequence (the same for all its tokens).
    ``prompt_lengths``: ``[N]``, where each response starts (filled by
    :func:`make_batch`; when ``None`` the response is taken to start at the
    first token with mask 1, which is right for rollouts since the model
    always writes a response's first token).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    prompt_lengths: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def rows(self, index: torch.Tensor | Sequence[int]) -> PolicyBatch:
        """The sequences at ``index`` (in that order), as a new batch."""
        index = torch.as_tensor(index, dtype=torch.long)
        return PolicyBatch(
            input_ids=self.input_ids[index],
            attention_mask=self.attention_mask[index],
            loss_mask=self.loss_mask[index],
            advantages=self.advantages[index],
            prompt_lengths=None if self.prompt_lengths is None else self.prompt_lengths[index],
        )


def make_batch(
    prompts: list[list[int]],
    responses: list[list[int]],
    response_masks: list[list[int]],
    advantages: list[float],
    pad_token_id: int,
) -> PolicyBatch:
    """Concatenate prompt + response per rollout and right-pad to the longest.

    ``response_masks[i]`` has one entry per token of ``responses[i]``: 1 for a
    token the model sampled, 0 for one the environment inserted. The loss
    mask is that mask on the response, 0 on the prompt and on padding.
    """
    n = len(prompts)
    if not (len(responses) == len(response_masks) == len(advantages) == n):
        raise ValueError(
            f"{n} prompts, {len(responses)} responses, {len(response_masks)} response masks "
            f"and {len(advantages)} advantages: give one of each per rollout"
        )
    if n == 0:
        raise ValueError("an empty batch: give at least one rollout")
    lengths = []
    for i, (prompt, response, mask) in enumerate(
        zip(prompts, responses, response_masks, strict=True)
    ):
        if len(response) != len(mask):
            raise ValueError(
                f"rollout {i}: {len(response)} response tokens but {len(mask)} mask entries"
            )
        if any(m not in (0, 1) for m in mask):
            raise ValueError(f"rollout {i}: response mask entries must be 0 or 1")
        lengths.append(len(prompt) + len(response))
    width = max(max(lengths), 1)
    input_ids = torch.full((n, width), int(pad_token_id), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.float32)
    for i, (prompt, response, mask) in enumerate(
        zip(prompts, responses, response_masks, strict=True)
    ):
        p, length = len(prompt), lengths[i]
        if length:
            input_ids[i, :length] = torch.tensor(list(prompt) + list(response), dtype=torch.long)
        attention_mask[i, :length] = 1
        if response:
            loss_mask[i, p:length] = torch.tensor(mask, dtype=torch.float32)
    adv = torch.tensor([float(a) for a in advantages], dtype=torch.float32)
    if not torch.isfinite(adv).all():
        raise ValueError("advantages must be finite numbers")
    return PolicyBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        advantages=adv,
        prompt_lengths=torch.tensor([len(p) for p in prompts], dtype=torch.long),
    )


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` in eval mode with ``requires_grad=False`` (the KL reference)."""
    ref = copy.deepcopy(model)
    ref.eval()
    for param in ref.parameters():
        param.requires_grad_(False)
    return ref


# --------------------------------------------------------------------------
# Log-probabilities
# --------------------------------------------------------------------------


def _model_device(model: torch.nn.Module) -> torch.device:
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


def _autocast(device: torch.device):
    """bf16 autocast on CUDA (where supported); nothing on CPU."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def _plain_head(model: torch.nn.Module):
    """``(decoder, lm_head)`` when the logits are exactly ``lm_head(decoder(x))``, else None."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in _PLAIN_HEAD_MODEL_TYPES:
        return None
    try:
        head = model.get_output_embeddings()
        decoder = model.get_decoder()
    except (AttributeError, NotImplementedError):
        return None
    if not isinstance(head, torch.nn.Linear) or not isinstance(decoder, torch.nn.Module):
        return None
    if decoder is model or type(decoder).__name__.endswith("ForCausalLM"):
        return None
    return decoder, head


def _generic_logits(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, sel: torch.Tensor
) -> torch.Tensor:
    """Logits ``[M, V]`` at the positions ``sel`` (``[b, t-1]``, row-major) via the model's forward.

    Asks for the union of the scored columns with ``logits_to_keep``, or for
    all logits from a model that does not take that argument.
    """
    columns = sel.any(dim=0).nonzero().squeeze(1)
    try:
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            logits_to_keep=columns,
        ).logits
    except TypeError:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return logits[:, :-1][sel]
    return logits[sel[:, columns]]


def _logprob_entropy(
    logits: torch.Tensor, targets: torch.Tensor, entropy: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) and the entropy of each row of ``logits`` ``[M, V]``, in fp32.

    ``entropy``: ``"none"`` (not computed), ``"grad"`` (part of the graph) or
    ``"stats"`` (detached, for logging only).
    """
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(1, targets.unsqueeze(1)).squeeze(1) - lse
    if entropy == "none":
        return logp, None
    with torch.no_grad() if entropy == "stats" else nullcontext():
        probs = torch.softmax(logits, dim=-1)
        ent = lse - (probs * logits).sum(dim=-1)
    return logp, ent


def _forward_scores(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor,
    *,
    entropy: str = "none",
    chunk_tokens: int | None = None,
    prefix_len: int | None = None,
    context: StepPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) ``[b, t]`` at the positions where ``score_mask`` > 0, 0 elsewhere.

    Inputs are already on the model's device and cut to the micro-batch's
    length. The logit at column ``j`` scores the token at ``j + 1``, so only
    the columns ``j`` with ``score_mask[:, j + 1] > 0`` go through the head.
    ``chunk_tokens``: the head's logits are taken (and reduced) this many
    scored positions at a time; meant for scoring without gradients, where
    it bounds the memory of the full-vocabulary block. ``prefix_len``: all
    rows share their first ``prefix_len`` tokens (the prompt, unscored); the
    prefix then goes through the decoder once (see :func:`_prefix_hidden`).
    ``context``: the keys and values of the first ``context.length`` tokens,
    which every row starts with, computed once for the whole step
    (:func:`step_prefix`); the decoder runs only on what follows them.
    Both are ignored where they cannot apply (generic head, one row for
    ``prefix_len``, gradient checkpointing, scored tokens inside the prefix).
    """
    b, t = input_ids.shape
    logp_full = torch.zeros((b, t), dtype=torch.float32, device=input_ids.device)
    ent_full = None if entropy == "none" else torch.zeros_like(logp_full)
    if t < 2:
        return logp_full, ent_full
    sel = score_mask[:, 1:] > 0
    if not bool(sel.any()):
        return logp_full, ent_full
    targets = input_ids[:, 1:][sel]
    plain = _plain_head(model)
    checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if prefix_len is not None and not (
        plain is not None
        and b > 1
        and 1 <= prefix_len < t
        and not bool(sel[:, : prefix_len - 1].any())
        and not checkpointing
    ):
        prefix_len = None
    if context is not None and not (
        plain is not None
        and context.length < min(t, prefix_len or t)
        and not bool(sel[:, : context.length].any())
        and not checkpointing
    ):
        context = None
    with _autocast(input_ids.device):
        if plain is not None:
            decoder, head = plain
            if prefix_len is None and context is None:
                hidden = decoder(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False
                ).last_hidden_state[:, :-1][sel]
            else:
                first, hidden = _prefix_hidden(
                    decoder, input_ids, attention_mask, prefix_len, context
                )
                hidden = hidden[:, :-1][sel[:, first:]]
            step = chunk_tokens or hidden.shape[0]
            parts = [
                _logprob_entropy(head(h), y, entropy)
                for h, y in zip(hidden.split(step), targets.split(step), strict=True)
            ]
            logp = torch.cat([p for p, _ in parts])
            ent = None if entropy == "none" else torch.cat([e for _, e in parts])
        else:
            logits = _generic_logits(model, input_ids, attention_mask, sel)
            logp, ent = _logprob_entropy(logits, targets, entropy)
    # index_put (not in-place) keeps the autograd graph to logp / ent
    where = torch.zeros((b, t), dtype=torch.bool, device=input_ids.device)
    where[:, 1:] = sel
    index = where.nonzero(as_tuple=True)  # row-major, the order of [sel] above
    logp_full = logp_full.index_put(index, logp)
    if ent is not None:
        ent_full = ent_full.index_put(index, ent.float())
    return logp_full, ent_full


def _prefix_hidden(
    decoder: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prefix_len: int | None,
    context: StepPrefix | None,
) -> tuple[int, torch.Tensor]:
    """``(first, hidden)``: the last hidden states ``[b, t - first, H]`` from position ``first``.

    Two levels of sharing, either or both:

    * ``context``: the step's common prefix, already in keys and values; the
      decoder starts after it (its own hidden states are never scored).
    * ``prefix_len``: the rows' common prompt (a GRPO group) runs once, as one
      row, with a KV cache that is then repeated over the ``b`` rows, and the
      rest of each row runs on top of it; ``first`` is ``prefix_len - 1`` (the
      prompt's last position scores the response's first token).

    Autograd flows through the repeats, so the gradient of what is shared is
    the sum over the rows, exactly as in ``b`` separate passes.
    """
    b = input_ids.shape[0]
    start = 0 if context is None else context.length
    if prefix_len is None:
        tail = decoder(
            input_ids=input_ids[:, start:],
            attention_mask=attention_mask,
            past_key_values=context.cache(b),
            use_cache=True,
        ).last_hidden_state
        return start, tail
    head = decoder(
        input_ids=input_ids[:1, start:prefix_len],
        past_key_values=None if context is None else context.cache(1),
        use_cache=True,
    )
    cache = head.past_key_values
    cache.batch_repeat_interleave(b)
    tail = decoder(
        input_ids=input_ids[:, prefix_len:],
        attention_mask=attention_mask,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state
    last = head.last_hidden_state[:, -1:]
    return prefix_len - 1, torch.cat([last.expand(b, 1, last.shape[-1]), tail], dim=1)


@dataclass
class StepPrefix:
    """Keys and values of the tokens every prompt of a step starts with (instruction, exemplars).

    With exemplars in the prompt these are most of each prompt's tokens
    (~1,430 of ~1,580 for three), and the same for every question of a
    step. They go through the model once per step (once per mini-batch in
    the update: the weights change between mini-batches) instead of once per
    group. In the update the cached keys and values are detached leaves
    (``kv``) that every micro-batch reads; their gradients accumulate there,
    and :meth:`backward` sends the sum back through the one prefix pass
    (``graph``), which gives the same parameter gradients as running the
    prefix inside every micro-batch.
    """

    length: int
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [1, kv heads, length, head dim]
    graph: list[torch.Tensor] | None = None  # the prefix pass's own keys/values (update only)

    def cache(self, rows: int):
        """A fresh cache holding the prefix for ``rows`` rows (the leaves, expanded)."""
        from transformers.cache_utils import DynamicCache

        return DynamicCache(ddp_cache_data=[
            (k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.kv
        ])

    def backward(self) -> None:
        """Send the gradients gathered on the leaves back through the prefix pass, once."""
        if self.graph is None:
            return
        leaves = [x for pair in self.kv for x in pair]
        pairs = [(g, x.grad) for g, x in zip(self.graph, leaves, strict=True)
                 if g.requires_grad and x.grad is not None]  # frozen layers have no graph
        if pairs:
            torch.autograd.backward([g for g, _ in pairs], [d for _, d in pairs])
        self.graph = None


#: Below this many shared tokens a step prefix saves less than its bookkeeping costs.
MIN_STEP_PREFIX = 32


def step_prefix(
    model: torch.nn.Module, batch: PolicyBatch, rows: torch.Tensor, *, grad: bool
) -> StepPrefix | None:
    """Run the common prefix of the prompts of ``rows`` once; None where sharing cannot help.

    The prefix is the longest common token prefix of the distinct prompts,
    stopped one token short of the shortest (its last hidden state scores
    the first response token and must be computed with the rest). None with
    one distinct prompt (a group shares its prompt already), a prefix under
    :data:`MIN_STEP_PREFIX` tokens, a generic head or gradient checkpointing.
    ``grad``: keep the pass's graph for :meth:`StepPrefix.backward`.
    """
    plain = _plain_head(model)
    if plain is None or getattr(model, "is_gradient_checkpointing", False):
        return None
    starts = _prompt_lengths(batch)
    prompts = {tuple(batch.input_ids[r, : int(starts[r])].tolist()) for r in rows.tolist()}
    if len(prompts) < 2:
        return None
    length = min(common_prefix_length(list(prompts)), min(len(p) for p in prompts) - 1)
    if length < MIN_STEP_PREFIX:
        return None
    decoder, _ = plain
    ids = batch.input_ids[rows[:1], :length].to(_model_device(model))
    with _autocast(ids.device), nullcontext() if grad else torch.no_grad():
        cache = decoder(input_ids=ids, use_cache=True).past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    if not grad:
        return StepPrefix(length, kv)
    graph = [x for pair in kv for x in pair]
    leaves = [(k.detach().requires_grad_(True), v.detach().requires_grad_(True)) for k, v in kv]
    return StepPrefix(length, leaves, graph)


def _prompt_lengths(batch: PolicyBatch) -> torch.Tensor:
    """Where each response starts: ``prompt_lengths``, else the first scored token."""
    if batch.prompt_lengths is not None:
        return batch.prompt_lengths
    lengths = batch.attention_mask.sum(dim=1)
    has = batch.loss_mask > 0
    first = torch.argmax(has.to(torch.int8), dim=1)
    return torch.where(has.any(dim=1), first, lengths)


def _micro_batches(
    batch: PolicyBatch, rows: torch.Tensor, size: int, share_prompt: bool
) -> Iterator[tuple[torch.Tensor, int, int | None]]:
    """Plan the forward passes over ``rows``: ``(rows, width, prefix_len)`` per micro-batch.

    With ``share_prompt``, rows with the same prompt (a GRPO group) go
    together, up to ``size`` per micro-batch, and ``prefix_len`` is that
    prompt's length; every other row is batched with the rest by length
    (longest first, so padding is small) with ``prefix_len`` None.
    ``width`` is the micro-batch's longest sequence.
    """
    lengths = batch.attention_mask.sum(dim=1)
    rows = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
    singles: list[int] = []
    if share_prompt:
        starts = _prompt_lengths(batch)
        groups: dict[tuple[int, ...], list[int]] = {}
        for r in rows.tolist():
            p = int(starts[r])
            groups.setdefault(tuple(batch.input_ids[r, :p].tolist()), []).append(r)
        for prompt, members in groups.items():
            if len(prompt) == 0 or len(members) < 2:
                singles.extend(members)
                continue
            for start in range(0, len(members), size):
                chunk = members[start : start + size]
                if len(chunk) < 2:
                    singles.extend(chunk)
                    continue
                idx = torch.tensor(chunk)
                yield idx, max(int(lengths[idx].max()), 1), len(prompt)
        singles.sort(key=lambda r: -int(lengths[r]))
    else:
        singles = rows.tolist()
    for start in range(0, len(singles), size):
        idx = torch.tensor(singles[start : start + size])
        yield idx, max(int(lengths[idx].max()), 1), None


def token_logprobs(
    model: torch.nn.Module,
    batch: PolicyBatch,
    micro_batch_size: int,
    *,
    with_entropy: bool = False,
    score_mask: torch.Tensor | None = None,
    share_prompt: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log p(input_ids[:, t] | input_ids[:, :t])`` as ``[N, T]`` float32 on CPU, no gradients.

    Aligned with ``input_ids``: position 0 is 0. Only the positions where
    ``score_mask`` (default: ``batch.loss_mask``) is > 0 are computed; every
    other position is 0 (their logits are never materialised). With
    ``with_entropy`` the second tensor holds the entropy of the predicted
    distribution at the same positions, else it is None.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    mask = batch.loss_mask if score_mask is None else score_mask
    if mask.shape != batch.input_ids.shape:
        raise ValueError(
            f"score_mask has shape {tuple(mask.shape)}, expected {tuple(batch.input_ids.shape)}"
        )
    device = _model_device(model)
    n, t = batch.input_ids.shape
    out = torch.zeros((n, t), dtype=torch.float32)
    ent = torch.zeros((n, t), dtype=torch.float32) if with_entropy else None
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 50_000
    chunk_tokens = max(1, _NO_GRAD_LOGITS_ELEMENTS // int(vocab))
    plan = _micro_batches(batch, torch.arange(n), micro_batch_size, share_prompt)
    with torch.no_grad():
        context = step_prefix(model, batch, torch.arange(n), grad=False) if share_prompt else None
        for rows, width, prefix_len in plan:
            logp, entropy = _forward_scores(
                model,
                batch.input_ids[rows, :width].to(device),
                batch.attention_mask[rows, :width].to(device),
                mask[rows, :width].to(device),
                entropy="stats" if with_entropy else "none",
                chunk_tokens=chunk_tokens,
                prefix_len=prefix_len,
                context=context,
            )
            out[rows, :width] = logp.float().cpu()
            if with_entropy:
                ent[rows, :width] = entropy.float().cpu()
    return out, ent


def reference_logprobs(
    ref_model: torch.nn.Module, batch: PolicyBatch, micro_batch_size: int
) -> torch.Tensor:
    """The frozen reference's log-probs on the loss-mask positions (see :func:`token_logprobs`)."""
    return token_logprobs(ref_model, batch, micro_batch_size)[0]


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
    (:class:`StepPrefix`). Each micro-batch's loss is divided by the token
    (or, for the ``seq-mean-*`` aggregations, sequence) count of the *whole*
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

    ``ref_logp``: ``[N, T]`` from :func:`reference_logprobs`, or None to drop
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
    device = _model_device(model)
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
            plan = _micro_batches(batch, rows_all, config.micro_batch_size, config.share_prompt)
            context = (step_prefix(model, batch, rows_all, grad=True)
                       if config.share_prompt else None)
            for rows, width, prefix_len in plan:
                ids = batch.input_ids[rows, :width].to(device)
                att = batch.attention_mask[rows, :width].to(device)
                lmask = batch.loss_mask[rows, :width].to(device)
                if not bool((lmask > 0).any()):
                    continue
                logp, entropy = _forward_scores(
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


# --------------------------------------------------------------------------
# Optimizer
# --------------------------------------------------------------------------


def make_optimizer(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float = 0.0,
    warmup_steps: int = 0,
    total_steps: int | None = None,
):
    """AdamW over the trainable parameters and a warmup-then-constant LR schedule.

    The learning rate is ``lr * min(1, (k + 1) / warmup_steps)`` for the
    ``k``-th optimizer step (0-based): it rises linearly over the first
    ``warmup_steps`` steps and stays at ``lr`` after; the first step already
    uses ``lr / warmup_steps`` (not 0, so no rollout batch is wasted).
    ``warmup_steps`` 0: constant from the start. ``total_steps`` (optional)
    only checks ``warmup_steps <= total_steps`` (e.g. warmup = 10% of it);
    there is no decay. Weight decay applies to matrices only (not to biases
    or norm weights). Call ``scheduler.step()`` after each ``optimizer.step()``
    (:func:`update_step` does).
    """
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if total_steps is not None and warmup_steps > total_steps:
        raise ValueError(f"warmup_steps ({warmup_steps}) exceeds total_steps ({total_steps})")
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    optimizer = torch.optim.AdamW(groups, lr=lr)

    def factor(step: int) -> float:
        if warmup_steps <= 0:
            return 1.0
        return min(1.0, (step + 1) / warmup_steps)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, scheduler
