"""What the Live run page says, without a browser: the step under way and its phase, when the
first point comes, steps counted from 1, and which run it opens by default."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from frontend.pages.live_run import (
    OpenedRuns,
    default_run,
    first_point_note,
    parse_step,
    status_markdown,
)
from studio.services import runs
from studio.services.errors import InvalidInput
from studio.storage.tables import utcnow
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.synthetic_runs import finished_run
from tests.support.training import tiny_config

NOW = utcnow()


def running(**extra) -> dict:
    return {"id": 3, "name": "first-try", "state": "running", "current_step": 3,
            "total_steps": 9, "queue": "cpu", "queue_position": None, "error": None,
            "phase": None, "first_step_seconds": None, "checkpoint_dir": None, **extra}


def phase(name: str, step: int, seconds_ago: int) -> dict:
    return {"name": name, "step": step, "since": (NOW - timedelta(seconds=seconds_ago)).isoformat()}


ROW = {"step": 2, "stage": 0, "exemplars": 3, "reward_mean": 0.04, "time_rollout": 6.2,
       "time_reference": 0.4, "time_update": 2.0, "time_step": 128.6}


def test_a_running_step_shows_its_phase_and_how_long_it_takes():
    """The time said is the phase's at the last step, named as such, beside the whole step's
    (before: "it took 6 s at the last step", the phase's time read as the step's)."""
    status = status_markdown(running(phase=phase("rolling out", 3, 4)), [ROW], [], now=NOW)
    assert "step 3 / 9 · stage 1 (3 exemplars) · reward 0.04" in status
    assert ("Now: step 4 of 9: **rolling out** → scoring → updating (4 s so far; at the last "
            "step rolling out took 6 s, the whole step 2 min).") in status
    scoring = status_markdown(running(phase=phase("scoring", 3, 1)), [ROW], [], now=NOW)
    assert "rolling out → **scoring** → updating (1 s so far; at the last step scoring took " \
        "1 s, the whole step 2 min)" in scoring
    no_step_time = {key: value for key, value in ROW.items() if key != "time_step"}
    updating = status_markdown(running(phase=phase("updating", 3, 1)), [no_step_time], [],
                               now=NOW)
    assert "(1 s so far; at the last step updating took 2 s)." in updating
    saving = status_markdown(running(phase=phase("saving a checkpoint", 2, 2)), [ROW], [],
                             now=NOW)
    assert "Now: saving a checkpoint (2 s so far)." in saving


def test_before_the_first_step_the_page_says_what_happens_and_when_the_first_point_comes():
    first = running(current_step=0, first_step_seconds=42.0, phase=phase("rolling out", 0, 5))
    status = status_markdown(first, [], [], now=NOW)
    assert ("Now: step 1 of 9: **rolling out** → scoring → updating (5 s so far; a whole step "
            "takes at most about 42 s (the launch's estimate)).") in status
    assert first_point_note(first) == ("The first point comes after step 1, in at most about "
                                       "42 s (the launch's estimate).\n"
                                       "The line above says what the run is doing now.")
    assert "Now: starting the training process." in status_markdown(running(), [], [], now=NOW)
    assert "Now:" not in status_markdown(running(), [ROW], [], now=NOW), "an engine that says nothing"
    assert first_point_note(running()).startswith("The first point comes after step 1.\n")
    queued = running(state="queued", current_step=0, queue_position=1)
    assert "Now:" not in status_markdown(queued, [], [], now=NOW)
    assert first_point_note(queued).startswith("Waiting for a worker: the curves start with "
                                               "step 1")


def test_steps_are_counted_from_one_in_warnings_and_the_step_filter():
    warning = {"id": 1, "step": 10, "kind": "warning", "message": "search calls fell"}
    assert "⚠️ step 11: search calls fell" in status_markdown(running(), [ROW], [warning], now=NOW)
    assert parse_step("1") == 0 and parse_step("12") == 11 and parse_step(" ") is None
    with pytest.raises(InvalidInput, match="steps count from 1"):
        parse_step("0")


def test_the_page_opens_the_running_run_else_one_with_curves_not_the_newest_queued(studio):
    settings, model = studio
    done = finished_run(settings, tiny_config(model), steps=2)
    queued = runs.create_run(settings, admin(settings), tiny_config(model), start=False)["id"]
    assert default_run(settings) == done, "not the run that has nothing to show yet"
    training = runs.create_run(settings, admin(settings), tiny_config(model), start=False)["id"]
    runs.create_run(settings, admin(settings), tiny_config(model), start=False)
    assert runs.claim_run(settings, training, 1, job_key(settings, training), "here")
    assert default_run(settings) == training
    assert queued != training


def test_a_paused_run_says_why_and_how_to_go_on():
    reason = "search_stopped: search_calls averaged 0 over the last 5 steps, down from 0.8."
    status = status_markdown(running(state="paused", error=reason), [ROW], [], now=NOW)
    assert "paused: the collapse sentinel stopped it at a checkpoint" in status
    assert "*Resume* on **Runs** continues from there" in status
    assert "**Why:** search\\_stopped\\: search\\_calls averaged 0" in status
    assert "Error" not in status


@pytest.mark.parametrize("state, why", [("cancelled", ""), ("failed", ""),
                                        ("interrupted", "its worker stopped: ")])
def test_a_stopped_run_promises_a_checkpoint_only_when_it_has_one(state, why):
    """Before: every stopped run "continues from its last checkpoint", one stopped before its
    first checkpoint too (its resume starts again from step 1)."""
    fresh = status_markdown(running(state=state), [ROW], [], now=NOW)
    assert (f"{state}: {why}*Resume* on **Runs** continues it from step 1 (it has no "
            "checkpoint yet).") in fresh
    assert "last checkpoint" not in fresh
    saved = running(state=state, checkpoint_dir="runs/3/checkpoints/step-2")
    assert (f"{state}: {why}*Resume* on **Runs** continues it from its last checkpoint."
            in status_markdown(saved, [ROW], [], now=NOW))


def test_a_tick_under_way_and_an_open_of_another_run_answer_one_after_the_other():
    """*Watch it* on run 2 while a tick about run 1 is being read: the open waits for the
    tick's answer, so the tick cannot land after it and take the page back to run 1."""
    opened = OpenedRuns()
    opened.opened("tab", 1)
    answers, tick_reading = [], threading.Event()

    def tick():
        with opened.lock("tab"):
            tick_reading.set()
            time.sleep(0.3)  # reading the run and drawing its curves
            answers.append(("tick about run 1", opened.is_last("tab", 1)))

    def watch_run_2():
        tick_reading.wait()
        with opened.lock("tab"):
            opened.opened("tab", 2)
            answers.append(("open run 2", True))

    threads = [threading.Thread(target=tick), threading.Thread(target=watch_run_2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert answers == [("tick about run 1", True), ("open run 2", True)]
    assert not opened.is_last("tab", 1), "a later tick about run 1 sends nothing"
    assert opened.is_last("tab", 2)


def test_each_session_has_its_own_lock_and_old_sessions_are_forgotten():
    opened = OpenedRuns(sessions=2)
    first = opened.lock("a")
    assert opened.lock("a") is first and opened.lock("b") is not first
    opened.lock("c")  # a third session pushes out the one used least recently ("a")
    assert opened.lock("a") is not first
    assert len(opened.locks) == 2
