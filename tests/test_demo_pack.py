"""The demo data pack (studio/demo/): well-formed, self-consistent and learnable.

The BM25 recipe below is the one the pack's exemplars were built with, and the
studio retriever's default (studio.retrieval, Bm25Params(): "en" stop words, no
stemmer): rank_bm25.BM25Okapi(epsilon=0) over each passage's title, a newline
and its text, lower-cased \\w+ tokens, bm25s's English stop words removed, ties
broken by corpus order.
"""

from __future__ import annotations

import json
import re

import pytest
from bm25s.stopwords import STOPWORDS_EN
from rank_bm25 import BM25Okapi

from studio import demo
from studio.method.exemplars import parse_jsonl, validate_exemplars
from studio.method.reward import normalize_answer, score
from studio.method.tags import SEARCH_TOOL, format_information, parse, search_queries

STOPWORDS = frozenset(STOPWORDS_EN)


def tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in STOPWORDS]


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


CORPUS = read_jsonl(demo.CORPUS)
QA = read_jsonl(demo.QA)
BY_ID = {p["id"]: p for p in CORPUS}


@pytest.fixture(scope="module")
def search():
    bm25 = BM25Okapi([tokens(f"{p['title']}\n{p['text']}") for p in CORPUS], epsilon=0)

    def top(query: str, k: int = 3) -> list[dict]:
        scores = bm25.get_scores(tokens(query))
        order = sorted(range(len(CORPUS)), key=lambda i: (-scores[i], i))
        return [CORPUS[i] for i in order[:k]]

    return top


def contains(passage: dict, answer: str) -> bool:
    """The normalised answer occurs as whole words in the normalised passage."""
    text = normalize_answer(f"{passage['title']} {passage['text']}")
    return f" {normalize_answer(answer)} " in f" {text} "


def test_corpus_shape():
    assert len(CORPUS) == 150
    assert [p["id"] for p in CORPUS] == [f"demo-{i:03d}" for i in range(1, 151)]
    assert len({p["title"] for p in CORPUS}) == 150, "titles should be unique"
    for p in CORPUS:
        assert set(p) == {"id", "title", "text"}
        assert p["title"].strip() == p["title"] and p["title"]
        assert 40 <= len(p["text"].split()) <= 90, (p["id"], len(p["text"].split()))
        assert "<" not in p["text"] and ">" not in p["text"], p["id"]


def test_qa_shape_and_support():
    assert len(QA) == 50
    assert len({q["id"] for q in QA}) == 50
    assert len({normalize_answer(q["question"]) for q in QA}) == 50
    hops = [q["hops"] for q in QA]
    assert hops.count(1) >= 20 and hops.count(2) >= 20, hops
    for q in QA:
        assert q["question"].strip().endswith("?"), q["id"]
        assert q["golden_answers"] and all(normalize_answer(g) for g in q["golden_answers"])
        assert q["hops"] in (1, 2)
        assert len(q["support"]) == q["hops"], q["id"]
        assert len(set(q["support"])) == len(q["support"]), q["id"]
        support = [BY_ID[s] for s in q["support"]]
        for gold in q["golden_answers"]:
            assert any(contains(p, gold) for p in support), (q["id"], gold)


def test_exemplars_are_valid_traces(search):
    exemplars = parse_jsonl(demo.EXEMPLARS.read_text(encoding="utf-8"))
    assert len(exemplars) == 3
    assert validate_exemplars(exemplars) == []
    assert max(len(search_queries(ex.solution)) for ex in exemplars) >= 2
    for ex in exemplars:
        assert score(ex.solution, [ex.answer]).acc == 1.0, ex.question
        calls = [s for s in parse(ex.solution) if s.kind == SEARCH_TOOL.call_tag and s.closed]
        assert calls
        for call in calls:
            block = format_information((p["title"], p["text"]) for p in search(call.body.strip()))
            assert ex.solution[call.end :].startswith(block), (ex.question, call.body)


def test_exemplar_questions_not_in_qa():
    asked = {normalize_answer(q["question"]) for q in QA}
    for ex in read_jsonl(demo.EXEMPLARS):
        assert normalize_answer(ex["question"]) not in asked, ex["question"]


def test_one_hop_questions_are_retrievable(search):
    one_hop = [q for q in QA if q["hops"] == 1]
    found = sum(any(p["id"] in q["support"] for p in search(q["question"], k=5)) for q in one_hop)
    rate = found / len(one_hop)
    print(f"\ndemo pack: 1-hop support in BM25 top 5 for {found}/{len(one_hop)} ({rate:.0%})")
    assert rate >= 0.8, f"only {found}/{len(one_hop)} 1-hop questions retrieve a support passage"
