"""BM25 parameters and the one tokenisation both backends share.

Tokenisation: lower-case the text, take word tokens (the regex ``\\w+``:
letters, digits and ``_``, Unicode-aware, single characters kept so that
"Apollo 7" or "Malcolm X" stay searchable), drop stop words (matched on the
lower-cased word, before stemming, as bm25s does), then optionally stem with
PyStemmer.  :func:`tokenize` returns strings; the index builder uses
:class:`Encoder`, which applies the very same rule through a per-word cache
and yields token ids, so both paths agree by construction (a test checks it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

# One compiled regex: word tokens.  _CHUNK_TOKEN also matches the NUL that
# separates passages when a whole chunk of passages is tokenised in one call.
WORD = re.compile(r"\w+")
_CHUNK_TOKEN = re.compile(r"\w+|\x00")
_SEP = "\x00"


def _stopword_lists() -> dict[str, tuple[str, ...]]:
    from bm25s import stopwords as sw  # the word lists bm25s ships (NLTK-derived)

    return {
        "en": sw.STOPWORDS_EN,
        "en_plus": sw.STOPWORDS_EN_PLUS,
        "de": sw.STOPWORDS_GERMAN,
        "nl": sw.STOPWORDS_DUTCH,
        "fr": sw.STOPWORDS_FRENCH,
        "es": sw.STOPWORDS_SPANISH,
        "pt": sw.STOPWORDS_PORTUGUESE,
        "it": sw.STOPWORDS_ITALIAN,
        "ru": sw.STOPWORDS_RUSSIAN,
        "sv": sw.STOPWORDS_SWEDISH,
        "no": sw.STOPWORDS_NORWEGIAN,
        "tr": sw.STOPWORDS_TURKISH,
        "da": sw.STOPWORDS_DANISH,
    }


STOPWORD_LANGUAGES: tuple[str, ...] = tuple(_stopword_lists())


def _stemmer_names() -> tuple[str, ...]:
    import Stemmer

    return tuple(Stemmer.algorithms())


@dataclass(frozen=True)
class Bm25Params:
    """How passages are scored and tokenised; JSON-ready via ``dataclasses.asdict``.

    * ``k1``, ``b``: the Okapi BM25 constants (k1 >= 0, 0 <= b <= 1).
    * ``stopwords``: a language code of the stop-word lists bm25s ships
      (:data:`STOPWORD_LANGUAGES`, e.g. ``"en"``) or None for none.
    * ``stemmer``: a PyStemmer algorithm (e.g. ``"english"``) or None.
    """

    k1: float = 1.5
    b: float = 0.75
    stopwords: str | None = "en"
    stemmer: str | None = None

    def __post_init__(self) -> None:
        for name in ("k1", "b"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"Bm25Params.{name} must be a number, got {value!r}")
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"Bm25Params.{name} must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.k1 < 0:
            raise ValueError(f"Bm25Params.k1 must be >= 0, got {self.k1}")
        if not 0.0 <= self.b <= 1.0:
            raise ValueError(f"Bm25Params.b must be between 0 and 1, got {self.b}")
        if self.stopwords is not None and self.stopwords not in STOPWORD_LANGUAGES:
            raise ValueError(
                f"Bm25Params.stopwords must be None or one of {', '.join(STOPWORD_LANGUAGES)}; "
                f"got {self.stopwords!r}"
            )
        if self.stemmer is not None and self.stemmer not in _stemmer_names():
            raise ValueError(
                f"Bm25Params.stemmer must be None or a PyStemmer algorithm "
                f"({', '.join(_stemmer_names())}); got {self.stemmer!r}"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Bm25Params:
        """Build from a mapping (e.g. parsed JSON); unknown keys and bad values raise ValueError."""
        if not isinstance(data, Mapping):
            raise ValueError(f"Bm25Params.from_dict needs a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"Bm25Params: unknown field(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(sorted(known))}"
            )
        for name in ("stopwords", "stemmer"):
            if name in data and data[name] is not None and not isinstance(data[name], str):
                raise ValueError(f"Bm25Params.{name} must be a string or null, got {data[name]!r}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@lru_cache(maxsize=16)
def _stopword_set(language: str | None) -> frozenset[str]:
    if language is None:
        return frozenset()
    return frozenset(w.lower() for w in _stopword_lists()[language])


def _stemmer(name: str | None):
    if name is None:
        return None
    import Stemmer

    return Stemmer.Stemmer(name)


class WordMap(dict):
    """Lower-cased word -> token string, or None for a stop word; filled lazily.

    The single place where the tokenisation rule (stop words, then stemming)
    lives; both :func:`tokenize` and :class:`Encoder` go through it.
    """

    def __init__(self, params: Bm25Params) -> None:
        super().__init__()
        self._stop = _stopword_set(params.stopwords)
        self._stem = _stemmer(params.stemmer)

    def __missing__(self, word: str) -> str | None:
        if word in self._stop:
            token = None
        elif self._stem is not None:
            token = self._stem.stemWord(word)
        else:
            token = word
        self[word] = token
        return token


_MAX_CACHED_WORDS = 1_000_000


@lru_cache(maxsize=8)
def _shared_word_map(params: Bm25Params) -> WordMap:
    # Queries and small calls reuse one cache per parameter set (emptied when
    # it passes _MAX_CACHED_WORDS, so a long-lived server's memory stays bounded).
    return WordMap(params)


def tokenize(texts: Sequence[str], params: Bm25Params) -> list[list[str]]:
    """Tokenise each text: lower-case, ``\\w+`` words, optional stop words, optional stemming."""
    if isinstance(texts, str):
        raise TypeError("tokenize() takes a list of texts, not a single string")
    wmap = _shared_word_map(params)
    if len(wmap) > _MAX_CACHED_WORDS:
        wmap.clear()
    get = wmap.__getitem__
    out = []
    for text in texts:
        out.append([t for t in map(get, WORD.findall(text.lower())) if t is not None])
    return out


class Encoder:
    """Turns chunks of texts into token ids, growing a vocabulary (the indexing path).

    ``encode(texts)`` tokenises the whole chunk with one regex pass over the
    texts joined by NUL, maps each word through a word -> id cache (the
    tokenisation rule runs once per distinct word), and returns the flat token
    ids and the token count of each text.
    """

    def __init__(self, params: Bm25Params) -> None:
        self.params = params
        self.vocab: dict[str, int] = {}
        self._words = WordMap(params)
        encoder = self

        class _Ids(dict):
            def __missing__(self, word: str) -> int:
                if word == _SEP:
                    return -2
                token = encoder._words[word]
                if token is None:
                    tid = -1
                else:
                    tid = encoder.vocab.get(token)
                    if tid is None:
                        tid = len(encoder.vocab)
                        encoder.vocab[token] = tid
                self[word] = tid
                return tid

        self._ids = _Ids()

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(token_ids int32, lengths int64)`` for ``texts`` (stop words removed)."""
        n = len(texts)
        if n == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        joined = _SEP.join(texts)
        if joined.count(_SEP) != n - 1:  # a text holds a NUL itself: neutralise it
            joined = _SEP.join(t.replace(_SEP, " ") for t in texts)
        words = _CHUNK_TOKEN.findall(joined.lower())
        ids = np.fromiter(map(self._ids.__getitem__, words), dtype=np.int64, count=len(words))
        seps = ids == -2
        doc_of = np.cumsum(seps)  # passage index of every word (separators included)
        keep = ids >= 0
        lengths = np.bincount(doc_of[keep], minlength=n).astype(np.int64)
        return ids[keep].astype(np.int32), lengths

    def tokens(self) -> list[str]:
        """The vocabulary in id order."""
        out = [""] * len(self.vocab)
        for tok, i in self.vocab.items():
            out[i] = tok
        return out
