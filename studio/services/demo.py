"""The demo pack: an original corpus, two QA sets and an exemplar set.

Stored as `demo` (the corpus, the exemplar set and the training questions) and
`demo-heldout` (the held-out questions, purpose "eval"): the split is fixed in
the pack's qa.jsonl (each row's ``split``), so a run trained on `demo` never
sees a question of `demo-heldout`. Loaded through the same services as an
upload, so a new user can launch a run a minute after installing.
"""

from __future__ import annotations

import io
import json

from studio import demo
from studio.services import corpora, exemplar_sets, qa_sets
from studio.services.access import Actor, require_member
from studio.services.errors import NotFound
from studio.settings import Settings

DEMO_NAME = "demo"
HELDOUT_NAME = "demo-heldout"
QA_SETS = {DEMO_NAME: ("train", "train"), HELDOUT_NAME: ("heldout", "eval")}
"""QA set name -> (the ``split`` of its rows in qa.jsonl, the set's purpose)."""


def _existing(find, settings: Settings, name: str = DEMO_NAME) -> dict | None:
    try:
        return find(settings, name)
    except NotFound:
        return None


def split_lines(split: str) -> bytes:
    """The lines of the pack's qa.jsonl whose ``split`` is ``split``, unchanged."""
    lines = demo.QA.read_bytes().splitlines(keepends=True)
    return b"".join(line for line in lines
                    if line.strip() and json.loads(line).get("split") == split)


def demo_pack_stored(settings: Settings) -> bool:
    """Whether every part of the pack is stored (the corpus, both QA sets, the exemplars)."""
    finds = [(corpora.find_corpus, DEMO_NAME), (exemplar_sets.find_exemplar_set, DEMO_NAME),
             *((qa_sets.find_qa_set, name) for name in QA_SETS)]
    return all(_existing(find, settings, name) is not None for find, name in finds)


def load_demo_pack(settings: Settings, actor: Actor, *, index_now: bool = False) -> dict:
    """Store what is missing of the pack, as the actor's; build the index here or queue it
    for a worker.

    Returns ``{"corpus", "qa_set", "heldout_qa_set", "exemplar_set"}``, the stored
    records (``qa_set`` is `demo`, the training questions; ``heldout_qa_set`` is
    `demo-heldout`).
    """
    require_member(actor, "load the demo pack")
    corpus = _existing(corpora.find_corpus, settings)
    if corpus is None:
        with open(demo.CORPUS, "rb") as stream:
            corpus = corpora.create_corpus(settings, actor, stream, demo.CORPUS.name, DEMO_NAME,
                                           start_indexing=not index_now)
        if index_now:
            corpus = corpora.build_corpus_index(settings, corpus["id"])
    stored = {}
    for name, (split, purpose) in QA_SETS.items():
        qa = _existing(qa_sets.find_qa_set, settings, name)
        if qa is None:
            qa = qa_sets.create_qa_set(settings, actor, io.BytesIO(split_lines(split)),
                                       demo.QA.name, name, purpose=purpose)
        stored[name] = qa
    exemplars = _existing(exemplar_sets.find_exemplar_set, settings)
    if exemplars is None:
        with open(demo.EXEMPLARS, "rb") as stream:
            exemplars = exemplar_sets.upload_exemplar_set(settings, actor, stream,
                                                          demo.EXEMPLARS.name, DEMO_NAME)
    return {"corpus": corpus, "qa_set": stored[DEMO_NAME],
            "heldout_qa_set": stored[HELDOUT_NAME], "exemplar_set": exemplars}
