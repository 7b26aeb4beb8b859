"""The demo packs: the search pack (an original corpus, four QA sets and an exemplar set), the
math pack for the python tool and the arithmetic pack for the calculator (two QA sets and an
exemplar set each, no corpus).

Stored as `demo` (the corpus, the exemplar set and the training questions) and
`demo-heldout` (the held-out questions, purpose "eval"), beside them `demo-span` and
`demo-span-heldout` (questions whose answer is one short span of one passage: a date, a count or
a name), as `math` and `math-heldout`, and as `calc` and `calc-heldout`:
the split is fixed in each QA file (each row's ``split``), so a run trained on `demo`
never sees a question of `demo-heldout`. Loaded through the same services as an upload, so a
new user can launch a run a minute after installing.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio import demo
from studio.services import corpora, exemplar_sets, qa_sets
from studio.services.access import Actor, require_member
from studio.services.corpora import CorpusView
from studio.services.errors import NotFound
from studio.services.exemplar_sets import ExemplarSetView
from studio.services.qa_sets import QASetView
from studio.settings import Settings


def _train_and_heldout(train: str, heldout: str) -> dict[str, tuple[str, str]]:
    """A pack's two QA sets: name -> (the ``split`` of its rows in the pack's QA file, the
    set's purpose)."""
    return {train: ("train", "train"), heldout: ("heldout", "eval")}


DEMO_NAME, HELDOUT_NAME = "demo", "demo-heldout"
QA_SETS = _train_and_heldout(DEMO_NAME, HELDOUT_NAME)
SPAN_NAME, SPAN_HELDOUT_NAME = "demo-span", "demo-span-heldout"
SPAN_QA_SETS = _train_and_heldout(SPAN_NAME, SPAN_HELDOUT_NAME)
"""The short-span questions (span_qa.jsonl), kept apart from qa.jsonl's so that each kind of
question is evaluated on its own."""
MATH_NAME, MATH_HELDOUT_NAME = "math", "math-heldout"
MATH_QA_SETS = _train_and_heldout(MATH_NAME, MATH_HELDOUT_NAME)
CALC_NAME, CALC_HELDOUT_NAME = "calc", "calc-heldout"
CALC_QA_SETS = _train_and_heldout(CALC_NAME, CALC_HELDOUT_NAME)


class ToolPack(TypedDict):
    """A pack without a corpus (math, calc), its records as stored."""

    qa_set: QASetView  # the training questions
    heldout_qa_set: QASetView  # purpose eval
    exemplar_set: ExemplarSetView


class DemoPack(TypedDict):
    """The search pack, its records as stored."""

    corpus: CorpusView
    qa_set: QASetView  # `demo`, the training questions
    heldout_qa_set: QASetView  # `demo-heldout`
    span_qa_set: QASetView  # `demo-span`
    span_heldout_qa_set: QASetView  # `demo-span-heldout`
    exemplar_set: ExemplarSetView


def _existing(find, settings: Settings, name: str = DEMO_NAME) -> dict | None:
    try:
        return find(settings, name)
    except NotFound:
        return None


def split_lines(split: str, qa_file: Path = demo.QA) -> bytes:
    """The lines of a pack's QA file whose ``split`` is ``split``, unchanged."""
    lines = qa_file.read_bytes().splitlines(keepends=True)
    return b"".join(line for line in lines
                    if line.strip() and json.loads(line).get("split") == split)


def demo_pack_stored(settings: Settings) -> bool:
    """Whether every part of the pack is stored (the corpus, its four QA sets, the
    exemplars)."""
    finds = [(corpora.find_corpus, DEMO_NAME), (exemplar_sets.find_exemplar_set, DEMO_NAME),
             *((qa_sets.find_qa_set, name) for name in (*QA_SETS, *SPAN_QA_SETS))]
    return all(_existing(find, settings, name) is not None for find, name in finds)


def calc_pack_stored(settings: Settings) -> bool:
    """Whether the arithmetic pack's two QA sets and its exemplar set are stored."""
    return _tool_pack_stored(settings, CALC_QA_SETS)


def math_pack_stored(settings: Settings) -> bool:
    """Whether the math pack's two QA sets and its exemplar set are stored."""
    return _tool_pack_stored(settings, MATH_QA_SETS)


def _tool_pack_stored(settings: Settings, sets: dict[str, tuple[str, str]]) -> bool:
    """Whether a pack without a corpus is stored: its QA sets and its exemplar set, named as
    its training set (the first of `sets`)."""
    train = next(iter(sets))
    return (_existing(exemplar_sets.find_exemplar_set, settings, train) is not None
            and all(_existing(qa_sets.find_qa_set, settings, name) is not None
                    for name in sets))


def load_demo_pack(settings: Settings, actor: Actor, *, index_now: bool = False
                   ) -> DemoPack:
    """Store what is missing of the pack, as the actor's; build the index here or queue it
    for a worker.

    Returns ``{"corpus", "qa_set", "heldout_qa_set", "span_qa_set",
    "span_heldout_qa_set", "exemplar_set"}``, the stored records (``qa_set`` is `demo`, the
    training questions; ``heldout_qa_set`` is `demo-heldout`; the span sets are `demo-span`
    and `demo-span-heldout`).
    """
    require_member(actor, "load the demo pack")
    corpus = _existing(corpora.find_corpus, settings)
    if corpus is None:
        with open(demo.CORPUS, "rb") as stream:
            corpus = corpora.create_corpus(settings, actor, stream, demo.CORPUS.name, DEMO_NAME,
                                           start_indexing=not index_now)
        if index_now:
            corpus = corpora.build_corpus_index(settings, corpus["id"])
    stored = _store_qa_sets(settings, actor, demo.QA, QA_SETS)
    spans = _store_qa_sets(settings, actor, demo.SPAN_QA, SPAN_QA_SETS)
    return {"corpus": corpus, "qa_set": stored[DEMO_NAME],
            "heldout_qa_set": stored[HELDOUT_NAME], "span_qa_set": spans[SPAN_NAME],
            "span_heldout_qa_set": spans[SPAN_HELDOUT_NAME],
            "exemplar_set": _store_exemplars(settings, actor, demo.EXEMPLARS, DEMO_NAME)}


def load_math_pack(settings: Settings, actor: Actor) -> ToolPack:
    """Store what is missing of the math pack (studio/demo/math), as the actor's: the QA sets
    `math` (training) and `math-heldout` (purpose eval) and the exemplar set `math`, worked
    traces that run Python. No corpus: the python tool searches nothing.

    Returns ``{"qa_set", "heldout_qa_set", "exemplar_set"}``, the stored records.
    """
    require_member(actor, "load the math pack")
    return _load_tool_pack(settings, actor, demo.MATH_QA, MATH_QA_SETS, demo.MATH_EXEMPLARS)


def load_calc_pack(settings: Settings, actor: Actor) -> ToolPack:
    """Store what is missing of the arithmetic pack (studio/demo/calc), as the actor's: the QA
    sets `calc` (training) and `calc-heldout` (purpose eval) and the exemplar set `calc`,
    worked traces that call the calculator. No corpus.

    Returns ``{"qa_set", "heldout_qa_set", "exemplar_set"}``, the stored records.
    """
    require_member(actor, "load the arithmetic pack")
    return _load_tool_pack(settings, actor, demo.CALC_QA, CALC_QA_SETS, demo.CALC_EXEMPLARS)


def _load_tool_pack(settings: Settings, actor: Actor, qa_file: Path,
                    sets: dict[str, tuple[str, str]], exemplars: Path) -> ToolPack:
    """A pack without a corpus: its two QA sets (training first, then held out) and its
    exemplar set, named as the training set."""
    stored = _store_qa_sets(settings, actor, qa_file, sets)
    train, heldout = sets
    return {"qa_set": stored[train], "heldout_qa_set": stored[heldout],
            "exemplar_set": _store_exemplars(settings, actor, exemplars, train)}


def _store_qa_sets(settings: Settings, actor: Actor, qa_file: Path,
                   sets: dict[str, tuple[str, str]]) -> dict[str, QASetView]:
    """Each QA set of ``sets`` (name -> (split, purpose)) stored unless it is already."""
    stored = {}
    for name, (split, purpose) in sets.items():
        qa = _existing(qa_sets.find_qa_set, settings, name)
        if qa is None:
            qa = qa_sets.create_qa_set(settings, actor, io.BytesIO(split_lines(split, qa_file)),
                                       qa_file.name, name, purpose=purpose)
        stored[name] = qa
    return stored


def _store_exemplars(settings: Settings, actor: Actor, path: Path, name: str
                     ) -> ExemplarSetView:
    exemplars = _existing(exemplar_sets.find_exemplar_set, settings, name)
    if exemplars is None:
        with open(path, "rb") as stream:
            exemplars = exemplar_sets.upload_exemplar_set(settings, actor, stream, path.name,
                                                          name)
    return exemplars
