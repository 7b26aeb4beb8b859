"""Uploads of corpora, QA sets and exemplar sets: what is refused, and that a refused upload
leaves no row and no file behind."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from studio.services import corpora, exemplar_sets, qa_sets
from studio.services.errors import InvalidInput
from studio.settings import Settings

GOOD_FILES = {
    "corpus": ("docs.jsonl", b'{"text": "The moss lamp burns for a week."}\n'),
    "qa": ("qa.csv", b"question,answer\nWho lit the lamp?,Ada\n"),
    "exemplars": ("ex.jsonl", b'{"question": "q", "solution": "<answer>a</answer>"}\n'),
}


def _upload(kind: str) -> Callable[..., dict]:
    return {"corpus": lambda s, stream, filename, name: corpora.create_corpus(
                s, stream, filename, name, start_indexing=False),
            "qa": qa_sets.create_qa_set,
            "exemplars": exemplar_sets.upload_exemplar_set}[kind]


def _stored(settings: Settings) -> dict:
    """Every row an upload can make, and every file under the data directory's tmp/ and
    uploads/ folders."""
    root = settings.resolved_data_dir
    return {
        "rows": (corpora.list_corpora(settings), qa_sets.list_qa_sets(settings),
                 exemplar_sets.list_exemplar_sets(settings)),
        "files": sorted(str(p.relative_to(root)) for folder in ("tmp", "uploads")
                        for p in (root / folder).rglob("*")),
    }


def _refused(settings: Settings, kind: str, filename: str, data: bytes, name: str
             ) -> InvalidInput:
    """Upload, expect a 422, and check that nothing was stored."""
    before = _stored(settings)
    with pytest.raises(InvalidInput) as info:
        _upload(kind)(settings, io.BytesIO(data), filename, name)
    assert info.value.status_code == 422
    assert _stored(settings) == before
    return info.value


@pytest.mark.parametrize("kind", GOOD_FILES)
@pytest.mark.parametrize(("name", "code", "position"),
                         [("lamp\x00set", "0000", 5), ("lamp\nset", "000A", 5),
                          ("\x1b[31mred", "001B", 1), ("para\u2029graph", "2029", 5)])
def test_names_with_control_characters_are_refused(settings, kind, name, code, position):
    filename, data = GOOD_FILES[kind]
    err = _refused(settings, kind, filename, data, name)
    assert str(err) == (f"name: the name holds a control character (U+{code} at character "
                        f"{position}); use printable characters only")


@pytest.mark.parametrize("kind", GOOD_FILES)
@pytest.mark.parametrize(("stem", "code"), [("lamp\x00", "0000"), ("lamp\x07", "0007"),
                                            ("lamp\r", "000D"), ("lamp\x85", "0085")])
def test_file_names_with_control_characters_are_refused(settings, kind, stem, code):
    filename, data = GOOD_FILES[kind]
    err = _refused(settings, kind, stem + filename, data, "lamp")
    assert str(err) == (f"file: the file name holds a control character (U+{code} at character "
                        "5); use printable characters only")


def test_names_that_are_refused_elsewhere_too(settings):
    """The JSON-made exemplar set and a QA split's halves go through the same check."""
    with pytest.raises(InvalidInput, match=r"^name: the name holds a control character"):
        exemplar_sets.create_exemplar_set(settings, "bad\x00name")
    source = qa_sets.create_qa_set(settings, io.BytesIO(b"question,answer\nq1,a\nq2,b\n"),
                                   "qa.csv", "source")
    with pytest.raises(InvalidInput, match=r"^name: the name holds a control character"):
        qa_sets.split_qa_set(settings, source["id"], eval_fraction=0.5, train_name="t\x00")
    assert [q["name"] for q in qa_sets.list_qa_sets(settings)] == ["source"]


def test_printable_names_are_kept(settings):
    """Punctuation, accents and emoji are not control characters."""
    for kind, (filename, data) in GOOD_FILES.items():
        name = f"Lämp – set #1 🪔 ({kind})"
        assert _upload(kind)(settings, io.BytesIO(data), "Ünïcode " + filename,
                             name)["name"] == name
