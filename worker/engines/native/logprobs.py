"""Log-probabilities of a :class:`~worker.engines.native.policy_batch.PolicyBatch` under a
causal LM, and the step's shared prompt prefix they reuse.

The GRPO update (:mod:`worker.engines.native.grpo`) needs three sets of
per-token log-probs: the policy's with gradients (:func:`forward_scores`, one
micro-batch at a time), and the frozen reference's and the sampling policy's
without (:func:`reference_logprobs` of :func:`frozen_copy`,
:func:`token_logprobs`). This module is how any of them is computed cheaply;
the loss never looks inside it, and it knows nothing of the loss.

Cost: the model's full-vocabulary logits are only computed for the scored
positions (the positions whose *next* token has mask 1), never for the prompt,
and log-probabilities are ``gather(logits) - logsumexp(logits)`` without a
full log-softmax tensor. The prompts of a step share their first tokens
(instruction and exemplars: most of a prompt with exemplars); that common
prefix goes through the model once per step in the reference pass (once per
stage while it stays the same: :class:`FrozenPrefix`) and once
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
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from studio.method.prompt import common_prefix_length
from worker.engines.native.policy_batch import PolicyBatch
from worker.engines.native.precision import scoring_autocast

__all__ = [
    "MIN_STEP_PREFIX",
    "FrozenPrefix",
    "StepPrefix",
    "forward_scores",
    "frozen_copy",
    "micro_batches",
    "model_device",
    "reference_logprobs",
    "step_prefix",
    "token_logprobs",
]

#: Upper bound, in elements, of one fp32 block of full-vocabulary logits when
#: scoring without gradients (token_logprobs): 2**26 floats = 256 MiB.
_NO_GRAD_LOGITS_ELEMENTS = 1 << 26

#: Model types whose causal-LM head is exactly ``lm_head(decoder(x))`` (no
#: logit soft-capping or scaling): for them the head is applied to the scored
#: positions only. Any other model goes through its own forward with
#: ``logits_to_keep`` (the union of the scored columns of the micro-batch).
_PLAIN_HEAD_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


# --------------------------------------------------------------------------
# Running the model
# --------------------------------------------------------------------------


def model_device(model: torch.nn.Module) -> torch.device:
    """Where ``model``'s parameters live (CPU for a model without any)."""
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


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


def forward_scores(
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
    with scoring_autocast(input_ids.device):
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


# --------------------------------------------------------------------------
# The step's shared prompt prefix
# --------------------------------------------------------------------------


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
    length = _step_prefix_length(model, batch, rows)
    if length is None:
        return None
    decoder, _ = _plain_head(model)
    ids = batch.input_ids[rows[:1], :length].to(model_device(model))
    with scoring_autocast(ids.device), nullcontext() if grad else torch.no_grad():
        cache = decoder(input_ids=ids, use_cache=True).past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    if not grad:
        return StepPrefix(length, kv)
    graph = [x for pair in kv for x in pair]
    leaves = [(k.detach().requires_grad_(True), v.detach().requires_grad_(True)) for k, v in kv]
    return StepPrefix(length, leaves, graph)


def _step_prefix_length(model: torch.nn.Module, batch: PolicyBatch,
                        rows: torch.Tensor) -> int | None:
    """How many tokens :func:`step_prefix` would run once; None where it would not."""
    if _plain_head(model) is None or getattr(model, "is_gradient_checkpointing", False):
        return None
    starts = _prompt_lengths(batch)
    prompts = {tuple(batch.input_ids[r, : int(starts[r])].tolist()) for r in rows.tolist()}
    if len(prompts) < 2:
        return None
    length = min(common_prefix_length(list(prompts)), min(len(p) for p in prompts) - 1)
    return length if length >= MIN_STEP_PREFIX else None


class FrozenPrefix:
    """The step prefix of a model whose weights never change (the KL reference), kept from
    step to step: a stage that shows every question the same exemplars (the set's first k)
    runs them through the reference once, not once per step. It is computed again when the
    prefix's tokens change (a new stage, a new draw) or the model is another one."""

    def __init__(self) -> None:
        self._model: weakref.ref | None = None
        self._tokens: tuple[int, ...] | None = None
        self._prefix: StepPrefix | None = None

    def get(self, model: torch.nn.Module, batch: PolicyBatch,
            rows: torch.Tensor) -> StepPrefix | None:
        """:func:`step_prefix` of ``rows`` without gradients, from the last call if it ran
        the same tokens through the same model."""
        length = _step_prefix_length(model, batch, rows)
        if length is None:
            return None
        tokens = tuple(batch.input_ids[int(rows[0]), :length].tolist())
        if self._model is None or self._model() is not model or tokens != self._tokens:
            self._prefix = step_prefix(model, batch, rows, grad=False)
            self._model, self._tokens = weakref.ref(model), tokens
        return self._prefix


# --------------------------------------------------------------------------
# Scoring a batch
# --------------------------------------------------------------------------


def _prompt_lengths(batch: PolicyBatch) -> torch.Tensor:
    """Where each response starts: ``prompt_lengths``, else the first scored token."""
    if batch.prompt_lengths is not None:
        return batch.prompt_lengths
    lengths = batch.attention_mask.sum(dim=1)
    has = batch.loss_mask > 0
    first = torch.argmax(has.to(torch.int8), dim=1)
    return torch.where(has.any(dim=1), first, lengths)


def micro_batches(
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
    frozen: FrozenPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log p(input_ids[:, t] | input_ids[:, :t])`` as ``[N, T]`` float32 on CPU, no gradients.

    Aligned with ``input_ids``: position 0 is 0. Only the positions where
    ``score_mask`` (default: ``batch.loss_mask``) is > 0 are computed; every
    other position is 0 (their logits are never materialised). With
    ``with_entropy`` the second tensor holds the entropy of the predicted
    distribution at the same positions, else it is None. ``frozen``: the step
    prefix kept across steps, for a model whose weights never change.
    """
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    mask = batch.loss_mask if score_mask is None else score_mask
    if mask.shape != batch.input_ids.shape:
        raise ValueError(
            f"score_mask has shape {tuple(mask.shape)}, expected {tuple(batch.input_ids.shape)}"
        )
    device = model_device(model)
    n, t = batch.input_ids.shape
    out = torch.zeros((n, t), dtype=torch.float32)
    ent = torch.zeros((n, t), dtype=torch.float32) if with_entropy else None
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 50_000
    chunk_tokens = max(1, _NO_GRAD_LOGITS_ELEMENTS // int(vocab))
    every = torch.arange(n)
    plan = micro_batches(batch, every, micro_batch_size, share_prompt)
    with torch.no_grad():
        context = None
        if share_prompt:
            context = (frozen.get(model, batch, every) if frozen is not None
                       else step_prefix(model, batch, every, grad=False))
        for rows, width, prefix_len in plan:
            logp, entropy = forward_scores(
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
    ref_model: torch.nn.Module, batch: PolicyBatch, micro_batch_size: int,
    frozen: FrozenPrefix | None = None,
) -> torch.Tensor:
    """The frozen reference's log-probs on the loss-mask positions (see :func:`token_logprobs`;
    ``frozen``: its step prefix kept across steps)."""
    return token_logprobs(ref_model, batch, micro_batch_size, frozen=frozen)[0]


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` in eval mode with ``requires_grad=False`` (the KL reference)."""
    ref = copy.deepcopy(model)
    ref.eval()
    for param in ref.parameters():
        param.requires_grad_(False)
    return ref
