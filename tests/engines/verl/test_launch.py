"""A verl run on a machine without GPUs fails at once with the studio's own message (no Ray
started, nothing waiting for resources), and the web app never imports veRL."""

from __future__ import annotations

import subprocess
import sys
import time

from studio.services import runs
from studio.storage.tables import RunState
from tests.support.jobs import job_key
from worker.training_process import run_training


def test_a_launch_without_gpus_fails_fast_with_a_clear_message(verl_run, capsys):
    settings, run, files, _ = verl_run()
    started = time.monotonic()
    state = run_training(settings, run["id"], 1, job_key(settings, run["id"]), "cpu-box")
    seconds = time.monotonic() - started
    with capsys.disabled():
        print(f"\nverl launch without GPUs: failed after {seconds:.1f} s")

    done = runs.get_run(settings, run["id"])
    assert state == RunState.failed == done["state"]
    assert done["error"].startswith("the verl backend trains on NVIDIA GPUs and this worker (")
    assert "sees none" in done["error"] and "verl.ray_address" in done["error"]
    assert "--queues gpu" in done["error"]
    assert not files.root.exists(), "nothing was prepared, no main_ppo or Ray was started"
    assert done["current_step"] == 0


def test_a_multi_node_run_without_a_ray_cluster_is_refused_before_any_gpu_check(verl_run):
    settings, run, _, _ = verl_run(verl={"nnodes": 2, "gpus_per_node": 1},
                                   grpo={"batch_size": 2, "group_size": 2})
    assert run_training(settings, run["id"], 1, job_key(settings, run["id"]), "cpu-box") == RunState.failed
    error = runs.get_run(settings, run["id"])["error"]
    assert error.startswith("verl.nnodes: 2 nodes need a Ray cluster")


def test_the_web_app_and_the_worker_do_not_import_verl():
    code = ("import sys, frontend.server, studio.cli, worker.tasks, worker.training_process; "
            "bad = sorted(m for m in sys.modules if m == 'verl' or m.startswith(('verl.', 'ray'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr



def test_a_verl_job_takes_gpus_per_node_of_the_workers_gpus():
    from studio.jobs.engines import engine_named
    from studio.run_config import parse_run_config

    def gpus_wanted(config):
        return engine_named(config.backend).gpus(config)

    def run(**config):
        return parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"}, **config})

    assert gpus_wanted(run()) == 1
    assert gpus_wanted(run(backend="verl", verl={"gpus_per_node": 4})) == 4
    assert gpus_wanted(run(backend="verl", verl={"gpus_per_node": 8, "nnodes": 2,
                                                 "ray_address": "head:6379"})) == 0
