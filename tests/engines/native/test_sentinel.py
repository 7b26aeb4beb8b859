"""The collapse sentinel in the native trainer, on a tiny random model: a recorded run raises
no false alarm (and its collapse does), `warn` writes the warning, `pause` leaves the run
paused at a checkpoint (also as the worker's attempt) and a resume continues it. On SQLite
and PostgreSQL (the `studio` fixture of tests/conftest.py)."""

from __future__ import annotations

from studio.method.sentinel import WATCHED_METRICS, Sentinel, default_rules
from studio.run_config import parse_run_config
from studio.services import runs
from studio.services.run_folder import RunFolder
from studio.services.run_progress import RunFollower
from studio.storage.tables import RunState
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.training import tiny_config
from worker.engines.native.trainer import Trainer
from worker.parent_watch import run_attempt

# An entropy bonus and a KL term give the tiny model's update a gradient although its
# rewards are all 0 (LoRA tests do the same), so KL and the gradient norm move.
MOVING = {"entropy_coef": 0.01, "kl_coef": 0.1}


def sentinel_warnings(settings, run_id) -> list[dict]:
    return [e for e in runs.run_events(settings, run_id)
            if e["kind"] == "warning" and "signal" in (e["data"] or {})]


def test_a_recorded_run_raises_no_alarm_and_its_collapse_does(studio):
    """A real series: 12 steps of the tiny model with every signal on `warn`. Its format and
    searching stay at 0 (a random model), so only the signals that can move are collapsed
    in the built series: entropy, length and a gradient spike."""
    settings, model = studio
    config = tiny_config(model, steps=12, **MOVING)
    config["engine"]["checkpoint_every"] = 12
    run = runs.create_run(settings, admin(settings), config, start=False)
    Trainer(settings, run["id"]).run()
    recorded = [{k: m[k] for k in WATCHED_METRICS} for m in runs.run_metrics(settings, run["id"])]
    assert len(recorded) == 12 and {m["zero_spread_groups"] for m in recorded} == {1.0}
    assert recorded[-1]["kl"] > 0 and recorded[-1]["grad_norm"] > 0, "the update moved"
    assert sentinel_warnings(settings, run["id"]) == []
    limit = parse_run_config(config).grpo.max_response_tokens
    replayed = Sentinel(default_rules(), limit)
    assert [a for m in recorded for a in replayed.observe(m)] == []

    collapse = [{**m, "entropy": m["entropy"] * 0.1, "response_length": 1.0} for m in recorded]
    collapse[0]["grad_norm"] = 50 * max(m["grad_norm"] for m in recorded)
    watching = Sentinel(default_rules(), limit)
    fired = {a.signal for m in recorded + collapse for a in watching.observe(m)}
    assert fired == {"entropy_collapse", "length_empty", "grad_norm_spike"}


def sentinel_config(model, action: str, steps: int) -> dict:
    """Responses of the tiny model run to its 12-token turn limit, a quarter of the 48-token
    response limit, from step 1 on (step 0's are shorter): `length_at_limit` set at a
    quarter, over one step, fires at step 1."""
    config = tiny_config(model, steps=steps)
    config["sentinel"] = {"length_at_limit": {"action": action, "window": 1, "threshold": 0.25}}
    return config


def test_warn_writes_the_warning_and_training_goes_on(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), sentinel_config(model, "warn", 3),
                          start=False)
    Trainer(settings, run["id"]).run()
    [warning] = sentinel_warnings(settings, run["id"])
    assert (warning["step"], warning["data"]["signal"], warning["data"]["action"]) == (
        1, "length_at_limit", "warn")
    assert warning["message"].startswith("length_at_limit: response_length averaged 25% over "
                                         "the last 1 steps (alarm at 25%)")
    assert "Try: lower the learning rate" in warning["message"]
    assert [m["step"] for m in runs.run_metrics(settings, run["id"])] == [0, 1, 2]
    assert runs.get_run(settings, run["id"])["state"] == RunState.queued, "not paused"


def test_pause_stops_at_a_checkpoint_and_resume_continues_without_pausing_again(studio):
    settings, model = studio
    config = sentinel_config(model, "pause", 4)
    config["engine"]["checkpoint_every"] = 3  # the pause writes its own checkpoint
    run_id = runs.create_run(settings, admin(settings), config, start=False)["id"]
    Trainer(settings, run_id).run()

    paused = runs.get_run(settings, run_id)
    assert (paused["state"], paused["current_step"]) == (RunState.paused, 2)
    assert paused["error"].startswith("length_at_limit: ") and "Resume continues it" in \
        paused["error"]
    assert RunFolder.of(settings, run_id).latest_checkpoint().step == 2
    [warning] = sentinel_warnings(settings, run_id)
    assert warning["message"] == paused["error"]
    assert RunFollower(settings, run_id).poll().final, "a follower (CLI, stream) stops here"

    resumed = runs.resume_run(settings, admin(settings), run_id)
    assert (resumed["state"], resumed["attempt"], resumed["error"]) == ("queued", 2, None)
    Trainer(settings, run_id).run()
    assert [m["step"] for m in runs.run_metrics(settings, run_id)] == [0, 1, 2, 3]
    assert len(sentinel_warnings(settings, run_id)) == 1, "the fired signal stays fired"
    assert any(e["message"] == "resumed from the checkpoint after step 2"
               for e in runs.run_events(settings, run_id))
    assert runs.get_run(settings, run_id)["state"] == RunState.queued, "not paused again"


def test_a_paused_attempt_stays_paused_after_its_process_and_its_worker_end(studio, monkeypatch):
    """The worker path: the attempt's process returns normally once paused, and neither it
    (succeeded) nor its worker (failed, for a process that recorded nothing) overwrites
    the state."""
    settings, model = studio
    run_id = runs.create_run(settings, admin(settings), sentinel_config(model, "pause", 4),
                             start=False)["id"]
    assert runs.claim_run(settings, run_id, 1, job_key(settings, run_id), "here")
    monkeypatch.setenv("STUDIO_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("STUDIO_DATABASE_URL", settings.sqlalchemy_url)
    assert run_attempt(run_id, 1, lambda: Trainer(settings, run_id, attempt=1).run()) == 0
    assert not runs.finish_run(settings, run_id, RunState.failed, "no outcome", attempt=1)
    run = runs.get_run(settings, run_id)
    assert (run["state"], run["current_step"]) == (RunState.paused, 2)
    assert run["error"].startswith("length_at_limit: ")
