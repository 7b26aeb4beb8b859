"""The data doctor through the REST API (and `studio doctor`) on the shared HotpotQA and MuSiQue samples, each figure
against a direct count in the test (the passages from the corpus's /retrieve, answers matched
with the reward's normalisation, supporting passages read from the original files), and the
run check's warning for a training set the corpus cannot answer. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.method.reward import normalize_answer
from studio.services import corpora, data_doctor, qa_sets, run_validation
from tests.support.actors import admin
from tests.support.api_client import Api, bearer
from tests.support.processes import studio_cli
from tests.support.shared_data import HOTPOT, MUSIQUE, needs_shared
from tests.support.training import tiny_config

K = 3


@pytest.fixture
def doctor(studio):
    """The admin's API client of a studio holding the demo pack; the tiny model's folder."""
    settings, model = studio
    with TestClient(create_app(settings)) as client:
        api = Api(settings, client, "")
        api.headers = bearer(settings, admin(settings))
        yield api, model


def _corpus(api: Api, name: str, folder: Path) -> int:
    corpus = api.upload("/corpora", name, "corpus.jsonl", (folder / "corpus.jsonl").read_bytes())
    corpora.build_corpus_index(api.settings, corpus.json()["id"])
    return corpus.json()["id"]


def _qa(api: Api, name: str, path: Path) -> int:
    created = api.upload("/qa-sets", name, path.name, path.read_bytes())
    assert created.status_code == 201, created.text
    return created.json()["id"]


def _hops_hotpot(row: dict) -> list[str]:
    return list(dict.fromkeys(title for title, _ in row["supporting_facts"]))


def _hops_musique(row: dict) -> list[str]:
    return [row["paragraphs"][hop["paragraph_support_idx"]]["title"]
            for hop in row["question_decomposition"]]


def _direct(api: Api, corpus_id: int, questions: list[tuple[str, str, list[str], list[str]]]
            ) -> dict:
    """The figures counted here: top-k from /retrieve, a gold answer as whole normalised words
    in a passage's title or text, a hop found when a passage carries its title."""
    result = api.post(f"/corpora/{corpus_id}/retrieve",
                      json={"queries": [q for _, q, _, _ in questions], "topk": K}).json()["result"]
    reachable, hops_found, all_found, unreachable = 0, {}, 0, []
    for (qid, _, golds, hops), docs in zip(questions, result, strict=True):
        titles, texts = [], []
        for doc in docs:
            title, text = doc["contents"].split("\n", 1)
            titles.append(title[1:-1])
            texts.append(normalize_answer(f"{title[1:-1]} {text}"))
        found = any(re.search(rf"(^| ){re.escape(normalize_answer(g))}( |$)", t)
                    for g in golds if normalize_answer(g) for t in texts)
        reachable += found
        if not found:
            unreachable.append(qid)
        for i, hop in enumerate(hops):
            hops_found.setdefault(i + 1, []).append(hop in titles)
        all_found += bool(hops) and all(hop in titles for hop in hops)
    return {"reachable": reachable, "unreachable": unreachable, "all_hops_found": all_found,
            "hops": [{"hop": hop, "questions": len(found), "found": sum(found)}
                     for hop, found in sorted(hops_found.items())]}


def _check(api: Api, corpus_id: int, qa_id: int, questions) -> dict:
    got = api.get(f"/corpora/{corpus_id}/doctor/reachability", params={"qa_set": qa_id, "k": K})
    assert got.status_code == 200, got.text
    report, direct = got.json(), _direct(api, corpus_id, questions)
    assert (report["questions"], report["sampled"]) == (len(questions), False)
    assert report["reachable"] == direct["reachable"]
    assert sum(r["questions"] for r in report["ranks"]) == direct["reachable"]
    assert [{k: h[k] for k in ("hop", "questions", "found")} for h in report["hops"]] \
        == direct["hops"]
    assert report["all_hops_found"] == direct["all_hops_found"]
    worst = [w["id"] for w in report["worst"]]
    assert len(worst) == min(10, len(direct["unreachable"]))
    assert set(worst) <= set(direct["unreachable"])
    return report


@needs_shared
def test_reachability_of_the_shared_samples_matches_a_direct_count(doctor):
    api, _ = doctor
    hotpot = _corpus(api, "hotpot", HOTPOT)
    rows = json.loads((HOTPOT / "hotpot_dev_distractor_sample100.json").read_text())
    report = _check(api, hotpot, _qa(api, "hotpot", HOTPOT / "hotpot_dev_distractor_sample100.json"),
                    [(r["_id"], r["question"], [r["answer"]], _hops_hotpot(r)) for r in rows])
    assert [h["hop"] for h in report["hops"]] == [1, 2]
    # the worst come first: the questions that found fewest of their supporting passages
    found = [int(w["hops_found"].split()[0]) for w in report["worst"]]
    assert found == sorted(found)

    musique = _corpus(api, "musique", MUSIQUE)
    rows = json.loads((MUSIQUE / "musique_train100.json").read_text())
    musique_qa = _qa(api, "musique", MUSIQUE / "musique_train100.json")
    report = _check(api, musique, musique_qa,
                    [(r["id"], r["question"], [r["answer"], *r["answer_aliases"]],
                      _hops_musique(r))
                     for r in rows])
    assert [h["hop"] for h in report["hops"]] == [1, 2, 3, 4]  # MuSiQue has 2 to 4 hops
    plain = [json.loads(line) for line in (MUSIQUE / "qa.jsonl").read_text().splitlines()]
    report = _check(api, musique, _qa(api, "musique-plain", MUSIQUE / "qa.jsonl"),
                    [(r["id"], r["question"], r["golden_answers"], []) for r in plain])
    assert report["hops"] == [] and report["all_hops_share"] is None  # no hops kept: said so

    sampled = api.get(f"/corpora/{musique}/doctor/reachability",
                      params={"qa_set": musique_qa, "k": 5, "limit": 10}).json()
    assert (sampled["questions"], sampled["set_size"], sampled["sampled"]) == (10, 100, True)
    every_tenth = {row["id"] for row in rows[::10]}  # evenly spaced through the set
    assert sampled["worst"] and {w["id"] for w in sampled["worst"]} <= every_tenth


@needs_shared
def test_exemplar_replay_flags_exemplars_written_for_another_corpus(doctor):
    api, _ = doctor
    demo = api.get("/corpora").json()[0]
    demo_set = api.get("/exemplar-sets").json()[0]
    at_home = api.get(f"/corpora/{demo['id']}/doctor/exemplars",
                      params={"exemplar_set": demo_set["id"]}).json()
    assert at_home["flagged"] == 0 and len(at_home["exemplars"]) == 3

    hotpot = _corpus(api, "hotpot", HOTPOT)
    abroad = api.get(f"/corpora/{hotpot}/doctor/exemplars",
                     params={"exemplar_set": demo_set["id"]}).json()
    assert abroad["flagged"] == 3
    assert all(f.startswith("search 1 ") for f in abroad["exemplars"][0]["findings"][:1])

    # an exemplar written from what this corpus returns passes
    query = "Scott Derrickson nationality"
    hits = api.get(f"/corpora/{hotpot}/search", params={"q": query, "k": K}).json()
    solution = (f"<think>Search.</think><search> {query} </search>{hits['tool_text']}"
                "<answer> American </answer>")
    made = api.post("/exemplar-sets", json={"name": "hotpot-ex", "exemplars": [
        {"question": "What nationality is Scott Derrickson?", "solution": solution}]}).json()
    replay = api.get(f"/corpora/{hotpot}/doctor/exemplars",
                     params={"exemplar_set": made["id"]}).json()
    assert replay["exemplars"][0]["searches"][0]["retrieved"] == [h["title"]
                                                                    for h in hits["hits"]]
    assert replay["flagged"] == 0, replay


def test_bad_requests_name_the_field(doctor):
    api, _ = doctor
    demo = api.get("/corpora").json()[0]["id"]
    path = f"/corpora/{demo}/doctor/reachability"
    assert "k: " in api.get(path, params={"qa_set": 1, "k": 0}).json()["detail"]
    assert api.get(path, params={"qa_set": 1, "limit": 10**6}).status_code == 422
    missing = api.get(path, params={"qa_set": 999})
    assert missing.status_code == 404 and "999" in missing.json()["detail"]
    assert api.get(path).status_code == 422  # qa_set is required
    pending = api.upload("/corpora", "pending", "c.jsonl", b'{"text": "salt"}\n').json()
    waiting = api.get(f"/corpora/{pending['id']}/doctor/exemplars", params={"exemplar_set": 1})
    assert waiting.status_code == 409 and "ready" in waiting.json()["detail"]


@needs_shared
def test_a_run_on_a_set_the_corpus_cannot_answer_gets_a_plain_warning(doctor):
    api, model = doctor
    settings = api.settings
    _qa(api, "elsewhere", HOTPOT / "qa.jsonl")  # real-world questions, a made-up corpus
    config = tiny_config(model)
    at_home = run_validation.validate_run(settings, admin(settings), config)["warnings"]
    assert not any(w.startswith("data.train") for w in at_home), at_home
    config["data"]["train"] = "elsewhere"
    (warning,) = [w for w in run_validation.validate_run(settings, admin(settings), config)
                  ["warnings"] if w.startswith("data.train")]
    assert re.match(r"data\.train: only \d of 100 training questions \(\d%\) have their "
                    r"answer in the top 3 passages", warning), warning
    checked = api.post("/runs/validate", json=config).json()
    assert warning in checked["warnings"]


def test_studio_doctor_prints_the_figures_the_api_gives_and_its_progress(tmp_path):
    settings, cli = studio_cli(tmp_path)
    assert cli("db", "upgrade").returncode == 0 and cli("demo").returncode == 0
    done = cli("doctor", "--corpus", "demo", "--qa", "demo", "--exemplars", "demo")
    assert done.returncode == 0, done.stderr
    corpus = corpora.find_corpus(settings, "demo")["id"]
    report = data_doctor.reachability(settings, corpus, qa_sets.find_qa_set(settings, "demo")["id"])
    lines = done.stdout.splitlines()
    assert lines[:3] == data_doctor.reachability_lines(report)
    assert sum(line.startswith("  unreachable: ") for line in lines) == len(report["worst"])
    assert lines[-4].startswith("Exemplar replay on 'demo' (top 3): 0 of 3 exemplars")
    assert "searched 100 of 196 questions" in done.stderr
    unknown = cli("doctor", "--corpus", "demo", "--qa", "nope")
    assert unknown.returncode == 2 and "--qa: " in unknown.stderr and "nope" in unknown.stderr
    bad_k = cli("doctor", "--corpus", "demo", "--exemplars", "demo", "--k", "0")
    assert bad_k.returncode == 2 and "k: must be between 1 and 50, got 0" in bad_k.stderr
