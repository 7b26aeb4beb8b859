"""Corpus readers: every format's happy path and every user error with its exact message."""

from __future__ import annotations

import csv
import io
import json
import stat
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from studio.ingest import CORPUS_SUFFIXES, Document, IngestError, Limits, read_documents
from studio.ingest.corpus import split_contents
from studio.retrieval import split_into_passages, stream_passages

HINT_UTF8 = ('save the file as UTF-8 (in Excel: Save As > "CSV UTF-8"; in a text editor: '
             'choose the UTF-8 encoding)')


def put(tmp_path: Path, data: str | bytes) -> Path:
    """The upload as the service stores it: a temp file whose name says nothing."""
    path = tmp_path / "upload-3f9a"
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def docs(tmp_path: Path, data: str | bytes, filename: str, **kwargs) -> list[Document]:
    return list(read_documents(put(tmp_path, data), filename, **kwargs))


def error(tmp_path: Path, data: str | bytes, filename: str, **kwargs) -> IngestError:
    with pytest.raises(IngestError) as info:
        list(read_documents(put(tmp_path, data), filename, **kwargs))
    assert isinstance(info.value, ValueError)
    return info.value


def zip_bytes(members: dict[str, str | bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


# --- JSONL / JSON ----------------------------------------------------------------------


def test_jsonl_with_and_without_ids(tmp_path: Path):
    data = ('{"id": "a1", "title": " Alpha ", "text": " First doc. "}\n'
            "\n"
            '{"title": "Beta", "text": "Second doc."}\r\n'
            '{"id": 7, "text": "No title."}\n')
    assert docs(tmp_path, data, "my corpus.jsonl") == [
        Document("a1", "Alpha", "First doc."),
        Document("my corpus-3", "Beta", "Second doc."),
        Document("7", "", "No title."),
    ]


def test_flashrag_contents_title_is_the_quoted_first_line(tmp_path: Path):
    data = (json.dumps({"id": "0", "contents": '"Aaron"\nAaron is a prophet.\nHe spoke.'}) + "\n"
            + json.dumps({"id": "1", "contents": "No quoted title here"}) + "\n"
            + json.dumps({"id": "2", "title": "Kept", "contents": '"Other"\nBody'}) + "\n")
    assert docs(tmp_path, data, "wiki-18.jsonl") == [
        Document("0", "Aaron", "Aaron is a prophet.\nHe spoke."),
        Document("1", "", "No quoted title here"),
        Document("2", "Kept", "Body"),
    ]
    assert split_contents('"A "quoted" name"\ntext') == ('A "quoted" name', "text")


def test_field_aliases_are_case_insensitive(tmp_path: Path):
    data = '{"DOC_ID": "x", "Heading": "H", "Body": "B"}\n{"passage": "P"}\n'
    assert docs(tmp_path, data, "c.ndjson") == [Document("x", "H", "B"), Document("c-2", "", "P")]


def test_json_array_corpus(tmp_path: Path):
    data = json.dumps([{"id": "a", "title": "T", "text": "one"}, {"text": "two"}], indent=2)
    assert docs(tmp_path, data, "c.json") == [Document("a", "T", "one"),
                                              Document("c-2", "", "two")]


def test_json_object_per_line_in_a_json_file(tmp_path: Path):
    assert docs(tmp_path, '{"text": "a"}\n{"text": "b"}\n', "c.json") == [
        Document("c-1", "", "a"), Document("c-2", "", "b")]


def test_reading_is_lazy(tmp_path: Path):
    data = '{"text": "fine"}\n{"text": broken}\n'
    it = read_documents(put(tmp_path, data), "c.jsonl")
    assert next(it) == Document("c-1", "", "fine")
    with pytest.raises(IngestError, match="line 2"):
        next(it)


def test_malformed_json_line(tmp_path: Path):
    err = error(tmp_path, '{"text": "a"}\n\n{"text": "b", id: 1}\n', "corpus.jsonl")
    assert str(err) == ("corpus.jsonl line 3: not valid JSON (Expecting property name enclosed "
                        "in double quotes at column 15); each line must hold one whole JSON "
                        "object (one document)")
    assert (err.filename, err.line, err.field, err.member) == ("corpus.jsonl", 3, None, None)


def test_missing_text_field(tmp_path: Path):
    err = error(tmp_path, '{"text": "a"}\n{"id": 1, "txt": "b"}\n', "corpus.jsonl")
    assert str(err) == ('corpus.jsonl line 2: field "text" is missing (found "id", "txt"); '
                        'each line needs {"text": ...} or {"contents": ...}')
    assert (err.line, err.field) == (2, "text")


def test_wrong_field_types(tmp_path: Path):
    err = error(tmp_path, '{"text": ["a", "b"]}\n', "c.jsonl")
    assert str(err) == 'c.jsonl line 1: field "text" must be a string, found a list'
    err = error(tmp_path, '{"text": "a", "id": {"x": 1}}\n', "c.jsonl")
    assert str(err) == 'c.jsonl line 1: field "id" must be a string or a number, found an object'
    assert err.field == "id"
    err = error(tmp_path, '{"text": "a"}\n3\n', "c.jsonl")
    assert str(err) == ('c.jsonl line 2: expected a JSON object, found a number; each line needs '
                        '{"text": ...} or {"contents": ...}')
    err = error(tmp_path, '{"text": "a"}\n["b"]\n', "c.jsonl")
    assert str(err) == ('c.jsonl line 2: expected a JSON object, found a list; each line needs '
                        '{"text": ...} or {"contents": ...}')


def test_empty_text(tmp_path: Path):
    err = error(tmp_path, '{"text": "a"}\n{"text": "  "}\n', "c.jsonl")
    assert str(err) == 'c.jsonl line 2: field "text" is empty; give the document text or remove it'
    err = error(tmp_path, '{"contents": "\\"Only a title\\"\\n"}\n', "c.jsonl")
    assert str(err) == ('c.jsonl line 1: field "contents" is empty; give the document text or '
                        "remove it")


def test_duplicate_ids(tmp_path: Path):
    err = error(tmp_path, '{"id": 1, "text": "a"}\n{"id": "1", "text": "b"}\n', "c.jsonl")
    assert str(err) == ('c.jsonl line 2: id "1" is already used by an earlier document; ids '
                        "must be unique across the upload: rename it, or leave out the id and "
                        "the studio numbers the documents")
    assert err.field == "id"


def test_json_array_errors(tmp_path: Path):
    err = error(tmp_path, '[{"text": "a"},\n {"text": "b", "x": tru}]', "c.json")
    assert str(err) == ("c.json item 2 (line 2): not valid JSON (Expecting value at line 2 "
                        "column 20); fix the JSON or convert the file to JSONL, one document "
                        "per line")
    assert (err.item, err.line) == (2, 2)
    err = error(tmp_path, '[{"text": "a"}, 3]', "c.json")
    assert str(err) == ('c.json item 2 (line 1): expected a JSON object, found a number; each '
                        'item needs {"text": ...} or {"contents": ...}')
    err = error(tmp_path, '[{"text": "a"},\n {"text": "b"}', "c.json")
    assert str(err) == ("c.json line 2: the JSON array is not closed with ]; the file may be "
                        "cut short (after 2 documents)")
    err = error(tmp_path, '[{"text": "a"} {"text": "b"}]', "c.json")
    assert str(err) == ("c.json line 1: expected , or ] after document 1 of the JSON array, "
                        "found '{'")
    err = error(tmp_path, '[{"text": "a"}] x', "c.json")
    assert str(err) == ("c.json line 1: unexpected text after the closing ] of the JSON array; "
                        "remove it")
    err = error(tmp_path, "[]", "c.json")
    assert str(err) == "c.json: no documents found; the file holds only blank lines or a header"


def test_pretty_printed_object_in_json_file(tmp_path: Path):
    err = error(tmp_path, '{\n  "text": "a"\n}\n', "c.json")
    assert str(err) == ("c.json line 1: not valid JSON (Expecting property name enclosed in "
                        "double quotes at column 2); a .json file must hold a JSON array [...] "
                        "of documents or one JSON object per line")


def test_large_json_array_streams_across_chunks(tmp_path: Path):
    items = [{"id": f"d{i}", "title": f"T{i}", "text": "word " * (i % 97 + 1) + str(i) * 3}
             for i in range(6000)]
    items.append({"id": "big", "text": "x" * 3_000_000})  # bigger than one read
    data = json.dumps(items, indent=1)
    assert len(data) > 3_000_000
    got = docs(tmp_path, data, "big.json")
    assert [d.id for d in got] == [i["id"] for i in items]
    assert [d.text for d in got] == [i["text"].strip() for i in items]


def test_malformed_item_deep_in_a_large_array(tmp_path: Path):
    good = [json.dumps({"text": "t" * 300}) for _ in range(9000)]
    good[7000] = '{"text": "oops",}'
    data = "[\n" + ",\n".join(good) + "\n]"
    err = error(tmp_path, data, "c.json")
    assert (err.item, err.line) == (7001, 7002)
    message = str(err)  # the JSON error's wording differs between Python versions
    assert message.startswith("c.json item 7001 (line 7002): not valid JSON (")
    assert message.endswith(" at line 7002 column 17); fix the JSON or convert the file to "
                            "JSONL, one document per line")


# --- CSV / TSV -------------------------------------------------------------------------


def test_csv_with_aliases_quotes_and_multiline_cells(tmp_path: Path):
    data = ('\ufeffDoc_ID,Title,Body,extra\n'
            'a,First,"one, two",x\n'
            '\n'
            ',Second,"multi\nline ""quoted""",y\n')
    assert docs(tmp_path, data, "c.csv") == [
        Document("a", "First", "one, two"),
        Document("c-4", "Second", 'multi\nline "quoted"'),
    ]


def test_csv_contents_column_gives_the_title(tmp_path: Path):
    data = 'id,contents\n1,"""Aaron""\nAaron is a prophet."\n'
    assert docs(tmp_path, data, "c.csv") == [Document("1", "Aaron", "Aaron is a prophet.")]


def test_dpr_style_tsv(tmp_path: Path):
    data = 'id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") is a prophet"\tAaron\n2\tplain\tB\n'
    assert docs(tmp_path, data, "psgs_w100.tsv") == [
        Document("1", "Aaron", 'Aaron ( or ; "Ahärôn") is a prophet'),
        Document("2", "B", "plain")]


def test_semicolon_csv_from_excel(tmp_path: Path):
    assert docs(tmp_path, "title;text\nA;one, two\n", "c.csv") == [
        Document("c-2", "A", "one, two")]


def test_utf16_tsv_from_excel(tmp_path: Path):
    data = "title\ttext\nCafé\tcrème brûlée\n".encode("utf-16")
    assert docs(tmp_path, data, "unicode.tsv") == [Document("unicode-2", "Café", "crème brûlée")]


def test_missing_text_column(tmp_path: Path):
    err = error(tmp_path, "Title,Summary\nA,b\n", "docs.csv")
    assert str(err) == (
        'docs.csv line 1: no text column: the header has "Title", "Summary"; name the column '
        'with the documents\' text one of "text", "contents", "content", "body", "passage", '
        '"passage_text", "paragraph", "paragraph_text", "document", "doc_text" (and optionally '
        'a "title" and an "id" column)')
    assert err.field == "text"


def test_csv_row_errors(tmp_path: Path):
    err = error(tmp_path, "title,text\nA,x,y\n", "c.csv")
    assert str(err) == ("c.csv line 2: 3 cells but the header has 2 columns (separated by ','); "
                        "put cells holding the separator in double quotes")
    err = error(tmp_path, 'title,text\nA,"x y\nmore\n', "c.csv")
    assert str(err) == ('c.csv line 2: a quoted cell is not closed before the end of the file; '
                        'check the quotes (") from this line on')
    err = error(tmp_path, 'title,text\nA,"x" y\n', "c.csv")
    assert str(err).startswith("c.csv line 2: not valid CSV (")
    err = error(tmp_path, "title,text\nA,\n", "c.csv")
    assert str(err) == ('c.csv line 2: column "text" is empty; give the document text or remove '
                        "the row")
    err = error(tmp_path, "title,text\n\n", "c.csv")
    assert str(err) == "c.csv: no documents found; the file holds only blank lines or a header"


def test_non_utf8_csv(tmp_path: Path):
    err = error(tmp_path, "title,text\nCafé,x\n".encode("cp1252"), "c.csv")
    assert str(err) == ("c.csv line 2: not UTF-8 text (byte 0xE9 at column 4); it looks like "
                        f"Windows-1252/Latin-1 text; {HINT_UTF8}")
    assert err.line == 2
    err = error(tmp_path, b"title,text\nA,\x81\x8d\n", "c.csv")  # not cp1252 either
    assert str(err) == f"c.csv line 2: not UTF-8 text (byte 0x81 at column 3); {HINT_UTF8}"


def test_utf16_without_bom_is_refused(tmp_path: Path):
    err = error(tmp_path, "text\nhello\n".encode("utf-16-le"), "c.csv")
    assert str(err) == ("c.csv line 1: the file holds NUL bytes: it looks like a binary file or "
                        f"UTF-16 text without a byte-order mark; {HINT_UTF8}")


# --- Parquet ---------------------------------------------------------------------------


def _parquet(path: Path, table: pa.Table, **kwargs) -> Path:
    pq.write_table(table, path, **kwargs)
    return path


def test_parquet_in_batches(tmp_path: Path):
    n = 5000
    table = pa.table({"doc_id": list(range(n)), "Title": [f"T{i}" for i in range(n)],
                      "text": [f"text {i}" for i in range(n)], "other": [1.5] * n})
    path = _parquet(tmp_path / "upload", table, row_group_size=1000)
    got = list(read_documents(path, "c.parquet"))
    assert len(got) == n
    assert got[0] == Document("0", "T0", "text 0")
    assert got[-1] == Document(str(n - 1), f"T{n - 1}", f"text {n - 1}")


def test_parquet_contents_and_generated_ids(tmp_path: Path):
    table = pa.table({"contents": ['"Aaron"\nAaron is a prophet.', "plain"]})
    path = _parquet(tmp_path / "upload", table)
    assert list(read_documents(path, "wiki.parquet")) == [
        Document("wiki-1", "Aaron", "Aaron is a prophet."), Document("wiki-2", "", "plain")]


def test_parquet_errors(tmp_path: Path):
    path = _parquet(tmp_path / "a", pa.table({"body_text": ["x"], "title": ["t"]}))
    with pytest.raises(IngestError) as info:
        list(read_documents(path, "c.parquet"))
    assert str(info.value) == (
        'c.parquet: no text column: the columns are "body_text", "title"; name the column with '
        'the documents\' text one of "text", "contents", "content", "body", "passage", '
        '"passage_text", "paragraph", "paragraph_text", "document", "doc_text" (and optionally '
        'a "title" and an "id" column)')
    path = _parquet(tmp_path / "b", pa.table({"text": [1, 2]}))
    with pytest.raises(IngestError) as info:
        list(read_documents(path, "c.parquet"))
    assert str(info.value) == ('c.parquet: column "text" holds int64 values; the text column '
                               "must hold strings")
    path = _parquet(tmp_path / "c", pa.table({"text": ["a", None]}))
    with pytest.raises(IngestError) as info:
        list(read_documents(path, "c.parquet"))
    assert str(info.value) == ('c.parquet row 2: column "text" is empty; give the document text '
                               "or remove the row")
    assert (info.value.item, info.value.line) == (2, None)
    path = _parquet(tmp_path / "d", pa.table({"text": ["a", "b", "c"]}))
    with pytest.raises(IngestError) as info:
        list(read_documents(path, "c.parquet", Limits(max_rows=2)))
    assert str(info.value) == ("c.parquet row 3: more than 2 documents, the limit for one "
                               "upload (setting STUDIO_MAX_UPLOAD_ROWS); split the corpus into "
                               "several uploads or raise the limit")
    bad = tmp_path / "e"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(IngestError, match=r"^c\.parquet: not a valid Parquet file \("):
        list(read_documents(bad, "c.parquet"))


# --- text and Markdown -----------------------------------------------------------------


def test_text_file_is_one_document(tmp_path: Path):
    data = "First paragraph.\n\nSecond paragraph.\n"
    assert docs(tmp_path, data, "notes.txt") == [
        Document("notes", "notes", "First paragraph.\n\nSecond paragraph.")]


def test_text_split_on_blank_lines(tmp_path: Path):
    data = "\nFirst paragraph\ngoes on.\n\n  \nSecond.\n"
    assert docs(tmp_path, data, "notes.txt", split_text_on_blank_lines=True) == [
        Document("notes-2", "notes", "First paragraph\ngoes on."),
        Document("notes-6", "notes", "Second.")]


def test_markdown_title_is_the_first_heading(tmp_path: Path):
    data = "```\n# a comment, not a heading\n```\nIntro.\n\n## The Title ##\n\nBody.\n"
    assert docs(tmp_path, data, "guide.md") == [Document(
        "guide", "The Title", "```\n# a comment, not a heading\n```\nIntro.\n\n\nBody.")]
    assert docs(tmp_path, "no heading here", "plain.md") == [
        Document("plain", "plain", "no heading here")]


def test_markdown_split_titles_paragraphs_by_their_heading(tmp_path: Path):
    data = ("Preface.\n\n# Install\n\nRun it.\n\nThen more.\n## Use\nCall it.\n\n"
            "```sh\n# not a heading\n\nstill code\n```\n")
    assert docs(tmp_path, data, "guide.md", split_text_on_blank_lines=True) == [
        Document("guide-1", "guide", "Preface."),
        Document("guide-5", "Install", "Run it."),
        Document("guide-7", "Install", "Then more."),
        Document("guide-9", "Use", "Call it."),
        Document("guide-11", "Use", "```sh\n# not a heading\n\nstill code\n```"),
    ]


def test_text_errors(tmp_path: Path):
    err = error(tmp_path, " \n\n", "notes.txt")
    assert str(err) == "notes.txt: the file holds only white space; give it some text or remove it"
    err = error(tmp_path, " \n\n", "notes.txt", split_text_on_blank_lines=True)
    assert str(err) == "notes.txt: no documents found; the file holds only blank lines or a header"
    err = error(tmp_path, "ok\nna\xefve\n".encode("latin-1"), "notes.txt")
    assert str(err) == ("notes.txt line 2: not UTF-8 text (byte 0xEF at column 3); it looks "
                        f"like Windows-1252/Latin-1 text; {HINT_UTF8}")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16"])
def test_a_long_text_file_reads_as_it_did_whole(tmp_path: Path, encoding: str):
    """Read in pieces of a mebibyte (issue 30, D2), a text of several mebibytes is the document
    it was when read whole: a Markdown heading after the first pieces is the title and leaves
    the text; lines, CRLF endings and multi-byte characters cut between pieces are kept; the
    passages are those of the whole text."""
    line = "Zoë's café in Ōsaka 🙂 serves naïve crème brûlée\r\n"
    head = "\n\n  " + line * 60_000 + "```\n# a comment, not a heading\n```\n"
    tail = "\n" + line * 30_000 + " \t\n\n"
    data = (head + "## The Title\r\n" + tail).encode(encoding)
    assert len(data) > 4 << 20
    (doc,) = docs(tmp_path, data, "guide.md")
    assert doc == Document("guide", "The Title", (head + tail).strip())
    assert len(list(doc.pieces())) > 3
    assert list(stream_passages(doc.id, doc.title, doc.pieces())) == split_into_passages(
        doc.id, doc.title, (head + tail).strip())
    (plain,) = docs(tmp_path, data, "notes.txt")
    assert plain == Document("notes", "notes", (head + "## The Title\r\n" + tail).strip())


@pytest.mark.parametrize("length", [10_000, 3 << 20])
def test_a_markdown_line_too_long_for_a_heading_is_text(tmp_path: Path, length: int):
    long_heading = "# " + "x" * length
    (doc,) = docs(tmp_path, f"{long_heading}\n# Short\nbody", "notes.md")
    assert doc == Document("notes", "Short", f"{long_heading}\nbody")


def test_a_bad_byte_deep_in_a_long_text_file_is_refused_with_its_line(tmp_path: Path):
    data = b"fine text\n" * 300_000 + "the caf\xe9\n".encode("latin-1")
    err = error(tmp_path, data, "notes.txt")
    assert str(err) == ("notes.txt line 300001: not UTF-8 text (byte 0xE9 at column 8); it looks "
                        f"like Windows-1252/Latin-1 text; {HINT_UTF8}")


# --- zip archives ----------------------------------------------------------------------


def test_zip_of_every_format(tmp_path: Path):
    pbuf = io.BytesIO()
    pq.write_table(pa.table({"text": ["from parquet"]}), pbuf)
    inner = zip_bytes({"deep/x.txt": "inner text"})
    data = zip_bytes({
        "docs/a.jsonl": '{"text": "from jsonl"}\n',
        "docs/b.csv": "title,text\nB,from csv\n",
        "c.tsv": "text\nfrom tsv\n",
        "d.parquet": pbuf.getvalue(),
        "notes/e.txt": "from txt",
        "f.md": "# F\nfrom md",
        "inner.zip": inner,
        "docs/": b"",
        "__MACOSX/docs/._a.jsonl": b"\x00\x05junk",
        ".hidden/g.jsonl": "not json",
        "docs/.DS_Store": b"\x00\x00",
        "Thumbs.db": b"\x00",
    })
    assert docs(tmp_path, data, "archive.zip") == [
        Document("docs/a-1", "", "from jsonl"),
        Document("docs/b-2", "B", "from csv"),
        Document("c-2", "", "from tsv"),
        Document("d-1", "", "from parquet"),
        Document("notes/e", "e", "from txt"),
        Document("f", "F", "from md"),
        Document("inner/deep/x", "x", "inner text"),
    ]


def test_zip_split_text_applies_to_members(tmp_path: Path):
    data = zip_bytes({"a.txt": "one\n\ntwo\n"})
    assert docs(tmp_path, data, "a.zip", split_text_on_blank_lines=True) == [
        Document("a-1", "a", "one"), Document("a-3", "a", "two")]


def test_zip_member_errors_name_the_member(tmp_path: Path):
    data = zip_bytes({"docs/ok.jsonl": '{"text": "a"}\n',
                      "docs/a.jsonl": '{"text": "a"}\n\n{"x": 1}'})
    err = error(tmp_path, data, "archive.zip")
    assert str(err) == ('archive.zip: docs/a.jsonl line 3: field "text" is missing (found "x"); '
                        'each line needs {"text": ...} or {"contents": ...}')
    assert (err.filename, err.member, err.line) == ("archive.zip", "docs/a.jsonl", 3)
    inner = zip_bytes({"b.csv": "title\nx\n"})
    err = error(tmp_path, zip_bytes({"in.zip": inner}), "archive.zip")
    assert str(err).startswith('archive.zip: in.zip: b.csv line 1: no text column: the header '
                               'has "title"; ')


@pytest.mark.parametrize("name", ["../evil.jsonl", "docs/../../evil.jsonl", "/etc/evil.jsonl",
                                  "C:/evil.jsonl", "..\\evil.jsonl"])
def test_zip_slip_members_are_refused(tmp_path: Path, name: str):
    err = error(tmp_path, zip_bytes({"ok.jsonl": '{"text": "a"}', name: '{"text": "b"}'}),
                "archive.zip")
    assert str(err) == (f'archive.zip: member "{name}" has an unsafe path (absolute, or with '
                        '".."); create the archive again from inside the folder, with relative '
                        "paths")


def symlink_zip(name: str, target: str, others: dict[str, str]) -> bytes:
    """A zip holding a symbolic link, as `zip -y` stores one: Unix mode S_IFLNK, the target as
    the member's content."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for other, text in others.items():
            archive.writestr(other, text)
        link = zipfile.ZipInfo(name)
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, target)
    return buf.getvalue()


@pytest.mark.parametrize("name", ["docs/passwd.txt", ".hidden-link.txt"])
def test_symlink_members_are_refused(tmp_path: Path, name: str):
    data = symlink_zip(name, "/etc/passwd", {"ok.jsonl": '{"text": "a"}'})
    err = error(tmp_path, data, "archive.zip")
    assert str(err) == (f'archive.zip: member "{name}" is a symbolic link; the studio reads only '
                        "the files themselves: create the archive again without links (zip "
                        "without -y, or with the linked files copied in)")
    nested = zip_bytes({"a.txt": "fine", "inner.zip": symlink_zip("b.txt", "../../x", {})})
    err = error(tmp_path, nested, "outer.zip")
    assert str(err).startswith('outer.zip: inner.zip: member "b.txt" is a symbolic link; ')
    assert (err.filename, err.member) == ("outer.zip", "inner.zip")


def test_zip_limits(tmp_path: Path):
    many = zip_bytes({f"d{i}.txt": f"doc {i}" for i in range(5)})
    err = error(tmp_path, many, "many.zip", limits=Limits(max_archive_members=3))
    assert str(err) == ("many.zip: the archive holds 5 entries (nested archives included), more "
                        "than the limit of 3 (setting STUDIO_MAX_ARCHIVE_MEMBERS); upload fewer, "
                        "larger files or raise the limit")
    bomb = zip_bytes({"zeros.txt": b"0" * 20_000_000})
    assert len(bomb) < 100_000
    err = error(tmp_path, bomb, "bomb.zip", limits=Limits(max_unpacked_bytes=1_000_000))
    assert str(err) == ("bomb.zip: the archive unpacks to 20.0 MB (20000000 bytes), more than "
                        "the limit of 1.0 MB (1000000 bytes) (setting STUDIO_MAX_UNPACKED_BYTES); "
                        "upload the files in several archives or raise the limit")
    inner = zip_bytes({f"x{i}.txt": "x" for i in range(3)})
    err = error(tmp_path, zip_bytes({"a.txt": "a", "in.zip": inner}), "nest.zip",
                limits=Limits(max_archive_members=4))
    assert str(err) == ("nest.zip: in.zip: the archive holds 5 entries (nested archives "
                        "included), more than the limit of 4 (setting "
                        "STUDIO_MAX_ARCHIVE_MEMBERS); upload fewer, larger files or raise the "
                        "limit")
    nested_bomb = zip_bytes({"in.zip": zip_bytes({"z.txt": b"0" * 5_000_000})})
    err = error(tmp_path, nested_bomb, "nest.zip", limits=Limits(max_unpacked_bytes=1_000_000))
    assert str(err).startswith("nest.zip: in.zip: the archive unpacks to 5.0 MB")


def test_zip_structure_errors(tmp_path: Path):
    err = error(tmp_path, b"PK\x03\x04 not really a zip", "a.zip")
    assert str(err) == ("a.zip: not a valid zip archive (File is not a zip file); create it "
                        "again with a zip tool (or upload the files one by one)")
    err = error(tmp_path, zip_bytes({"a.pdf": b"%PDF-1.4"}), "a.zip")
    assert str(err) == ('a.zip: a.pdf: unsupported file type (".pdf"); an archive may hold '
                        ".jsonl, .json, .csv, .tsv, .parquet, .txt, .md or .zip files: remove "
                        "this file from the archive (convert PDF or Word files to text first)")
    err = error(tmp_path, zip_bytes({"LICENSE": "MIT"}), "a.zip")
    assert str(err).startswith("a.zip: LICENSE: unsupported file type (no suffix); ")
    deep = zip_bytes({"in.zip": zip_bytes({"deeper.zip": zip_bytes({"a.txt": "a"})})})
    err = error(tmp_path, deep, "a.zip")
    assert str(err) == ("a.zip: in.zip: deeper.zip: archives inside archives are read one level "
                        "deep; unpack this one into its parent archive")
    err = error(tmp_path, zip_bytes({"a.txt": "a", "b.jsonl": ""}), "a.zip")
    assert str(err) == "a.zip: b.jsonl: the file is empty; remove it from the archive"
    err = error(tmp_path, zip_bytes({"b.csv": "text\n"}), "a.zip")
    assert str(err) == ("a.zip: b.csv: no documents found; the file holds only blank lines or "
                        "a header: remove it from the archive")
    err = error(tmp_path, zip_bytes({"__MACOSX/._a.txt": "x", "docs/": ""}), "a.zip")
    assert str(err) == ("a.zip: no documents found: the archive holds no .jsonl, .json, .csv, "
                        ".tsv, .parquet, .txt, .md or .zip files (hidden files and __MACOSX are "
                        "skipped)")
    dup = zip_bytes({"a.jsonl": '{"id": "1", "text": "a"}', "b.jsonl": '{"id": "1", "text": "b"}'})
    err = error(tmp_path, dup, "a.zip")
    assert str(err).startswith('a.zip: b.jsonl line 1: id "1" is already used by an earlier '
                               "document; ids must be unique across the upload")


def test_encrypted_member_is_refused(tmp_path: Path):
    data = bytearray(zip_bytes({"a.txt": "secret"}))
    central = data.index(b"PK\x01\x02")
    data[central + 8] |= 0x01  # the "encrypted" flag, as a password-protected zip sets it
    err = error(tmp_path, bytes(data), "a.zip")
    assert str(err) == ("a.zip: a.txt: the member is encrypted; create the archive without a "
                        "password")


# --- limits and file types -------------------------------------------------------------


def test_row_limit(tmp_path: Path):
    data = '{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n'
    assert len(docs(tmp_path, data, "c.jsonl", limits=Limits(max_rows=3))) == 3
    err = error(tmp_path, data, "c.jsonl", limits=Limits(max_rows=2))
    assert str(err) == ("c.jsonl line 3: more than 2 documents, the limit for one upload "
                        "(setting STUDIO_MAX_UPLOAD_ROWS); split the corpus into several uploads "
                        "or raise the limit")
    err = error(tmp_path, zip_bytes({"a.txt": "a", "b.txt": "b"}), "a.zip",
                limits=Limits(max_rows=1))
    assert str(err).startswith("a.zip: b.txt: more than 1 documents, the limit")


def test_byte_limit_is_checked_before_reading(tmp_path: Path):
    path = put(tmp_path, '{"text": "' + "a" * 3000 + '"}\n')
    with pytest.raises(IngestError) as info:
        read_documents(path, "c.jsonl", Limits(max_bytes=2000))  # raises on the call itself
    assert str(info.value) == ("c.jsonl: the file is 3.0 kB (3013 bytes), more than the upload "
                               "limit of 2.0 kB (2000 bytes) (setting STUDIO_MAX_UPLOAD_BYTES); "
                               "split it into smaller uploads or raise the limit")
    with pytest.raises(IngestError) as info:
        read_documents(put(tmp_path, "x" * 50), "c.txt", Limits(max_bytes=10))
    assert str(info.value) == ("c.txt: the file is 50 bytes, more than the upload limit of 10 "
                               "bytes (setting STUDIO_MAX_UPLOAD_BYTES); split it into smaller "
                               "uploads or raise the limit")


def test_empty_file_and_unsupported_type(tmp_path: Path):
    for name in ("c.jsonl", "c.csv", "c.txt", "c.zip", "c.parquet"):
        with pytest.raises(IngestError) as info:
            read_documents(put(tmp_path, b""), name)
        assert str(info.value) == f"{name}: the file is empty; upload a file with documents in it"
    with pytest.raises(IngestError) as info:
        read_documents(put(tmp_path, "x"), "report.docx")
    assert str(info.value) == (
        'report.docx: unsupported file type (".docx"); upload JSONL (.jsonl), JSON (.json), '
        "CSV (.csv), TSV (.tsv), Parquet (.parquet), text (.txt), Markdown (.md) or a .zip of "
        "them")
    with pytest.raises(IngestError, match="a file without a suffix"):
        read_documents(put(tmp_path, "x"), "README")
    assert ".zip" in CORPUS_SUFFIXES and ".JSONL".lower() in CORPUS_SUFFIXES
    assert docs(tmp_path, '{"text": "a"}', "UPPER.JSONL") == [Document("UPPER-1", "", "a")]


def test_documents_only_blank_lines(tmp_path: Path):
    err = error(tmp_path, "\n\n  \n", "c.jsonl")
    assert str(err) == "c.jsonl: no documents found; the file holds only blank lines or a header"
    err = error(tmp_path, "text\n", "c.csv")
    assert str(err) == "c.csv: no documents found; the file holds only blank lines or a header"


def test_archive_is_checked_before_the_first_document(tmp_path: Path):
    data = zip_bytes({"a.txt": "first", "z.docx": b"PK"})
    it = read_documents(put(tmp_path, data), "a.zip")
    with pytest.raises(IngestError, match=r'^a\.zip: z\.docx: unsupported file type \("\.docx"\)'):
        next(it)


# --- round trips -----------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1, max_size=40).filter(lambda s: s.strip() == s and s)
_docs = st.lists(st.tuples(_text, st.text(max_size=20).map(str.strip).filter(
    lambda s: "\x00" not in s), _text), min_size=1, max_size=15, unique_by=lambda d: d[0])


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_docs, fmt=st.sampled_from(["jsonl", "json", "csv", "tsv", "parquet"]))
def test_round_trip(tmp_path: Path, rows, fmt: str):
    expected = [Document(i, t, x) for i, t, x in rows]
    path = tmp_path / f"rt-{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n"
                                for i, t, x in rows), encoding="utf-8")
    elif fmt == "json":
        path.write_text(json.dumps([{"id": i, "title": t, "text": x} for i, t, x in rows],
                                   ensure_ascii=False), encoding="utf-8")
    elif fmt in ("csv", "tsv"):
        with open(path, "w", encoding="utf-8", newline="") as out:
            writer = csv.writer(out, delimiter="," if fmt == "csv" else "\t")
            writer.writerow(["id", "title", "text"])
            writer.writerows(rows)
    else:
        pq.write_table(pa.table({"id": [r[0] for r in rows], "title": [r[1] for r in rows],
                                 "text": [r[2] for r in rows]}), path)
    got = list(read_documents(path, f"corpus.{fmt}"))
    assert got == [Document(d.id.strip(), d.title.strip(), d.text.strip()) for d in expected]
