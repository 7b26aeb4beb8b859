"""Corpora, QA sets, exemplar sets and the demo pack through the REST API, on real files."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.services import auth, corpora
from studio.settings import Settings
from studio.storage import db
from tests.support.api_client import Api
from tests.support.shared_data import HOTPOT, MUSIQUE, needs_shared
from tests.support.tiny_model import build_tiny_model


def _index_now(api: Api, corpus_id: int) -> dict:
    """Run the index build as the worker task does (the worker path is tested elsewhere)."""
    corpora.build_corpus_index(api.settings, corpus_id)
    return api.get(f"/corpora/{corpus_id}").json()


# --- corpora ---------------------------------------------------------------------------------


@needs_shared
def test_upload_index_and_search_a_real_corpus(api):
    created = api.upload("/corpora", "hotpot", "corpus.jsonl", (HOTPOT / "corpus.jsonl").read_bytes())
    assert created.status_code == 201, created.text
    corpus = created.json()
    assert corpus["status"] == "pending" and corpus["num_documents"] == 1000
    assert len(api.stored_uploads()) == 1

    ready = _index_now(api, corpus["id"])
    assert ready["status"] == "ready" and ready["error"] is None
    assert ready["num_passages"] >= 1000
    assert ready["progress"]["rows_read"] == 1000 and ready["progress"]["fraction"] == 1.0

    question = json.loads((HOTPOT / "qa.jsonl").read_text().splitlines()[0])
    found = api.get(f"/corpora/{corpus['id']}/search", params={"q": question["question"], "k": 3})
    assert found.status_code == 200
    body = found.json()
    assert len(body["hits"]) == 3
    assert body["tool_text"].startswith("\n\n<information>Doc 1(Title: ")
    assert body["tool_text"].endswith("</information>\n\n")
    assert f"Doc 1(Title: {body['hits'][0]['title']}) {body['hits'][0]['text']}" in body["tool_text"]

    r1 = api.post(f"/corpora/{corpus['id']}/retrieve",
                  json={"queries": [question["question"], "Scott Derrickson"], "topk": 2,
                        "return_scores": True})
    assert r1.status_code == 200
    result = r1.json()["result"]
    assert len(result) == 2 and all(len(hits) == 2 for hits in result)
    first = result[0][0]
    assert set(first) == {"document", "score"} and set(first["document"]) == {"id", "contents"}
    assert first["document"]["contents"] == f'"{body["hits"][0]["title"]}"\n{body["hits"][0]["text"]}'
    no_scores = api.post(f"/corpora/{corpus['id']}/retrieve", json={"queries": ["film"]}).json()
    assert "score" not in no_scores["result"][0][0] and len(no_scores["result"][0]) == 3


def test_zip_of_text_files_is_split_into_passages_that_keep_their_title(api):
    long_text = " ".join(f"word{i}" for i in range(250))
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("docs/harbour.md", f"# Harbour of Brine\n\n{long_text}\n")
        zf.writestr("docs/lamp.txt", "The moss lamp burns for a week.")
    corpus = api.upload("/corpora", "zipped", "docs.zip", archive.getvalue()).json()
    ready = _index_now(api, corpus["id"])
    assert ready["num_documents"] == 2 and ready["num_passages"] == 4  # 250 words -> 3 + 1
    hits = api.get(f"/corpora/{corpus['id']}/search", params={"q": "word240", "k": 1}).json()
    assert hits["hits"][0]["title"] == "Harbour of Brine"


def test_a_malformed_corpus_is_refused_with_its_line_and_nothing_is_stored(api):
    bad = b'{"title": "A", "text": "fine"}\n{"title": "B", "text": "broken"\n'
    answer = api.upload("/corpora", "bad", "my-docs.jsonl", bad)
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("my-docs.jsonl line 2: ")
    assert api.get("/corpora").json() == []
    assert api.stored_uploads() == []
    assert list((api.settings.resolved_data_dir / "tmp").iterdir()) == []


def test_corpus_input_errors_name_the_field(api):
    ok = b'{"text": "salt and timber"}\n'
    assert api.upload("/corpora", "c", "a.jsonl", ok).status_code == 201
    dup = api.upload("/corpora", "c", "a.jsonl", ok)
    assert dup.status_code == 409 and dup.json()["detail"].startswith("name: 'c' is already used")
    backend = api.upload("/corpora", "d", "a.jsonl", ok, backend="faiss")
    assert backend.status_code == 422 and backend.json()["detail"].startswith("backend: 'faiss'")
    params = api.upload("/corpora", "e", "a.jsonl", ok, params="{nope")
    assert params.status_code == 422 and params.json()["detail"].startswith("params: not valid JSON")
    binary = api.upload("/corpora", "f", "a.jsonl", "é".encode("latin-1") + b" text\n")
    assert binary.status_code == 422 and "UTF-8" in binary.json()["detail"]
    pending = api.get("/corpora").json()[0]
    early = api.get(f"/corpora/{pending['id']}/search", params={"q": "salt"})
    assert early.status_code == 409 and "search it when its status is ready" in early.json()["detail"]
    assert api.get("/corpora/999").status_code == 404


def test_upload_size_limit_answers_413(tmp_path):
    settings = Settings(data_dir=tmp_path / "small", max_upload_bytes=64)
    settings.resolved_data_dir.mkdir(parents=True)
    db.upgrade(settings.sqlalchemy_url)
    with db.session_scope(settings.sqlalchemy_url) as session:
        token = auth.bootstrap_admin(session).token
    with TestClient(create_app(settings)) as client:
        api = Api(settings, client, token)
        answer = api.upload("/corpora", "big", "big.jsonl", b'{"text": "x"}\n' * 10)
        assert answer.status_code == 413
        assert "STUDIO_MAX_UPLOAD_BYTES" in answer.json()["detail"]
        assert api.get("/corpora").json() == []


def test_search_input_errors(api):
    corpus = api.upload("/corpora", "c", "a.jsonl", b'{"text": "salt and timber"}\n').json()
    _index_now(api, corpus["id"])
    assert api.get(f"/corpora/{corpus['id']}/search", params={"q": "  "}).status_code == 422
    too_many = api.get(f"/corpora/{corpus['id']}/search", params={"q": "salt", "k": 500})
    assert too_many.status_code == 422 and too_many.json()["detail"].startswith("k: ")


def test_delete_corpus_removes_its_files(api):
    corpus = api.upload("/corpora", "c", "a.jsonl", b'{"text": "salt and timber"}\n').json()
    ready = _index_now(api, corpus["id"])
    index_dirs = list((api.settings.resolved_data_dir / "indexes").iterdir())
    assert ready["status"] == "ready" and len(index_dirs) == 1
    assert api.delete(f"/corpora/{corpus['id']}").status_code == 204
    assert api.stored_uploads() == [] and not index_dirs[0].exists()


# --- QA sets -----------------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize(("path", "fmt"), [
    (HOTPOT / "hotpot_dev_distractor_sample100.json", "hotpotqa-json"),
    (MUSIQUE / "musique_train100.json", "musique-json"),
    (HOTPOT / "qa.jsonl", "flashrag-jsonl"),
])
def test_real_qa_files_load(api, path, fmt):
    answer = api.upload("/qa-sets", "qa", path.name, path.read_bytes(), purpose="eval")
    assert answer.status_code == 201, answer.text
    qa = answer.json()
    assert (qa["num_rows"], qa["format"], qa["purpose"]) == (100, fmt, "eval")
    page = api.get(f"/qa-sets/{qa['id']}/rows", params={"offset": 0, "limit": 5}).json()
    assert page["total"] == 100 and len(page["rows"]) == 5
    assert page["rows"][0]["row"] == 1 and page["rows"][0]["golden_answers"]


def test_qa_split_is_seeded_disjoint_and_complete(api):
    rows = "\n".join(json.dumps({"id": str(i), "question": f"Question number {i}?",
                                 "golden_answers": [str(i)]}) for i in range(40))
    qa = api.upload("/qa-sets", "all", "qa.jsonl", rows.encode()).json()
    split = api.post(f"/qa-sets/{qa['id']}/split", json={"eval_fraction": 0.25, "seed": 7})
    assert split.status_code == 201
    parts = split.json()
    assert (parts["train"]["name"], parts["eval"]["name"]) == ("all-train", "all-eval")
    assert parts["train"]["num_rows"] + parts["eval"]["num_rows"] == 40
    ids = {p: {r["id"] for r in api.get(f"/qa-sets/{parts[p]['id']}/rows",
                                        params={"limit": 100}).json()["rows"]}
           for p in ("train", "eval")}
    assert not ids["train"] & ids["eval"] and len(ids["train"] | ids["eval"]) == 40
    again = api.post(f"/qa-sets/{qa['id']}/split",
                     json={"eval_fraction": 0.25, "seed": 7, "train_name": "t2", "eval_name": "e2"})
    eval_again = {r["id"] for r in api.get(f"/qa-sets/{again.json()['eval']['id']}/rows",
                                           params={"limit": 100}).json()["rows"]}
    assert eval_again == ids["eval"]


def test_qa_report_and_errors(api):
    csv = b"question,answer,aliases\nWho lit Fennick Light?,Orla Vane,O. Vane|Vane\n" \
          b"who lit fennick light?,Orla Vane,\nWhat is the capital?,,\n"
    qa = api.upload("/qa-sets", "csv", "qa.csv", csv)
    assert qa.status_code == 201, qa.text
    report = qa.json()["report"]
    assert report["count"] == 3
    assert [d["row"] for d in report["duplicate_questions"]] == [2]
    assert [e["row"] for e in report["empty_answers"]] == [3]
    first = api.get(f"/qa-sets/{qa.json()['id']}/rows").json()["rows"][0]
    assert first["golden_answers"] == ["Orla Vane", "O. Vane", "Vane"]

    bad = api.upload("/qa-sets", "bad", "bad.csv", b"question,answer\n,Paris\n")
    assert bad.status_code == 422
    assert bad.json()["detail"] == (
        'bad.csv line 2: column "question" is empty; write the question or remove the row')
    purpose = api.upload("/qa-sets", "p", "qa.csv", csv, purpose="test")
    assert purpose.status_code == 422 and purpose.json()["detail"].startswith("purpose: 'test'")
    assert [q["name"] for q in api.get("/qa-sets").json()] == ["csv"]


# --- exemplar sets -------------------------------------------------------------------------------

GOOD_SOLUTION = (
    "<think>I need the lamp's inventor.</think>\n<search> moss lamp inventor </search>\n\n"
    "<information>Doc 1(Title: Moss lamp) The moss lamp was made by Ida Fenn.</information>\n\n"
    "<think>Ida Fenn made it.</think>\n<answer> Ida Fenn </answer>"
)


def test_exemplar_set_edit_cycle_revalidates_each_save(api):
    created = api.post("/exemplar-sets", json={"name": "mine", "exemplars": [
        {"question": "Who made the moss lamp?", "solution": GOOD_SOLUTION, "answer": "Ida Fenn"}]})
    assert created.status_code == 201
    body = created.json()
    assert (body["size"], body["errors"]) == (1, 0)

    broken = api.post(f"/exemplar-sets/{body['id']}/exemplars", json={
        "question": "Who made the tide clock?", "solution": "<think>no search</think> Ida"})
    assert broken.status_code == 201
    second = broken.json()["exemplars"][1]
    assert broken.json()["errors"] >= 1
    assert all(f["severity"] in {"error", "warning"} for f in second["findings"])
    assert any("answer" in f["message"] for f in second["findings"])

    fixed = api.put(f"/exemplar-sets/{body['id']}/exemplars/2",
                    json={"solution": GOOD_SOLUTION.replace("moss lamp", "tide clock")})
    assert fixed.status_code == 200 and fixed.json()["errors"] == 0
    assert fixed.json()["exemplars"][1]["question"] == "Who made the tide clock?"

    missing = api.put(f"/exemplar-sets/{body['id']}/exemplars/9", json={"answer": "x"})
    assert missing.status_code == 404 and "the set has 2" in missing.json()["detail"]
    after = api.client.delete(f"/api/v1/exemplar-sets/{body['id']}/exemplars/1",
                              headers=api.headers).json()
    assert after["size"] == 1 and after["exemplars"][0]["question"] == "Who made the tide clock?"


def test_exemplar_upload_in_the_text_block_format_and_a_bad_file(api):
    text = ("===== Example 1 =====\nExample Problem: Who made the moss lamp?\n"
            f"Example Solution: {GOOD_SOLUTION}\n")
    up = api.upload("/exemplar-sets/upload", "blocks", "examples.txt", text.encode())
    assert up.status_code == 201, up.text
    assert up.json()["size"] == 1 and up.json()["errors"] == 0
    bad = api.upload("/exemplar-sets/upload", "bad", "ex.jsonl", b'{"question": "q"\n')
    assert bad.status_code == 422 and bad.json()["detail"].startswith("ex.jsonl: ")
    assert [s["name"] for s in api.get("/exemplar-sets").json()] == ["blocks"]


def test_prompt_preview_counts_tokens_for_each_k(api, tmp_path):
    model = build_tiny_model(tmp_path / "tiny")
    set_id = api.post("/exemplar-sets", json={"name": "two", "exemplars": [
        {"question": "Who made the moss lamp?", "solution": GOOD_SOLUTION},
        {"question": "Who made the tide clock?", "solution": GOOD_SOLUTION}]}).json()["id"]
    for layout in ("inline", "chat"):
        answer = api.post(f"/exemplar-sets/{set_id}/preview", json={
            "question": "Where was Ida Fenn born", "layout": layout, "model": str(model),
            "assistant_prefix": "<think>"})
        assert answer.status_code == 200, answer.text
        prompts = answer.json()["prompts"]
        assert [p["k"] for p in prompts] == [0, 1, 2]
        assert prompts[0]["tokens"] < prompts[1]["tokens"] < prompts[2]["tokens"]
        assert all(p["text"].endswith("<think>") for p in prompts)
        assert "Where was Ida Fenn born?" in prompts[0]["text"]
        assert "moss lamp" not in prompts[0]["text"] and "moss lamp" in prompts[1]["text"]
    bad_k = api.post(f"/exemplar-sets/{set_id}/preview", json={"question": "q", "ks": [3],
                                                               "model": str(model)})
    assert bad_k.status_code == 422 and "outside 0..2" in bad_k.json()["detail"]
    coded = api.post(f"/exemplar-sets/{set_id}/preview", json={
        "question": "What is 6 times 7", "model": str(model), "tools": ["python"], "ks": [0]})
    assert coded.status_code == 200, coded.text
    assert "<code> and </code>" in coded.json()["prompts"][0]["text"]
    assert "<search>" not in coded.json()["prompts"][0]["text"]
    bad_tool = api.post(f"/exemplar-sets/{set_id}/preview", json={
        "question": "q", "model": str(model), "tools": ["grep"]})
    assert bad_tool.status_code == 422
    assert bad_tool.json()["detail"].startswith("tools: unknown tool 'grep'; known tools: ")


# --- the demo pack -----------------------------------------------------------------------------------


def test_demo_pack_loads_once_ready_to_use(api):
    first = api.post("/demo")
    assert first.status_code == 200, first.text
    pack = first.json()
    assert pack["corpus"]["status"] == "ready" and pack["corpus"]["num_documents"] == 257
    assert (pack["qa_set"]["name"], pack["qa_set"]["purpose"]) == ("demo", "train")
    assert pack["qa_set"]["num_rows"] == 196
    heldout = pack["heldout_qa_set"]
    assert (heldout["name"], heldout["purpose"], heldout["num_rows"]) == ("demo-heldout", "eval", 60)
    assert (pack["exemplar_set"]["size"], pack["exemplar_set"]["errors"]) == (3, 0)
    again = api.post("/demo").json()
    assert again["corpus"]["id"] == pack["corpus"]["id"]
    assert again["heldout_qa_set"]["id"] == heldout["id"]
    assert len(api.get("/corpora").json()) == 1
    spans, held_spans = pack["span_qa_set"], pack["span_heldout_qa_set"]
    assert [(q["name"], q["purpose"], q["num_rows"]) for q in (spans, held_spans)] == [
        ("demo-span", "train", 90), ("demo-span-heldout", "eval", 30)]
    assert sorted(q["name"] for q in api.get("/qa-sets").json()) == [
        "demo", "demo-heldout", "demo-span", "demo-span-heldout"]
    hit = api.get(f"/corpora/{pack['corpus']['id']}/search",
                  params={"q": "capital of the Ondrell Archipelago", "k": 3}).json()
    assert any("Brindlecombe" in h["text"] for h in hit["hits"])


@pytest.mark.parametrize(("pack", "trained"), [("math", 200), ("calc", 260)])
def test_a_tool_pack_loads_once_without_a_corpus(api, pack, trained):
    first = api.post(f"/demo/{pack}")
    assert first.status_code == 200, first.text
    stored = first.json()
    assert set(stored) == {"qa_set", "heldout_qa_set", "exemplar_set"}
    assert [(p["name"], p["purpose"], p["num_rows"]) for p in (
        stored["qa_set"], stored["heldout_qa_set"])] == [(pack, "train", trained),
                                                         (f"{pack}-heldout", "eval", 60)]
    assert (stored["exemplar_set"]["size"], stored["exemplar_set"]["errors"]) == (3, 0)
    assert api.post(f"/demo/{pack}").json()["qa_set"]["id"] == stored["qa_set"]["id"]
    assert api.get("/corpora").json() == []
    assert sorted(q["name"] for q in api.get("/qa-sets").json()) == [pack, f"{pack}-heldout"]


DEEP = "[" * 3000 + "]" * 3000  # 6 KB that Python's JSON decoder cannot nest into


@pytest.mark.parametrize(("route", "filename", "content", "line"), [
    ("/corpora", "docs.jsonl", '{"title": "A", "text": "fine"}\n' + DEEP + "\n", 2),
    ("/corpora", "docs.json", '[{"title": "A", "text": "fine"}, ' + DEEP + "]", 1),
    ("/qa-sets", "qa.jsonl", '{"question": "Q?", "answer": "A"}\n' + DEEP + "\n", 2),
    ("/exemplar-sets/upload", "ex.jsonl", DEEP + "\n", 1),
])
def test_deeply_nested_json_is_refused_with_its_line_not_a_500(api, route, filename, content,
                                                                line):
    answer = api.upload(route, "deep", filename, content.encode())
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith(filename) and f"line {line}" in detail
    assert "nested too deeply" in detail
    assert api.stored_uploads() == []
