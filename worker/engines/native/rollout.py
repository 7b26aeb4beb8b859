"""Batched multi-turn tool-use rollouts with PyTorch + Transformers (the native engine).

method.md, "The tag protocol (search tool)": the model writes ``<think>``,
``<search>`` and ``<answer>``; generation stops at ``</search>`` (the
environment runs the query and appends an ``<information>`` block, truncated
to ``max_obs_tokens`` tokens, masked out of the loss) and at ``</answer>``
(the rollout ends).  A turn that ends with neither (EOS, turn token budget)
gets the corrective message (masked) and the loop continues.  After
``max_turns`` environment turns (tool calls and corrective messages) the
model gets one last turn in which a further ``</search>`` is not executed.

How it runs (all sequences of a call share one forward pass per step):

* **Rounds.**  Every live sequence generates one model turn; a sequence that
  ends its turn is parked (moved behind the active rows of the batch, so
  decoding continues over a contiguous block of rows and parked rows cost
  nothing).  When every sequence has ended its turn, all the searches of the
  round go to the search function in one call (queries in input order), the
  environment text is encoded, and one prefill of just ``[last sampled
  token] + env tokens`` per continuing sequence appends them to the KV cache.
* **KV cache.**  A preallocated cache (:class:`_RolloutCache`) with one write
  pointer for the batch: each forward writes its keys/values at the same
  slots for every row and a per-row validity mask says which slots hold real
  tokens, so rows may have holes (padding, parked steps); position ids are
  per row and count real tokens only.  It grows by reallocation (rarely, not
  per token like ``DynamicCache``) and is compacted (holes removed) at round
  ends when holes make up a sizeable part of it.  Slots are zero-initialised:
  a masked slot must hold finite numbers, or attention's ``0 * NaN`` poisons
  the output.
* **Prompts.**  Identical prompts (the G samples of a question) are prefilled
  once, and the longest common token prefix of all prompts (instruction and
  exemplars) once for all of them.  That prefix is then kept in one copy
  that every row attends to (cascade attention: its keys and values are read
  once per step, not once per row), or, when the model's attention function
  cannot be replaced, copied into every row.
* **Prefill.**  In chunks of columns bounded by a token budget; rows are
  ordered longest input first, and a chunk only runs the rows that have
  tokens in it, so padding costs nothing.
* **Attention.**  Transformers' SDPA path repeats the grouped K/V heads
  (GQA) whenever there is a padding mask, a full copy of the cache per layer
  per step; while rolling out, a model using ``sdpa`` is switched to an
  equivalent function that folds the query heads of a group into the query
  length instead (no copy) and handles the shared prefix, and switched back
  afterwards (``model.config._attn_implementation``; do not use the same
  model from another thread meanwhile).
* **Sampling.**  Temperature and top-p in one batched op on the model's
  device (inverse CDF with one uniform draw per row); temperature 0 is
  greedy.  Only the last position's logits are computed
  (``logits_to_keep=1``).
* **Stop strings.**  After each step, a sequence whose new token contains
  ``>`` decodes the last few tokens of its turn and looks for ``</search>`` /
  ``</answer>`` (case-insensitive, like the tag parser); the token that
  completes the stop string is kept whole.

Token ids in model segments are exactly the ids sampled (EOS included when it
ends a turn); their ``text`` is ``tokenizer.decode(ids)`` (special tokens
kept).  Environment ids are ``tokenizer(text, add_special_tokens=False)``.

Thread counts are the caller's business (on CPU, one thread; see the perf
notes).  The model runs in eval mode (restored afterwards) under
``torch.inference_mode()``; its device comes from its parameters.
Sliding-window attention layers are not supported (the cache is
full-attention only).
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, CacheLayerMixin

from studio.method import tags
from studio.method.prompt import common_prefix_length

SearchFn = Callable[[list[str]], list[list[tuple[str, str]]]]
"""Queries -> for each query its passages as ``(title, text)``, best first."""

STOP_REASONS = ("answer", "eos", "length", "max_turns")

_ANSWER_STOP = f"</{tags.ANSWER}>"
_SEARCH_STOP = f"</{tags.SEARCH_TOOL.call_tag}>"
_RESULT_OPEN = f"\n\n<{tags.SEARCH_TOOL.result_tag}>"
_RESULT_CLOSE = f"</{tags.SEARCH_TOOL.result_tag}>\n\n"


# --------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------


@dataclass
class RolloutConfig:
    """Budgets and sampling of one batch of rollouts (method.md; upstream values as defaults)."""

    max_turns: int = 6  # environment turns (tool calls, corrective messages); then one last turn
    max_turn_tokens: int = 512  # new tokens per model turn
    max_response_tokens: int = 2048  # whole response budget (model + environment tokens)
    max_obs_tokens: int = 500  # information block truncated to this many tokens, closing tag kept
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k_passages: int = 3

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_turn_tokens", "max_response_tokens", "max_obs_tokens",
                     "top_k_passages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"RolloutConfig.{name} must be an integer, got {value!r}")
            if value < (0 if name in ("max_turns", "top_k_passages") else 1):
                raise ValueError(f"RolloutConfig.{name} must be positive, got {value}")
        if not self.temperature >= 0:
            raise ValueError(f"RolloutConfig.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"RolloutConfig.top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Segment:
    """A stretch of the response written by one side."""

    source: str  # "model" | "env"
    token_ids: list[int]
    text: str  # model: decode(token_ids); env: the exact text that was encoded


@dataclass
class Rollout:
    """One response: its segments in order, why it stopped, and how many searches ran.

    ``stop_reason``:

    * ``"answer"``: the model closed an answer (``</answer>``);
    * ``"eos"``: the model ended its last allowed turn with EOS;
    * ``"length"``: the response budget (``max_response_tokens``) ran out, or
      the last allowed turn hit ``max_turn_tokens``;
    * ``"max_turns"``: the model called the tool again in its last allowed
      turn (the call was not executed).
    """

    prompt_ids: list[int]
    segments: list[Segment]  # the response only, in order
    stop_reason: str  # "answer" | "eos" | "length" | "max_turns"
    num_tool_calls: int

    @property
    def response_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def response_mask(self) -> list[int]:
        """1 for each token the model sampled, 0 for each token the environment inserted."""
        return [int(s.source == "model") for s in self.segments for _ in s.token_ids]

    @property
    def response_text(self) -> str:
        return "".join(s.text for s in self.segments)


# --------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------


def generate_rollouts(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    search: SearchFn,
    config: RolloutConfig,
    *,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
) -> list[Rollout]:
    """Roll out every prompt (B questions x G samples, flattened) with the search tool.

    Returns one :class:`Rollout` per prompt, in input order.  The same
    ``generator`` state gives the same rollouts.  ``search`` is called at most
    once per round with every query of that round; only the first
    ``config.top_k_passages`` passages of each answer are used.  EOS is
    ``eos_token_id`` when given, else the tokenizer's eos and the model's
    ``generation_config.eos_token_id`` (all of them).
    """
    return _generate(model, tokenizer, prompt_ids, search, config, generator=generator,
                     eos_token_id=eos_token_id)


def _generate(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    search: SearchFn,
    config: RolloutConfig,
    *,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    reuse_cache: bool = True,
    share_prompts: bool = True,
    shared_kv: bool = True,
    grouped_attention: bool = True,
    tag_stops: bool = True,
) -> list[Rollout]:
    """:func:`generate_rollouts` with switches for the tests and the benchmark's ablations.

    ``reuse_cache=False`` re-encodes each sequence's whole context after every
    environment turn (as TRL does); ``share_prompts=False`` prefills every
    prompt row on its own; ``shared_kv=False`` copies the common prompt
    prefix into every row instead of attending to one copy;
    ``grouped_attention=False`` keeps the model's own attention function (and
    so copies the prefix too); ``tag_stops=False`` ends turns at EOS and the
    token budget only (a benchmark's fixed lengths, whatever tags the model writes).
    """
    if not isinstance(config, RolloutConfig):
        raise TypeError(f"config must be a RolloutConfig, got {type(config).__name__}")
    prompts = [list(map(int, p)) for p in prompt_ids]
    if any(not p for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if not prompts:
        return []
    with torch.inference_mode(), _eval_mode(model), _grouped_sdpa_enabled(
        model, grouped_attention
    ) as grouped:
        engine = _Engine(model, tokenizer, search, config, generator, eos_token_id,
                         reuse_cache=reuse_cache, share_prompts=share_prompts,
                         cascade=grouped and share_prompts and shared_kv, tag_stops=tag_stops)
        return engine.run(prompts)


@contextmanager
def _eval_mode(model):
    """Eval mode while rolling out (no dropout; gradient checkpointing would drop the cache)."""
    training = bool(getattr(model, "training", False))
    if training:
        model.eval()
    try:
        yield
    finally:
        if training:
            model.train()


# --------------------------------------------------------------------------
# Per-sequence state
# --------------------------------------------------------------------------


class _Seq:
    __slots__ = ("prompt", "segments", "turn", "resp_len", "env_turns", "tool_calls", "pos",
                 "limit", "end", "stop_reason", "pending", "next_input")

    def __init__(self, prompt: list[int], turn_limit: int):
        self.prompt = prompt
        self.segments: list[Segment] = []
        self.turn: list[int] = []  # tokens of the current model turn
        self.resp_len = 0  # tokens in finished segments
        self.env_turns = 0  # tool calls + corrective messages
        self.tool_calls = 0
        self.pos = len(prompt)  # position id of the next token fed to the model
        self.limit = turn_limit  # tokens this turn may have
        self.end: str | None = None  # how the current turn ended
        self.stop_reason: str | None = None  # set when the rollout is over
        self.pending = -1  # last sampled token, not fed yet
        self.next_input: list[int] = []  # tokens to prefill at the round end


# --------------------------------------------------------------------------
# KV cache: preallocated, one write pointer, per-row validity, holes allowed
# --------------------------------------------------------------------------


class _Layer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False

    def __init__(self, owner: _RolloutCache):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        o = self.owner
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_zeros(o.rows, key_states.shape[1], o.cap, key_states.shape[3])
        self.values = value_states.new_zeros(o.rows, value_states.shape[1], o.cap,
                                             value_states.shape[3])
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, q = key_states.shape[0], key_states.shape[2]
        start = self.owner.length
        self.keys[:n, :, start : start + q] = key_states
        self.values[:n, :, start : start + q] = value_states
        return self.keys[:n, :, : start + q], self.values[:n, :, : start + q]

    def get_mask_sizes(self, query_length, *args) -> tuple[int, int]:
        if isinstance(query_length, torch.Tensor):  # older signature: cache_position
            query_length = query_length.shape[0]
        return self.owner.length + int(query_length), 0

    def get_seq_length(self) -> int:
        return self.owner.length

    def get_max_cache_shape(self) -> int:
        return -1


class _RolloutCache(Cache):
    """All rows write at slot ``length`` (the same for every row); ``valid`` marks real tokens.

    The model only ever sees the first ``n`` rows of a forward's batch, so
    rows that are not generating (parked) are kept at the back.
    """

    def __init__(self, rows: int, cap: int, device: torch.device):
        super().__init__(layers=[])
        self.rows, self.cap, self.length = rows, cap, 0
        self.valid = torch.zeros(rows, cap, dtype=torch.bool, device=device)
        # A prompt prefix every row shares, outside the per-row buffers (see
        # _attend_with_shared_prefix): per layer (keys, values) [1, h_kv, P, d].
        self.shared: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def share_prefix(self, rows: int, cap: int) -> None:
        """Turn the one row held so far into the shared prefix; start ``rows`` empty rows."""
        n = self.length
        self.shared = [
            (layer.keys[:1, :, :n].clone(), layer.values[:1, :, :n].clone())
            for layer in self.layers
        ]
        cap = _round_up(cap)
        for layer in self.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                setattr(layer, name, old.new_zeros(rows, old.shape[1], cap, old.shape[3]))
        self.valid = self.valid.new_zeros(rows, cap)
        self.rows, self.cap, self.length = rows, cap, 0

    # Transformers calls these.
    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        while len(self.layers) <= layer_idx:
            self.layers.append(_Layer(self))
        return self.layers[layer_idx].update(key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def get_mask_sizes(self, query_length, layer_idx: int = 0) -> tuple[int, int]:
        if isinstance(query_length, torch.Tensor):
            query_length = query_length.shape[0]
        return self.length + int(query_length), 0

    # The engine calls these.
    def reserve(self, extra: int) -> None:
        """Make room for ``extra`` more slots (reallocates, rarely)."""
        need = self.length + extra
        if need <= self.cap:
            return
        new_cap = _round_up(max(need, self.cap + self.cap // 2))
        for layer in self.layers:
            if layer.is_initialized:
                for name in ("keys", "values"):
                    old = getattr(layer, name)
                    new = old.new_zeros(old.shape[0], old.shape[1], new_cap, old.shape[3])
                    new[:, :, : self.length] = old[:, :, : self.length]
                    setattr(layer, name, new)
        valid = self.valid.new_zeros(self.rows, new_cap)
        valid[:, : self.length] = self.valid[:, : self.length]
        self.valid, self.cap = valid, new_cap

    def swap_rows(self, a: list[int], b: list[int]) -> None:
        """Exchange rows ``a[i]`` and ``b[i]`` (everything they hold)."""
        if not a:
            return
        dst = torch.tensor(a + b, device=self.valid.device)
        src = torch.tensor(b + a, device=self.valid.device)
        n = self.length
        for layer in self.layers:
            if layer.is_initialized:
                layer.keys[dst, :, :n] = layer.keys[src, :, :n]
                layer.values[dst, :, :n] = layer.values[src, :, :n]
        self.valid[dst, :n] = self.valid[src, :n]

    def rebuild(self, rows: torch.Tensor, extra: int, compact: bool) -> None:
        """Keep ``rows`` (in that order, repeats allowed); with ``compact``, drop every hole.

        Compacted rows are left-padded: row r's valid slots, in order, end at
        the new ``length``.  ``extra`` free slots follow.
        """
        rows = rows.to(self.valid.device)
        n = self.length
        valid = self.valid[rows, :n]
        if compact:
            counts = valid.sum(1)
            new_len = int(counts.max().item()) if rows.numel() else 0
            dest = (new_len - counts)[:, None] + valid.cumsum(1) - 1
            r_idx, s_idx = valid.nonzero(as_tuple=True)
            slots = torch.zeros(rows.numel(), new_len, dtype=torch.long, device=rows.device)
            slots[r_idx, dest[r_idx, s_idx]] = s_idx
            new_valid_part = torch.arange(new_len, device=rows.device)[None, :] >= (
                new_len - counts
            )[:, None]
        else:
            new_len = n
            new_valid_part = valid
        cap = _round_up(new_len + extra)
        for layer in self.layers:
            if not layer.is_initialized:
                continue
            for name in ("keys", "values"):
                old = getattr(layer, name)
                new = old.new_zeros(rows.numel(), old.shape[1], cap, old.shape[3])
                picked = old[rows, :, :n]
                if compact:
                    index = slots[:, None, :, None].expand(-1, old.shape[1], -1, old.shape[3])
                    new[:, :, :new_len] = torch.gather(picked, 2, index)
                else:
                    new[:, :, :new_len] = picked
                setattr(layer, name, new)
        self.valid = self.valid.new_zeros(rows.numel(), cap)
        self.valid[:, :new_len] = new_valid_part
        self.rows, self.cap, self.length = rows.numel(), cap, new_len


def _round_up(n: int, step: int = 64) -> int:
    return max(step, -(-n // step) * step)


# --------------------------------------------------------------------------
# Grouped-query SDPA without repeating K/V
# --------------------------------------------------------------------------

_GROUPED_IMPL = "icrl_rollout_grouped_sdpa"

# The shared prompt prefix of the forward in progress: per layer (keys, values), each
# [1, h_kv, P, d]; None outside the engine's forward calls or when nothing is shared.
_state = threading.local()


def _grouped_sdpa_attention(module, query, key, value, attention_mask, dropout=0.0,
                            scaling=None, is_causal=None, **kwargs):
    """Same result as Transformers' ``sdpa_attention_forward``, without ``repeat_kv``.

    The query heads that share a K/V head are folded into the query-length
    dimension: ``[b, h_kv * g, q, d] -> [b, h_kv, g * q, d]``, so SDPA reads
    the cache as it is.  The mask is repeated over the folded rows (a no-op
    broadcast when decoding, q = 1).  While the engine runs a forward over a
    cache with a shared prompt prefix, the prefix is attended to separately
    (:func:`_attend_with_shared_prefix`).
    """
    shared = getattr(_state, "shared", None)
    if shared is not None:
        layer = getattr(module, "layer_idx", None)
        if layer is not None and layer < len(shared):
            prefix_k, prefix_v = shared[layer]
            return _attend_with_shared_prefix(query, key, value, attention_mask, prefix_k,
                                              prefix_v, scaling), None
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


def _attend_with_shared_prefix(query, key, value, mask, prefix_k, prefix_v, scaling):
    """Attention over ``[shared prefix] + [each row's own cache]`` (cascade attention).

    Every row attends to the whole prefix (it precedes all of a row's tokens),
    so the prefix part is one attention of all rows' queries (of a K/V head)
    against the one prefix: its keys and values are read once per step
    instead of once per row.  The row part is masked (holes, causality).  The
    two parts are merged by their log-sum-exp.
    """
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
    if query.device.type == "cpu" and query.dtype in (torch.float32, torch.bfloat16):
        o1, lse1 = _cpu_attention(flat, prefix_k, prefix_v, None, scale)
        o2, lse2 = _cpu_attention(folded, key, value, mask, scale)
    else:
        o1, lse1 = _plain_attention(flat, prefix_k, prefix_v, None, scale)
        o2, lse2 = _plain_attention(folded, key, value, mask, scale)
    o1 = o1.view(hkv, b, g * q, d).transpose(0, 1)
    lse1 = lse1.view(hkv, b, g * q).transpose(0, 1)
    top = torch.maximum(lse1, lse2)
    w1, w2 = torch.exp(lse1 - top)[..., None], torch.exp(lse2 - top)[..., None]
    out = (o1.float() * w1 + o2.float() * w2) / (w1 + w2)
    return out.to(query.dtype).reshape(b, hq, q, d).transpose(1, 2).contiguous()


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
def _grouped_sdpa_enabled(model, enabled: bool):
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


# --------------------------------------------------------------------------
# Tokenizer helpers
# --------------------------------------------------------------------------

_GT_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _gt_table(tokenizer, vocab: int) -> list[bool]:
    """For each id: may its text contain ``>`` (every stop string ends with it)?"""
    try:
        table = _GT_TABLES.get(tokenizer)
    except TypeError:
        table = None
    if table is None or len(table) < vocab:
        n = len(tokenizer)
        strings = tokenizer.convert_ids_to_tokens(list(range(n)))
        table = [s is None or ">" in s or "3E" in s.upper() for s in strings]
        table += [True] * max(0, vocab - n)  # ids the tokenizer does not know: check them
        try:
            _GT_TABLES[tokenizer] = table
        except TypeError:
            pass
    return table


def _encode(tokenizer, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def information_block(tokenizer, passages, limit: int) -> tuple[str, list[int]] | None:
    """``format_information(passages)`` cut to ``limit`` tokens in the passages' text.

    The opening and closing tags and the newlines around them are kept; the
    body is cut at a token boundary (a partial character dropped).  None when
    not even the empty block fits.
    """
    text = tags.format_information(passages)
    ids = _encode(tokenizer, [text])[0]
    if len(ids) <= limit:
        return text, ids
    assert text.startswith(_RESULT_OPEN) and text.endswith(_RESULT_CLOSE)
    body = text[len(_RESULT_OPEN) : -len(_RESULT_CLOSE)]
    open_ids, close_ids, body_ids = _encode(tokenizer, [_RESULT_OPEN, _RESULT_CLOSE, body])
    keep = min(len(body_ids), limit - len(open_ids) - len(close_ids))
    while keep > 0:
        cut = tokenizer.decode(body_ids[:keep]).rstrip("\ufffd")
        text = _RESULT_OPEN + cut + _RESULT_CLOSE
        ids = _encode(tokenizer, [text])[0]
        if len(ids) <= limit:
            return text, ids
        keep -= max(1, len(ids) - limit)
    text = _RESULT_OPEN + _RESULT_CLOSE
    ids = _encode(tokenizer, [text])[0]
    return (text, ids) if len(ids) <= limit else None


def _eos_ids(model, tokenizer, eos_token_id: int | None) -> set[int]:
    if eos_token_id is not None:
        return {int(eos_token_id)}
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(extra, int):
        ids.add(extra)
    elif isinstance(extra, (list, tuple)):
        ids.update(int(i) for i in extra)
    return ids


# --------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------

# Tokens per prefill forward (rows x chunk length): bounds activation memory.
_PREFILL_TOKENS = {"cpu": 8192}
_PREFILL_TOKENS_DEFAULT = 16384
# ... and tokens x heads x context length (attention scores or mask, float32) per forward.
_ATTENTION_ELEMENTS = 2**28
# Share a common prompt prefix only when it is at least this long.
_MIN_SHARED_PREFIX = 16
# Compact the cache at a round end when holes exceed this fraction of it.
_COMPACT_HOLES = 0.2


class _Engine:
    def __init__(self, model, tokenizer, search, config: RolloutConfig, generator, eos_token_id,
                 *, reuse_cache: bool, share_prompts: bool, cascade: bool, tag_stops: bool):
        self.model, self.tokenizer, self.search, self.cfg = model, tokenizer, search, config
        self.tag_stops = tag_stops
        self.reuse_cache, self.share_prompts, self.cascade = reuse_cache, share_prompts, cascade
        param = next(iter(model.parameters()), None)
        self.device = param.device if param is not None else torch.device("cpu")
        self.eos = _eos_ids(model, tokenizer, eos_token_id)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else (min(self.eos) if self.eos else 0))
        self.gen = self._device_generator(generator)
        self.prefill_tokens = _PREFILL_TOKENS.get(self.device.type, _PREFILL_TOKENS_DEFAULT)
        heads = getattr(getattr(model, "config", None), "num_attention_heads", None)
        self.heads = heads if isinstance(heads, int) and heads > 0 else 32
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            params = {}
        passes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.keep_kw = ("logits_to_keep" if "logits_to_keep" in params or passes_kwargs
                        else "num_logits_to_keep" if "num_logits_to_keep" in params else None)
        self.tail_tokens = max(len(_ANSWER_STOP), len(_SEARCH_STOP)) + 1
        self.corrective_text = tags.corrective_message(tags.SEARCH_TOOL)
        self.corrective_ids = _encode(tokenizer, [self.corrective_text])[0]
        self.gt: list[bool] = []
        self.seqs: list[_Seq] = []
        self.order: list[int] = []  # cache row -> sequence index
        self.cache: _RolloutCache | None = None

    def _device_generator(self, generator):
        if generator is None or (
            generator.device.type == self.device.type
            and (generator.device.index or 0) == (self.device.index or 0)
        ):
            return generator
        # A generator on another device than the model: derive one seeded from it.
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        return g

    # ----------------------------------------------------------- main loop

    def run(self, prompts: list[list[int]]) -> list[Rollout]:
        cfg = self.cfg
        first_limit = min(cfg.max_turn_tokens, cfg.max_response_tokens)
        self.seqs = [_Seq(p, first_limit) for p in prompts]
        logits = self._prefill_prompts(prompts)
        self.gt = _gt_table(self.tokenizer, logits.shape[-1]) if self.tag_stops \
            else [False] * logits.shape[-1]
        self.order = list(range(len(prompts)))
        n_alive = len(prompts)
        while n_alive:
            self._round(logits, n_alive)
            n_alive, logits = self._round_end(n_alive)
        return [
            Rollout(s.prompt, s.segments, s.stop_reason or "length", s.tool_calls)
            for s in self.seqs
        ]

    def _round(self, logits: torch.Tensor, n: int) -> None:
        """Every one of the first ``n`` cache rows generates until its turn ends."""
        seqs, order, cache = self.seqs, self.order, self.cache
        cache.reserve(max(self.seqs[i].limit for i in order[:n]))
        while n:
            sampled = self._sample(logits[:n]).tolist()
            ended = [i for i in range(n) if self._push(seqs[order[i]], sampled[i])]
            if ended:
                keep = n - len(ended)
                ended_set = set(ended)
                front = [i for i in ended if i < keep]
                back = [i for i in range(keep, n) if i not in ended_set]
                cache.swap_rows(front, back)
                for a, b in zip(front, back, strict=True):
                    order[a], order[b] = order[b], order[a]
                    sampled[a], sampled[b] = sampled[b], sampled[a]
                n = keep
                if not n:
                    break
            rows = [seqs[j] for j in order[:n]]
            ids = torch.tensor(sampled[:n], device=self.device).unsqueeze(1)
            pos = torch.tensor([s.pos for s in rows], device=self.device).unsqueeze(1)
            for s in rows:
                s.pos += 1
            cache.valid[:n, cache.length] = True
            logits = self._forward(ids, pos, n)

    def _push(self, s: _Seq, token: int) -> bool:
        """Record a sampled token; True when it ends the turn (``s.end`` says how)."""
        turn = s.turn
        turn.append(token)
        s.pending = token
        if self.gt[token]:
            tail = self.tokenizer.decode(turn[-self.tail_tokens :]).lower()
            if _ANSWER_STOP in tail:
                s.end = "answer"
                return True
            if _SEARCH_STOP in tail:
                s.end = "search"
                return True
        if token in self.eos:
            s.end = "eos"
            return True
        if len(turn) >= s.limit:
            s.end = "budget"
            return True
        return False

    def _round_end(self, n: int) -> tuple[int, torch.Tensor | None]:
        """Close the turns of the first ``n`` rows, run the round's searches, append env text."""
        cfg, tok = self.cfg, self.tokenizer
        rows = self.order[:n]
        searches: list[tuple[_Seq, str]] = []
        correct: list[_Seq] = []
        for j in sorted(rows):  # input order: the search function sees the queries in it
            s = self.seqs[j]
            text = tok.decode(s.turn)
            s.segments.append(Segment("model", s.turn, text))
            s.resp_len += len(s.turn)
            s.turn = []
            last_turn = s.env_turns >= cfg.max_turns
            if s.end == "answer":
                s.stop_reason = "answer"
            elif s.resp_len >= cfg.max_response_tokens:
                s.stop_reason = "length"
            elif s.end == "search" and last_turn:
                s.stop_reason = "max_turns"
            elif last_turn:
                s.stop_reason = {"eos": "eos", "budget": "length"}.get(s.end, "max_turns")
            elif s.end == "search" and (queries := tags.search_queries(text)):
                searches.append((s, queries[-1]))
            else:
                correct.append(s)

        env: list[tuple[_Seq, str, list[int], bool]] = []
        if searches:
            results = self.search([q for _, q in searches])
            if len(results) != len(searches):
                raise ValueError(
                    f"search returned {len(results)} result lists for {len(searches)} queries"
                )
            for (s, _), passages in zip(searches, results, strict=True):
                room = cfg.max_response_tokens - s.resp_len - 1  # keep one token for the model
                block = information_block(
                    tok, list(passages)[: cfg.top_k_passages], min(cfg.max_obs_tokens, room)
                )
                if block is None:
                    s.stop_reason = "length"
                else:
                    env.append((s, block[0], block[1], True))
        for s in correct:
            if s.resp_len + len(self.corrective_ids) < cfg.max_response_tokens:
                env.append((s, self.corrective_text, list(self.corrective_ids), False))
            else:
                s.stop_reason = "length"
        for s, text, ids, is_search in env:
            s.segments.append(Segment("env", ids, text))
            s.resp_len += len(ids)
            s.env_turns += 1
            s.tool_calls += int(is_search)
            s.limit = min(cfg.max_turn_tokens, cfg.max_response_tokens - s.resp_len)
            s.end = None
            s.next_input = [s.pending, *ids]

        # Continuing rows go to the front of the cache, longest input first (_prefill_rows).
        keep = [i for i, j in enumerate(rows) if self.seqs[j].stop_reason is None]
        if not keep:
            return 0, None
        keep.sort(key=lambda i: -len(self.seqs[rows[i]].next_input))
        new_order = [rows[i] for i in keep]
        if not self.reuse_cache:
            self.order = new_order
            return len(keep), self._reprefill(new_order)
        cache = self.cache
        extra = max(len(self.seqs[j].next_input) for j in new_order)
        valid = cache.valid[torch.tensor(keep, device=self.device), : cache.length]
        holes = 1.0 - float(valid.sum().item()) / max(1, valid.numel())
        compact = holes > _COMPACT_HOLES or cache.length + extra > cache.cap
        if compact or keep != list(range(len(keep))):
            cache.rebuild(torch.tensor(keep), extra + cfg.max_turn_tokens, compact=compact)
        self.order = new_order
        seqs = [self.seqs[j] for j in new_order]
        return len(keep), self._prefill_rows([s.next_input for s in seqs], seqs)

    # ----------------------------------------------------------- model calls

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
        """One forward of the first ``n`` rows; their slots must already be marked valid."""
        cache = self.cache
        q = ids.shape[1]
        kwargs = {self.keep_kw: 1} if self.keep_kw else {}
        _state.shared = cache.shared
        try:
            out = self.model(
                input_ids=ids,
                attention_mask=cache.valid[:n, : cache.length + q],
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
                **kwargs,
            )
        finally:
            _state.shared = None
        cache.length += q
        return out.logits[:, -1, :]

    def _prefill_rows(self, inputs: list[list[int]], seqs: list[_Seq] | None,
                      starts: list[int] | None = None) -> torch.Tensor:
        """Append each row's tokens (right-aligned, holes on the left) to the first rows.

        Positions continue from each sequence's ``pos`` (or ``starts``), which
        advances.  Returns the logits after each row's last token.
        """
        n = len(inputs)
        width = max(len(x) for x in inputs)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        pos = torch.zeros((n, width), dtype=torch.long)
        real = torch.zeros((n, width), dtype=torch.bool)
        for r, x in enumerate(inputs):
            start = seqs[r].pos if seqs is not None else starts[r]
            k = len(x)
            ids[r, width - k :] = torch.tensor(x, dtype=torch.long)
            pos[r, width - k :] = torch.arange(start, start + k)
            real[r, width - k :] = True
            if seqs is not None:
                seqs[r].pos += k
        ids, pos, real = ids.to(self.device), pos.to(self.device), real.to(self.device)
        cache = self.cache
        cache.reserve(width)
        # Chunks of columns, left to right; a chunk only runs the rows that have tokens
        # in it: rows with shorter inputs join later (callers sort rows longest first,
        # so these are the first rows).  Every row has a token in the last column.
        first = [width - len(x) for x in inputs]  # first real column of each row
        context = cache.length + width + (cache.shared[0][0].shape[2] if cache.shared else 0)
        budget = max(1, min(self.prefill_tokens, _ATTENTION_ELEMENTS // (self.heads * context)))
        logits, c0 = None, 0
        while c0 < width:
            c1 = min(width, c0 + max(1, budget // n))
            while True:
                rows = 1 + max(r for r in range(n) if first[r] < c1)
                if c1 - c0 == 1 or (c1 - c0) * rows <= budget:
                    break
                c1 = c0 + max(1, budget // rows)
            cache.valid[:rows, cache.length : cache.length + c1 - c0] = real[:rows, c0:c1]
            logits = self._forward(ids[:rows, c0:c1], pos[:rows, c0:c1], rows)
            c0 = c1
        return logits

    def _prefill_prompts(self, prompts: list[list[int]]) -> torch.Tensor:
        """Prefill every prompt; identical prompts and the common prefix are computed once."""
        cfg = self.cfg
        if self.share_prompts:
            index: dict[tuple[int, ...], int] = {}
            for p in sorted(prompts, key=len, reverse=True):  # longest first (_prefill_rows)
                index.setdefault(tuple(p), len(index))
            of_row = [index[tuple(p)] for p in prompts]
            unique = [list(p) for p in index]
        else:
            longest_first = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
            unique = [prompts[i] for i in longest_first]
            of_row = [0] * len(prompts)
            for u, i in enumerate(longest_first):
                of_row[i] = u
        room = cfg.max_turn_tokens + 1
        shared = common_prefix_length(unique) if self.share_prompts else 0
        shared = min(shared, min(len(p) for p in unique) - 1)
        if shared >= _MIN_SHARED_PREFIX:
            longest = max(len(p) for p in unique)
            self.cache = _RolloutCache(1, _round_up(longest + room), self.device)
            self._prefill_rows([unique[0][:shared]], None, [0])
            if self.cascade:  # keep one copy that every row attends to
                self.cache.share_prefix(len(unique), longest - shared + room)
            else:  # copy it into every row
                self.cache.rebuild(torch.zeros(len(unique), dtype=torch.long),
                                   longest - shared + room, compact=False)
            logits = self._prefill_rows([p[shared:] for p in unique], None,
                                        [shared] * len(unique))
        else:
            longest = max(len(p) for p in unique)
            self.cache = _RolloutCache(len(unique), _round_up(longest + room), self.device)
            logits = self._prefill_rows(unique, None, [0] * len(unique))
        if len(unique) != len(prompts) or of_row != list(range(len(prompts))):
            rows = torch.tensor(of_row, dtype=torch.long)
            self.cache.rebuild(rows, room + cfg.max_turn_tokens, compact=False)
            logits = logits[rows.to(logits.device)]
        return logits

    def _reprefill(self, order: list[int]) -> torch.Tensor:
        """Without cache reuse: encode each continuing sequence's whole context again."""
        order.sort(key=lambda j: -(len(self.seqs[j].prompt) + self.seqs[j].resp_len))
        contexts = []
        for j in order:
            s = self.seqs[j]
            contexts.append(s.prompt + [t for seg in s.segments for t in seg.token_ids])
            s.pos = len(contexts[-1])
        longest = max(len(c) for c in contexts)
        self.cache = _RolloutCache(len(order), _round_up(longest + self.cfg.max_turn_tokens + 1),
                                   self.device)
        return self._prefill_rows(contexts, None, [0] * len(contexts))

    # ----------------------------------------------------------- sampling

    def _sample(self, logits: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        logits = logits.float()
        if cfg.temperature == 0:
            return logits.argmax(-1)
        logits = logits / cfg.temperature
        if cfg.top_p < 1.0:
            sorted_logits, idx = logits.sort(-1, descending=True)
            probs = sorted_logits.softmax(-1)
            drop = probs.cumsum(-1) - probs > cfg.top_p  # the first token always stays
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, sorted_logits)
        # Inverse-CDF sampling (float64 running sum): one uniform draw per row, several
        # times cheaper than torch.multinomial on CPU; right=True never picks a token
        # of probability zero.
        cdf = logits.softmax(-1).double().cumsum(-1)
        u = torch.rand((cdf.shape[0], 1), generator=self.gen, device=cdf.device,
                       dtype=torch.float64) * cdf[:, -1:]
        return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.shape[1] - 1)
