"""The demo data pack (studio/demo/): well-formed, self-consistent and learnable.

Counts are the pack's as documented in studio/demo/README.md: 257 passages,
256 questions (156 one-hop, 100 two-hop), a fixed split of 196 training
questions (120 + 76) and 60 held-out ones (36 + 24) that the loader stores as
the QA sets `demo` and `demo-heldout`; beside them span_qa.jsonl, 120 one-hop
questions answered by a single short span (a date, a count or a name), 90 to train
on and 30 held out (30 and 10 of each kind), stored as `demo-span` and
`demo-span-heldout`.

The BM25 recipe below is the one the pack's exemplars were built with, and the
studio retriever's default (studio.retrieval, Bm25Params(): "en" stop words, no
stemmer): rank_bm25.BM25Okapi(epsilon=0) over each passage's title, a newline
and its text, lower-cased \\w+ tokens, bm25s's English stop words removed, ties
broken by corpus order.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest
from bm25s.stopwords import STOPWORDS_EN
from rank_bm25 import BM25Okapi

from studio import demo
from studio.method.exemplars import parse_jsonl, validate_exemplars
from studio.method.reward import normalize_answer, numbers, score
from studio.method.tags import (
    PYTHON_TOOL,
    SEARCH_TOOL,
    format_information,
    parse,
    search_queries,
    tool_calls,
)
from studio.method.tools import PythonTool, all_specs
from studio.sandbox import Limits, Sandbox
from studio.services import corpora, qa_sets
from studio.services.demo import (
    HELDOUT_NAME,
    SPAN_HELDOUT_NAME,
    SPAN_NAME,
    demo_pack_stored,
    load_calc_pack,
    load_demo_pack,
    load_math_pack,
)
from studio.settings import Settings
from tests.support.actors import admin
from tests.support.processes import studio_cli
from tests.support.scripts import load_script

STOPWORDS = frozenset(STOPWORDS_EN)
PASSAGES, QUESTIONS = 257, 256
SPLITS = {("train", 1): 120, ("train", 2): 76, ("heldout", 1): 36, ("heldout", 2): 24}
REBUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_exemplar_blocks.py"


def tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in STOPWORDS]


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


CORPUS = read_jsonl(demo.CORPUS)
QA = read_jsonl(demo.QA)
BY_ID = {p["id"]: p for p in CORPUS}
TRAIN = [q for q in QA if q["split"] == "train"]
HELDOUT = [q for q in QA if q["split"] == "heldout"]
SPAN_QA = read_jsonl(demo.SPAN_QA)
SPAN_TRAIN = [q for q in SPAN_QA if q["split"] == "train"]
SPAN_HELDOUT = [q for q in SPAN_QA if q["split"] == "heldout"]
SPAN_KINDS = ("date", "count", "name")
SPAN_SPLITS = {**{("train", k): 30 for k in SPAN_KINDS}, **{("heldout", k): 10 for k in SPAN_KINDS}}


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


def answers(q: dict) -> set[str]:
    return {normalize_answer(g) for g in q["golden_answers"]}


def kind(question: str) -> str:
    """A coarse question type, to compare the mix of the two splits."""
    q = question.lower()
    if q.startswith(("who ", "whose ")):
        return "who"
    if "what year" in q:
        return "year"
    if re.search(r"\bwhich (month|day)\b", q):
        return "month or day"
    if "how many" in q:
        return "how many"
    if re.match(r"(about |for )?how \w+", q):
        return "how long, high, far..."
    if re.search(r"\b(which|what) (town|island|lake)\b", q):
        return "where"
    return "what or which"


def test_corpus_shape():
    assert len(CORPUS) == PASSAGES
    assert [p["id"] for p in CORPUS] == [f"demo-{i:03d}" for i in range(1, PASSAGES + 1)]
    assert len({p["title"] for p in CORPUS}) == PASSAGES, "titles should be unique"
    for p in CORPUS:
        assert set(p) == {"id", "title", "text"}
        assert p["title"].strip() == p["title"] and p["title"]
        assert 40 <= len(p["text"].split()) <= 90, (p["id"], len(p["text"].split()))
        assert "<" not in p["text"] and ">" not in p["text"], p["id"]


def test_qa_shape_and_support():
    assert len(QA) == QUESTIONS
    assert [q["id"] for q in QA] == [f"demo-q{i:02d}" for i in range(1, QUESTIONS + 1)]
    assert len({normalize_answer(q["question"]) for q in QA}) == QUESTIONS
    hops = Counter(q["hops"] for q in QA)
    assert (hops[1], hops[2]) == (156, 100), hops  # about 60% one-hop, 40% two-hop
    for q in QA:
        assert set(q) == {"id", "question", "golden_answers", "hops", "support", "split"}, q["id"]
        assert q["question"].strip().endswith("?"), q["id"]
        assert q["golden_answers"] and all(normalize_answer(g) for g in q["golden_answers"])
        assert not answers(q) & {"yes", "no"}, q["id"]
        assert q["hops"] in (1, 2)
        assert len(q["support"]) == q["hops"], q["id"]
        assert len(set(q["support"])) == len(q["support"]), q["id"]
        assert all(s in BY_ID for s in q["support"]), q["id"]
        # every gold answer is a span of the last support passage (the one holding the answer)
        for gold in q["golden_answers"]:
            assert contains(BY_ID[q["support"][-1]], gold), (q["id"], gold)
            assert not contains({"title": "", "text": q["question"]}, gold), (q["id"], gold)


def test_split_is_fixed_disjoint_and_alike():
    assert Counter((q["split"], q["hops"]) for q in QA) == SPLITS
    train_questions = {normalize_answer(q["question"]) for q in TRAIN}
    assert not train_questions & {normalize_answer(q["question"]) for q in HELDOUT}
    # no held-out question asks for what a training question asks for: the same answer
    # out of the same passage
    asked = {(q["support"][-1], a) for q in TRAIN for a in answers(q)}
    for q in HELDOUT:
        assert not {(q["support"][-1], a) for a in answers(q)} & asked, q["id"]
    # the same mix of question kinds: each kind's share within 12 points of training's
    shares = {split: Counter(kind(q["question"]) for q in part)
              for split, part in (("train", TRAIN), ("heldout", HELDOUT))}
    print(f"\ndemo pack question kinds: {dict(shares['train'])} (train), "
          f"{dict(shares['heldout'])} (held out)")
    assert set(shares["train"]) == set(shares["heldout"])
    for k in shares["train"]:
        gap = shares["heldout"][k] / len(HELDOUT) - shares["train"][k] / len(TRAIN)
        assert abs(gap) <= 0.12, (k, shares)


def test_loader_stores_train_and_heldout_sets(settings):
    pack = load_demo_pack(settings, admin(settings), index_now=True)
    assert pack["corpus"]["num_passages"] == PASSAGES
    train, heldout = pack["qa_set"], pack["heldout_qa_set"]
    assert (train["name"], train["purpose"], train["num_rows"]) == ("demo", "train", len(TRAIN))
    assert (heldout["name"], heldout["purpose"], heldout["num_rows"]) == (
        HELDOUT_NAME, "eval", len(HELDOUT))
    spans, held_spans = pack["span_qa_set"], pack["span_heldout_qa_set"]
    assert (spans["name"], spans["purpose"], spans["num_rows"]) == (
        SPAN_NAME, "train", len(SPAN_TRAIN))
    assert (held_spans["name"], held_spans["purpose"], held_spans["num_rows"]) == (
        SPAN_HELDOUT_NAME, "eval", len(SPAN_HELDOUT))
    for stored, part in ((train, TRAIN), (heldout, HELDOUT), (spans, SPAN_TRAIN),
                         (held_spans, SPAN_HELDOUT)):
        assert stored["report"]["duplicate_question_count"] == 0
        rows = qa_sets.load_rows(settings, stored["id"])
        assert [(r.id, r.question, r.golden_answers) for r in rows] == [
            (q["id"], q["question"], q["golden_answers"]) for q in part]
        # every field but these three is kept as the row's meta: a span row keeps its kind
        assert [r.meta for r in rows] == [
            {k: v for k, v in q.items() if k not in ("id", "question", "golden_answers")}
            for q in part]
    assert {r.meta["kind"] for r in qa_sets.load_rows(settings, held_spans["id"])} == set(
        SPAN_KINDS)
    assert demo_pack_stored(settings)
    again = load_demo_pack(settings, admin(settings))  # nothing is stored twice
    assert [again[key]["id"] for key in ("qa_set", "heldout_qa_set", "span_qa_set",
                                         "span_heldout_qa_set")] == [
        train["id"], heldout["id"], spans["id"], held_spans["id"]]
    assert [q["name"] for q in qa_sets.list_qa_sets(settings)] == [
        "demo", HELDOUT_NAME, SPAN_NAME, SPAN_HELDOUT_NAME]


def test_a_pack_missing_a_span_set_is_not_stored_and_loading_adds_only_that_set(settings):
    """An install that loaded the pack before the span sets existed: the preset loads it
    again, and only the missing sets are stored."""
    first = load_demo_pack(settings, admin(settings), index_now=True)
    qa_sets.delete_qa_set(settings, admin(settings), first["span_heldout_qa_set"]["id"])
    assert not demo_pack_stored(settings)
    again = load_demo_pack(settings, admin(settings))
    assert demo_pack_stored(settings)
    assert [again[key]["id"] for key in ("qa_set", "heldout_qa_set", "span_qa_set")] == [
        first[key]["id"] for key in ("qa_set", "heldout_qa_set", "span_qa_set")]
    assert again["span_heldout_qa_set"]["id"] != first["span_heldout_qa_set"]["id"]
    assert again["span_heldout_qa_set"]["num_rows"] == len(SPAN_HELDOUT)
    assert len(qa_sets.list_qa_sets(settings)) == 4


def test_exemplars_are_valid_traces(search):
    exemplars = parse_jsonl(demo.EXEMPLARS.read_text(encoding="utf-8"))
    assert len(exemplars) == 3
    assert validate_exemplars(exemplars) == []
    assert validate_exemplars(exemplars, tools=all_specs()) == []  # as the studio stores
    assert max(len(search_queries(ex.solution)) for ex in exemplars) >= 2
    for ex in exemplars:
        assert score(ex.solution, [ex.answer]).acc == 1.0, ex.question
        calls = [s for s in parse(ex.solution) if s.kind == SEARCH_TOOL.call_tag and s.closed]
        assert calls
        for call in calls:
            block = format_information((p["title"], p["text"]) for p in search(call.body.strip()))
            assert ex.solution[call.end :].startswith(block), (ex.question, call.body)


def test_exemplar_blocks_script_finds_nothing_stale(capsys):
    assert load_script(REBUILD_SCRIPT).main(["--check"]) == 0, capsys.readouterr().out


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


def test_questions_reach_their_passage_in_the_top_3(search):
    """The figure the pack is built for: search the question, read the top 3."""
    one_hop = [q for q in QA if q["hops"] == 1]
    found = [q for q in one_hop if q["support"][0] in {p["id"] for p in search(q["question"])}]
    rate = len(found) / len(one_hop)
    held = [q for q in found if q["split"] == "heldout"]
    two_hop = [q for q in QA if q["hops"] == 2]
    first = sum(q["support"][0] in {p["id"] for p in search(q["question"])} for q in two_hop)
    print(f"\ndemo pack: 1-hop support in BM25 top 3 for {len(found)}/{len(one_hop)} "
          f"({rate:.0%}; held out {len(held)}/{SPLITS['heldout', 1]}); 2-hop first passage "
          f"in top 3 for {first}/{len(two_hop)}")
    assert rate >= 0.95, [q["id"] for q in one_hop if q not in found]  # measured: 156/156
    assert first / len(two_hop) >= 0.9  # measured: 98/100


# --- the short-span questions (span_qa.jsonl): a date, a count or a name from one passage ---


def span_asks(q: dict) -> set[tuple[str, str]]:
    """What a question asks for: (the passage holding the answer, a normalised answer)."""
    return {(q["support"][-1], a) for a in answers(q)}


def test_span_qa_shape_and_support():
    assert [q["id"] for q in SPAN_QA] == [f"demo-s{i:03d}" for i in range(1, len(SPAN_QA) + 1)]
    asked = {normalize_answer(q["question"]) for q in QA} | {
        normalize_answer(ex["question"]) for ex in read_jsonl(demo.EXEMPLARS)}
    span_questions = [normalize_answer(q["question"]) for q in SPAN_QA]
    assert len(set(span_questions)) == len(SPAN_QA)
    assert not set(span_questions) & asked, "a span question is already in qa.jsonl or exemplars"
    for q in SPAN_QA:
        assert set(q) == {"id", "question", "golden_answers", "hops", "support", "kind",
                          "split"}, q["id"]
        assert q["question"].strip().endswith("?"), q["id"]
        assert (q["hops"], len(q["support"]), q["kind"] in SPAN_KINDS) == (1, 1, True), q["id"]
        for gold in q["golden_answers"]:
            assert 1 <= len(gold.split()) <= 3, (q["id"], gold)
            assert contains(BY_ID[q["support"][0]], gold), (q["id"], gold)
            assert not contains({"title": "", "text": q["question"]}, gold), (q["id"], gold)
        # the last answer is the bare date, number or name; a count may come first with its
        # unit ("2,214 metres", "2,214")
        bare = q["golden_answers"][-1]
        assert re.fullmatch(SPAN_SHAPES[q["kind"]], bare), (q["id"], bare)
        assert all(g == bare or g.startswith(bare + " ") for g in q["golden_answers"]), q["id"]


_NUMBER_WORD = ("(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
                "thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:-[a-z]+)?")
SPAN_SHAPES = {
    "date": r"\d{4}|(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|(?:January|February|March|April"
            r"|May|June|July|August|September|October|November|December)",
    "count": rf"\d[\d,]*|{_NUMBER_WORD}(?: hundred| thousand)?",
    "name": r"[A-Z][\w']*(?: (?:of )?[A-Z][\w']*)*",
}
"""What the bare answer of each kind of span question looks like."""


def test_span_split_is_fixed_and_asks_nothing_asked_elsewhere():
    assert Counter((q["split"], q["kind"]) for q in SPAN_QA) == SPAN_SPLITS
    assert len({q["support"][0] for q in SPAN_QA}) == len(SPAN_QA), "one question a passage"
    # no span question asks for an answer out of a passage that qa.jsonl already asks for
    asked = set().union(*(span_asks(q) for q in QA))
    for q in SPAN_QA:
        assert not span_asks(q) & asked, q["id"]
    # and no held-out one for what a training one asks for
    trained = set().union(*(span_asks(q) for q in SPAN_TRAIN))
    for q in SPAN_HELDOUT:
        assert not span_asks(q) & trained, q["id"]


def test_span_questions_reach_their_passage_in_the_top_3(search):
    found = {q["id"] for q in SPAN_QA if q["support"][0] in {p["id"] for p in search(q["question"])}}
    per = {(split, k): sum(q["id"] in found for q in SPAN_QA if (q["split"], q["kind"]) == (split, k))
           for split, k in SPAN_SPLITS}
    print(f"\ndemo pack span questions: support in BM25 top 3 for {len(found)}/{len(SPAN_QA)}; "
          + ", ".join(f"{split} {k} {n}/{SPAN_SPLITS[split, k]}" for (split, k), n in per.items()))
    assert len(found) == len(SPAN_QA), [q["id"] for q in SPAN_QA if q["id"] not in found]


# --- the math pack (studio/demo/math): numeric answers, code exemplars, no corpus -----------

MATH_QA = read_jsonl(demo.MATH_QA)
MATH_TRAIN = [q for q in MATH_QA if q["split"] == "train"]
MATH_HELDOUT = [q for q in MATH_QA if q["split"] == "heldout"]
MATH_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "math_pack.py"


def half_up(value: Fraction, places: int) -> Fraction:
    """``value`` (positive) rounded half up to ``places`` decimals."""
    scale = 10 ** places
    return Fraction(math.floor(value * scale + Fraction(1, 2)), scale)


def reference_answer(kind: str, v: dict) -> Fraction:
    """Each template's answer redone here in fractions, from the numbers the question states."""
    F = Fraction
    if kind == "unit_price":
        return F(v["total"]) * v["asked"] / v["count"]
    if kind == "discount_tax":
        return half_up(F(v["price"]) * F(100 - v["discount_percent"], 100)
                       * F(100 + v["tax_percent"], 100), 2)
    if kind == "two_leg_distance":
        return v["speed1"] * v["hours"] + F(v["speed2"] * v["minutes"], 60)
    if kind == "fill_time":
        return 60 / (F(1, v["hours_a"]) + F(1, v["hours_b"]))
    if kind == "ages":  # y + later + y + gap + later = sum
        return F(v["sum_later"] - 2 * v["years_later"] - v["gap"], 2)
    if kind == "sum_of_products":
        return sum(c * F(p) for c, p in zip(v["counts"], v["prices"], strict=True))
    if kind == "population":
        return half_up(v["start"] * F(100 + v["grow_percent"], 100)
                       * F(100 - v["fall_percent"], 100), 0)
    if kind == "average_needed":
        return F(5 * v["target"] - sum(v["scores"]))
    if kind == "paint_mix":
        return F(v["red_litres"] * (v["red"] + v["white"]), v["red"])
    if kind == "compound_interest":
        return half_up(v["principal"] * (1 + F(v["rate_percent"], 100)) ** v["years"], 2)
    if kind == "bags_needed":
        return F(math.ceil(F(v["grams_per_batch"] * v["batches"], 1000 * v["kilograms_per_bag"])))
    if kind == "average_speed":
        hours = F(v["distance1"], v["speed1"]) + F(v["distance2"], v["speed2"])
        return half_up((v["distance1"] + v["distance2"]) / hours, 1)
    if kind == "overtime_pay":
        wage = F(v["wage"])
        return 40 * wage + F(3, 2) * wage * (v["hours"] - 40)
    raise AssertionError(f"no reference for {kind}")


def test_math_pack_shape_split_and_answers():
    assert (len(MATH_QA), len(MATH_TRAIN), len(MATH_HELDOUT)) == (260, 200, 60)
    assert [q["id"] for q in MATH_QA] == [f"math-q{i:03d}" for i in range(1, 261)]
    kinds = Counter(q["kind"] for q in MATH_QA)
    assert len(kinds) == 13 and set(kinds.values()) == {20}
    assert {q["kind"] for q in MATH_HELDOUT} == set(kinds), "every kind is held out too"
    for q in MATH_QA:
        assert set(q) == {"id", "question", "golden_answers", "kind", "values", "split"}, q["id"]
        assert q["question"].endswith("?")
        (gold,) = q["golden_answers"]
        want = reference_answer(q["kind"], q["values"])
        assert numbers(gold) == [want], (q["id"], gold, want)
        # the numbers the answer is computed from are the ones the question states
        stated = set(numbers(q["question"]))
        flat = [x for value in q["values"].values()
                for x in (value if isinstance(value, list) else [value])]
        assert {Fraction(str(x)) for x in flat} <= stated, q["id"]
    integral = sum(numbers(q["golden_answers"][0])[0].denominator == 1 for q in MATH_QA)
    print(f"\nmath pack: {integral}/{len(MATH_QA)} integer answers")
    assert integral > len(MATH_QA) / 2
    train_asks = {(q["kind"], json.dumps(q["values"], sort_keys=True)) for q in MATH_TRAIN}
    assert len(train_asks) == len(MATH_TRAIN)
    for q in MATH_HELDOUT:
        assert (q["kind"], json.dumps(q["values"], sort_keys=True)) not in train_asks, q["id"]
    assert not {q["question"] for q in MATH_TRAIN} & {q["question"] for q in MATH_HELDOUT}


def test_math_pack_files_are_what_the_script_writes(capsys):
    assert load_script(MATH_SCRIPT).main(["--check"]) == 0, capsys.readouterr().out


def test_math_exemplars_run_in_the_sandbox_and_print_their_outputs():
    """Each exemplar validates with the code tool, its answer scores in numeric mode, and
    after each <code> call comes exactly the block the python tool makes of the sandbox's run
    of that code."""
    exemplars = parse_jsonl(demo.MATH_EXEMPLARS.read_text(encoding="utf-8"))
    assert len(exemplars) == 3
    assert validate_exemplars(exemplars, tools=(PYTHON_TOOL,)) == []
    assert validate_exemplars(exemplars, tools=all_specs()) == []
    asked = {normalize_answer(q["question"]) for q in MATH_QA}
    tool = PythonTool(Sandbox(Limits(wall_seconds=20)).run_batch)
    calls = [(ex, c) for ex in exemplars for c in tool_calls(ex.solution, (PYTHON_TOOL,))]
    assert len(calls) == 4
    runs = tool.execute([call.query for _, call in calls])
    for (ex, call), run in zip(calls, runs, strict=True):
        assert run.error is None and run.stdout.strip(), (ex.question, run)
        assert ex.solution[call.end:].startswith(tool.observation(run)), call.query
    for ex in exemplars:
        assert normalize_answer(ex.question) not in asked
        result = score(ex.solution, [ex.answer], tools=(PYTHON_TOOL,), answer_match="numeric")
        assert (result.acc, result.format) == (1.0, 1.0), ex.question


TOOL_PACKS = {"math": (load_math_pack, "--math", 200, MATH_HELDOUT),
              "calc": (load_calc_pack, "--calc", 260,
                       [q for q in read_jsonl(demo.CALC_QA) if q["split"] == "heldout"])}
"""The packs without a corpus: their loader, CLI flag, training questions, held-out rows."""


@pytest.mark.parametrize("pack", list(TOOL_PACKS))
def test_a_tool_pack_loads_without_a_corpus(migrated_db_url, tmp_path, pack):
    load, _, trained, held = TOOL_PACKS[pack]
    settings = Settings(data_dir=tmp_path / "data", database_url=migrated_db_url)
    settings.resolved_data_dir.mkdir(parents=True)
    stored = load(settings, admin(settings))
    train, heldout, exemplars = stored["qa_set"], stored["heldout_qa_set"], stored["exemplar_set"]
    assert (train["name"], train["purpose"], train["num_rows"]) == (pack, "train", trained)
    assert (heldout["name"], heldout["purpose"], heldout["num_rows"]) == (
        f"{pack}-heldout", "eval", 60)
    assert (exemplars["name"], exemplars["size"], exemplars["errors"], exemplars["warnings"]) \
        == (pack, 3, 0, 0)
    rows = qa_sets.load_rows(settings, heldout["id"])
    assert [(r.id, r.golden_answers, r.meta["values"]) for r in rows] == [
        (q["id"], q["golden_answers"], q["values"]) for q in held]
    assert corpora.list_corpora(settings) == []
    again = load(settings, admin(settings))  # nothing is stored twice
    assert again["exemplar_set"]["id"] == exemplars["id"]
    assert len(qa_sets.list_qa_sets(settings)) == 2


@pytest.mark.parametrize("pack", list(TOOL_PACKS))
def test_the_cli_loads_a_tool_pack(tmp_path, pack):
    _, flag, trained, _ = TOOL_PACKS[pack]
    settings, cli = studio_cli(tmp_path)
    assert cli("db", "upgrade").returncode == 0
    done = cli("demo", flag)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"QA set '{pack}': {trained} questions to train on",
        f"QA set '{pack}-heldout': 60 held-out questions to evaluate on (never in '{pack}')",
        f"exemplar set '{pack}': 3 exemplars, 0 errors, 0 warnings"]
    assert qa_sets.find_qa_set(settings, pack)["num_rows"] == trained
    assert corpora.list_corpora(settings) == []


def test_the_cli_loads_the_search_pack_with_its_span_sets(tmp_path):
    settings, cli = studio_cli(tmp_path)
    assert cli("db", "upgrade").returncode == 0
    done = cli("demo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        f"QA set 'demo': {len(TRAIN)} questions to train on",
        f"QA set 'demo-heldout': {len(HELDOUT)} held-out questions to evaluate on "
        "(never in 'demo')",
        f"QA set 'demo-span': {len(SPAN_TRAIN)} short-answer questions to train on (a date, "
        "a count or a name from one passage)",
        f"QA set 'demo-span-heldout': {len(SPAN_HELDOUT)} held-out short-answer questions to "
        "evaluate on (never in 'demo-span')",
        "exemplar set 'demo': 3 exemplars, 0 errors, 0 warnings"]
    assert demo_pack_stored(settings)


def test_the_cli_loads_one_pack_at_a_time(tmp_path):
    _, cli = studio_cli(tmp_path)
    both = cli("demo", "--math", "--calc")
    assert (both.returncode, both.stdout) == (2, "")
    assert both.stderr.strip() == "studio: error: --math, --calc: one pack at a time"
