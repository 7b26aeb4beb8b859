"""Issue 41: what one request may ask of exemplar sets, their previews and QA sets is
bounded, and a request past a bound is refused at once, naming it, while others are served.

Each was measured on the studio before: 200,000 tiny exemplars locked SQLite for 16 minutes
(every route a 500); three exemplars of 5 MB took 109 s to validate and their preview 43 s;
a 0.6 MB question made `rows?limit=500` answer 115 MB; NUL characters reached storage
through the JSON exemplar routes.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from studio.services import exemplar_sets
from studio.services.errors import InvalidInput
from studio.services.prompt_preview import MAX_PREVIEW_CHARS
from studio.services.qa_sets import MAX_PAGE_BYTES, MAX_ROWS_PAGE
from tests.support.actors import admin, user
from tests.support.api_client import Api, bearer
from tests.support.tiny_model import build_tiny_model

SOLUTION = ("<think>I need the lamp's inventor.</think>\n<search> moss lamp inventor </search>\n"
            "<information>Doc 1(Title: Moss lamp) The moss lamp was made by Ida Fenn."
            "</information>\n<answer> Ida Fenn </answer>")


def _exemplar(number: int, chars: int = 0) -> dict:
    """A valid exemplar, padded to `chars` characters (question and solution) when given."""
    question = f"Who made moss lamp {number}?"
    pad = max(0, chars - len(question) - len(SOLUTION))
    return {"question": question,
            "solution": SOLUTION.replace("</information>", "x" * pad + "</information>")}


def _post_json(api: Api, path: str, body: dict):
    return api.client.post(f"/api/v1{path}", content=json.dumps(body).encode(),
                           headers={**api.headers, "Content-Type": "application/json"})


def test_200000_exemplars_are_refused_in_under_2_s_while_another_client_is_served(api):
    """N2: the number is bounded (STUDIO_MAX_EXEMPLARS_PER_SET) before any exemplar is read,
    and the studio keeps serving another user meanwhile."""
    body = {"name": "huge", "exemplars": [
        {"question": f"q{i}", "solution": "<answer>a</answer>"} for i in range(200_000)]}
    other = bearer(api.settings, user(api.settings, "mo", "viewer"))
    posted: dict = {}

    def post() -> None:
        started = time.monotonic()
        posted["answer"] = _post_json(api, "/exemplar-sets", body)
        posted["seconds"] = time.monotonic() - started

    sender = threading.Thread(target=post)
    sender.start()
    served = [api.client.get("/api/v1/exemplar-sets", headers=other)]
    deadline = time.monotonic() + 30
    while sender.is_alive() and time.monotonic() < deadline:
        served.append(api.client.get("/api/v1/exemplar-sets", headers=other))
    sender.join()
    assert [r.status_code for r in served] == [200] * len(served)
    answer = posted["answer"]
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["detail"] == (
        "exemplars: 200000 exemplars; a set holds at most 1000 (setting "
        "STUDIO_MAX_EXEMPLARS_PER_SET): split them into several sets")
    assert posted["seconds"] < 2, posted["seconds"]
    assert api.get("/exemplar-sets").json() == []


def test_an_exemplar_past_the_length_bound_is_refused_on_every_route(api):
    """N3: one exemplar holds at most STUDIO_MAX_EXEMPLAR_CHARS characters, refused before it
    is validated: three of 5 MB are a 422 at once (their validation took 109 s and 4.9 GB)."""
    bound = api.settings.max_exemplar_chars
    at_bound, past = _exemplar(1, bound), _exemplar(2, bound + 1)
    started = time.monotonic()
    huge = _post_json(api, "/exemplar-sets", {"name": "huge", "exemplars": [
        _exemplar(i, 5_000_000) for i in range(3)]})
    assert time.monotonic() - started < 10
    assert huge.status_code == 422
    assert huge.json()["detail"].startswith(
        f"exemplars[0]: {5_000_000} characters (question, solution and answer together); an "
        f"exemplar holds at most {bound} (setting STUDIO_MAX_EXEMPLAR_CHARS)")

    created = api.post("/exemplar-sets", json={"name": "ok", "exemplars": [at_bound]})
    assert created.status_code == 201 and created.json()["errors"] == 0
    set_id = created.json()["id"]
    refusals = [
        (api.post("/exemplar-sets", json={"name": "big", "exemplars": [at_bound, past]}),
         "exemplars[1]: "),
        (api.upload("/exemplar-sets/upload", "up", "ex.jsonl",
                    f"{json.dumps(at_bound)}\n{json.dumps(past)}\n".encode()),
         "ex.jsonl: exemplar 2: "),
        (api.post(f"/exemplar-sets/{set_id}/exemplars", json=past), "exemplar: "),
        (api.put(f"/exemplar-sets/{set_id}/exemplars/1", json={"solution": past["solution"]}),
         "exemplar 1: "),
    ]
    for answer, place in refusals:
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert detail.startswith(place + f"{bound + 1} characters") and \
            "STUDIO_MAX_EXEMPLAR_CHARS" in detail, detail
    assert [s["name"] for s in api.get("/exemplar-sets").json()] == ["ok"]
    assert api.get(f"/exemplar-sets/{set_id}").json()["exemplars"][0]["solution"] == \
        at_bound["solution"]


def test_a_preview_of_a_large_set_renders_a_bounded_share_and_says_what_it_left_out(
        api, tmp_path):
    """N3: a preview renders at most MAX_PREVIEW_CHARS of exemplars over all its prompts; the
    k left out are listed (every k of a large set is quadratic in its size)."""
    model = str(build_tiny_model(tmp_path / "tiny"))
    bound = api.settings.max_exemplar_chars
    exemplars = [_exemplar(i, bound) for i in range(40)]
    set_id = api.post("/exemplar-sets", json={"name": "long", "exemplars": exemplars}
                      ).json()["id"]
    started = time.monotonic()
    answer = api.post(f"/exemplar-sets/{set_id}/preview",
                      json={"question": "Who made the tide clock?", "model": model})
    assert answer.status_code == 200, answer.text[:300]
    preview = answer.json()
    shown = [p["k"] for p in preview["prompts"]]
    assert shown == list(range(len(shown))) and 3 <= len(shown) < 40
    assert preview["not_shown"] == list(range(len(shown), 41))
    assert sum(k * bound for k in shown) <= MAX_PREVIEW_CHARS
    assert sum(len(p["text"]) for p in preview["prompts"]) < 2 * MAX_PREVIEW_CHARS
    assert time.monotonic() - started < 30
    asked = api.post(f"/exemplar-sets/{set_id}/preview",
                     json={"question": "q", "model": model, "ks": [0, 39, 1]}).json()
    assert [p["k"] for p in asked["prompts"]] == [0, 1] and asked["not_shown"] == [39]
    long_question = api.post(f"/exemplar-sets/{set_id}/preview", json={
        "question": "q" * (api.settings.max_question_chars + 1), "model": model})
    assert long_question.status_code == 422
    assert long_question.json()["detail"].startswith("question: ")


def test_a_nul_in_a_json_exemplar_is_a_422_naming_its_field(api):
    """S2: the upload path refused NUL; the JSON routes stored it (PostgreSQL cannot). The
    service names the field, for the API and the Exemplars page alike."""
    created = api.post("/exemplar-sets", json={"name": "ok", "exemplars": [_exemplar(1)]})
    set_id = created.json()["id"]
    refused = [
        api.post("/exemplar-sets", json={"name": "nul", "exemplars": [
            _exemplar(1), {**_exemplar(2), "question": "Who\x00?"}]}),
        api.post(f"/exemplar-sets/{set_id}/exemplars", json={**_exemplar(2), "answer": "a\x00"}),
        api.put(f"/exemplar-sets/{set_id}/exemplars/1", json={"solution": SOLUTION + "\x00"}),
    ]
    for answer in refused:
        assert answer.status_code == 422, answer.text
        assert "NUL" in answer.json()["detail"]
    owner = admin(api.settings)
    refusals = [
        (lambda: exemplar_sets.create_exemplar_set(api.settings, owner, "nul", [
            _exemplar(1), {**_exemplar(2), "question": "Who\x00?"}]),
         "exemplars[1]: field 'question': "),
        (lambda: exemplar_sets.add_exemplar(api.settings, owner, set_id,
                                            {**_exemplar(2), "answer": "a\x00"}),
         "exemplar: field 'answer': "),
        (lambda: exemplar_sets.update_exemplar(api.settings, owner, set_id, 1,
                                               {"solution": SOLUTION + "\x00"}),
         "exemplar 1: field 'solution': "),
    ]
    for refusal, place in refusals:
        with pytest.raises(InvalidInput, match=re.escape(place) + ".*NUL"):
            refusal()
    assert [s["name"] for s in api.get("/exemplar-sets").json()] == ["ok"]
    assert api.get(f"/exemplar-sets/{set_id}").json()["exemplars"] == \
        created.json()["exemplars"]


def test_a_question_or_an_answer_past_its_bound_is_refused_naming_the_file_and_line(api):
    """N6: questions and gold answers are stored, shown and searched whole: each is bounded
    at upload (STUDIO_MAX_QUESTION_CHARS, STUDIO_MAX_ANSWER_CHARS)."""
    questions, answers = api.settings.max_question_chars, api.settings.max_answer_chars
    fine = json.dumps({"question": "q" * questions, "golden_answers": ["a" * answers]})
    long_question = json.dumps({"question": "q" * (questions + 1), "golden_answers": ["a"]})
    refused = api.upload("/qa-sets", "long", "qa.jsonl", f"{fine}\n{long_question}\n".encode())
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        f"qa.jsonl line 2: the question is {questions + 1} characters, more than {questions}, "
        "the limit (setting STUDIO_MAX_QUESTION_CHARS); shorten it or raise the limit")
    csv = f"question,answer,aliases\nq1,a,\nq2,b,ok|{'a' * (answers + 1)}\n"
    refused = api.upload("/qa-sets", "long", "qa.csv", csv.encode())
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        f"qa.csv line 3: gold answer 3 is {answers + 1} characters, more than {answers}, "
        "the limit (setting STUDIO_MAX_ANSWER_CHARS); shorten it or raise the limit")
    assert api.get("/qa-sets").json() == []
    assert api.upload("/qa-sets", "fine", "qa.jsonl", fine.encode()).status_code == 201


def test_a_page_of_rows_stops_at_its_byte_budget_and_says_where_the_next_starts(api):
    """N6: `rows?limit=500` of long rows answered 115 MB; a page stops adding rows at
    MAX_PAGE_BYTES, and `next_offset` pages on to every row, once each."""
    rows = "\n".join(json.dumps({"id": str(i), "question": f"{i} " + "q" * 7000,
                                 "golden_answers": ["a" * 1000]})
                     for i in range(MAX_ROWS_PAGE))
    qa_id = api.upload("/qa-sets", "long", "qa.jsonl", rows.encode()).json()["id"]
    seen, offset, pages = [], 0, 0
    while offset is not None:
        answer = api.get(f"/qa-sets/{qa_id}/rows", params={"offset": offset,
                                                            "limit": MAX_ROWS_PAGE})
        page = answer.json()
        assert len(answer.content) <= MAX_PAGE_BYTES + 1000
        assert page["bytes_reached"] == (page["next_offset"] is not None)
        seen += [row["id"] for row in page["rows"]]
        offset, pages = page["next_offset"], pages + 1
    assert seen == [str(i) for i in range(MAX_ROWS_PAGE)] and pages >= 3
    short = api.get(f"/qa-sets/{qa_id}/rows", params={"offset": 10, "limit": 5}).json()
    assert [r["id"] for r in short["rows"]] == ["10", "11", "12", "13", "14"]
    assert short["next_offset"] == 15 and short["bytes_reached"] is False
