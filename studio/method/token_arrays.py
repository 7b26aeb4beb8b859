"""Per-token figures of a logged rollout, packed small, and laid back onto its text.

For every response token the engine keeps (docs/engine.md, "Token-level rollouts"):

* ``logprob``: the log-probability of the token under the policy that sampled it (the
  weights before the step's update, temperature 1, as the loss sees it);
* ``entropy``: the entropy, in nats, of that policy's next-token distribution there;
* ``advantage``: what the loss multiplies the token's log-prob ratio by (GRPO: the
  rollout's group advantage on every model token, 0 where the loss mask is 0);
* ``mask``: the loss mask, 1 for a token the model sampled, 0 for one the environment
  inserted (log-prob and entropy are not computed there and read back as None);
* ``chars``: how many characters of the response text the token covers, so that the
  tokens cut the stored text back into pieces without a tokenizer.

Packed form (``pack``/``unpack``): a version byte, the token count (uint32), then the
five arrays one after the other, little-endian: three float16 arrays, the mask as bytes
and the character counts as uint16; 9 bytes a token and 5 in all (2,705 bytes for a
300-token response). float16 keeps about 3 significant digits: a value comes back within
2**-11 of itself relative (plus 2**-24 absolute near zero), which is finer than any colour
scale shows. Pure (struct only): the engines pack, the services unpack.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .prompt import common_prefix_length

VERSION = 1
_HEADER = struct.Struct("<BI")
#: float16 round-off: relative bound (half of 2**-10, the spacing of 10 mantissa bits)
#: and the absolute bound below float16's smallest normal number.
FLOAT16_RELATIVE = 2.0 ** -11
FLOAT16_ABSOLUTE = 2.0 ** -24
_MAX_CHARS = 0xFFFF


@dataclass
class TokenArrays:
    """One rollout's per-token figures, one entry per response token, in order."""

    logprob: list[float]
    entropy: list[float]
    advantage: list[float]
    mask: list[int]
    chars: list[int]

    def __post_init__(self) -> None:
        n = len(self.mask)
        if not all(len(a) == n for a in (self.logprob, self.entropy, self.advantage,
                                         self.chars)):
            raise ValueError("token arrays: give logprob, entropy, advantage, mask and chars "
                             "with one entry per response token each")

    def __len__(self) -> int:
        return len(self.mask)

    def pack(self) -> bytes:
        n = len(self)
        chars = [min(c, _MAX_CHARS) for c in self.chars]
        return (_HEADER.pack(VERSION, n)
                + struct.pack(f"<{3 * n}e", *self.logprob, *self.entropy, *self.advantage)
                + bytes(1 if m else 0 for m in self.mask)
                + struct.pack(f"<{n}H", *chars))

    @classmethod
    def unpack(cls, data: bytes) -> TokenArrays:
        version, n = _HEADER.unpack_from(data)
        if version != VERSION or len(data) != packed_size(n):
            raise ValueError(f"token arrays: not version {VERSION} arrays of {n} tokens")
        floats = struct.unpack_from(f"<{3 * n}e", data, _HEADER.size)
        at = _HEADER.size + 6 * n
        return cls(logprob=list(floats[:n]), entropy=list(floats[n:2 * n]),
                   advantage=list(floats[2 * n:]), mask=list(data[at:at + n]),
                   chars=list(struct.unpack_from(f"<{n}H", data, at + n)))


def packed_size(tokens: int) -> int:
    """Bytes of the packed arrays of a response of `tokens` tokens."""
    return _HEADER.size + 9 * tokens


def token_ends(text: str, prefix_texts: list[str]) -> list[int]:
    """Where each token of `text` ends in it, from the decoded text of the first 1, 2, ...
    tokens: kept non-decreasing and within `text` (a token cut inside a multi-byte
    character decodes to a replacement mark; its end then waits for the next token), and
    the last token ends at the end of `text`."""
    ends, end = [], 0
    for decoded in prefix_texts:
        shared = len(decoded) if text.startswith(decoded) \
            else common_prefix_length([text, decoded])
        end = max(end, shared)
        ends.append(end)
    if ends:
        ends[-1] = len(text)
    return ends


def char_counts(ends: list[int]) -> list[int]:
    """Per token the characters it covers, from its end offsets."""
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def token_view(segments: list[dict], arrays: TokenArrays | None) -> dict:
    """The arrays laid onto the stored segments, as the API serves them: per response token
    its `text`, `mask`, `logprob` and `entropy` (None where masked) and `advantage`, with
    `segment` (its index in `segments`) and `bytes` (the packed size). Empty arrays and
    `recorded` false for a rollout stored without them."""
    columns = {"text": [], "segment": [], "mask": [], "logprob": [], "entropy": [],
               "advantage": []}
    if arrays is None:
        return {"recorded": False, "tokens": 0, "bytes": 0, **columns}
    at = 0
    for index, segment in enumerate(segments):
        if segment.get("source") == "prompt":
            continue
        text, start = segment.get("text") or "", 0
        for _ in range(int(segment.get("tokens") or 0)):
            if at >= len(arrays):
                break
            end = start + arrays.chars[at]
            trained = bool(arrays.mask[at])
            columns["text"].append(text[start:end])
            columns["segment"].append(index)
            columns["mask"].append(int(trained))
            columns["logprob"].append(arrays.logprob[at] if trained else None)
            columns["entropy"].append(arrays.entropy[at] if trained else None)
            columns["advantage"].append(arrays.advantage[at])
            start, at = end, at + 1
    return {"recorded": True, "tokens": len(arrays), "bytes": packed_size(len(arrays)),
            **columns}
