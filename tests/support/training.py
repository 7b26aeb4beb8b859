"""What the trainer's tests share: a tiny run config over the demo pack, and a trainer that
dies mid-run as a killed worker's process would."""

from __future__ import annotations

from worker.engines.native.trainer import Trainer


def tiny_config(model, steps=3, **grpo) -> dict:
    """A run of the tiny model on the demo pack: 2 exemplars for a step, then none."""
    return {
        "name": "tiny", "model": str(model),
        "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"},
        "curriculum": {"stages": [{"exemplars": 2, "steps": 1}, {"exemplars": 0, "steps": 2}]},
        "grpo": {"steps": steps, "batch_size": 2, "group_size": 2, "lr": 1e-4,
                 "max_turns": 2, "max_turn_tokens": 12, "max_response_tokens": 48,
                 "max_obs_tokens": 24, "micro_batch_size": 2, **grpo},
        "engine": {"checkpoint_every": 1, "log_groups_per_step": 1},
        "seed": 3,
    }


class Crash(Exception):
    """The death of a training process, raised where a SIGKILL could land."""


class CrashingTrainer(Trainer):
    """Dies right after writing step `crash_after`, before that step's checkpoint."""

    crash_after = 2

    def _after_step(self, step, metrics):
        super()._after_step(step, metrics)
        if step == self.crash_after:
            raise Crash()
