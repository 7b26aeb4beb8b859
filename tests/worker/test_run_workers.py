"""Runs on real workers: a worker killed with SIGKILL mid-run (PostgreSQL + Redis), resume to
the end, and the `studio run` / `studio eval` commands end to end (SQLite + embedded broker)."""

from __future__ import annotations

import json
import os
import signal

import pytest
import redis
import yaml

from studio.jobs.queue import make_celery
from studio.services import runs
from studio.services.reproduce import run_bundle
from studio.services.run_folder import RunFolder
from studio.settings import Settings
from studio.storage import db
from studio.storage.tables import Run, RunState
from tests.conftest import REDIS_URL
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.processes import (
    demo_studio_cli,
    pid_alive,
    run_studio,
    running_worker,
    start_studio,
    stop,
    studio_env,
    wait_for,
)
from tests.support.tiny_model import build_tiny_model
from tests.support.training import tiny_config


def _row(settings, run_id: int) -> Run:
    with db.session_scope(settings.sqlalchemy_url) as session:
        return session.get(Run, run_id)


def _steps(settings, run_id: int) -> list[int]:
    return [m["step"] for m in runs.run_metrics(settings, run_id)]


def _forget_unacked(task_id: str) -> None:
    """Drop the killed worker's unacknowledged message from Redis, so that no later worker on
    this shared test database restores it when its visibility timeout ends."""
    client = redis.Redis.from_url(REDIS_URL)
    for tag, payload in client.hgetall("unacked").items():
        if task_id.encode() in payload:
            client.hdel("unacked", tag)
            client.zrem("unacked_index", tag)


STEPS = 40


@pytest.mark.slow
@pytest.mark.parametrize("migrated_db_url", ["postgresql"], indirect=True)
def test_a_worker_killed_with_sigkill_leaves_the_run_interrupted_and_resume_finishes_it(
        studio, tmp_path):  # noqa: F811
    settings, model = studio
    settings = settings.model_copy(update={"broker_url": REDIS_URL})
    env = {"database_url": settings.database_url, "broker_url": REDIS_URL,
           "heartbeat_seconds": "1"}
    # long enough that the worker dies mid-run: a tiny step can take well under a second
    config = tiny_config(model, steps=STEPS)
    config["engine"]["checkpoint_every"] = 2

    worker = start_studio(["worker", "--queues", "cpu"],
                          studio_env(settings.resolved_data_dir, **env), tmp_path / "first.log")
    try:
        run_id = runs.create_run(settings, admin(settings), config)["id"]
        wait_for(lambda: runs.get_run(settings, run_id)["current_step"] >= 3, 180, "three steps")
        first = _row(settings, run_id)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    finally:
        stop(worker)
    try:
        interrupted = wait_for(lambda: (r := runs.get_run(settings, run_id))["state"]
                               == RunState.interrupted and r, 30, "the run to be interrupted")
        assert f"its worker (pid {worker.pid}) died" in interrupted["error"]
        wait_for(lambda: not pid_alive(first.pid), 30, "the orphaned training process to stop")
        kept = _steps(settings, run_id)
        assert len(kept) >= 3 and kept == list(range(len(kept))), "every written step is kept"
        checkpoint = RunFolder.of(settings, run_id).latest_checkpoint()
        assert checkpoint.step >= 2 and checkpoint.step % 2 == 0
        assert _steps(settings, run_id) == kept, "nothing is written after the interruption"

        with running_worker(settings.resolved_data_dir, tmp_path / "second.log", queues="cpu",
                            **env):
            # the broker may deliver attempt 1's message again: it takes nothing over
            redelivered = make_celery(settings).send_task(
                runs.TRAIN_TASK, args=[run_id, 1, job_key(settings, run_id)], queue="cpu")
            assert redelivered.get(timeout=120) == RunState.interrupted
            assert runs.get_run(settings, run_id)["state"] == RunState.interrupted

            assert runs.resume_run(settings, admin(settings), run_id)["attempt"] == 2
            final = wait_for(lambda: (r := runs.get_run(settings, run_id))["state"]
                             not in runs.ACTIVE_STATES and r, 240, "the resumed run to end")
    finally:
        _forget_unacked(first.task_id)
    assert (final["state"], final["current_step"], final["attempt"]) == ("succeeded", STEPS, 2)
    assert _steps(settings, run_id) == list(range(STEPS)), "no step lost, none repeated"
    assert f"resumed from the checkpoint after step {checkpoint.step}" in [
        e["message"] for e in runs.run_events(settings, run_id)]
    log = RunFolder.of(settings, run_id).log.read_text()
    assert "attempt 1 on cpu@" in log and "attempt 2 on cpu@" in log


@pytest.mark.slow
@pytest.mark.parametrize("migrated_db_url", ["sqlite"], indirect=True)
def test_a_deleted_runs_message_trains_no_other_run(studio, tmp_path):
    """A run deleted while its message waits in the queue: its id is not handed out again,
    and a message naming another run with a job key not its own does nothing (before
    migration 0009 the deleted run's message trained the next run of the same id)."""
    settings, model = studio
    actor = admin(settings)
    deleted = runs.create_run(settings, actor, tiny_config(model))  # its message is queued
    stale_key = job_key(settings, deleted["id"])
    runs.cancel_run(settings, actor, deleted["id"])
    runs.delete_run(settings, actor, deleted["id"])
    waiting = runs.create_run(settings, actor, tiny_config(model), start=False)
    assert waiting["id"] > deleted["id"], "a deleted run's id is never handed out again"
    with running_worker(settings.resolved_data_dir, tmp_path / "worker.log",
                        database_url=settings.database_url, heartbeat_seconds="1"):
        celery = make_celery(settings)
        stale = celery.send_task(runs.TRAIN_TASK, args=[waiting["id"], 1, stale_key],
                                 queue="cpu")
        assert stale.get(timeout=120) == RunState.queued
        no_key = celery.send_task(runs.TRAIN_TASK, args=[waiting["id"], 1], queue="cpu")
        assert no_key.get(timeout=120) == RunState.queued
    run = runs.get_run(settings, waiting["id"])
    assert (run["state"], run["attempt"], run["worker"]) == ("queued", 1, None)
    assert _steps(settings, waiting["id"]) == [], "nothing was trained"
    assert "was for another run" in (tmp_path / "worker.log").read_text()


def test_the_quick_start_preset_from_the_command_line(tmp_path):
    """`--preset quick-start` instead of a file: the demo pack stored if missing, the studio's
    default model, the preset's stages; a file and a preset together, or an unknown preset,
    are one error line. `--from-card` launches a run's bundle again."""
    from studio.services.presets import QUICK_START, RUN_PRESETS

    model = build_tiny_model(tmp_path / "tiny")
    data = tmp_path / "data"
    env = studio_env(data, heartbeat_seconds="1", default_model=str(model))
    settings = Settings(data_dir=data)

    def cli(*args: str):
        return run_studio(list(args), env, timeout=300)

    assert cli("db", "upgrade").returncode == 0
    checked = cli("run", "validate", "--preset", QUICK_START, "--wait-estimate", "0")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    stages = RUN_PRESETS[QUICK_START]["curriculum"]["stages"]
    lines = checked.stdout.splitlines()
    for number, stage in enumerate(stages, 1):
        assert lines[number - 1].startswith(
            f"stage {number}: {stage['exemplars']} exemplars, {stage['steps']} steps, "
            "longest prompt "), lines
    assert any(line.startswith("time: ") for line in lines)
    run_file = tmp_path / "run.yaml"
    run_file.write_text("name: x\n")
    assert _error_line(cli("run", "validate", str(run_file), "--preset", QUICK_START)) == (
        "studio: error: give a run YAML file or --preset NAME (one of them)")
    assert _error_line(cli("run", "launch", "--preset", "nope")) == (
        f"studio: error: preset: 'nope' is not one of {', '.join(RUN_PRESETS)}")

    launched = cli("run", "launch", "--preset", QUICK_START)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert launched.stdout.splitlines()[0] == "run 1"
    (run,) = runs.list_runs(settings)
    assert run["config"]["model"] == str(model) and run["config"]["data"]["eval"] == [
        "demo-heldout"]
    assert run["config"]["engine"]["evaluate_at_end"] is True and run["state"] == "queued"

    # the same run again from its reproducibility bundle (a model card's, or reproduce.json)
    bundle = tmp_path / "reproduce.json"
    bundle.write_text(json.dumps(run_bundle(settings, run["id"])))
    relaunched = cli("run", "launch", "--from-card", str(bundle))
    assert relaunched.returncode == 0, relaunched.stdout + relaunched.stderr
    assert relaunched.stdout.splitlines()[0] == "run 2"
    assert runs.get_run(settings, 2)["config"] == run["config"]
    assert _error_line(cli("run", "launch", "--from-card", str(run_file))) == (
        f"studio: error: {run_file}: holds no reproducibility bundle: give a model card "
        "exported by the studio (its README.md has a fenced JSON block with \"format\": "
        "\"icrl-studio/reproduce/1\") or a run's runs/<id>/reproduce.json")
    assert _error_line(cli("run", "launch", str(run_file), "--from-card", str(bundle))) == (
        "studio: error: --from-card names the whole run: give it alone, without a run YAML "
        "file or --preset")


def _error_line(done) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.slow
def test_the_run_and_eval_commands_end_to_end(tmp_path):
    settings, cli, model = demo_studio_cli(tmp_path)
    good = tmp_path / "run.yaml"
    good.write_text(yaml.safe_dump(tiny_config(model, steps=3, max_prompt_tokens=300)))

    # refused before anything is queued: one line naming the file and the field, exit code 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**tiny_config(model), "grpo": {"lr": -1}}))
    assert _error_line(cli("run", "launch", str(bad))) == (
        f"studio: error: {bad}: grpo.lr: Input should be greater than 0")
    bad.write_text(yaml.safe_dump({**tiny_config(model), "data": {"corpus": "nowhere",
                                                                  "train": "demo"}}))
    assert _error_line(cli("run", "launch", str(bad))) == (
        f"studio: error: {bad}: data.corpus: 'nowhere' does not exist; upload it first; "
        "data.exemplars: the curriculum shows up to 2 exemplars per prompt; name an exemplar "
        "set (or use stages of 0)")
    bad.write_text("name: [unclosed\n")
    assert "run config: not valid YAML" in _error_line(cli("run", "launch", str(bad)))
    assert "cannot read it" in _error_line(cli("run", "launch", str(tmp_path / "none.yaml")))
    assert runs.list_runs(settings) == []

    assert _error_line(cli("eval", "--model", str(model), "--qa-set", "nope")) == (
        "studio: error: --qa-set: QA set 'nope' does not exist")
    assert _error_line(cli("eval", "--model", str(model), "--qa-set", "demo", "--corpus", "demo",
                           "--queue", "tpu")) == (
        "studio: error: queue: 'tpu' is not one of cpu, gpu")

    checked = cli("run", "validate", str(good))
    assert checked.returncode == 0
    assert checked.stdout.startswith("stage 1: 2 exemplars, 1 steps, longest prompt ")
    assert "warning: grpo.max_prompt_tokens: the first stage (2 exemplars)" in checked.stdout

    with running_worker(settings.resolved_data_dir, tmp_path / "worker.log",
                        database_url=settings.database_url, heartbeat_seconds="1"):
        launched = cli("run", "launch", str(good), "--wait")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        out = launched.stdout.splitlines()
        assert out[0] == "run 1" and any(line.startswith("warning: ") for line in out)
        assert any(line.startswith("step 3/3  stage 2 (0 exemplars)  reward ") for line in out)
        assert "step 2: stage_change: stage 2: 2 -> 0 exemplars" in out  # events as they come
        assert out[-1] == "run 1 'tiny': succeeded"

        evaluated = cli("eval", "--run", "1", "--qa-set", "demo", "--limit", "2",
                        "--protocol", "max_turns=1", "--protocol", "max_turn_tokens=8", "--wait")
        assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
        table = evaluated.stdout.splitlines()[-2:]
        assert table[0].split()[:4] == ["QA", "SET", "QUESTIONS", "EM"]
        assert table[1].split()[:2] == ["demo", "2"]

        # cancel keeps what the run wrote; resume continues from its latest checkpoint
        long = tmp_path / "long.yaml"
        config = {**tiny_config(model, steps=500), "name": "long"}
        config["engine"]["checkpoint_every"] = 2
        long.write_text(yaml.safe_dump(config))
        assert cli("run", "launch", str(long)).stdout.splitlines()[0] == "run 2"
        wait_for(lambda: runs.get_run(settings, 2)["current_step"] >= 3, 180, "three steps")
        pid = _row(settings, 2).pid
        cancelled = cli("run", "cancel", "2")
        assert cancelled.stdout.strip() == "run 2 'long': cancelled", cancelled.stderr
        wait_for(lambda: _row(settings, 2).pid is None, 60, "the process group to be killed")
        assert not pid_alive(pid)
        kept = _steps(settings, 2)
        assert len(kept) >= 3 and kept == list(range(len(kept)))
        checkpoint = RunFolder.of(settings, 2).latest_checkpoint().step
        assert checkpoint >= 2
        resumed = cli("run", "resume", "2")
        assert resumed.stdout.startswith("run 2 'long': queued on the cpu queue, position 1")
        wait_for(lambda: runs.get_run(settings, 2)["current_step"] > len(kept) + 1, 180,
                 "the resumed run to pass the cancelled one")
        assert cli("run", "cancel", "2").returncode == 0
        wait_for(lambda: _row(settings, 2).pid is None, 60, "the process group to be killed")
        assert f"resumed from the checkpoint after step {checkpoint}" in [
            e["message"] for e in runs.run_events(settings, 2)]
        resumed_steps = _steps(settings, 2)
        assert resumed_steps == list(range(len(resumed_steps))), "each step once"

        # the same model, its weights broken since: measured already, so the run is queued
        # without a measurement of a model that cannot load before it
        (model / "model.safetensors").write_bytes(b"not weights")
        failing = tmp_path / "failing.yaml"
        failing.write_text(yaml.safe_dump({**tiny_config(model), "name": "failing"}))
        failed = cli("run", "launch", str(failing), "--wait")
        assert failed.returncode == 1
        assert failed.stdout.splitlines()[-1].startswith(
            "run 3 'failing': failed: ModelNotAvailable: Cannot load")

    listed = cli("run", "list").stdout.splitlines()
    assert listed[0].split() == ["ID", "NAME", "STATE", "STEP", "QUEUE", "BACKEND", "CREATED",
                                 "(UTC)"]
    assert [line.split()[:5] for line in listed[1:]] == [
        ["3", "failing", "failed", "0/3", "cpu"],
        ["2", "long", "cancelled", f"{len(resumed_steps)}/500", "cpu"],
        ["1", "tiny", "succeeded", "3/3", "cpu"]]
    shown = json.loads(cli("run", "show", "2", "--json").stdout)
    assert (shown["state"], shown["attempt"], shown["queue_position"]) == ("cancelled", 2, None)
    assert shown["config"]["grpo"]["steps"] == 500
    assert cli("run", "show", "2").stdout.startswith("run 2 'long': cancelled")
    assert _error_line(cli("run", "resume", "1")) == (
        "studio: error: run 1 has finished all its steps; only an interrupted, paused, "
        "failed or cancelled run can be resumed")
    assert _error_line(cli("run", "show", "99")) == "studio: error: run 99 does not exist"
    assert cli("run", "delete", "3").stdout.strip() == "run 3 deleted"
    assert [r["id"] for r in runs.list_runs(settings)] == [2, 1]


def test_a_gpu_worker_runs_at_most_one_job_per_gpu(tmp_path):
    env = {**studio_env(tmp_path), "CUDA_VISIBLE_DEVICES": "0,1"}
    assert _error_line(run_studio(["worker", "--queues", "gpu", "--concurrency", "3"], env)) == (
        "studio: error: --concurrency: 3 jobs at once, but this worker sees 2 GPU(s) (0, 1); "
        "one job per GPU")
