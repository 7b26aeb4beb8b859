"""The services' tokenizers: one per model per process, and a clear error when a model's
tokenizer cannot be had."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from studio.base_models import ModelNotAvailable, load_tokenizer
from studio.services.errors import UserError


class ModelUnavailable(UserError):
    status_code = 409


@lru_cache(maxsize=4)
def cached_tokenizer(ref: str, data_dir: str):
    """One tokenizer per model per process (the bundled model converts once, ~30 s)."""
    try:
        return load_tokenizer(ref, Path(data_dir))
    except ModelNotAvailable as exc:
        raise ModelUnavailable(f"model: {exc}") from None
