"""Exemplar drafts from a team's own data (studio/services/exemplar_drafts.py): every tool
result inside a draft is what the tool returned, a draft passes the checks an uploaded
exemplar passes, and where the data does not say what to compute the draft leaves a marked
gap rather than a made-up call."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from frontend.server import create_app
from studio.method.arithmetic import calculate
from studio.method.drafting import GAP
from studio.method.reachability import contains_answer, written_searches
from studio.method.tags import SEARCH_TOOL, ToolSpec, format_information
from studio.services import corpora, exemplar_drafts, qa_sets
from studio.services.access import Forbidden
from studio.services.demo import load_calc_pack, load_math_pack
from studio.services.errors import InvalidInput
from studio.storage.tables import Role
from tests.support.actors import admin, user
from tests.support.api_client import admin_headers
from tests.support.lookup_tool import LOOKUP, registered_lookup
from tests.support.processes import run_studio, studio_env
from tests.support.shared_data import HOTPOT, needs_shared


def _result_blocks(solution: str, tag: str) -> list[str]:
    """The bodies of the `<tag>` blocks of a trace (it holds one tool's tags)."""
    return re.findall(rf"<{tag}>(.*?)</{tag}>", solution, re.DOTALL)


def _top_k(settings, corpus: str, query: str, k: int, tool: ToolSpec = SEARCH_TOOL) -> str:
    index = corpora.open_index(settings, corpora.find_corpus(settings, corpus)["id"])
    return format_information([(h.passage.title, h.passage.text)
                               for h in index.search([query], k)[0]], tool)


@pytest.mark.parametrize("qa_set", ["demo", "demo-span"])
def test_search_drafts_hold_the_corpus_s_own_top_k_and_the_gold_answer(studio, qa_set):
    settings, _ = studio
    drafted = exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set=qa_set,
                                              tool="search", corpus="demo", k=3)
    assert len(drafted["drafts"]) == 3 and drafted["gaps"] == 0
    for item in drafted["drafts"]:
        assert item["draft"] is True and item["findings"] == [], item["findings"]
        (search,) = written_searches(item["solution"])
        block = _top_k(settings, "demo", search.query, 3)
        assert block in item["solution"], "the block is the search tool's own top 3"
        assert contains_answer(block, [item["answer"]])
        assert item["solution"].endswith(f"<answer> {item['answer']} </answer>")


def test_a_tool_drafted_from_passages_is_drafted_over_the_corpus_whatever_its_name(
        studio, monkeypatch):
    """The runner is the tool's registration's (`drafted_from`, `needs_corpus`), not its
    name's: the test-only lookup tool drafts as search does, in its own tags."""
    settings, _ = studio
    registered_lookup(monkeypatch)
    drafted = exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="demo",
                                              tool="lookup", corpus="demo", k=3)
    assert drafted["corpus"] == "demo" and len(drafted["drafts"]) == 3
    for item in drafted["drafts"]:
        assert item["findings"] == [], item["findings"]
        assert "<search>" not in item["solution"]
        query = _result_blocks(item["solution"], "lookup")[0].strip()
        assert _top_k(settings, "demo", query, 3, LOOKUP) in item["solution"], \
            "the corpus's own top 3, in the lookup's tags"


def test_calculator_drafts_hold_the_calculator_s_own_result(studio):
    """The arithmetic pack's bare expressions, and its word problems through the `expression`
    each QA row keeps."""
    settings, _ = studio
    load_calc_pack(settings, admin(settings))
    drafted = exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="calc",
                                              tool="calculator", count=5)
    assert len(drafted["drafts"]) == 5 and drafted["gaps"] == 0
    for item in drafted["drafts"]:
        (call,) = _result_blocks(item["solution"], "calc")
        (result,) = _result_blocks(item["solution"], "result")
        assert result == calculate(call.strip()).text == item["answer"]
        assert item["findings"] == []


def test_python_drafts_run_in_the_sandbox_and_leave_a_gap_where_the_question_is_prose(studio):
    """Bare expressions are printed by python in the sandbox; the math pack's word problems
    do not say what to compute, so their drafts keep the call for the user to write, and
    the checks say what is missing."""
    settings, _ = studio
    load_calc_pack(settings, admin(settings))
    load_math_pack(settings, admin(settings))
    run = exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="calc",
                                          tool="python", count=2)
    for item in run["drafts"]:
        (code,) = _result_blocks(item["solution"], "code")
        (output,) = _result_blocks(item["solution"], "output")
        assert code.strip().startswith("print(") and output == item["answer"]
    gaps = exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="math",
                                           tool="python", count=2)
    assert gaps["gaps"] == 2
    for item in gaps["drafts"]:
        assert GAP in item["solution"] and "<output>" not in item["solution"], "nothing run"
        assert any(f["severity"] == "error" for f in item["findings"])


def test_drafting_refuses_what_it_cannot_do_and_who_may_not(studio):
    settings, _ = studio
    refusals = [({"tool": "teleport"}, "tool: 'teleport' is not one of search, python, "
                 "calculator"),
                ({"tool": "search"}, "corpus: drafting search exemplars needs the corpus"),
                ({"tool": "search", "corpus": "demo", "count": 0}, "count: must be between 1"),
                ({"tool": "search", "corpus": "demo", "k": 999}, "k: must be between 1")]
    for fields, said in refusals:
        with pytest.raises(InvalidInput, match=said.replace("(", r"\(")):
            exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="demo", **fields)
    with pytest.raises(Forbidden, match="vera is a viewer and may not draft exemplars"):
        exemplar_drafts.draft_exemplars(settings, user(settings, "vera", Role.viewer),
                                        qa_set="demo", tool="search", corpus="demo")


def test_the_api_drafts_and_the_drafts_save_as_a_set_without_errors(studio):
    """Drafts saved as they come make a set with no error, which a "try it" evaluation
    then shows two of before each question."""
    settings, model = studio
    headers = admin_headers(settings)
    with TestClient(create_app(settings)) as client:
        drafted = client.post("/api/v1/exemplar-sets/draft", headers=headers, json={
            "qa_set": "demo-span", "tool": "search", "corpus": "demo"})
        assert drafted.status_code == 200, drafted.json()
        saved = client.post("/api/v1/exemplar-sets", headers=headers, json={
            "name": "drafted", "exemplars": [
                {key: d[key] for key in ("question", "solution", "answer")}
                for d in drafted.json()["drafts"]]})
        assert saved.status_code == 201 and (saved.json()["size"], saved.json()["errors"]) == (
            3, 0)
        unknown = client.post("/api/v1/exemplar-sets/draft", headers=headers, json={
            "qa_set": "nope", "tool": "search", "corpus": "demo"})
        assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
        too_many = client.post("/api/v1/exemplar-sets/draft", headers=headers, json={
            "qa_set": "demo", "tool": "search", "corpus": "demo", "count": 11})
        assert too_many.status_code == 422
        tried = client.post("/api/v1/evaluations", headers=headers, json={  # "try it"
            "qa_set": "demo-span", "corpus": "demo", "model": str(model), "limit": 5,
            "protocol": {"exemplars": 2}, "exemplar_set": "drafted"})
        assert tried.status_code == 201, tried.json()
        assert tried.json()["params"]["exemplars"] == [
            {key: d[key] for key in ("question", "solution", "answer")}
            for d in drafted.json()["drafts"][:2]]


@needs_shared
def test_search_drafts_on_hotpotqa_take_a_second_search_where_one_does_not_reach(settings):
    """HotpotQA keeps each question's supporting titles: where a search for the question
    misses the answer, the draft searches the last supporting title too, and both blocks
    are the corpus's own."""
    with open(HOTPOT / "corpus.jsonl", "rb") as stream:
        corpus = corpora.create_corpus(settings, admin(settings), stream, "corpus.jsonl",
                                       "hotpot", start_indexing=False)
    corpora.build_corpus_index(settings, corpus["id"])
    questions = HOTPOT / "hotpot_dev_distractor_sample100.json"  # with supporting facts
    with open(questions, "rb") as stream:
        qa_sets.create_qa_set(settings, admin(settings), stream, questions.name, "hotpot-qa")
    drafted = exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="hotpot-qa",
                                              tool="search", corpus="hotpot", count=10)
    assert len(drafted["drafts"]) == 10
    searches = [written_searches(d["solution"]) for d in drafted["drafts"]]
    assert any(len(s) == 2 for s in searches), [len(s) for s in searches]
    for item, made in zip(drafted["drafts"], searches, strict=True):
        blocks = _result_blocks(item["solution"], "information")
        assert [f"\n\n<information>{b}</information>\n\n" for b in blocks] == [
            _top_k(settings, "hotpot", s.query, 3) for s in made]
        assert contains_answer(blocks[-1], [item["answer"]])


def test_the_cli_writes_drafts_a_set_upload_reads(settings, tmp_path):
    """`studio exemplars draft` writes JSONL that the exemplar upload takes as it is, and
    says on stderr what is left to write; an unknown QA set is one error line."""
    from studio.services import exemplar_sets

    load_calc_pack(settings, admin(settings))
    env = studio_env(settings.resolved_data_dir)
    out = tmp_path / "drafts.jsonl"
    done = run_studio(["exemplars", "draft", "--qa-set", "calc", "--tool", "calculator",
                       "--count", "2", "--out", str(out)], env)
    assert done.returncode == 0, done.stderr
    assert "2 drafts from 200 questions read, 0 with a part left for you to write" in done.stderr
    with open(out, "rb") as stream:
        stored = exemplar_sets.upload_exemplar_set(settings, admin(settings), stream,
                                                   out.name, "from-cli")
    assert (stored["size"], stored["errors"]) == (2, 0)
    missing = run_studio(["exemplars", "draft", "--qa-set", "nope"], env)
    assert missing.returncode == 2 and missing.stderr.strip().startswith("studio: error: ")


def test_a_correct_rollout_is_kept_as_an_exemplar_byte_for_byte(studio):
    """Its segments joined exactly as stored (the pre-filled prompt part, the model's text,
    the environment's blocks) become the solution, in a new set and then beside it; a
    rollout judged wrong is refused, and so is a viewer."""
    from sqlalchemy import update

    from studio.services import exemplar_sets
    from studio.storage.db import session_scope
    from studio.storage.tables import Rollout
    from tests.support.synthetic_runs import add_rollout, finished_run, long_rollout_segments

    settings, model = studio
    config = {"name": "r", "model": str(model),
              "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"},
              "curriculum": {"stages": [{"exemplars": 0, "steps": 1}]}}
    run_id = finished_run(settings, config, steps=1, owner=admin(settings))
    segments = long_rollout_segments(60)
    kept = add_rollout(settings, run_id, 0, segments)
    made = exemplar_drafts.keep_rollout(settings, admin(settings), run_id, kept, "harvest")
    (item,) = made["exemplars"]
    assert item["solution"] == "".join(s["text"] for s in segments)
    assert item["solution"].startswith("<think>") and "<information>" in item["solution"]
    assert (item["question"], item["answer"]) == ("Where do the ferries stop?", "Port Ondrell")
    again = exemplar_drafts.keep_rollout(settings, admin(settings), run_id, kept, "harvest")
    assert again["id"] == made["id"] and again["size"] == 2

    wrong = add_rollout(settings, run_id, 0, segments)
    with session_scope(settings.sqlalchemy_url) as session:
        session.exec(update(Rollout).where(Rollout.id == wrong).values(
            breakdown={"acc": 0.0, "answer": "Pell"}))
    with pytest.raises(InvalidInput, match=f"rollout {wrong}: its answer was not judged right"):
        exemplar_drafts.keep_rollout(settings, admin(settings), run_id, wrong, "harvest")
    with pytest.raises(Forbidden):
        exemplar_drafts.keep_rollout(settings, user(settings, "vic", Role.viewer), run_id,
                                     kept, "harvest")
    assert exemplar_sets.find_exemplar_set(settings, "harvest")["size"] == 2
