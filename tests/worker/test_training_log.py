"""A training process's log (train.log) says each step once, on a line of its own, and holds
no progress bar: the job's output is a file, where every redraw of a bar stays ("Loading
weights: 0%|...", the tiny model's load filled it before)."""

from __future__ import annotations

import pytest

from studio.services import runs
from studio.services.run_folder import RunFolder
from studio.storage.tables import RunState
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.training import tiny_config
from worker.training_process import run_training

PROGRESS_BAR = ("%|", "it/s]")  # what every redraw of a tqdm bar writes


@pytest.mark.parametrize("migrated_db_url", ["sqlite"], indirect=True)
def test_the_training_log_has_a_line_per_step_and_no_progress_bar(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=3), start=False)

    state = run_training(settings, run["id"], 1, job_key(settings, run["id"]), "cpu-box")

    assert state == RunState.succeeded
    log = RunFolder.of(settings, run["id"]).log.read_text()
    assert not any(bar in log for bar in PROGRESS_BAR), log
    steps = [line.split(":")[0] for line in log.splitlines() if line.startswith("step ")]
    assert steps == ["step 1 of 3", "step 2 of 3", "step 3 of 3"], log
