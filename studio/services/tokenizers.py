"""The services' tokenizers: one per model per process, and a clear error when a model's
tokenizer cannot be had or its folder lies where the studio does not read models from."""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

from studio.models.base_models import ModelNotAvailable, load_tokenizer, named_folder
from studio.services.errors import InvalidInput, UserError
from studio.settings import Settings


class ModelUnavailable(UserError):
    status_code = 409

    def __init__(self, reason: str) -> None:
        super().__init__(f"model: {reason}")
        self.reason = reason  # what is wrong with the model, without the field


_loading = threading.Lock()


def cached_tokenizer(ref: str, data_dir: str):
    """One tokenizer per model per process (the bundled model converts once, ~30 s). One
    thread at a time: the web app's first calls come at once (a page load previews the
    exemplars twice), and transformers' first import, run by two threads together, fails
    in one of them ("cannot import name 'AutoTokenizer'")."""
    with _loading:
        return _tokenizer(ref, data_dir)


@lru_cache(maxsize=4)
def _tokenizer(ref: str, data_dir: str):
    try:
        return load_tokenizer(ref, Path(data_dir))
    except ModelNotAvailable as exc:
        raise ModelUnavailable(str(exc)) from None


def check_model_folder(settings: Settings, ref: str, field: str = "model") -> None:
    """A 422 naming `field` unless `ref` is a packaged model, a Hub id, the admin's default
    model or a folder in `Settings.model_roots`: a member must not train on, evaluate or
    measure another studio's data dir. One message whether or not the folder exists."""
    folder = named_folder(ref)
    if folder is None or ref.strip() == settings.default_model.strip() or any(
            folder.is_relative_to(root) for root in settings.model_roots):
        return
    raise InvalidInput(f"{field}: {ref!r} is not in a folder this studio reads models from "
                       "(its models folder, the Hugging Face cache or one an admin lists in "
                       "STUDIO_MODEL_FOLDERS): put the model there, or name a Hugging Face Hub "
                       "id")


def checked_tokenizer(settings: Settings, ref: str, field: str = "model"):
    """The tokenizer of a submitted model reference, or a 422 naming `field`: how runs and
    evaluations check their model before anything is queued."""
    check_model_folder(settings, ref, field)
    try:
        return cached_tokenizer(ref, str(settings.resolved_data_dir))
    except ModelUnavailable as exc:
        raise InvalidInput(f"{field}: {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"{field}: the tokenizer of '{ref}' does not load "
                           f"({type(exc).__name__}: {exc})") from None
