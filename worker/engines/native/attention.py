"""Attention for the rollout: grouped-query SDPA without repeating K/V, and cascade
attention over a shared prompt prefix.

Transformers' SDPA path repeats the grouped K/V heads (GQA) whenever there is a padding
mask, a full copy of the cache per layer per step; while rolling out, a model using
``sdpa`` is switched to an equivalent function that folds the query heads of a group
into the query length instead (no copy) and handles the shared prefix, and switched
back afterwards (``model.config._attn_implementation``; do not use the same model from
another thread meanwhile).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import torch
import torch.nn.functional as F

_GROUPED_IMPL = "icrl_rollout_grouped_sdpa"

# The shared prompt prefix of the forward in progress: per layer (keys, values), each
# [1, h_kv, P, d]; None outside the engine's forward calls or when nothing is shared.
# With it, which of its tokens each row reads ([b, P] bool; None: all).
_state = threading.local()


@contextmanager
def sharing_prefix(shared: list[tuple[torch.Tensor, torch.Tensor]] | None,
                   reads: torch.Tensor | None = None):
    """Within: the grouped function attends to `shared` (the tokens of it each row
    `reads`) before each row's own cache."""
    _state.shared, _state.reads = shared, reads
    try:
        yield
    finally:
        _state.shared = _state.reads = None


def _grouped_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0,
                            scaling=None, is_causal=None, **kwargs):
    """Same result as Transformers' ``sdpa_attention_forward``, without ``repeat_kv``.

    The query heads that share a K/V head are folded into the query-length
    dimension: ``[b, h_kv * g, q, d] -> [b, h_kv, g * q, d]``, so SDPA reads
    the cache as it is.  The mask is repeated over the folded rows (a no-op
    broadcast when decoding, q = 1).  While the engine runs a forward over a
    cache with a shared prompt prefix, the prefix is attended to separately
    (:func:`attend_with_shared_prefix`).
    """
    shared = getattr(_state, "shared", None)
    if shared is not None:
        layer = getattr(module, "layer_idx", None)
        if layer is not None and layer < len(shared):
            prefix_k, prefix_v = shared[layer]
            return attend_with_shared_prefix(query, key, value, attention_mask, prefix_k,
                                              prefix_v, scaling, getattr(_state, "reads", None)
                                              ), None
    b, hq, q, d = query.shape
    hkv = key.shape[1]
    groups = hq // hkv
    if attention_mask is None:
        causal = q > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal",
                                                                             True))
        out = F.scaled_dot_product_attention(query, key, value, scale=scaling, is_causal=causal,
                                             enable_gqa=groups > 1)
    elif groups == 1:
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                             scale=scaling)
    else:
        folded = query.reshape(b, hkv, groups * q, d)
        mask = attention_mask
        if q > 1:
            mb, mh, _, kv = mask.shape
            mask = mask[:, :, None].expand(mb, mh, groups, q, kv).reshape(mb, mh, groups * q, kv)
        out = F.scaled_dot_product_attention(folded, key, value, attn_mask=mask, scale=scaling)
        out = out.reshape(b, hq, q, d)
    return out.transpose(1, 2).contiguous(), None


def attend_with_shared_prefix(query, key, value, mask, prefix_k, prefix_v, scaling,
                              prefix_reads=None):
    """Attention over ``[shared prefix] + [each row's own cache]`` (cascade attention).

    Every row attends to the prefix (it precedes all of a row's tokens), or to
    its first tokens only (``prefix_reads``, ``[b, P]`` bool: a row whose prompt
    leaves the prefix there), so the prefix part is one attention of all rows'
    queries (of a K/V head) against the one prefix: its keys and values are
    read once per step instead of once per row.  The row part is masked (holes,
    causality).  The two parts are merged by their log-sum-exp.
    """
    # under bfloat16 autocast RoPE leaves the queries float32 while the cache (keys and
    # values, worker.engines.native.kv_cache) is bfloat16: the kernels take one dtype, and
    # the queries are the small side (a no-op otherwise)
    out_dtype, query = query.dtype, query.to(value.dtype)
    b, hq, q, d = query.shape
    hkv, lr = key.shape[1], key.shape[2]
    g = hq // hkv
    scale = scaling if scaling is not None else d**-0.5
    folded = query.reshape(b, hkv, g * q, d)  # row r, kv head h: its g*q query vectors
    flat = folded.transpose(0, 1).reshape(1, hkv, b * g * q, d)  # all rows against the prefix
    if mask is None and q > 1:  # Transformers leaves a plain causal mask to the kernel
        mask = torch.ones(q, lr, dtype=torch.bool, device=query.device).tril(lr - q)[None, None]
    if mask is not None:
        if mask.dtype != torch.bool:
            mask = mask >= 0
        if q > 1:
            mb, mh, _, kv = mask.shape
            mask = mask[:, :, None].expand(mb, mh, g, q, kv).reshape(mb, mh, g * q, kv)
    flat_mask = None
    if prefix_reads is not None:  # row r's g*q queries, in the order of `flat`
        p = prefix_k.shape[2]
        flat_mask = prefix_reads[:, None, :].expand(b, g * q, p).reshape(1, 1, b * g * q, p)
    if query.device.type == "cpu" and query.dtype in (torch.float32, torch.bfloat16):
        o1, lse1 = _cpu_attention(flat, prefix_k, prefix_v, flat_mask, scale)
        o2, lse2 = _cpu_attention(folded, key, value, mask, scale)
    else:
        o1, lse1 = _plain_attention(flat, prefix_k, prefix_v, flat_mask, scale)
        o2, lse2 = _plain_attention(folded, key, value, mask, scale)
    o1 = o1.view(hkv, b, g * q, d).transpose(0, 1)
    lse1 = lse1.view(hkv, b, g * q).transpose(0, 1)
    top = torch.maximum(lse1, lse2)
    w1, w2 = torch.exp(lse1 - top)[..., None], torch.exp(lse2 - top)[..., None]
    out = (o1.float() * w1 + o2.float() * w2) / (w1 + w2)
    return out.to(out_dtype).reshape(b, hq, q, d).transpose(1, 2).contiguous()


def _cpu_attention(q, k, v, mask, scale):
    """Output and log-sum-exp of softmax attention (PyTorch's CPU flash kernel)."""
    additive = None
    if mask is not None:
        additive = torch.zeros(mask.shape, dtype=q.dtype, device=q.device)
        additive.masked_fill_(~mask, float("-inf"))
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, attn_mask=additive, scale=scale
    )
    if mask is not None:  # the kernel reports 0 for a query that sees nothing
        lse = lse.masked_fill(~mask.any(-1), float("-inf"))
    return out, lse


def _plain_attention(q, k, v, mask, scale):
    """Output and log-sum-exp of softmax attention with matrix products (any device)."""
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    probs = torch.exp(scores - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])
    return torch.matmul(probs.to(v.dtype), v), lse


_registered = False


def _register_grouped_sdpa() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(_GROUPED_IMPL, _grouped_sdpa_attention)
    AttentionMaskInterface.register(_GROUPED_IMPL, sdpa_mask)
    _registered = True


@contextmanager
def grouped_sdpa_enabled(model, enabled: bool):
    """Switch a plain-SDPA model to the grouped function (yields True), then back.

    Only for models whose attention layers know their ``layer_idx`` and use
    Transformers' attention interface; anything else keeps its own attention
    (yields False), and the engine then copies the shared prompt prefix into
    every row instead of sharing it.
    """
    config = getattr(model, "config", None)
    attention = [m for m in model.modules() if hasattr(m, "num_key_value_groups")]
    if (
        not enabled
        or config is None
        or getattr(config, "_attn_implementation", None) != "sdpa"
        or not hasattr(config, "_attn_implementation_internal")
        or getattr(config, "attn_logit_softcapping", None)
        or not attention
        or not all(isinstance(getattr(m, "layer_idx", None), int) for m in attention)
    ):
        yield False
        return
    _register_grouped_sdpa()
    before = config._attn_implementation_internal
    config._attn_implementation_internal = _GROUPED_IMPL
    try:
        yield True
    finally:
        config._attn_implementation_internal = before
