"""Following a run by polling (`RunFollower`, behind `--wait` and the Live page): each poll
gives what was written since the last, in order, a step run again after a resume comes back,
and `final` once the run has stopped; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime

import pytest

from studio.services import calibrations, runs
from studio.services.run_progress import RunFollower
from studio.services.run_recorder import RunRecorder, RunStopped
from studio.services.run_streams import StreamOptions
from studio.storage.tables import RunEvent, RunState, utcnow
from tests.support.actors import admin
from tests.support.calibrated import measured, worker_with
from tests.support.jobs import job_key
from tests.support.training import tiny_config


def write(recorder: RunRecorder, step: int, reward: float, event: str | None = None) -> None:
    events = [RunEvent(run_id=recorder.run_id, step=step, kind="info", message=event)] \
        if event else []
    recorder.write_step(step, {"stage": 0, "exemplars": 2, "reward_mean": reward}, [], events)


def test_each_poll_gives_what_is_new_until_the_run_stops(studio):
    settings, model = studio
    run_id = runs.create_run(settings, admin(settings), tiny_config(model), start=False)["id"]
    assert runs.claim_run(settings, run_id, 1, job_key(settings, run_id), "here")
    recorder = RunRecorder(settings, run_id, attempt=1)
    follower = RunFollower(settings, run_id, StreamOptions(batch=2))

    first = follower.poll()
    assert (first.run["state"], first.metrics, first.events, first.final) == \
        ("running", [], [], False)

    for step in range(5):  # more rows than one read takes
        write(recorder, step, reward=step / 10, event="half way" if step == 2 else None)
    polled = follower.poll()
    assert [(r["step"], r["reward_mean"]) for r in polled.metrics] == \
        [(s, s / 10) for s in range(5)]
    assert [(e["step"], e["message"]) for e in polled.events] == [(2, "half way")]
    assert follower.poll().metrics == []  # nothing twice

    recorder.forget_steps_from(3)  # a resume from the checkpoint after step 3
    write(recorder, 3, reward=0.9)
    again = follower.poll()
    assert [(r["step"], r["reward_mean"]) for r in again.metrics] == [(3, 0.9)]

    assert runs.finish_run(settings, run_id, RunState.succeeded, attempt=1)
    done = follower.poll()
    assert done.final and done.run["state"] == "succeeded" and done.metrics == []


def test_a_run_says_what_its_step_is_doing_and_keeps_its_launch_estimate(studio):
    """The phase an engine reports is on the run as every reader gets it; a new attempt's
    claim clears the last one's; the launch stores its estimate of a first step."""
    settings, model = studio
    worker_with(settings)
    config = tiny_config(model)
    calibration = calibrations.request_calibration(settings, admin(settings), model=str(model),
                                                   start=False)
    measured(settings, calibration["id"])
    launched = runs.create_run(settings, admin(settings), config, start=False)
    run_id = launched["id"]
    assert launched["first_step_seconds"] == launched["stages"][0]["seconds_per_step"] > 0
    assert launched["phase"] is None
    assert runs.claim_run(settings, run_id, 1, job_key(settings, run_id), "here")
    recorder = RunRecorder(settings, run_id, attempt=1)
    follower = RunFollower(settings, run_id)

    recorder.phase("rolling out", 0)
    phase = follower.poll().run["phase"]
    assert (phase["name"], phase["step"]) == ("rolling out", 0)
    assert abs((utcnow() - datetime.fromisoformat(phase["since"])).total_seconds()) < 30

    runs.cancel_run(settings, admin(settings), run_id)
    runs.resume_run(settings, admin(settings), run_id)
    assert runs.claim_run(settings, run_id, 2, job_key(settings, run_id), "here")
    assert runs.get_run(settings, run_id)["phase"] is None, "the new attempt starts afresh"
    with pytest.raises(RunStopped):  # the old attempt's process may no longer say anything
        recorder.phase("scoring", 0)
