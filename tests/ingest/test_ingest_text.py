"""Encoding policy (decode_text and the line reader) and the streaming JSON array reader."""

from __future__ import annotations

import codecs
import io
import json
from pathlib import Path

import pytest

from studio.ingest import IngestError, Limits, decode_text
from studio.ingest.errors import Source
from studio.ingest.textio import json_records, text_lines

HINT_UTF8 = ('save the file as UTF-8 (in Excel: Save As > "CSV UTF-8"; in a text editor: '
             'choose the UTF-8 encoding)')
TEXT = "Zoë's café\nnaïve — “quoted” 日本語 🙂\n"
RECORD = Limits().record("shorten it")


@pytest.mark.parametrize("data", [
    TEXT.encode("utf-8"),
    codecs.BOM_UTF8 + TEXT.encode("utf-8"),
    TEXT.encode("utf-16"),  # with its byte-order mark
    codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"),
    codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"),
    TEXT.encode("utf-32"),
])
def test_decode_text_accepts_utf8_and_marked_unicode(data: bytes):
    assert decode_text(data, "x.txt") == TEXT


def test_decode_text_refuses_windows_1252_with_its_place():
    data = "line one\nline two\nthe café\n".encode("cp1252")
    with pytest.raises(IngestError) as info:
        decode_text(data, "notes.txt")
    assert str(info.value) == ("notes.txt line 3: not UTF-8 text (byte 0xE9 at column 8); it "
                               f"looks like Windows-1252/Latin-1 text; {HINT_UTF8}")
    assert (info.value.filename, info.value.line) == ("notes.txt", 3)


def test_decode_text_refuses_bytes_that_are_no_text():
    with pytest.raises(IngestError) as info:
        decode_text(b"ok\n\x81\x8d\x8f", "blob.txt")
    assert str(info.value) == ("blob.txt line 2: not UTF-8 text (byte 0x81 at column 1); "
                               + HINT_UTF8)
    with pytest.raises(IngestError) as info:
        decode_text("hi\nthere".encode("utf-16-le"), "u16.txt")
    assert str(info.value) == ("u16.txt line 1: the file holds NUL bytes: it looks like a binary "
                               f"file or UTF-16 text without a byte-order mark; {HINT_UTF8}")
    with pytest.raises(IngestError) as info:
        decode_text(codecs.BOM_UTF16_LE + b"a\x00\x00\xdc", "bad16.txt")  # lone low surrogate
    assert str(info.value).startswith("bad16.txt: the text does not match its UTF-16 "
                                      "byte-order mark (bad bytes at offset")


def _stream(data: bytes) -> io.BufferedReader:
    return io.BufferedReader(io.BytesIO(data))


def test_text_lines_numbers_and_line_endings():
    src = Source.upload("x.txt")
    data = b"a\r\nb\n\nc"
    assert list(text_lines(_stream(data), src, RECORD)) == [(1, "a"), (2, "b"), (3, ""), (4, "c")]
    assert [t for _, t in text_lines(_stream(data), src, RECORD, keepends=True)] == [
        "a\r\n", "b\n", "\n", "c"]
    assert list(text_lines(_stream(codecs.BOM_UTF8 + b"x\ny"), src, RECORD)) == [(1, "x"),
                                                                                (2, "y")]
    assert list(text_lines(_stream("x\r\ny".encode("utf-16")), src, RECORD)) == [(1, "x"),
                                                                                 (2, "y")]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_a_line_at_the_record_limit_is_read_and_one_byte_more_is_refused(encoding: str):
    """The limit counts a line's UTF-8 bytes without its line break, whatever the file's
    encoding ("é" is two)."""
    record = Limits(max_record_bytes=12).record("shorten it")
    src = Source.upload("x.txt")
    over = "short\ncafé au lait\r\nend"  # "café au lait": 12 characters, 13 bytes
    with pytest.raises(IngestError) as info:
        list(text_lines(_stream(over.encode(encoding)), src, record))
    assert str(info.value) == ("x.txt line 2: the line is longer than 12 bytes, the limit for "
                               "one record (setting STUDIO_MAX_RECORD_BYTES); shorten it")
    exact = "café au lai\nabcdefghijkl\n"  # 12 bytes each
    assert list(text_lines(_stream(exact.encode(encoding)), src, record)) == [
        (1, "café au lai"), (2, "abcdefghijkl")]


def test_json_array_numbers_cut_at_chunk_edges():
    # Many short numbers: some are certainly split between two reads of the stream.
    values = [i * 7919 % 1000003 for i in range(400_000)]
    data = json.dumps(values).encode()
    assert len(data) > 3 << 20
    records = list(json_records(_stream(data), Source.upload("n.json"), RECORD))
    assert [r.value for r in records] == values
    assert records[-1].item == len(values)


def test_json_array_with_utf16_and_long_strings(tmp_path: Path):
    items = [{"text": "é" * (700_000 + i)} for i in range(3)]
    data = json.dumps(items, ensure_ascii=False).encode("utf-16")
    records = list(json_records(_stream(data), Source.upload("u.json"), RECORD))
    assert [r.value for r in records] == items


def test_json_array_bad_bytes_name_a_line():
    data = b'[\n{"text": "ok"},\n{"text": "caf\xe9"}\n]'
    with pytest.raises(IngestError) as info:
        list(json_records(_stream(data), Source.upload("c.json"), RECORD))
    assert str(info.value) == ("c.json line 3: not UTF-8 text (byte 0xE9 at column 14); it "
                               f"looks like Windows-1252/Latin-1 text; {HINT_UTF8}")
    far = b"[" + b'{"text": "ok"},\n' * 200_000 + b'{"text": "na\xefve"}]'
    with pytest.raises(IngestError) as info:
        list(json_records(_stream(far), Source.upload("c.json"), RECORD))
    assert (info.value.line, info.value.item) == (200_001, None)
    assert "(byte 0xEF at column 13)" in str(info.value)
    one_line = b"[" + b'{"text": "ok"},' * 200_000 + b'{"text": "na\xefve"}]'
    with pytest.raises(IngestError) as info:
        list(json_records(_stream(one_line), Source.upload("c.json"), RECORD))
    assert info.value.line == 1
    assert f"(byte 0xEF at column {1 + 15 * 200_000 + 13})" in str(info.value)
