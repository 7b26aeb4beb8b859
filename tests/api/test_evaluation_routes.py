"""Base-vs-trained evaluation and the curriculum designer through the API, as the Evaluate
and Curriculum pages use them through the services."""

from __future__ import annotations

from studio.db import session_scope
from studio.services.demo import load_demo_pack
from studio.tables import Run
from tests.support.actors import admin
from tests.support.synthetic_runs import finished_run
from tests.support.tiny_model import build_tiny_model


def checkpointed_run(settings, tmp_path) -> int:
    load_demo_pack(settings, admin(settings), index_now=True)
    config = {"name": "r", "model": str(build_tiny_model(tmp_path / "tiny")),
              "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"}}
    run_id = finished_run(settings, config, steps=4)
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        run.checkpoint_dir = f"runs/{run_id}/checkpoints/step-4"
        session.add(run)
    return run_id


def test_base_vs_trained_is_queued_read_and_cancelled(api, tmp_path):
    run_id = checkpointed_run(api.settings, tmp_path)
    wrong = api.post(f"/runs/{run_id}/base-vs-trained", json={"qa_sets": ["demo", "nope"]})
    assert wrong.status_code == 404 and "'nope'" in wrong.json()["detail"]
    assert api.get(f"/runs/{run_id}/base-vs-trained").json() == []  # nothing was queued

    queued = api.post(f"/runs/{run_id}/base-vs-trained", json={"qa_sets": ["demo"], "limit": 2})
    assert queued.status_code == 201
    base, trained = queued.json()
    assert base["run_id"] is None and trained["run_id"] == run_id
    [pair] = api.get(f"/runs/{run_id}/base-vs-trained").json()
    assert (pair["qa_set"], pair["base"]["id"], pair["trained"]["id"]) == \
        ("demo", base["id"], trained["id"])

    assert api.post(f"/runs/{run_id}/base-vs-trained/cancel").json() == {"cancelled": 2}
    [pair] = api.get(f"/runs/{run_id}/base-vs-trained").json()
    assert pair["base"]["state"] == pair["trained"]["state"] == "cancelled"
    assert api.post(f"/runs/{run_id}/base-vs-trained/cancel").json() == {"cancelled": 0}


def test_a_model_that_cannot_be_resolved_is_a_422_and_nothing_is_queued(api, tmp_path):
    run_id = checkpointed_run(api.settings, tmp_path)
    missing = str(tmp_path / "no-such-model")
    refused = api.post("/evaluations", json={"qa_set": "demo", "corpus": "demo",
                                             "model": missing})
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith(f"model: {missing!r} is not a model folder")
    refused = api.post(f"/runs/{run_id}/base-vs-trained",
                       json={"qa_sets": ["demo"], "base_model": missing})
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith(f"base_model: {missing!r} is not a model folder")
    assert api.get("/evaluations").json() == []


def test_the_curriculum_designer_answers_presets_and_checks(api):
    presets = api.get("/curricula/presets").json()
    assert presets["presets"]["3-2-0"] == [3, 2, 0] and presets["best"] == "3-2-0"
    assert "reward_mean" in presets["adaptive_metrics"]

    design = api.get("/curricula/presets/3-2-0", params={"steps_per_stage": 10}).json()
    assert [s["exemplars"] for s in design["stages"]] == [3, 2, 0]
    unknown = api.get("/curricula/presets/9-9")
    assert unknown.status_code == 422 and "9-9" in unknown.json()["detail"]

    checked = api.post("/curricula/check", json={"design": design}).json()
    assert checked["ok"] and checked["total_steps"] == 30 and checked["starts"] == [0, 10, 20]
    too_few = api.post("/curricula/check", json={"design": design, "available_exemplars": 2})
    assert not too_few.json()["ok"] and too_few.json()["errors"]
