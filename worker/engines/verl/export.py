"""A veRL checkpoint -> a Hugging Face folder, where the studio's evaluation and export look.

veRL saves `checkpoints/global_step_N/actor/` (FSDP shards, optimizer state,
`huggingface/` with the config and tokenizer) and writes N to
`latest_checkpointed_iteration.txt`. `merge_checkpoint` runs veRL's own
merger (`python -m verl.model_merger merge --backend fsdp`) into
`runs/<id>/checkpoints/step-N/`, the folder a native run's checkpoint has,
written whole or not at all, and records it as the run's checkpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from studio.services.run_folder import RunFolder
from studio.services.run_recorder import RunRecorder

LATEST_FILE = "latest_checkpointed_iteration.txt"


class MergeFailed(RuntimeError):
    """veRL's merger did not produce a model; the message holds its output's tail."""


def latest_verl_step(checkpoints: Path) -> int | None:
    """The last step veRL finished saving (its own marker file), or None."""
    try:
        text = (checkpoints / LATEST_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def merge_checkpoint(checkpoints: Path, step: int, folder: RunFolder) -> Path:
    """Merge `global_step_<step>/actor` into the run's checkpoint after `step` steps."""
    actor = checkpoints / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise MergeFailed(f"{actor} does not exist: veRL saved no checkpoint for step {step}")
    with folder.writing_checkpoint(step) as partial:
        _merge(actor, partial)
    return folder.checkpoint(step)


def _merge(actor: Path, partial: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
         "--local_dir", str(actor), "--target_dir", str(partial)],
        capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if result.returncode != 0 or not (partial / "config.json").exists():
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise MergeFailed(f"veRL's model merger failed for {actor} (exit {result.returncode}):"
                          f"\n{tail}")


def export_latest(recorder: RunRecorder, checkpoints: Path) -> Path | None:
    """Merge the run's latest veRL checkpoint and make it the run's checkpoint; None if none."""
    step = latest_verl_step(checkpoints)
    if step is None:
        return None
    settings = recorder.settings
    folder = merge_checkpoint(checkpoints, step, RunFolder.of(settings, recorder.run_id))
    recorder.checkpointed(str(folder.relative_to(settings.resolved_data_dir)))
    return folder
