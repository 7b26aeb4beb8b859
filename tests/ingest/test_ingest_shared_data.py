"""The shared real samples (../shared/data) load in the right format with the right answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studio.ingest import read_documents, read_qa
from studio.ingest.qa import normalize_question
from tests.support.shared_data import SHARED

pytestmark = pytest.mark.skipif(not SHARED.is_dir(), reason=f"no shared data at {SHARED}")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _clean(answers: list[str]) -> list[str]:
    out: list[str] = []
    for a in (a.strip() for a in answers):
        if a and a not in out:
            out.append(a)
    return out


@pytest.mark.parametrize("folder,count", [
    ("hotpotqa-dev100", 1000), ("hotpotqa-train100", 994), ("musique-train100", 1890)])
def test_corpus_jsonl_loads_every_document(folder: str, count: int):
    path = SHARED / folder / "corpus.jsonl"
    docs = list(read_documents(path, "corpus.jsonl"))
    assert len(docs) == count
    raw = _jsonl(path)
    assert len({d.id for d in docs}) == count
    for k in (0, 1, count // 2, count - 1):
        assert docs[k].id == str(raw[k]["id"])
        assert docs[k].title == raw[k]["title"].strip()
        assert docs[k].text == raw[k]["text"].strip()


def test_hotpot_corpus_first_document():
    docs = read_documents(SHARED / "hotpotqa-dev100" / "corpus.jsonl", "corpus.jsonl")
    first = next(docs)
    assert first.id == "0"
    assert first.title == "Constantin Medien"
    assert first.text.startswith("Constantin Medien AG (formerly EM.Entertainment")


@pytest.mark.parametrize("relpath,fmt,count", [
    ("hotpotqa-dev100/qa.jsonl", "flashrag-jsonl", 100),
    ("hotpotqa-dev100/hotpot_dev_distractor_sample100.json", "hotpotqa-json", 100),
    ("hotpotqa-train100/qa.jsonl", "flashrag-jsonl", 100),
    ("hotpotqa-train100/hotpotqa_train100.json", "hotpotqa-json", 100),
    ("musique-train100/qa.jsonl", "flashrag-jsonl", 100),
    ("musique-train100/musique_train100.json", "musique-json", 100),
    ("qa-only/nq-test-1000.jsonl", "flashrag-jsonl", 1000),
    ("qa-only/triviaqa-test-1000.jsonl", "flashrag-jsonl", 1000),
    ("qa-only/popqa-test-1000.jsonl", "flashrag-jsonl", 1000),
])
def test_qa_files_load_in_their_format(relpath: str, fmt: str, count: int):
    path = SHARED / relpath
    result = read_qa(path, path.name)
    assert result.fmt == fmt
    assert len(result.rows) == count
    assert result.report["count"] == count
    assert result.report["empty_answers"] == []
    assert result.report["generated_ids"] == 0
    assert len({r.id for r in result.rows}) == count
    json.dumps(result.report)  # stored as JSON by the service
    json.dumps([r.meta for r in result.rows])


@pytest.mark.parametrize("relpath", [
    "hotpotqa-dev100/qa.jsonl", "hotpotqa-train100/qa.jsonl", "musique-train100/qa.jsonl",
    "qa-only/nq-test-1000.jsonl", "qa-only/triviaqa-test-1000.jsonl",
    "qa-only/popqa-test-1000.jsonl"])
def test_flashrag_rows_match_the_raw_file(relpath: str):
    path = SHARED / relpath
    rows = read_qa(path, path.name).rows
    raw = _jsonl(path)
    for k in (0, 7, len(raw) - 1):
        assert rows[k].id == raw[k]["id"]
        assert rows[k].question == raw[k]["question"].strip()
        assert rows[k].golden_answers == _clean(raw[k]["golden_answers"])
        extra = {key: v for key, v in raw[k].items()
                 if key not in ("id", "question", "golden_answers")}
        assert rows[k].meta == extra


def test_popqa_keeps_its_metadata():
    path = SHARED / "qa-only" / "popqa-test-1000.jsonl"
    row = read_qa(path, path.name).rows[0]
    assert row.id == "test_10207"
    assert row.question == "Who was the composer of Easy Living?"
    assert row.golden_answers == ["Ralph Rainger", "Ralph Reichenthal"]
    assert row.meta["metadata"]["prop"] == "composer"


def test_popqa_duplicate_questions_are_reported_with_both_rows():
    path = SHARED / "qa-only" / "popqa-test-1000.jsonl"
    result = read_qa(path, path.name)
    dups = result.report["duplicate_questions"]
    raw = _jsonl(path)
    expected = []
    seen: dict[str, int] = {}
    for i, r in enumerate(raw):
        key = " ".join(r["question"].split()).casefold()
        if key in seen:
            expected.append((i + 1, seen[key] + 1))
        else:
            seen[key] = i
    assert expected, "the sample has repeated PopQA questions"
    assert [(d["row"], d["first_row"]) for d in dups] == expected
    for d in dups:
        assert d["line"] == d["row"] and d["first_line"] == d["first_row"]  # one row a line
        assert normalize_question(result.rows[d["row"] - 1].question) == \
            normalize_question(result.rows[d["first_row"] - 1].question)
        assert d["question"] == result.rows[d["row"] - 1].question


@pytest.mark.parametrize("folder,name", [
    ("hotpotqa-dev100", "hotpot_dev_distractor_sample100.json"),
    ("hotpotqa-train100", "hotpotqa_train100.json")])
def test_hotpotqa_original_matches_raw_and_flashrag_copy(folder: str, name: str):
    raw = json.loads((SHARED / folder / name).read_text(encoding="utf-8"))
    result = read_qa(SHARED / folder / name, name)
    flash = read_qa(SHARED / folder / "qa.jsonl", "qa.jsonl").rows
    for k in (0, 42, 99):
        row, item = result.rows[k], raw[k]
        assert row.id == item["_id"]
        assert row.question == item["question"]
        assert row.golden_answers == [item["answer"]]
        assert row.meta["type"] == item["type"] and row.meta["level"] == item["level"]
        assert row.meta["supporting_facts"] == item["supporting_facts"]
        titles = list(dict.fromkeys(f[0] for f in item["supporting_facts"]))
        assert row.meta["supporting_titles"] == titles
        assert "context" not in row.meta
    assert [(r.id, r.question) for r in result.rows] == [(r.id, r.question) for r in flash]


def test_hotpotqa_dev_first_row():
    path = SHARED / "hotpotqa-dev100" / "hotpot_dev_distractor_sample100.json"
    row = read_qa(path, path.name).rows[0]
    assert row.id == "5a7613c15542994ccc9186bf"
    assert row.golden_answers == ["Gesellschaft mit beschränkter Haftung"]
    assert row.meta["supporting_titles"] == ["VIVA Media", "Gesellschaft mit beschränkter Haftung"]


def test_musique_original_answers_are_answer_plus_aliases():
    path = SHARED / "musique-train100" / "musique_train100.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    result = read_qa(path, path.name)
    flash = read_qa(SHARED / "musique-train100" / "qa.jsonl", "qa.jsonl").rows
    first = result.rows[0]
    assert first.id == "2hop__150763_14904"
    assert first.golden_answers == ["G. Stanley Hall", "Stanley Hall"]
    assert first.meta["supporting_titles"] == ["Journal of Psychotherapy Integration",
                                               "Adolescence"]
    assert first.meta["answerable"] is True
    assert first.meta["question_decomposition"][0]["answer"] == \
        "American Psychological Association"
    assert "paragraphs" not in first.meta
    for k in range(100):
        item = raw[k]
        assert result.rows[k].golden_answers == _clean([item["answer"]] + item["answer_aliases"])
        assert result.rows[k].meta["supporting_titles"] == [
            p["title"] for p in item["paragraphs"] if p["is_supporting"]]
        assert result.rows[k].golden_answers == flash[k].golden_answers


def test_musique_as_jsonl_reads_the_same(tmp_path: Path):
    raw = json.loads((SHARED / "musique-train100" / "musique_train100.json").read_text("utf-8"))
    path = tmp_path / "upload"
    path.write_text("".join(json.dumps(item) + "\n" for item in raw), encoding="utf-8")
    result = read_qa(path, "musique_ans_v1.0_train.jsonl")
    assert result.fmt == "musique-json"
    assert [r.golden_answers for r in result.rows] == [
        r.golden_answers for r in read_qa(SHARED / "musique-train100" / "musique_train100.json",
                                          "musique_train100.json").rows]
    assert result.rows[5].meta == read_qa(
        SHARED / "musique-train100" / "musique_train100.json", "m.json").rows[5].meta


def test_explicit_format_overrides_detection():
    path = SHARED / "musique-train100" / "musique_train100.json"
    result = read_qa(path, path.name, fmt="flashrag-jsonl")
    assert result.fmt == "flashrag-jsonl"
    assert result.rows[0].golden_answers == ["G. Stanley Hall"]
    assert result.rows[0].meta["answer_aliases"] == ["Stanley Hall"]
