"""Rebuild the <information> blocks of the demo exemplars from the demo corpus.

Each block after a ``<search> query </search>`` of studio/demo/exemplars.jsonl
must be exactly what the studio's retriever returns for that query on
studio/demo/corpus.jsonl: the top 3 passages of BM25 (tests/services/test_demo_pack.py
checks it). Run this after editing the corpus; it rewrites the blocks in
place, leaves the rest of each trace alone, and prints the queries whose
block changed, so that you can check the <think> text that follows still
fits the passages it refers to.

    python scripts/demo_exemplar_blocks.py           # rewrite
    python scripts/demo_exemplar_blocks.py --check   # exit 1 if a block is stale

The recipe (the default Bm25Params of studio.retrieval: "en" stop words, no
stemmer): rank_bm25.BM25Okapi(epsilon=0) over each passage's title, a newline
and its text, lower-cased \\w+ tokens, bm25s's English stop words removed, ties
broken by corpus order.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bm25s.stopwords import STOPWORDS_EN
from rank_bm25 import BM25Okapi

from studio import demo
from studio.method.tags import SEARCH_TOOL, format_information, parse

STOPWORDS = frozenset(STOPWORDS_EN)
K = 3
_BLOCK = re.compile(r"\s*<information>.*?</information>\s*", re.DOTALL)


def tokens(text: str) -> list[str]:
    return [t for t in re.findall(r"\w+", text.lower()) if t not in STOPWORDS]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def searcher(corpus: list[dict]):
    bm25 = BM25Okapi([tokens(f"{p['title']}\n{p['text']}") for p in corpus], epsilon=0)

    def top(query: str, k: int = K) -> list[dict]:
        scores = bm25.get_scores(tokens(query))
        order = sorted(range(len(corpus)), key=lambda i: (-scores[i], i))
        return [corpus[i] for i in order[:k]]

    return top


def rebuild(solution: str, top) -> tuple[str, list[str]]:
    """The solution with each search call's block replaced; the queries whose block changed."""
    changed, n = [], 0
    while True:
        calls = [s for s in parse(solution) if s.kind == SEARCH_TOOL.call_tag and s.closed]
        if n == len(calls):
            return solution, changed
        call = calls[n]
        query = call.body.strip()
        block = format_information((p["title"], p["text"]) for p in top(query))
        rest = solution[call.end:]
        old = _BLOCK.match(rest)
        if old is None:
            raise SystemExit(f"no <information> block after <search> {query} </search>")
        if old.group(0) != block:
            changed.append(query)
        solution = solution[:call.end] + block + rest[old.end():]
        n += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report stale blocks")
    args = parser.parse_args(argv)
    top = searcher(read_jsonl(demo.CORPUS))
    exemplars = read_jsonl(demo.EXEMPLARS)
    stale = []
    for ex in exemplars:
        ex["solution"], changed = rebuild(ex["solution"], top)
        stale += [(ex["question"], q) for q in changed]
    for question, query in stale:
        print(f"{'stale' if args.check else 'rebuilt'}: {question!r}: <search> {query} </search>")
    if args.check:
        return 1 if stale else 0
    if stale:
        demo.EXEMPLARS.write_text(
            "".join(json.dumps(ex, ensure_ascii=False) + "\n" for ex in exemplars),
            encoding="utf-8")
    print(f"{len(stale)} block(s) rewritten in {demo.EXEMPLARS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
