"""The ready-made runs (studio/services/presets.py): each one launches as it is, on the data
it stores itself, and says beside it what it did when it was measured."""

from __future__ import annotations

import pytest

from studio.services import presets, runs
from tests.support.actors import admin
from tests.support.tiny_model import build_tiny_model


@pytest.mark.parametrize("name", list(presets.RUN_PRESETS))
def test_a_preset_launches_on_the_data_it_stores(settings, tmp_path, name):
    """`prepare_preset` stores the demo pack; the run it gives is stored as queued, training
    on the preset's questions and evaluating on held-out ones it never trains on."""
    settings = settings.model_copy(
        update={"default_model": str(build_tiny_model(tmp_path / "tiny"))})
    config = presets.prepare_preset(settings, admin(settings), name)
    run = runs.create_run(settings, admin(settings), config, start=False)
    assert run["state"] == "queued" and run["name"] == name
    assert run["config"]["data"]["train"] not in run["config"]["data"]["eval"]
    assert run["config"]["engine"]["evaluate_at_end"] is True
    assert [s["exemplars"] for s in run["config"]["curriculum"]["stages"]] == [3, 2, 0]


def test_the_search_tour_trains_on_short_spans_and_is_judged_on_both_held_out_sets(settings):
    config = presets.preset_config(presets.SEARCH_TOUR, settings)
    assert config["data"]["train"] == "demo-span" and config["tools"] == ["search"]
    assert config["data"]["eval"] == ["demo-span-heldout", "demo-heldout"]


def test_every_preset_says_what_it_did_when_measured():
    assert set(presets.EXPECTATIONS) == set(presets.DESCRIPTIONS) == set(presets.RUN_PRESETS)
    for words in presets.EXPECTATIONS.values():
        assert "docs/engine.md" in words and "seed" in words
