"""Where each data set is used (the Data page's *Use it*): the runs whose plan pins it, by
id, and the ready-made runs that name it."""

from __future__ import annotations

import io
import json

from frontend.pages import data
from studio.services import qa_sets, runs
from studio.services.data_usage import data_usage
from tests.support.actors import admin
from tests.support.training import tiny_config


def test_each_data_set_names_the_runs_that_trained_on_it_and_the_ready_made_runs(studio):
    settings, model = studio
    config = tiny_config(model)
    config["data"]["eval"] = ["demo-heldout"]
    run = runs.create_run(settings, admin(settings), config, start=False)
    used = {(row["kind"], row["name"]): row for row in data_usage(settings)}
    mine = [{"id": run["id"], "name": "tiny", "state": "queued"}]
    assert {key: (row["runs"], row["presets"]) for key, row in used.items()} == {
        ("corpus", "demo"): (mine, ["quick-start", "search-tour"]),
        ("QA set", "demo"): (mine, ["quick-start"]),
        ("QA set", "demo-heldout"): (mine, ["quick-start", "search-tour"]),
        ("QA set", "demo-span"): ([], ["search-tour"]),
        ("QA set", "demo-span-heldout"): ([], ["search-tour"]),
        ("exemplar set", "demo"): (mine, ["quick-start", "search-tour"])}
    assert data.usage_view(settings)[0] == ["corpus", "demo", f"#{run['id']} tiny (queued)",
                                            "quick-start, search-tour"]

    # a set uploaded again under the name is another set: the run keeps the one it pinned
    qa_sets.delete_qa_set(settings, admin(settings), qa_sets.find_qa_set(settings, "demo")["id"])
    row = {"question": "Which colour is the new lighthouse?", "golden_answers": ["green"]}
    qa_sets.create_qa_set(settings, admin(settings), io.BytesIO(json.dumps(row).encode()),
                          "qa.jsonl", "demo")
    (again,) = [r for r in data_usage(settings) if (r["kind"], r["name"]) == ("QA set", "demo")]
    assert (again["runs"], again["presets"]) == ([], ["quick-start"])
    assert ["QA set", "demo", "none yet", "quick-start"] in data.usage_view(settings)
