"""Adding an engine is one package and one registration (`studio.jobs.engines`): a test-only
engine is a backend the run config accepts, the launch checks ask, and the worker spawns."""

from __future__ import annotations

import pytest

from studio.jobs.engines import ENGINES
from studio.run_config import RunConfigError, parse_run_config
from studio.services import runs
from studio.services.demo import load_calc_pack
from studio.services.errors import InvalidInput
from studio.services.run_folder import RunFolder
from studio.storage.tables import RunState
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.scripted_engine import SCRIPTED
from tests.support.tiny_model import build_tiny_model
from worker.training_process import run_training


def scripted_config(model, **overrides) -> dict:
    return {"name": "scripted-run", "model": str(model), "backend": SCRIPTED.name,
            "tools": ["calculator"], "data": {"train": "calc", "exemplars": "calc"},
            "grpo": {"batch_size": 1, "group_size": 2, "max_prompt_tokens": 2000},
            "curriculum": {"stages": [{"exemplars": 1, "steps": 2},
                                      {"exemplars": 0, "steps": 1}]}, **overrides}


def test_only_registered_engines_are_backends():
    assert list(ENGINES)[:2] == ["native", "verl"] and SCRIPTED.name in ENGINES
    with pytest.raises(RunConfigError, match=r"backend: 'nope' is not one of native, verl, "):
        parse_run_config({"name": "x", "backend": "nope", "data": {"corpus": "c", "train": "t"}})


def test_a_registered_engine_is_launched_checked_and_run_by_the_worker(settings, tmp_path):
    load_calc_pack(settings, admin(settings))
    model = build_tiny_model(tmp_path / "tiny")
    with pytest.raises(InvalidInput, match="lora: the scripted engine trains no adapters"):
        runs.create_run(settings, admin(settings), scripted_config(model, lora={"rank": 4}),
                        start=False)

    run = runs.create_run(settings, admin(settings), scripted_config(model), start=False)
    assert (run["backend"], run["queue"], run["total_steps"]) == ("scripted", "cpu", 3)
    state = run_training(settings, run["id"], 1, job_key(settings, run["id"]), "cpu-box")

    assert state == RunState.succeeded == runs.get_run(settings, run["id"])["state"]
    log = RunFolder.of(settings, run["id"]).log.read_text()
    assert (f"scripted engine: run {run['id']} 'scripted-run' on 'calc' with 3 exemplars, "
            "3 steps") in log
