"""The demo data pack: a small made-up world to try ICRL Studio on.

The Ondrell Archipelago is an invented chain of seven islands (towns, people,
inventions, festivals, ships, rivers, events).  All text is original, written
for the studio, so a model cannot know the answers and has to search for them.

* ``corpus.jsonl``: 150 passages ``{"id", "title", "text"}``.
* ``qa.jsonl``: 50 questions ``{"id", "question", "golden_answers", "hops", "support"}``;
  25 need one search, 25 a second search over a bridge entity.
* ``exemplars.jsonl``: 3 worked traces ``{"question", "solution", "answer"}`` whose
  information blocks are the top-3 BM25 passages of the corpus for each query.
"""

from pathlib import Path

DEMO_DIR = Path(__file__).parent
CORPUS = DEMO_DIR / "corpus.jsonl"
QA = DEMO_DIR / "qa.jsonl"
EXEMPLARS = DEMO_DIR / "exemplars.jsonl"
