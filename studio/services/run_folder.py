"""The files of one run, `runs/<id>/` in the data directory: the one place that spells them.

    runs/<id>/
      train.log                   the training process's output, every attempt appended
      reproduce.json              what it takes to start the same run again, as the latest
                                  attempt wrote it when it started (studio.services.reproduce)
      checkpoints/step-<N>/       a complete checkpoint after N steps: a Hugging Face model
                                  folder (with LoRA, the adapter), and the native trainer's
                                  optimizer and scheduler state beside it
      checkpoints/.step-<N>.partial/  one being written; renamed into place when whole
      reference/                  the KL reference of a `grpo.reset_each_stage` run
      tensorboard/                the metrics mirror (`mirror.tensorboard`)
      verl/                       a veRL run's inputs, attempts and veRL's own checkpoints

A checkpoint is complete when its `step-<N>` folder exists and holds a model: it is written
under a hidden name and renamed into place, so a process killed meanwhile leaves only a
hidden folder that nothing reads.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from studio.settings import Settings

CHECKPOINT_PREFIX = "step-"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
VERL_ADAPTER_DIR = "lora_adapter"
MODEL_MARKERS = ("config.json", ADAPTER_CONFIG)  # a full model, or a LoRA adapter


def adapter_folder(checkpoint: Path) -> Path | None:
    """Where a checkpoint keeps its LoRA adapter: itself (native), `lora_adapter/` (veRL's
    merger), or None (full weights)."""
    for folder in (checkpoint, checkpoint / VERL_ADAPTER_DIR):
        if (folder / ADAPTER_CONFIG).is_file():
            return folder
    return None


@dataclass(frozen=True)
class Checkpoint:
    step: int  # steps done
    folder: Path


@dataclass(frozen=True)
class RunFolder:
    root: Path

    @classmethod
    def of(cls, settings: Settings, run_id: int) -> RunFolder:
        return cls(settings.resolved_data_dir / "runs" / str(run_id))

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    @property
    def bundle(self) -> Path:
        return self.root / "reproduce.json"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def reference(self) -> Path:
        return self.root / "reference"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def verl(self) -> Path:
        return self.root / "verl"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"{CHECKPOINT_PREFIX}{step}"

    def checkpoint_steps(self) -> dict[int, Path]:
        """The complete checkpoints by steps done."""
        found = {}
        for folder in self.checkpoints.glob(f"{CHECKPOINT_PREFIX}*"):
            steps = folder.name[len(CHECKPOINT_PREFIX):]
            if steps.isdigit() and any((folder / m).exists() for m in MODEL_MARKERS):
                found[int(steps)] = folder
        return found

    def latest_checkpoint(self) -> Checkpoint | None:
        """The latest complete checkpoint; None before the first."""
        steps = self.checkpoint_steps()
        return Checkpoint(max(steps), steps[max(steps)]) if steps else None

    @contextmanager
    def writing_checkpoint(self, step: int, keep: int | None = None) -> Iterator[Path]:
        """A hidden folder to write the checkpoint after `step` steps into; when the block
        ends without an error it becomes `step-<N>` (replacing one of that step), and only
        the latest `keep` complete checkpoints stay."""
        partial = self.checkpoints / f".{CHECKPOINT_PREFIX}{step}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        yield partial
        final = self.checkpoint(step)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
        if keep is not None:
            for old in sorted(self.checkpoint_steps())[:-keep]:
                shutil.rmtree(self.checkpoint(old), ignore_errors=True)
