"""Uploads of corpora, QA sets and exemplar sets: what is refused, and that a refused upload
leaves no row and no file behind."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from studio.retrieval.passages import MAX_WORD_CHARS
from studio.services import corpora, exemplar_sets, qa_sets, uploads
from studio.services.errors import InvalidInput
from studio.settings import Settings
from tests.conftest import free_port
from tests.support.actors import admin
from tests.support.processes import run_studio, start_studio, stop, studio_env, wait_for

GOOD_FILES = {
    "corpus": ("docs.jsonl", b'{"text": "The moss lamp burns for a week."}\n'),
    "qa": ("qa.csv", b"question,answer\nWho lit the lamp?,Ada\n"),
    "exemplars": ("ex.jsonl", b'{"question": "q", "solution": "<answer>a</answer>"}\n'),
}


def _zip_of(members: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return buf.getvalue()


def _upload(kind: str) -> Callable[..., dict]:
    """The service storing an upload of `kind`, called as the studio's admin."""
    store = {"corpus": lambda s, actor, *args, **options: corpora.create_corpus(
                 s, actor, *args, start_indexing=False, **options),
             "qa": qa_sets.create_qa_set,
             "exemplars": exemplar_sets.upload_exemplar_set}[kind]
    return lambda s, *args, **options: store(s, admin(s), *args, **options)


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


@pytest.mark.parametrize("kind", GOOD_FILES)
@pytest.mark.parametrize(("name", "code", "position"),
                         [("lamp\u202egnp.exe", "202E", 5), ("la\u200bmp", "200B", 3),
                          ("\u2067lamp", "2067", 1), ("lamp\ufeff", "FEFF", 5)])
def test_names_with_invisible_formatting_are_refused(settings, kind, name, code, position):
    """A bidi override makes a name read backwards; a zero-width space makes two names look
    the same."""
    filename, data = GOOD_FILES[kind]
    err = _refused(settings, kind, filename, data, name)
    assert str(err) == (f"name: the name holds an invisible formatting character (U+{code} at "
                        f"character {position}) that can make it look like another; remove it")


@pytest.mark.parametrize("code", [0x200D, 0x200C, 0x00AD, 0x034F, 0x115F, 0x3164, 0xFE0F,
                                  0xE0001, 0x1D173, 0xFFF9])
def test_names_with_other_invisible_characters_are_refused(settings, code):
    """Joiners outside the scripts that need them, a soft hyphen, the grapheme joiner, the
    Hangul fillers, a variation selector, a language tag, a musical format character and an
    annotation anchor each still made a name look like another (S5)."""
    filename, data = GOOD_FILES["qa"]
    err = _refused(settings, "qa", filename, data, f"la{chr(code)}mp")
    assert str(err) == (f"name: the name holds an invisible formatting character (U+{code:04X} "
                        "at character 3) that can make it look like another; remove it")


@pytest.mark.parametrize("name", ["\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
                                  "\u0915\u094d\u200d\u0937 set"],
                         ids=["persian-zwnj", "devanagari-zwj"])
def test_a_joiner_between_letters_of_a_script_that_needs_it_is_kept(settings, name):
    filename, data = GOOD_FILES["qa"]
    assert _upload("qa")(settings, io.BytesIO(data), filename, name)["name"] == name


def test_names_that_are_refused_elsewhere_too(settings):
    """The JSON-made exemplar set and a QA split's halves go through the same check."""
    with pytest.raises(InvalidInput, match=r"^name: the name holds a control character"):
        exemplar_sets.create_exemplar_set(settings, admin(settings), "bad\x00name")
    source = qa_sets.create_qa_set(settings, admin(settings), io.BytesIO(b"question,answer\nq1,a\nq2,b\n"),
                                   "qa.csv", "source")
    with pytest.raises(InvalidInput, match=r"^name: the name holds a control character"):
        qa_sets.split_qa_set(settings, admin(settings), source["id"], eval_fraction=0.5, train_name="t\x00")
    assert [q["name"] for q in qa_sets.list_qa_sets(settings)] == ["source"]


def test_printable_names_are_kept(settings):
    """Punctuation, accents and emoji are not control characters."""
    for kind, (filename, data) in GOOD_FILES.items():
        name = f"Lämp – set #1 🪔 ({kind})"
        assert _upload(kind)(settings, io.BytesIO(data), "Ünïcode " + filename,
                             name)["name"] == name


# --- the row limit, at its default ------------------------------------------------------

READER = """
import json, resource, sys
from pathlib import Path
from studio.services import corpora, qa_sets
from studio.services.auth import first_admin
from studio.services.errors import InvalidInput
from studio.settings import Settings

settings, path = Settings(data_dir=Path(sys.argv[1])), Path(sys.argv[2])
actor = first_admin(settings)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(path, "rb") as stream:
    try:
        if path.suffix == ".csv":
            qa_sets.create_qa_set(settings, actor, stream, path.name, "big")
        else:
            corpora.create_corpus(settings, actor, stream, path.name, "big", start_indexing=False,
                                  split_on_blank_lines=True)
        detail = None
    except InvalidInput as exc:
        detail = str(exc)
grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"detail": detail, "grown_mb": grown_kb / 1024}))
"""
"""Upload a file through the service in a process of its own, and say how much its peak
memory grew from the moment the service was imported."""

DEFAULT_ROWS = 5_000_000


@pytest.mark.parametrize(("filename", "row", "place", "what", "hint"), [
    ("questions.csv", b"q,a\n", f"line {DEFAULT_ROWS + 2}", "questions",
     "split the file or raise the limit"),
    ("notes.txt", b"p.\n\n", f"line {2 * DEFAULT_ROWS + 1}", "documents",
     "split the corpus into several uploads or raise the limit"),
], ids=["qa-csv", "text-corpus-paragraphs"])
def test_a_20_mb_upload_over_the_default_row_limit_is_refused_in_bounded_memory(
        settings, tmp_path, filename, row, place, what, hint):
    assert settings.max_upload_rows == DEFAULT_ROWS
    path = tmp_path / filename
    path.write_bytes((b"question,answer\n" if filename.endswith(".csv") else b"")
                     + row * (DEFAULT_ROWS + 1))
    assert path.stat().st_size >= 20_000_000
    admin(settings)  # the child uploads as the studio's admin
    before = _stored(settings)
    done = subprocess.run([sys.executable, "-c", READER, str(settings.resolved_data_dir),
                           str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["detail"] == (f"{filename} {place}: more than {DEFAULT_ROWS} {what}, the limit "
                                f"for one upload (setting STUDIO_MAX_UPLOAD_ROWS); {hint}")
    # Kept as they were read, 5 million questions take gigabytes, and even the hashes of 5
    # million document ids (all a corpus upload keeps) take over 400 MB.
    assert result["grown_mb"] < 64, result
    assert _stored(settings) == before


# --- one text document of many megabytes ----------------------------------------------------


def test_a_zip_of_one_huge_text_file_is_stored_and_indexed_in_memory_far_below_its_size(
        settings):
    """A 128 KB zip holding 128 MiB of "a" in one .txt, no space and no line break (issue 30,
    D2, a zip bomb): storing it and building its index each take a few tens of megabytes at
    most, while reading the text whole took twice its size to store and more to index."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf, \
            zf.open("bomb.txt", "w") as member:
        for _ in range(128):
            member.write(b"a" * (1 << 20))
    assert len(archive.getvalue()) < 200_000
    tracemalloc.start()
    try:
        stored = _upload("corpus")(settings, io.BytesIO(archive.getvalue()), "bomb.zip", "bomb")
        store_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        indexed = corpora.build_corpus_index(settings, stored["id"])
        index_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert store_peak < 16 << 20, store_peak
    assert index_peak < 48 << 20, index_peak
    words = math.ceil((128 << 20) / MAX_WORD_CHARS)  # the one long word, cut
    assert (indexed["status"], indexed["num_documents"]) == ("ready", 1)
    assert indexed["num_passages"] == math.ceil(words / settings.passage_words)


# --- one record over the record limit --------------------------------------------------------


def _lines_of(n: int) -> bytes:
    """``n`` bytes in lines of 100: no line is long, the record they make is."""
    return (b"a" * 99 + b"\n") * (n // 100)


RECORD_LIMIT = 1 << 20
LONG_RECORDS = {
    "corpus-jsonl-line": ("corpus", "docs.jsonl", {},
                          b'{"text": "t"}\n{"text": "' + b"a" * (16 << 20) + b'"}\n',
                          "docs.jsonl line 2: the line",
                          "split the document into smaller ones or raise the limit"),
    "qa-csv-field": ("qa", "qa.csv", {},
                     b'question,answer\nq,a\nr,"' + _lines_of(16 << 20) + b'"\n',
                     "qa.csv line 3: the row", 'a quote (") is probably left open: check the '
                     "quotes from this line on, or raise the limit"),
    "corpus-paragraph": ("corpus", "notes.txt", {"split_on_blank_lines": True},
                         b"first\n\n" + _lines_of(16 << 20), "notes.txt line 3: the paragraph",
                         "put blank lines between its paragraphs, or upload the file as one "
                         'document of any length (leave "a blank line starts a new document", '
                         "split_on_blank_lines, off), or raise the limit"),
    "exemplars-jsonl-line": ("exemplars", "ex.jsonl", {},
                             b'{"question": "q", "solution": "' + b"s" * (16 << 20) + b'"}\n',
                             "ex.jsonl line 1: the line", "shorten the exemplar or raise the limit"),
}


@pytest.mark.parametrize("case", LONG_RECORDS)
def test_a_record_over_the_record_limit_is_a_422_that_stores_nothing_and_holds_little(
        settings, case):
    """Issue 30: a 16 MiB JSONL line, CSV cell or paragraph with STUDIO_MAX_RECORD_BYTES at
    1 MiB is refused naming its file, line, the bound and what to do, stores nothing, and is
    never held whole: the upload's peak traced memory stays under 8 MiB, where the readers
    took 41 to 80 MiB to read such a line, cell or paragraph whole (docs/uploads.md)."""
    kind, filename, options, data, place, hint = LONG_RECORDS[case]
    small = settings.model_copy(update={"max_record_bytes": RECORD_LIMIT})
    _upload(kind)(small, io.BytesIO(GOOD_FILES[kind][1]), GOOD_FILES[kind][0], "earlier")
    before = _stored(small)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput) as info:
            _upload(kind)(small, io.BytesIO(data), filename, "long", **options)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.status_code == 422
    assert str(info.value) == (f"{place} is longer than 1.0 MB (1048576 bytes), the limit for "
                               f"one record (setting STUDIO_MAX_RECORD_BYTES); {hint}")
    assert _stored(small) == before
    assert peak < 8 << 20, peak


# --- refused uploads leave nothing behind --------------------------------------------------


def _symlink_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("docs/a.txt", "fine")
        link = zipfile.ZipInfo("docs/passwd.txt")
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    return buf.getvalue()


FOUR_ROWS = {
    "corpus-jsonl": ("corpus", "docs.jsonl", b'{"text": "t"}\n' * 4, "docs.jsonl line 4"),
    "corpus-csv": ("corpus", "docs.csv", b"text\n" + b"t\n" * 4, "docs.csv line 5"),
    "corpus-zip": ("corpus", "docs.zip", _zip_of({"a.txt": "a", "b.txt": "b", "c.md": "c",
                                                  "d.txt": "d"}), "docs.zip: d.txt"),
    "qa-csv": ("qa", "qa.csv", b"question,answer\n" + b"q,a\n" * 4, "qa.csv line 5"),
    "qa-hotpotqa-json": ("qa", "hotpot.json", b"[" + b",".join(
        [b'{"_id": null, "question": "q", "answer": "a"}'] * 4) + b"]",
        "hotpot.json item 4 (line 1)"),
    "exemplars-text-blocks": (
        "exemplars", "ex.txt",
        b"===== Example 1 =====\nExample Problem: q\nExample Solution: s\n" * 4,
        "ex.txt line 10"),
}


@pytest.mark.parametrize("case", FOUR_ROWS)
def test_a_refused_upload_leaves_no_row_and_no_file(settings, case):
    kind, filename, data, place = FOUR_ROWS[case]
    with_three = settings.model_copy(update={"max_upload_rows": 3})
    _upload(kind)(with_three, io.BytesIO(GOOD_FILES[kind][1]), GOOD_FILES[kind][0], "earlier")
    err = _refused(with_three, kind, filename, data, "big")
    assert str(err).startswith(f"{place}: more than 3 ")
    assert "(setting STUDIO_MAX_UPLOAD_ROWS)" in str(err)


def test_a_zip_with_a_symbolic_link_is_refused_and_leaves_nothing(settings):
    err = _refused(settings, "corpus", "docs.zip", _symlink_zip(), "linked")
    assert str(err).startswith('docs.zip: member "docs/passwd.txt" is a symbolic link; ')


# --- staging files left by a killed process ----------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys
from pathlib import Path
from studio.services import uploads
from studio.settings import Settings

with uploads.stage_upload(sys.stdin.buffer, "big.jsonl", Settings(data_dir=Path(sys.argv[1]))):
    print("received", flush=True)
"""
"""A web process receiving an upload: it stages what comes on stdin until stdin closes."""


def _start_writer(data_dir: Path) -> tuple[subprocess.Popen, Path]:
    """A process in the middle of receiving an upload, and its staging file."""
    tmp = data_dir / "tmp"
    before = set(tmp.glob("*")) if tmp.exists() else set()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(data_dir)], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    writer.stdin.write(b'{"text": "the first bytes of a large upload"}\n')
    writer.stdin.flush()
    new = wait_for(lambda: tmp.exists() and set(tmp.glob("*")) - before, 30,
                   "the writer's staging file")
    assert len(new) == 1
    return writer, new.pop()


def _kill(writer: subprocess.Popen) -> None:
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)


def test_staging_files_of_dead_writers_are_removed_and_those_of_live_ones_kept(settings):
    data_dir = settings.resolved_data_dir
    dead, dead_file = _start_writer(data_dir)
    live, live_file = _start_writer(data_dir)
    try:
        _kill(dead)
        old, fresh = data_dir / "tmp" / "upload-a8Fq2x", data_dir / "tmp" / "upload-k2Jd0s"
        old_partial = data_dir / "uploads" / ("ab" * 32 + ".jsonl.partial")
        old_partial.parent.mkdir()
        for path in (old, fresh, old_partial):  # an older version's, which took no lock
            path.write_bytes(b"half an upload")
        day_ago = time.time() - uploads.STALE_AFTER_S - 60
        for path in (old, old_partial):
            os.utime(path, (day_ago, day_ago))

        assert uploads.remove_stale_staging(settings) == sorted([dead_file, old, old_partial])
        assert live_file.exists() and fresh.exists() and not dead_file.exists()
        assert uploads.remove_stale_staging(settings) == []

        out, _ = live.communicate(b'{"text": "and the rest"}\n', timeout=30)
        assert (live.returncode, out) == (0, b"received\n")  # the live one finished its upload
        assert not live_file.exists()
    finally:
        if live.poll() is None:
            _kill(live)


@pytest.mark.slow
def test_studio_web_removes_stale_staging_files_as_it_starts(tmp_path):
    data_dir = tmp_path / "data"
    env = studio_env(data_dir, port=str(free_port()))
    assert run_studio(["db", "upgrade"], env).returncode == 0
    dead, dead_file = _start_writer(data_dir)
    _kill(dead)
    live, live_file = _start_writer(data_dir)
    web = start_studio(["web"], env, tmp_path / "web.log")
    try:
        wait_for(lambda: not dead_file.exists() or web.poll() is not None, 60,
                 "the dead writer's staging file to go")
        assert web.poll() is None, (tmp_path / "web.log").read_text()
        assert live_file.exists()
    finally:
        stop(web)
        _kill(live)
