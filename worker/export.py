"""The export task's body: a run's checkpoint as a Hugging Face folder, a zip, or a Hub push.

Nothing is ever half-written: the folder is assembled in a hidden partial
folder and renamed when complete, the zip likewise; a Hub push is a single
commit. A failed export keeps no file at all, partial or finished (a failed push
frees its folder's disk, which counts against its owner's export quota), and can
be retried: the retry builds it again.

`assemble_folder` is the step other engines reuse: it turns any Hugging Face
model folder (a native checkpoint, or a veRL checkpoint merged to HF format)
plus its run into the export folder. A LoRA run's checkpoint (an adapter, see
`worker.lora`) is exported merged into its base, so that plain Transformers
loads it without PEFT, with the adapter itself beside it in `adapter/`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from studio.jobs.heartbeats import keep_beating
from studio.jobs.lifecycle import RunState
from studio.run_config import RunConfig
from studio.services import exports, runs
from studio.services.errors import UserError
from studio.services.model_card import REWARD_CURVES, base_model_facts, build_model_card
from studio.services.run_folder import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_folder
from studio.services.run_plans import stored_plan
from studio.settings import Settings
from worker.hub import PushError, push_folder, scrub
from worker.lora import load_checkpoint

ADAPTER_DIR = "adapter"  # a LoRA run's adapter, beside the merged weights
CHUNK = 8 << 20
REPORT_EVERY_S = 0.5

Progress = Callable[[float, str], None]
# Transformers builds a model's modules on the meta device under process-wide state (and
# imports its classes lazily), so two models loaded at once by threads of one worker (the
# short jobs' worker runs two exports so) leave weights on meta ("Cannot copy out of meta
# tensor"); loads take turns.
_LOADING_A_MODEL = threading.Lock()


class ExportError(Exception):
    """An export that cannot be made; the message says why and what to do."""


def _link_or_copy(source: Path, target: Path, on_bytes: Callable[[int], None]) -> None:
    """A hard link when the data directory allows it (instant, no extra space: checkpoint
    files are never rewritten in place), else a copy in chunks."""
    try:
        os.link(source, target)
        on_bytes(source.stat().st_size)
        return
    except OSError:
        pass
    with open(source, "rb") as src, open(target, "wb") as out:
        while chunk := src.read(CHUNK):
            out.write(chunk)
            on_bytes(len(chunk))


def _ensure_safetensors(folder: Path, on_progress: Progress) -> None:
    """Weights saved otherwise (e.g. pytorch_model.bin) are re-saved as safetensors."""
    if any(folder.glob("*.safetensors")):
        return
    if not any(folder.glob("*.bin")) and not any(folder.glob("*.pt")):
        raise ExportError(f"{folder.name}: no model weights found (*.safetensors or *.bin)")
    on_progress(0.5, "converting the weights to safetensors")
    with _LOADING_A_MODEL:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder)
    model.save_pretrained(folder)
    for stale in (*folder.glob("*.bin"), *folder.glob("*.bin.index.json")):
        stale.unlink()


def _ensure_generation_config(folder: Path) -> None:
    if (folder / "generation_config.json").exists():
        return
    from transformers import AutoConfig, GenerationConfig

    GenerationConfig.from_model_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)


def _copy_adapter(adapter: Path, target: Path, config: RunConfig) -> None:
    """The adapter's weights and config; its base named by Hub id, never by a local path."""
    target.mkdir()
    _link_or_copy(adapter / ADAPTER_WEIGHTS, target / ADAPTER_WEIGHTS, lambda _: None)
    adapter_config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    adapter_config["base_model_name_or_path"] = base_model_facts(config.model)[0]
    (target / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=2))


def assemble_folder(settings: Settings, run_id: int, source: Path, target: Path, *, step: int,
                    repo_id: str | None = None, on_progress: Progress) -> None:
    """Write into `target` (a new folder) the model files of the Hugging Face folder `source`
    as safetensors, a generation config, the model card (README.md and its reward curves)
    and run.yaml. A LoRA checkpoint is merged into its base first (in a staging folder
    beside `target`), and its adapter goes into `adapter/`."""
    config = stored_plan(settings, run_id).config
    adapter = adapter_folder(source)
    if adapter is None:
        _assemble(settings, run_id, config, source, target, step, repo_id, on_progress)
        return
    with tempfile.TemporaryDirectory(prefix=".merged-", dir=target.parent) as staging:
        on_progress(0.0, "merging the LoRA adapter into the base model")
        with _LOADING_A_MODEL:
            model, tokenizer = load_checkpoint(source, config.model,
                                               settings.resolved_data_dir, dtype="auto")
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        del model
        _assemble(settings, run_id, config, Path(staging), target, step, repo_id, on_progress,
                  adapter)


def _assemble(settings: Settings, run_id: int, config: RunConfig, source: Path, target: Path,
              step: int, repo_id: str | None, on_progress: Progress,
              adapter: Path | None = None) -> None:
    files = exports.model_files(source)
    if not (source / "config.json").exists():
        raise ExportError(f"{source}: not a Hugging Face model folder (no config.json)")
    target.mkdir(parents=True)
    total, done = max(sum(p.stat().st_size for p in files), 1), 0

    def copied(size: int) -> None:
        nonlocal done
        done += size
        on_progress(0.8 * done / total, f"copying the model files ({done / 1e6:.1f} of "
                                        f"{total / 1e6:.1f} MB)")

    for path in files:
        _link_or_copy(path, target / path.name, copied)
    _ensure_safetensors(target, on_progress)
    _ensure_generation_config(target)
    if adapter is not None:
        _copy_adapter(adapter, target / ADAPTER_DIR, config)
    on_progress(0.85, "writing the model card")
    card = build_model_card(settings, run_id, step, repo_id)
    (target / "README.md").write_text(card.markdown)
    if card.reward_curves_png:
        (target / REWARD_CURVES).write_bytes(card.reward_curves_png)
    (target / "run.yaml").write_text(config.to_yaml())
    on_progress(1.0, "folder complete")


def zip_folder(folder: Path, target: Path, arcroot: str, on_progress: Progress) -> None:
    """Zip `folder` into `target` under `arcroot/`; weights are stored, text deflated."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    total, done = max(sum(p.stat().st_size for p in files), 1), 0
    with zipfile.ZipFile(target, "w", allowZip64=True) as archive:
        for path in files:
            info = zipfile.ZipInfo.from_file(path, f"{arcroot}/{path.relative_to(folder)}")
            info.compress_type = zipfile.ZIP_STORED if path.suffix in (".safetensors", ".png") \
                else zipfile.ZIP_DEFLATED
            with open(path, "rb") as src, archive.open(info, "w", force_zip64=True) as out:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    on_progress(done / total, f"zipping ({done / 1e6:.1f} of "
                                              f"{total / 1e6:.1f} MB)")


class _Reporter:
    """Writes progress to the export's row, at most every REPORT_EVERY_S unless told to."""

    def __init__(self, settings: Settings, export_id: int):
        self.settings, self.export_id, self.last = settings, export_id, 0.0

    def phase(self, start: float, end: float) -> Progress:
        def report(fraction: float, message: str) -> None:
            now = time.monotonic()
            if now - self.last >= REPORT_EVERY_S or fraction >= 1.0:
                self.last = now
                exports.update_export(self.settings, self.export_id, message=message,
                                      progress=round(start + (end - start) * fraction, 4))
        return report


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "model"


def _build(settings: Settings, export: dict, reporter: _Reporter, end: float) -> Path:
    """The finished export folder (made now unless a previous attempt finished it)."""
    folder = exports.export_folder(settings, export["id"])
    if folder.is_dir():
        return folder
    step, source = exports.checkpoint_folder(settings, export["run_id"], export["step"])
    partial = exports.partial_path(folder)
    shutil.rmtree(partial, ignore_errors=True)
    assemble_folder(settings, export["run_id"], source, partial, step=step,
                    repo_id=export["repo_id"], on_progress=reporter.phase(0.0, end))
    os.replace(partial, folder)
    return folder


def _deliver(settings: Settings, export: dict, token: str | None, reporter: _Reporter) -> dict:
    """Build and deliver; returns the fields of the finished row."""
    root = exports.exports_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    if export["target"] == "folder":
        folder = _build(settings, export, reporter, 1.0)
        return {"location": str(folder.relative_to(settings.resolved_data_dir)),
                "message": f"exported to {folder}"}
    if export["target"] == "zip":
        folder = _build(settings, export, reporter, 0.5)
        target = exports.export_zip(settings, export["id"])
        partial = exports.partial_path(target)
        run_name = _safe_name(runs.get_run(settings, export["run_id"])["name"])
        zip_folder(folder, partial, f"{run_name}-step-{export['step']}",
                   reporter.phase(0.5, 1.0))
        os.replace(partial, target)
        shutil.rmtree(folder)  # the zip is the export; the folder was its staging area
        return {"location": str(target.relative_to(settings.resolved_data_dir)),
                "message": f"zip ready ({target.stat().st_size / 1e6:.1f} MB)"}
    if not token:
        raise ExportError("the Hub token was not kept after the last attempt; retry the "
                          "export with the token")
    folder = _build(settings, export, reporter, 0.2)
    run = runs.get_run(settings, export["run_id"])
    pushed = push_folder(folder, export["repo_id"], token=token, private=export["private"],
                         message=f"{run['name']}: checkpoint after {export['step']} steps "
                                 "(ICRL Studio)",
                         on_progress=reporter.phase(0.2, 1.0))
    return {"location": pushed.url, "repo_id": pushed.repo_id,
            "message": f"pushed to {pushed.repo_id} (commit {pushed.commit[:12]})"}


def run_export(settings: Settings, export_id: int, token: str | None = None) -> dict:
    """Make export `export_id`; its row records progress, the outcome or the reason.

    The token comes from the hand-off file (`exports.store_token`) unless given; the file
    is deleted when the job ends, whatever the outcome.
    """
    if not exports.claim_export(settings, export_id):  # a duplicate delivery
        return exports.get_export(settings, export_id)
    export = exports.get_export(settings, export_id)
    token = token or exports.read_token(settings, export_id)
    reporter = _Reporter(settings, export_id)
    try:
        with keep_beating(settings, exports.EXPORT_JOBS, export_id):
            done = _deliver(settings, export, token, reporter)
    except Exception as exc:  # recorded on the row, without a traceback that could hold secrets
        reason = str(exc) if isinstance(exc, (ExportError, PushError, UserError)) \
            else f"{type(exc).__name__}: {exc}"
        reason = scrub(reason, token)
        exports.remove_export_files(settings, export_id)
        exports.update_export(settings, export_id, state=RunState.failed, error=reason,
                              message=f"failed: {reason}"[:512])
        return exports.get_export(settings, export_id)
    finally:
        exports.discard_token(settings, export_id)
    exports.update_export(settings, export_id, state=RunState.succeeded, progress=1.0, **done)
    return exports.get_export(settings, export_id)
