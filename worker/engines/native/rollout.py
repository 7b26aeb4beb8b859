"""Batched multi-turn tool-use rollouts with PyTorch + Transformers (the native engine).

The tag protocol (method.md; `studio.method.protocol` decides every move): the model
writes until it closes a tool call or an answer; a call runs the tool and appends its
observation (cut to ``max_obs_tokens``, masked out of the loss); a turn that ends with
neither gets the corrective message; after ``max_turns`` environment turns the model
gets one last turn in which a further call is not run. This module is the driver: who
samples the tokens for a whole batch, and how cheaply.

How it runs (all sequences of a call share one forward pass per step):

* **Rounds.**  Every live sequence generates one model turn; a sequence that
  ends its turn is parked (moved behind the active rows of the batch, so
  decoding continues over a contiguous block of rows and parked rows cost
  nothing).  When every sequence has ended its turn, each tool gets all of the
  round's calls to it in one ``execute`` (inputs in input order), the
  environment text is encoded, and one prefill of just ``[last sampled
  token] + env tokens`` per continuing sequence appends them to the KV cache.
* **KV cache** (`kv_cache.py`): preallocated, one write pointer for the batch,
  per-row validity; compacted at round ends when holes make up a sizeable part.
* **Prompts.**  Identical prompts (the G samples of a question) are prefilled
  once, and the longest common token prefix of all prompts (instruction and
  exemplars) once for all of them.  That prefix is then kept in one copy
  that every row attends to (cascade attention, `attention.py`), or, when the
  model's attention function cannot be replaced, copied into every row.
* **Prefill.**  In chunks of columns bounded by a token budget; rows are
  ordered longest input first, and a chunk only runs the rows that have
  tokens in it, so padding costs nothing.
* **Sampling** (`sampling.py`): one batched op on the model's device; only the
  last position's logits are computed (``logits_to_keep=1``).
* **Stop strings.**  After each step, a sequence whose new token contains
  ``>`` decodes the last few tokens of its turn and looks for a stop string
  (`protocol.closed_by`, case-insensitive like the tag parser); the token that
  completes it is kept whole.

Token ids in model segments are exactly the ids sampled (EOS included when it
ends a turn); their ``text`` is ``tokenizer.decode(ids)`` (special tokens
kept).  Environment ids are ``tokenizer(text, add_special_tokens=False)``.

Thread counts are the caller's business (on CPU, one thread; see the perf
notes).  The model runs in eval mode (restored afterwards) without gradients
(``precision.rollout_mode``: inference mode, or one bfloat16 autocast
region); its device comes from its parameters.
Sliding-window attention layers are not supported (the cache is
full-attention only).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from studio.method import protocol
from studio.method.prompt import common_prefix_length
from studio.method.rollouts import Rollout, Segment
from studio.method.tools import SearchBackend, SearchTool, Tool, run_tool
from worker.engines.native.attention import grouped_sdpa_enabled, sharing_prefix
from worker.engines.native.kv_cache import RolloutCache, round_up
from worker.engines.native.logprobs import model_device
from worker.engines.native.precision import rollout_mode
from worker.engines.native.sampling import device_generator, sample


@dataclass(frozen=True)
class RolloutConfig(protocol.Limits):
    """The protocol's budgets plus sampling (method.md; upstream values as defaults)."""

    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k_passages: int = 3  # when the tool is given as a bare search function

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.top_k_passages, bool) or not isinstance(self.top_k_passages, int) \
                or self.top_k_passages < 0:
            raise ValueError("RolloutConfig.top_k_passages must be a non-negative integer, "
                             f"got {self.top_k_passages!r}")
        if not self.temperature >= 0:
            raise ValueError(f"RolloutConfig.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"RolloutConfig.top_p must be in (0, 1], got {self.top_p}")


def _tools(tools: Sequence[Tool] | SearchBackend, config: RolloutConfig) -> list[Tool]:
    if callable(tools) and not isinstance(tools, Tool):
        return [SearchTool(tools, config.top_k_passages)]
    tools = list(tools)
    if not tools or not all(isinstance(t, Tool) for t in tools):
        raise TypeError("tools must be a search function or a non-empty list of Tool objects")
    return tools


def generate_rollouts(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    tools: Sequence[Tool] | SearchBackend,
    config: RolloutConfig,
    *,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
    on_finished: Callable[[int], None] | None = None,
    reuse_cache: bool = True,
    share_prompts: bool = True,
    shared_kv: bool = True,
    grouped_attention: bool = True,
    tag_stops: bool = True,
) -> list[Rollout]:
    """Roll out every prompt (B questions x G samples, flattened) with the given tools.

    ``tools`` are registered `Tool` objects, or a bare search function (queries -> per
    query its passages), which becomes the search tool with ``config.top_k_passages``.
    Returns one :class:`Rollout` per prompt, in input order.  The same ``generator``
    state gives the same rollouts.  Each tool's ``execute`` is called at most once per
    round with every call of that round.  EOS is ``eos_token_id`` when given, else the
    tokenizer's eos and the model's ``generation_config.eos_token_id`` (all of them).
    ``on_finished`` is told after each round how many rollouts are over (a caller's
    progress: an evaluation's questions answered).

    The switches are for the tests and the benchmarks' ablations: ``reuse_cache=False``
    re-encodes each sequence's whole context after every environment turn (as TRL does);
    ``share_prompts=False`` prefills every prompt row on its own; ``shared_kv=False`` copies
    the common prompt prefix into every row instead of attending to one copy;
    ``grouped_attention=False`` keeps the model's own attention function (and so copies the
    prefix too); ``tag_stops=False`` ends turns at EOS and the token budget only (a
    benchmark's fixed lengths, whatever tags the model writes).
    """
    if not isinstance(config, RolloutConfig):
        raise TypeError(f"config must be a RolloutConfig, got {type(config).__name__}")
    prompts = [list(map(int, p)) for p in prompt_ids]
    if any(not p for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if not prompts:
        return []
    with rollout_mode(model_device(model)), _eval_mode(model), grouped_sdpa_enabled(
        model, grouped_attention
    ) as grouped:
        engine = _Engine(model, tokenizer, _tools(tools, config), config, generator,
                         eos_token_id, reuse_cache=reuse_cache, share_prompts=share_prompts,
                         cascade=grouped and share_prompts and shared_kv, tag_stops=tag_stops)
        return engine.run(prompts, on_finished)


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


class _Seq:
    """One sequence's state across rounds."""

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
        self.end: protocol.TurnEnd | None = None  # how the current turn ended
        self.stop_reason: str | None = None  # set when the rollout is over
        self.pending = -1  # last sampled token, not fed yet
        self.next_input: list[int] = []  # tokens to prefill at the round end


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


# Tokens per prefill forward (rows x chunk length): bounds activation memory.
_PREFILL_TOKENS = {"cpu": 8192}
_PREFILL_TOKENS_DEFAULT = 16384
# ... and tokens x heads x context length (attention scores or mask, float32) per forward.
_ATTENTION_ELEMENTS = 2**28
# Share a common prompt prefix only when it is at least this long.
_MIN_SHARED_PREFIX = 16
# Compact the cache at a round end when holes exceed this fraction of it.
_COMPACT_HOLES = 0.2


def _shared_block(rests: list[list[int]]) -> tuple[list[int], int]:
    """``(members, length)``: the prompts (by index) whose continuations after the common
    prefix start with the same ``length`` tokens, chosen to save the most prefill (a mixed
    step's hinted prompts: the exemplar block); ``([], 0)`` when no two share
    ``_MIN_SHARED_PREFIX`` tokens. Each member keeps at least one token of its own.

    Prompts sorted by their tokens put those sharing a start next to each other; a run of
    neighbours sharing at least ``_MIN_SHARED_PREFIX`` tokens shares the least of their
    pairwise starts.
    """
    ranked = sorted(range(len(rests)), key=lambda i: rests[i])
    best: tuple[int, list[int], int] = (0, [], 0)
    run: list[int] = ranked[:1]
    for i in range(1, len(ranked) + 1):
        common = (common_prefix_length([rests[ranked[i - 1]], rests[ranked[i]]])
                  if i < len(ranked) else 0)
        if common >= _MIN_SHARED_PREFIX:
            run.append(ranked[i])
            continue
        if len(run) > 1:
            length = min(common_prefix_length([rests[m] for m in run]),
                         min(len(rests[m]) for m in run) - 1)
            saved = (len(run) - 1) * length
            if length >= _MIN_SHARED_PREFIX and saved > best[0]:
                best = (saved, sorted(run), length)
        run = ranked[i : i + 1]
    return best[1], best[2]


class _Engine:
    def __init__(self, model, tokenizer, tools: list[Tool], config: RolloutConfig, generator,
                 eos_token_id, *, reuse_cache: bool, share_prompts: bool, cascade: bool,
                 tag_stops: bool):
        self.model, self.tokenizer, self.tools, self.cfg = model, tokenizer, tools, config
        self.tag_stops = tag_stops
        self.reuse_cache, self.share_prompts, self.cascade = reuse_cache, share_prompts, cascade
        self.device = model_device(model)
        self.eos = _eos_ids(model, tokenizer, eos_token_id)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else (min(self.eos) if self.eos else 0))
        self.gen = device_generator(generator, self.device)
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
        self.tail_tokens = max(map(len, protocol.stop_strings(tools))) + 1
        self.gt: list[bool] = []
        self.seqs: list[_Seq] = []
        self.order: list[int] = []  # cache row -> sequence index
        self.cache: RolloutCache | None = None

    # ----------------------------------------------------------- main loop

    def run(self, prompts: list[list[int]],
            on_finished: Callable[[int], None] | None = None) -> list[Rollout]:
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
            if on_finished:
                on_finished(len(prompts) - n_alive)
        return [
            Rollout(s.prompt, s.segments, s.stop_reason or "length", s.tool_calls)
            for s in self.seqs
        ]

    def _round(self, logits: torch.Tensor, n: int) -> None:
        """Every one of the first ``n`` cache rows generates until its turn ends."""
        seqs, order, cache = self.seqs, self.order, self.cache
        cache.reserve(max(self.seqs[i].limit for i in order[:n]))
        while n:
            sampled = sample(logits[:n], self.cfg.temperature, self.cfg.top_p,
                             self.gen).tolist()
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
            closed = protocol.closed_by(self.tokenizer.decode(turn[-self.tail_tokens :]),
                                        self.tools)
            if closed:
                s.end = closed
                return True
        if token in self.eos:
            s.end = "eos"
            return True
        if len(turn) >= s.limit:
            s.end = "budget"
            return True
        return False

    def _round_end(self, n: int) -> tuple[int, torch.Tensor | None]:
        """Close the turns of the first ``n`` rows, run the round's tool calls, append env text."""
        cfg, tok = self.cfg, self.tokenizer
        rows = self.order[:n]
        calls: dict[Tool, list[tuple[_Seq, str]]] = {}
        correct: list[_Seq] = []
        for j in sorted(rows):  # input order: each tool sees its inputs in it
            s = self.seqs[j]
            text = tok.decode(s.turn)
            s.segments.append(Segment("model", s.turn, text))
            s.resp_len += len(s.turn)
            s.turn = []
            move = protocol.after_turn(text, s.end, response_tokens=s.resp_len,
                                       env_turns=s.env_turns, limits=cfg, tools=self.tools)
            if move.action == "stop":
                s.stop_reason = move.reason
            elif move.action == "call":
                calls.setdefault(move.tool, []).append((s, move.input))
            else:
                correct.append(s)

        env: list[tuple[_Seq, str, list[int], Tool | None, bool]] = []
        for tool, pending in calls.items():
            results = run_tool(tool, [text for _, text in pending])
            for (s, _), result in zip(pending, results, strict=True):
                fitted = protocol.fit_observation(tok, tool, result, s.resp_len, cfg)
                if fitted is None:
                    s.stop_reason = "length"
                else:
                    env.append((s, *fitted, tool, tool.failed(result)))
        for s in correct:
            fitted = protocol.correction(tok, self.tools, s.resp_len, cfg)
            if fitted is None:
                s.stop_reason = "length"
            else:
                env.append((s, *fitted, None, False))
        for s, text, ids, tool, failed in env:
            s.segments.append(Segment("env", ids, text, tool and tool.spec.name, failed))
            s.resp_len += len(ids)
            s.env_turns += 1
            s.tool_calls += int(tool is not None)
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
        with sharing_prefix(cache.shared, cache.prefix_mask(n)):
            out = self.model(
                input_ids=ids,
                attention_mask=cache.valid[:n, : cache.length + q],
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
                **kwargs,
            )
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
        """Prefill every prompt; identical prompts, the common prefix and a block that
        several prompts share after it (a mixed step's exemplars) are computed once."""
        cfg = self.cfg
        if self.share_prompts:
            index: dict[tuple[int, ...], int] = {}
            for p in prompts:
                index.setdefault(tuple(p), len(index))
            of_row = [index[tuple(p)] for p in prompts]
            unique = [list(p) for p in index]
        else:
            unique, of_row = prompts, list(range(len(prompts)))
        room = cfg.max_turn_tokens + 1
        shared = common_prefix_length(unique) if self.share_prompts else 0
        shared = min(shared, min(len(p) for p in unique) - 1)
        shared = shared if shared >= _MIN_SHARED_PREFIX else 0
        reads = [shared] * len(unique)  # per prompt: the shared prefix tokens it reads
        if shared and self.cascade:
            members, block = _shared_block([p[shared:] for p in unique])
            for u in members:
                reads[u] = shared + block
        # rows longest input first (_prefill_rows), ties in the order the prompts came
        order = sorted(range(len(unique)), key=lambda u: reads[u] - len(unique[u]))
        rank = {u: r for r, u in enumerate(order)}
        unique, reads = [unique[u] for u in order], [reads[u] for u in order]
        of_row = [rank[u] for u in of_row]
        longest = max(len(p) for p in unique)
        if shared:
            self.cache = RolloutCache(1, round_up(longest + room), self.device)
            top = max(reads)
            self._prefill_rows([unique[reads.index(top)][:top]], None, [0])
            if self.cascade:  # keep one copy that every row attends to (its part of it)
                self.cache.share_prefix(len(unique), longest - shared + room, reads)
            else:  # copy it into every row
                self.cache.rebuild(torch.zeros(len(unique), dtype=torch.long),
                                   longest - shared + room, compact=False)
            logits = self._prefill_rows([p[r:] for p, r in zip(unique, reads, strict=True)],
                                        None, reads)
        else:
            self.cache = RolloutCache(len(unique), round_up(longest + room), self.device)
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
        self.cache = RolloutCache(len(order), round_up(longest + self.cfg.max_turn_tokens + 1),
                                   self.device)
        return self._prefill_rows(contexts, None, [0] * len(contexts))
