"""The calibration on a real worker (SQLite + embedded broker, a tiny model): `studio run
validate` queues it, waits for it and prints seconds per step; it is kept for the next check;
`studio calibrate` measures again."""

from __future__ import annotations

import re

import pytest
import yaml

from studio.services import calibrations
from studio.services.health import health, live_workers
from tests.support.processes import demo_studio_cli, running_worker, wait_for
from tests.support.training import tiny_config

SECONDS_PER_STEP = re.compile(r", at most about [\d,.]+ s per step$")


@pytest.mark.slow
def test_validate_measures_the_queues_device_once_and_prints_seconds_per_stage(tmp_path):
    settings, cli, model = demo_studio_cli(tmp_path)
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(tiny_config(model, steps=3)))

    unmeasured = cli("run", "validate", str(run)).stdout.splitlines()
    assert "time: no time estimate: no worker listens on queue cpu" in unmeasured[2]

    with running_worker(settings.resolved_data_dir, tmp_path / "worker.log",
                        heartbeat_seconds="1"):
        (worker,) = wait_for(lambda: live_workers(settings), 60, "the worker's heartbeat")
        device = worker["devices"]["cpu"]
        assert device["kind"] == "cpu" and device["key"].startswith("cpu: ")
        assert "devices" not in health(settings)["workers"][0], "/healthz has no credentials"

        checked = cli("run", "validate", str(run), "--wait-estimate", "240")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        out = checked.stdout.splitlines()
        assert out[0].startswith(f"time: measuring this worker's speed for {model} "
                                 "(calibration 1): it is queued")
        assert out[0].endswith("; waiting up to 240 s")
        assert out[1].startswith("stage 1: 2 exemplars, 1 steps, longest prompt ")
        assert SECONDS_PER_STEP.search(out[1]) and SECONDS_PER_STEP.search(out[2]), out
        assert out[3].startswith("time: at most about ") and " for 3 steps on queue cpu (" \
            in out[3]

        (measured,) = calibrations.list_calibrations(settings)
        assert (measured["state"], measured["device_key"], measured["dtype"]) == (
            "succeeded", device["key"], "float32")
        assert all(v > 0 for v in measured["figures"]["rates"].values())

        again = cli("run", "validate", str(run)).stdout.splitlines()
        assert again == out[1:], "the stored calibration gives the same estimate"
        assert len(calibrations.list_calibrations(settings)) == 1

        forced = cli("calibrate", "--model", str(model))
        assert forced.returncode == 0, forced.stdout + forced.stderr
        lines = forced.stdout.splitlines()
        assert lines[0] == f"calibration 2: {model} on queue cpu (1 thread(s), float32): queued"
        assert lines[-1].startswith(f"measured on {measured['worker']} ({device['name']}) in ")
        assert " tokens/s, decoding " in lines[-1]
