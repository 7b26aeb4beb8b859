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
import shutil
import subprocess
import sys
from pathlib import Path

from studio.db import session_scope
from studio.settings import Settings
from studio.tables import Run

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


def merge_checkpoint(checkpoints: Path, step: int, target: Path) -> Path:
    """Merge `global_step_<step>/actor` into the Hugging Face folder `target`."""
    actor = checkpoints / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise MergeFailed(f"{actor} does not exist: veRL saved no checkpoint for step {step}")
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    result = subprocess.run(
        [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
         "--local_dir", str(actor), "--target_dir", str(partial)],
        capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if result.returncode != 0 or not (partial / "config.json").exists():
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise MergeFailed(f"veRL's model merger failed for {actor} (exit {result.returncode}):"
                          f"\n{tail}")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    return target


def export_latest(settings: Settings, run_id: int, checkpoints: Path) -> Path | None:
    """Merge the run's latest veRL checkpoint and make it the run's checkpoint; None if none."""
    step = latest_verl_step(checkpoints)
    if step is None:
        return None
    run_dir = settings.resolved_data_dir / "runs" / str(run_id)
    folder = merge_checkpoint(checkpoints, step, run_dir / "checkpoints" / f"step-{step}")
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        run.checkpoint_dir = str(folder.relative_to(settings.resolved_data_dir))
        session.add(run)
    return folder
