"""What the trainer's tests share: a tiny run config over the demo pack, a trainer that
dies mid-run as a killed worker's process would, and a studio with a trained run."""

from __future__ import annotations

from pathlib import Path

from studio.services import evaluations, runs
from studio.services.demo import load_demo_pack
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import RunState
from tests.support.actors import admin
from tests.support.tiny_model import build_tiny_model
from worker.engines.native.trainer import Trainer
from worker.evaluation import run_evaluation


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
        pause = super()._after_step(step, metrics)
        if step == self.crash_after:
            raise Crash()
        return pause


def trained_studio(data_dir: Path, database_url: str | None = None, **extra
                   ) -> tuple[Settings, int, Path]:
    """A migrated studio with the demo pack, a tiny model, a 2-step run (checkpoints after
    steps 1 and 2; `extra` keys added to its config) and evaluations of the base model and
    the run."""
    settings = Settings(data_dir=data_dir, database_url=database_url)
    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    load_demo_pack(settings, admin(settings), index_now=True)
    model = build_tiny_model(data_dir / "tiny-base")
    config = {
        "name": "tiny export", "model": str(model),
        "data": {"corpus": "demo", "train": "demo", "eval": ["demo"], "exemplars": "demo"},
        "curriculum": {"stages": [{"exemplars": 2, "steps": 1}, {"exemplars": 0, "steps": 1}]},
        "grpo": {"steps": 2, "batch_size": 2, "group_size": 2, "lr": 1e-3, "max_turns": 1,
                 "max_turn_tokens": 8, "max_response_tokens": 24, "max_obs_tokens": 16,
                 "micro_batch_size": 2},
        "engine": {"checkpoint_every": 1},
        **extra,
    }
    run_id = runs.create_run(settings, admin(settings), config, start=False)["id"]
    Trainer(settings, run_id).run()
    runs.finish_run(settings, run_id, RunState.succeeded)
    protocol = {"max_turns": 1, "max_turn_tokens": 8, "max_response_tokens": 16}
    for source in ({"model": str(model), "corpus": "demo"}, {"run_id": run_id}):
        evaluation = evaluations.create_evaluation(settings, admin(settings), qa_set="demo", limit=2,
                                                   protocol=protocol, start=False, **source)
        done = run_evaluation(settings, evaluation["id"])
        assert done["state"] == RunState.succeeded, done["error"]
    return settings, run_id, model
