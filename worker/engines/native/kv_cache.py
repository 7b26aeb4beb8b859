"""The rollout's KV cache: preallocated, one write pointer, per-row validity, holes allowed.

Every forward writes its keys/values at the same slots for every row and a per-row
validity mask says which slots hold real tokens, so rows may have holes (padding,
parked steps); the engine keeps position ids per row, counting real tokens only. It
grows by reallocation (rarely, not per token like ``DynamicCache``) and is compacted
(holes removed) when the engine asks. Slots are zero-initialised: a masked slot must
hold finite numbers, or attention's ``0 * NaN`` poisons the output. A prompt prefix
every row shares can be held once, outside the rows (``share_prefix``; the attention
function in `attention.py` reads it); rows may read only its start (``shared_valid``:
the exemplar block of a mixed step's hinted prompts, which the others do not show).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class _Layer(CacheLayerMixin):
    is_sliding = False
    is_compileable = False

    def __init__(self, owner: RolloutCache):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        # keys are kept in the values' dtype: under bfloat16 autocast RoPE hands over float32
        # keys, which attention would cast to bfloat16 again at every step
        o = self.owner
        self.dtype, self.device = value_states.dtype, key_states.device
        self.keys = value_states.new_zeros(o.rows, key_states.shape[1], o.cap,
                                           key_states.shape[3])
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


class RolloutCache(Cache):
    """All rows write at slot ``length`` (the same for every row); ``valid`` marks real tokens.

    The model only ever sees the first ``n`` rows of a forward's batch, so
    rows that are not generating (parked) are kept at the back.
    """

    def __init__(self, rows: int, cap: int, device: torch.device):
        super().__init__(layers=[])
        self.rows, self.cap, self.length = rows, cap, 0
        self.valid = torch.zeros(rows, cap, dtype=torch.bool, device=device)
        # A prompt prefix every row shares, outside the per-row buffers (see
        # attention.attend_with_shared_prefix): per layer (keys, values) [1, h_kv, P, d].
        self.shared: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        # Which of its P tokens each row reads, [rows, P]; None: all of them.
        self.shared_valid: torch.Tensor | None = None

    def share_prefix(self, rows: int, cap: int, reads: list[int] | None = None) -> None:
        """Turn the one row held so far into the shared prefix; start ``rows`` empty rows.

        ``reads``: per new row, how many of the prefix's first tokens it attends to (its
        own prompt goes on from there); None: all of them.
        """
        n = self.length
        self.shared = [
            (layer.keys[:1, :, :n].clone(), layer.values[:1, :, :n].clone())
            for layer in self.layers
        ]
        self.shared_valid = None
        if reads is not None and min(reads) < n:
            device = self.valid.device
            self.shared_valid = (torch.arange(n, device=device)[None, :]
                                 < torch.tensor(reads, device=device)[:, None])
        cap = round_up(cap)
        for layer in self.layers:
            for name in ("keys", "values"):
                old = getattr(layer, name)
                setattr(layer, name, old.new_zeros(rows, old.shape[1], cap, old.shape[3]))
        self.valid = self.valid.new_zeros(rows, cap)
        self.rows, self.cap, self.length = rows, cap, 0

    def prefix_mask(self, rows: int) -> torch.Tensor | None:
        """Which shared-prefix tokens the first ``rows`` rows read, or None: all of them."""
        return None if self.shared_valid is None else self.shared_valid[:rows]

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
        new_cap = round_up(max(need, self.cap + self.cap // 2))
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
        if self.shared_valid is not None:
            self.shared_valid[dst] = self.shared_valid[src]

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
        cap = round_up(new_len + extra)
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
        if self.shared_valid is not None:
            self.shared_valid = self.shared_valid[rows]
        self.rows, self.cap, self.length = rows.numel(), cap, new_len


def round_up(n: int, step: int = 64) -> int:
    return max(step, -(-n // step) * step)
