"""Base-vs-trained evaluation, an evaluation's failure labels and the curriculum designer
through the API, as the Evaluate and Curriculum pages use them through the services."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.method.evaluation import PROTOCOL_KEYS, EvalConfig
from studio.method.failures import label_set
from studio.run_config import PROTOCOL_FIELDS_DECLARED_IN, EvaluationProtocol
from studio.services import auth, evaluations
from studio.services.demo import load_demo_pack
from studio.services.evaluation_files import evaluation_records_path
from studio.settings import Settings
from studio.storage import db
from studio.storage.db import session_scope
from studio.storage.tables import Evaluation, QASet, Run, RunState
from tests.support.actors import admin, user
from tests.support.api_client import Api, bearer
from tests.support.labelled_evaluations import finished_evaluation
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


def test_a_member_s_cancelled_pair_never_hides_the_owner_s_figures(api_on_any_db, tmp_path):
    """Issue 30, D8: a member's newer pair, cancelled, replaced the owner's succeeded one on
    GET /runs/{id}/base-vs-trained. The owner's is what every member reads; the member's own
    comes beside it under `yours`, labelled."""
    api = api_on_any_db
    run_id = checkpointed_run(api.settings, tmp_path)
    path = f"/runs/{run_id}/base-vs-trained"
    owners = [e["id"] for e in api.post(path, json={"qa_sets": ["demo"]}).json()]
    for evaluation_id in owners:
        evaluations.update_evaluation(api.settings, evaluation_id, state=RunState.succeeded,
                                      metrics={"em": 0.2})
    mel = bearer(api.settings, user(api.settings, "mel"))
    mels = [e["id"] for e in api.client.post(f"/api/v1{path}", headers=mel,
                                             json={"qa_sets": ["demo"]}).json()]
    assert api.client.post(f"/api/v1{path}/cancel", headers=mel).json() == {"cancelled": 2}

    [pair] = api.get(path).json()
    assert [pair["base"]["id"], pair["trained"]["id"]] == owners and pair["yours"] is None
    [seen] = api.client.get(f"/api/v1{path}", headers=mel).json()
    assert [seen["base"]["id"], seen["trained"]["id"]] == owners
    assert seen["base"]["state"] == "succeeded" and seen["trained"]["owner"] == "admin"
    yours = seen["yours"]
    assert yours["requested_by"] == "mel"
    assert [yours["base"]["id"], yours["trained"]["id"]] == mels
    assert yours["trained"]["state"] == "cancelled" and yours["trained"]["owner"] == "mel"


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


OUT_OF_BOUNDS = [("max_turns", 1e6), ("max_turns", -1), ("max_response_tokens", 1e12),
                 ("max_turn_tokens", 0), ("max_obs_tokens", -5), ("top_k", 10**6),
                 ("batch_size", 0), ("batch_size", 1e7), ("temperature", 1e308),
                 ("temperature", -1.0), ("max_turns", "many"), ("seed", -1),
                 ("instruction", "x" * 200_000), ("layout", "sideways")]


def test_each_protocol_value_out_of_its_run_config_bounds_is_a_422_naming_it(api, tmp_path):
    """Issue 41, N5: POST /evaluations took max_turns 1e6, max_response_tokens 1e12, batch 0
    and 1e7, temperature 1e308, "many" and a 200,000-character instruction. The protocol's
    fields are typed and bounded by the run config's own declarations, not a copy of them."""
    run_id = checkpointed_run(api.settings, tmp_path)
    for field, value in OUT_OF_BOUNDS:
        for path, body in (("/evaluations", {"qa_set": "demo", "corpus": "demo",
                                             "model": "smollm2-135m-instruct"}),
                           (f"/runs/{run_id}/base-vs-trained", {"qa_sets": ["demo"]})):
            refused = api.post(path, json={**body, "protocol": {field: value}})
            assert refused.status_code == 422, (path, field, value, refused.text[:200])
            assert refused.json()["detail"].startswith(f"protocol.{field}: "), refused.text[:200]
    assert api.get("/evaluations").json() == []
    for name, declared_in in PROTOCOL_FIELDS_DECLARED_IN.items():
        assert EvaluationProtocol.model_fields[name].metadata == \
            declared_in.model_fields[name].metadata, name
    assert tuple(EvaluationProtocol.model_fields) == PROTOCOL_KEYS
    assert EvaluationProtocol.model_validate(asdict(EvalConfig())).model_dump() == \
        asdict(EvalConfig()) | {"tools": list(EvalConfig().tools)}  # the defaults fit


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


@pytest.fixture
def api_on_any_db(migrated_db_url, tmp_path):
    """The admin's API client of a fresh studio on SQLite, then on PostgreSQL."""
    settings = Settings(data_dir=tmp_path / "data", database_url=migrated_db_url)
    settings.resolved_data_dir.mkdir(parents=True)
    with db.session_scope(migrated_db_url) as session:
        token = auth.bootstrap_admin(session).token
    with TestClient(create_app(settings)) as client:
        yield Api(settings, client, token)


def stored_qa_set(api: Api, name: str, rows: int) -> int:
    """A QA set's row (its questions are the labelled evaluations' own); its id."""
    with session_scope(api.settings.sqlalchemy_url) as session:
        qa = QASet(name=name, source_filename=f"{name}.jsonl", content_hash="0",
                   source_format="jsonl", num_rows=rows)
        session.add(qa)
        session.flush()
        return qa.id


def test_an_evaluation_s_failure_labels_and_their_questions(api_on_any_db):
    api = api_on_any_db
    qa_id = stored_qa_set(api, "held", 5)
    labels = ["retrieval_miss", "correct", "retrieval_miss", "no_search", "format_miss"]
    done = finished_evaluation(api.settings, qa_id, labels, model_ref="base")

    split = api.get(f"/evaluations/{done}/labels").json()
    assert [(s["label"], s["count"]) for s in split] == [
        ("correct", 1), ("format_miss", 1), ("no_search", 1), ("retrieval_miss", 2),
        ("reasoning_miss", 0)]
    assert [s["share"] for s in split] == [0.2, 0.2, 0.2, 0.4, 0.0]
    assert split[3]["title"] == "retrieval miss" and "searched" in split[3]["meaning"]

    missed = api.get(f"/evaluations/{done}/labels/retrieval_miss").json()
    assert [q["id"] for q in missed] == ["1", "3"]
    assert missed[0] == {"id": "1", "question": "Question 1? ", "golden_answers": ["gold 1"],
                         "prediction": "wrong 1 ", "searches": ["query 1 "],
                         "calls": [{"tool": "search", "input": "query 1 ", "failed": False,
                                    "result": "Doc 1(Title: Page 1) passage 1 "}],
                         "label": "retrieval_miss"}
    assert [q["id"] for q in api.get(f"/evaluations/{done}/labels/retrieval_miss",
                                     params={"limit": 1}).json()] == ["1"]
    assert api.get(f"/evaluations/{done}/labels/reasoning_miss").json() == []
    assert api.get(f"/evaluations/{done}/labels/format_miss").json()[0]["prediction"] is None

    wrong = api.get(f"/evaluations/{done}/labels/wrong_answer")
    assert wrong.status_code == 422
    assert wrong.json()["detail"] == ("label: 'wrong_answer' is not a failure label; use one of "
                                      + ", ".join(label.key for label in label_set()))
    too_many = api.get(f"/evaluations/{done}/labels/correct", params={"limit": 0})
    assert too_many.status_code == 422 and too_many.json()["detail"].startswith("limit: ")
    assert api.get(f"/evaluations/{done + 1}/labels").status_code == 404
    assert api.get(f"/evaluations/{done + 1}/labels/correct").status_code == 404

    # an evaluation without labels (queued, or from before they were kept) has no split
    with session_scope(api.settings.sqlalchemy_url) as session:
        queued = Evaluation(model_ref="base", qa_set_id=qa_id)
        session.add(queued)
        session.flush()
        queued_id = queued.id
    assert api.get(f"/evaluations/{queued_id}/labels").json() == []
    assert api.get(f"/evaluations/{queued_id}/labels/correct").json() == []


def test_an_evaluation_s_labels_follow_its_tools(api_on_any_db):
    """A calculator evaluation is split by the calculator's labels and refuses search's; one
    labelled before the labels followed the tools keeps search's, its searches as its calls."""
    api = api_on_any_db
    qa_id = stored_qa_set(api, "sums", 3)
    done = finished_evaluation(api.settings, qa_id, ["wrong_expression", "no_call",
                                                     "copied_wrong"],
                               model_ref="base", tool="calculator")
    split = api.get(f"/evaluations/{done}/labels").json()
    assert [(s["label"], s["title"], s["count"]) for s in split] == [
        ("correct", "correct", 0), ("format_miss", "format miss", 0), ("no_call", "no call", 1),
        ("call_failed", "call failed", 0), ("wrong_expression", "wrong expression", 1),
        ("copied_wrong", "copied wrong", 1)]
    assert "calculator" in split[2]["meaning"]
    (wrong,) = api.get(f"/evaluations/{done}/labels/wrong_expression").json()
    assert wrong["calls"][0]["tool"] == "calculator"
    refused = api.get(f"/evaluations/{done}/labels/no_search")
    assert refused.status_code == 422 and refused.json()["detail"].endswith(
        "use one of correct, format_miss, no_call, call_failed, wrong_expression, copied_wrong")

    before = finished_evaluation(api.settings, qa_id, ["no_search", "retrieval_miss"],
                                 model_ref="base")
    with session_scope(api.settings.sqlalchemy_url) as session:
        old = session.get(Evaluation, before)
        old.params = {**old.params, "protocol": {"tools": ["calculator"]}}
        session.add(old)
    records = evaluation_records_path(api.settings, before)
    records.write_text("".join(
        json.dumps({key: value for key, value in json.loads(line).items() if key != "calls"})
        + "\n" for line in records.read_text().splitlines()))
    assert [s["label"] for s in api.get(f"/evaluations/{before}/labels").json()] == [
        label.key for label in label_set()]
    (missed,) = api.get(f"/evaluations/{before}/labels/retrieval_miss").json()
    assert missed["calls"] == [{"tool": "search", "input": "query 2 ", "result": None,
                                "failed": False}]
