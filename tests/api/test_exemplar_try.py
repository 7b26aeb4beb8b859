"""POST /exemplar-sets/{id}/try (issue 42, item 1): a try of an exemplar set asks questions
that are no exemplar's own, from the QA set's held-out split when it has one, says which
and how long it may take, and the worker answers exactly those."""

from __future__ import annotations

import io
import json

import pytest

from studio.services import calibrations, evaluations, exemplar_sets, qa_sets
from studio.services.demo import load_demo_pack
from studio.services.exemplar_trials import try_outcome
from studio.storage.db import session_scope
from studio.storage.tables import Evaluation
from tests.support.actors import admin, user
from tests.support.api_client import bearer
from tests.support.calibrated import measured, worker_with
from tests.support.tiny_model import build_tiny_model
from worker.evaluation import run_evaluation

FAST = {"max_turn_tokens": 16, "max_turns": 2, "max_response_tokens": 64}
"""Budgets the tiny random model, which never stops by itself, answers in quickly."""
TRACE = ("<think> I search for it. </think> <search> {q} </search> <information>Doc 1(Title: "
         "Notes) Nothing useful.</information> <answer> {a} </answer>")


@pytest.fixture
def drafted(api, tmp_path) -> dict:
    """The demo pack, the tiny model, and a set whose three exemplars are the first three
    questions of `demo-span` (as a draft from it is)."""
    load_demo_pack(api.settings, admin(api.settings), index_now=True)
    first = qa_sets.qa_rows(api.settings, qa_sets.find_qa_set(api.settings, "demo-span")["id"],
                            0, 3)["rows"]
    made = exemplar_sets.create_exemplar_set(api.settings, admin(api.settings), "span-draft", [
        {"question": row["question"], "answer": row["golden_answers"][0],
         "solution": TRACE.format(q=row["question"], a=row["golden_answers"][0])}
        for row in first])
    assert made["errors"] == 0, made
    return {"set": made, "model": str(build_tiny_model(tmp_path / "tiny"))}


def test_a_try_asks_the_held_out_questions_and_lists_them(api, drafted):
    own = {e["question"] for e in drafted["set"]["exemplars"]}
    told = api.post(f"/exemplar-sets/{drafted['set']['id']}/try",
                    json={"qa_set": "demo-span", "corpus": "demo", "model": drafted["model"]})
    assert told.status_code == 201, told.text
    tried = told.json()
    assert (tried["asked_for"], tried["qa_set"], tried["held_out"]) == (
        "demo-span", "demo-span-heldout", True)
    assert tried["k"] == 3  # the set's size, at most 3
    heldout = qa_sets.qa_rows(api.settings, qa_sets.find_qa_set(
        api.settings, "demo-span-heldout")["id"], 0, 5)["rows"]
    assert [q["question"] for q in tried["questions"]] == [r["question"] for r in heldout]
    assert not own & {q["question"] for q in tried["questions"]}
    params = tried["evaluation"]["params"]
    assert params["rows"] == [0, 1, 2, 3, 4] and params["total"] == 5
    assert params["protocol"]["exemplars"] == 3 and params["exemplar_set"] == "span-draft"
    assert tried["estimate"]["seconds"] is None
    assert "no time estimate yet" in tried["estimate"]["message"]


def test_without_a_held_out_split_a_try_leaves_out_the_exemplars_questions(api, drafted):
    """A QA set of its own: the exemplars' questions (one typed in another case, spaced
    otherwise and without its '?') are passed over; the worker answers the others, in
    order, and the try says how long it took, which the next try's estimate reads."""
    settings, model = api.settings, drafted["model"]
    own = [e["question"] for e in drafted["set"]["exemplars"]]
    others = ["Who keeps the Fennick Light?", "What is the tallest hill on Marrow Point?",
              "Which river runs through Oster?"]
    typed = ["  " + own[0].upper().rstrip("?") + " ", others[0], own[1], others[1], own[2],
             others[2]]
    lines = "".join(json.dumps({"question": q, "golden_answers": ["x"]}) + "\n" for q in typed)
    qa_sets.create_qa_set(settings, admin(settings), io.BytesIO(lines.encode()), "mine.jsonl",
                          "mine")
    told = api.post(f"/exemplar-sets/{drafted['set']['id']}/try",
                    json={"qa_set": "mine", "corpus": "demo", "model": model, "k": 2})
    assert told.status_code == 201, told.text
    tried = told.json()
    assert (tried["qa_set"], tried["held_out"], tried["left_out"], tried["k"]) == (
        "mine", False, 3, 2)
    assert [(q["row"], q["question"]) for q in tried["questions"]] == [
        (2, others[0]), (4, others[1]), (6, others[2])]

    evaluation_id = tried["evaluation"]["id"]
    with session_scope(settings.sqlalchemy_url) as session:  # answered quickly
        row = session.get(Evaluation, evaluation_id)
        row.params = {**row.params, "protocol": {**row.params["protocol"], **FAST}}
    assert evaluations.claim_evaluation(settings, evaluation_id)  # as the worker takes it
    run_evaluation(settings, evaluation_id)
    outcome = try_outcome(settings, evaluation_id)
    assert [a["question"] for a in outcome["answers"]] == others
    assert (outcome["state"], outcome["done"], outcome["total"]) == ("succeeded", 3, 3)
    assert outcome["seconds"] is not None and outcome["seconds"] >= 0

    again = api.post(f"/exemplar-sets/{drafted['set']['id']}/try",
                     json={"qa_set": "mine", "corpus": "demo", "model": model}).json()
    assert "the last try of this model on queue cpu took that for 3 questions" in \
        again["estimate"]["message"], again["estimate"]


def test_a_try_is_estimated_from_the_model_s_measured_speed(api, drafted):
    settings = api.settings
    worker_with(settings)
    asked = calibrations.request_calibration(settings, admin(settings), model=drafted["model"],
                                             start=False)
    measured(settings, asked["id"])
    tried = api.post(f"/exemplar-sets/{drafted['set']['id']}/try",
                     json={"qa_set": "demo-span", "corpus": "demo",
                           "model": drafted["model"]}).json()
    estimate = tried["estimate"]
    assert estimate["seconds"] > 0
    assert estimate["message"].startswith("at most about ")
    assert "for 5 questions, if every answer used its whole budget (3,584 tokens from the " \
        "model), at the speed measured on queue cpu (Test CPU, 2 cores)" in estimate["message"]


def test_a_try_refuses_bad_input_with_the_field_and_a_viewer(api, drafted):
    path = f"/exemplar-sets/{drafted['set']['id']}/try"
    model = drafted["model"]
    refusals = [
        ({"qa_set": "nope", "corpus": "demo", "model": model}, 404,
         "qa_set: QA set 'nope' does not exist"),
        ({"qa_set": "demo-span", "corpus": "demo", "model": model, "k": 4}, 422,
         "k: give 1 to 3 exemplars to show (the set 'span-draft' holds 3), got 4"),
        ({"qa_set": "demo-span", "corpus": "demo", "model": model, "k": 0}, 422, "k: "),
        ({"qa_set": "demo-span", "corpus": "demo", "model": model, "questions": 11}, 422,
         "questions: Input should be less than or equal to 10"),
        ({"qa_set": "demo-span", "model": model}, 422, "corpus: name the corpus"),
        ({"qa_set": "demo-span", "corpus": "demo", "model": model, "tools": ["fax"]}, 422,
         "tools: "),
        ({"qa_set": "demo-span", "corpus": "demo", "model": model, "layout": "poem"}, 422,
         "layout: "),
    ]
    for body, status, said in refusals:
        answer = api.post(path, json=body)
        assert (answer.status_code, said in answer.json()["detail"]) == (status, True), (
            body, answer.text)
    empty = exemplar_sets.create_exemplar_set(api.settings, admin(api.settings), "empty")
    answer = api.post(f"/exemplar-sets/{empty['id']}/try", json={"qa_set": "demo-span"})
    assert answer.status_code == 422 and "holds no exemplar yet" in answer.json()["detail"]
    assert api.post("/exemplar-sets/999/try", json={"qa_set": "demo-span"}).status_code == 404

    viewer = api.client.post(f"/api/v1{path}", json={"qa_set": "demo-span", "corpus": "demo"},
                             headers=bearer(api.settings, user(api.settings, "vic", "viewer")))
    assert viewer.status_code == 403 and viewer.json()["detail"].startswith(
        "vic is a viewer and may not try exemplar sets")
    assert evaluations.list_evaluations(api.settings) == []  # none was queued
