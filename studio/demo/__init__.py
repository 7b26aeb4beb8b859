"""The demo data pack: a small made-up world to try ICRL Studio on.

The Ondrell Archipelago is an invented chain of seven islands (towns, people,
inventions, festivals, ships, rivers, dishes, guilds, events).  All text is
original, written for the studio, so a model cannot know the answers and has
to search for them.

* ``corpus.jsonl``: 257 passages ``{"id", "title", "text"}`` (``demo-001`` ...).
* ``qa.jsonl``: 256 questions ``{"id", "question", "golden_answers", "hops",
  "support", "split"}``; 156 need one search, 100 a second search over a bridge
  entity ("Who founded the town where Jory Callendar was born?"). ``support``
  lists the passages that hold the bridge and the answer (the answer's last).
  ``split`` is fixed: 196 ``"train"`` questions (120 one-hop, 76 two-hop) and
  60 ``"heldout"`` ones (36 one-hop, 24 two-hop), stored by the loader as the QA
  sets ``demo`` and ``demo-heldout`` (studio.services.demo), so training on
  ``demo`` never sees a held-out question.
* ``span_qa.jsonl``: 120 more one-hop questions, the same fields and a ``kind``
  (``"date"``, ``"count"`` or ``"name"``), whose answer is one short span (1 to 3
  words) of one passage; 90 ``"train"`` and 30 ``"heldout"`` (30 and 10 of each
  kind), stored as the QA sets ``demo-span`` and ``demo-span-heldout``.
* ``exemplars.jsonl``: 3 worked traces ``{"question", "solution", "answer"}`` whose
  information blocks are the top-3 BM25 passages of the corpus for each query
  (scripts/demo_exemplar_blocks.py rebuilds them after the corpus changes).

``math/`` is a second pack, for the python tool: invented word problems with numeric
answers and worked exemplars that run code (``math/README.md``; scripts/math_pack.py
writes it). It has no corpus.

``calc/`` is the arithmetic pack, for the calculator tool: bare expressions and one- and
two-operation word problems with numbers too large to do in one's head, and worked exemplars
whose results are the calculator's own (``calc/README.md``; scripts/calc_pack.py writes it).
It has no corpus either.
"""

from pathlib import Path

DEMO_DIR = Path(__file__).parent
CORPUS = DEMO_DIR / "corpus.jsonl"
QA = DEMO_DIR / "qa.jsonl"
EXEMPLARS = DEMO_DIR / "exemplars.jsonl"
SPAN_QA = DEMO_DIR / "span_qa.jsonl"

MATH_DIR = DEMO_DIR / "math"
MATH_QA = MATH_DIR / "qa.jsonl"
MATH_EXEMPLARS = MATH_DIR / "exemplars.jsonl"

CALC_DIR = DEMO_DIR / "calc"
CALC_QA = CALC_DIR / "qa.jsonl"
CALC_EXEMPLARS = CALC_DIR / "exemplars.jsonl"
