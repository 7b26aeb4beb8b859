"""The demo pack: an original corpus, QA set and exemplar set, each stored as `demo`.

Loaded through the same services as an upload, so a new user can launch a run
a minute after installing.
"""

from __future__ import annotations

from studio import demo
from studio.services import corpora, exemplar_sets, qa_sets
from studio.services.errors import NotFound
from studio.settings import Settings

DEMO_NAME = "demo"


def _existing(find, settings: Settings) -> dict | None:
    try:
        return find(settings, DEMO_NAME)
    except NotFound:
        return None


def load_demo_pack(settings: Settings, *, index_now: bool = False) -> dict:
    """Store what is missing of the pack; build the index here or queue it for a worker."""
    corpus = _existing(corpora.find_corpus, settings)
    if corpus is None:
        with open(demo.CORPUS, "rb") as stream:
            corpus = corpora.create_corpus(settings, stream, demo.CORPUS.name, DEMO_NAME,
                                           start_indexing=not index_now)
        if index_now:
            corpus = corpora.build_corpus_index(settings, corpus["id"])
    qa = _existing(qa_sets.find_qa_set, settings)
    if qa is None:
        with open(demo.QA, "rb") as stream:
            qa = qa_sets.create_qa_set(settings, stream, demo.QA.name, DEMO_NAME)
    exemplars = _existing(exemplar_sets.find_exemplar_set, settings)
    if exemplars is None:
        with open(demo.EXEMPLARS, "rb") as stream:
            exemplars = exemplar_sets.upload_exemplar_set(settings, stream, demo.EXEMPLARS.name,
                                                          DEMO_NAME)
    return {"corpus": corpus, "qa_set": qa, "exemplar_set": exemplars}
