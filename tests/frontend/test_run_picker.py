"""Run dropdowns: labels, filters, a refresh that never undoes a choice made meanwhile, and the
only run picked."""

from __future__ import annotations

from frontend.run_picker import run_choices, run_dropdown_update, run_label
from studio.services import runs
from studio.services.demo import load_demo_pack
from tests.support.actors import admin
from tests.support.synthetic_runs import finished_run
from tests.support.tiny_model import build_tiny_model


def test_choices_and_refreshes(settings, tmp_path):
    load_demo_pack(settings, admin(settings), index_now=True)
    config = {"name": "a", "model": str(build_tiny_model(tmp_path / "tiny")),
              "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"}}
    first = finished_run(settings, config, steps=2)
    second = finished_run(settings, {**config, "name": "b"}, steps=2)
    assert run_choices(settings) == [(f"#{second} b · succeeded", second),
                                     (f"#{first} a · succeeded", first)]
    assert run_label(runs.get_run(settings, first)) == f"#{first} a · succeeded"
    assert run_choices(settings, only=lambda r: r["name"] == "a") == [
        (f"#{first} a · succeeded", first)]

    kept = run_dropdown_update(settings, first)
    assert "value" not in kept, "a run chosen since the event fired is not undone"
    assert run_dropdown_update(settings, [first, second], multiselect=True).get("value") is None
    assert "value" not in run_dropdown_update(settings, None), "two runs: none is picked"
    runs.delete_run(settings, admin(settings), second)
    assert run_dropdown_update(settings, second)["value"] == first, "the only run is picked"
    assert run_dropdown_update(settings, None)["value"] == first
    assert "value" not in run_dropdown_update(settings, None, preselect=False)
    assert run_dropdown_update(settings, second, preselect=False)["value"] is None
    assert run_dropdown_update(settings, [first, second], multiselect=True)["value"] == [first]
    assert run_dropdown_update(settings, [], multiselect=True)["choices"] == [
        (f"#{first} a · succeeded", first)]
