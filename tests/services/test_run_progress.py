"""Following a run by polling (`RunFollower`, behind `--wait` and the Live page): each poll
gives what was written since the last, in order, a step run again after a resume comes back,
and `final` once the run has stopped; on SQLite and PostgreSQL."""

from __future__ import annotations

from studio.services import runs
from studio.services.run_progress import RunFollower
from studio.services.run_recorder import RunRecorder
from studio.services.run_streams import StreamOptions
from studio.tables import RunEvent, RunState
from tests.support.actors import admin
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
