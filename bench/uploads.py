"""Benchmark of the upload limits: how fast, and in how much memory, a file over the row limit
is refused, what the counting pass costs a file within it, the peak memory of one large
text file through the upload and the index build, and of one long record refused.

    .venv/bin/python bench/uploads.py                  # limit 5,000,000 (the default), 1M rows read
    .venv/bin/python bench/uploads.py --rows 20000 --accepted-rows 20000 --text-mb 5 \
        --record-mb 4 --record-limit-mb 1                                             # seconds

* Refused: a file of ROWS + 1 rows of each format, read with the limit at ROWS, in a process
  of its own; the time to the refusal, and how much the process's peak memory (max RSS)
  grew from the moment the readers were imported.
* Accepted: a file of ACCEPTED rows read whole with the limit at ACCEPTED (counting pass,
  then reading pass), against the same file with one row more, refused at the end of the
  counting pass: the counting pass's share of a full read.
* One text file: a zip holding one .txt of TEXT_MB megabytes, stored as a corpus (the upload,
  ``corpora.create_corpus``) and indexed (``corpora.build_corpus_index``), each in a process
  of its own on a fresh SQLite studio; how much each process's peak memory (VmHWM, Linux)
  grew over its size once the services were imported. Two
  contents: words (100,000 distinct ones, 12 to a line), and one long word of "a" (what a
  zip bomb holds: no space, no line break).
* One long record: a file whose one record (a JSONL line, a JSON array item, a CSV cell over
  many lines, a paragraph, a Parquet cell, an exemplar) is RECORD_MB mebibytes, read with
  the record limit at RECORD_LIMIT_MB (refused) and above the record (read whole, as every
  record was before the limit): time and peak memory growth, as for the refusals above.

Rows are short (a few bytes), which is the worst case for a row limit: a 5,000,001-row QA
CSV is 20 MB. Nothing here asserts timings; it prints markdown tables (docs/uploads.md).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studio.ingest import Limits  # noqa: E402 - the studio from this checkout

FORMATS = {
    # name: (the user's file name, the reader, the file's first bytes, one row)
    "QA CSV": ("qa.csv", "qa", b"question,answer\n", b"q,a\n"),
    "QA JSONL (FlashRAG)": ("qa.jsonl", "qa", b"", b'{"question":"q","answer":"a"}\n'),
    "QA JSON array (HotpotQA)": ("qa.json", "qa", b"[",
                                 b'{"_id":null,"question":"q","answer":"a"},'),
    "corpus txt, paragraphs": ("c.txt", "corpus", b"", b"p.\n\n"),
    "corpus CSV": ("c.csv", "corpus", b"text\n", b"t\n"),
    "corpus JSONL": ("c.jsonl", "corpus", b"", b'{"text":"t"}\n'),
    "exemplars JSONL": ("ex.jsonl", "exemplars", b"", b'{"question":"q","solution":"s"}\n'),
}

TEXT_CONTENTS = ("words", "one long word")

READ = """
import json, resource, sys, time
from pathlib import Path
from studio.ingest import IngestError, Limits, read_documents, read_exemplar_file, read_qa

path, filename, reader, limit = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
limits = Limits(max_rows=limit, max_record_bytes=int(sys.argv[5]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
try:
    if reader == "qa":
        rows = len(read_qa(path, filename, limits).rows)
    elif reader == "exemplars":
        rows = len(read_exemplar_file(path, filename, limits))
    else:
        rows = sum(1 for _ in read_documents(path, filename, limits,
                                             split_text_on_blank_lines=True))
    refusal = None
except IngestError as exc:
    rows, refusal = None, str(exc)
seconds = time.perf_counter() - start
grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"seconds": seconds, "rows": rows, "refusal": refusal,
                  "grown_mb": grown_kb / 1024}))
"""


STORE = """
import json, sys, time
from pathlib import Path
from studio.storage import db
from studio.services import auth, corpora
from studio.settings import Settings

settings, stage, arg = Settings(data_dir=Path(sys.argv[1])), sys.argv[2], sys.argv[3]
if stage == "setup":
    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    with db.session_scope(settings.sqlalchemy_url) as session:
        auth.bootstrap_admin(session)
    sys.exit()
actor = auth.first_admin(settings)

def status_mb(key):
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(key + ":"))
    return int(line.split()[1]) / 1024

with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the peak so far (imports, migrations) becomes the present size
before = status_mb("VmRSS")
start = time.perf_counter()
if stage == "upload":
    with open(arg, "rb") as stream:
        corpus = corpora.create_corpus(settings, actor, stream, Path(arg).name, "big",
                                       start_indexing=False)
else:
    corpus = corpora.build_corpus_index(settings, int(arg))
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "id": corpus["id"], "passages": corpus["num_passages"],
                  "grown_mb": status_mb("VmHWM") - before}))
"""
"""Make a studio (``setup``: migrate, add its admin), store a corpus (``upload``) or build
its index (``index``) in a process of its own; say how much its peak memory grew over its
size before that work."""


def _text_block(content: str) -> bytes:
    """One mebibyte of a text file's content (see the module doc), repeated to its size."""
    if content == "one long word":
        return b"a" * (1 << 20)
    rng = random.Random(0)
    lines, size = [], 0
    while size < 1 << 20:
        lines.append(" ".join(f"w{rng.randrange(100_000)}" for _ in range(12)).encode() + b"\n")
        size += len(lines[-1])
    return b"".join(lines)[:1 << 20]


def _text_zip(folder: Path, content: str, mebibytes: int) -> Path:
    path = folder / f"{content.replace(' ', '-')}-{mebibytes}.zip"
    block = _text_block(content)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive, \
            archive.open("big.txt", "w", force_zip64=True) as member:
        for _ in range(mebibytes):
            member.write(block)
    return path


def _store(data_dir: Path, stage: str, arg: str) -> dict:
    done = subprocess.run([sys.executable, "-c", STORE, str(data_dir), stage, arg], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout) if stage != "setup" else {}


def _text_file_table(folder: Path, sizes: list[int]) -> None:
    print("\nOne text file in a zip: peak memory growth of the upload and of the index build\n")
    print("| content | text MB | zip MB | upload s | upload MB | index build s | "
          "index build MB | passages |")
    print("|---|---|---|---|---|---|---|---|")
    for content in TEXT_CONTENTS:
        for mebibytes in sizes:
            path = _text_zip(folder, content, mebibytes)
            data_dir = folder / "studio"
            _store(data_dir, "setup", "")
            upload = _store(data_dir, "upload", str(path))
            index = _store(data_dir, "index", str(upload["id"]))
            print(f"| {content} | {mebibytes * 1.048576:.0f} | {path.stat().st_size / 1e6:.1f} | "
                  f"{upload['seconds']:.3g} | {upload['grown_mb']:.0f} | {index['seconds']:.3g} | "
                  f"{index['grown_mb']:.0f} | {index['passages']:,} |", flush=True)
            shutil.rmtree(data_dir)
            path.unlink()


PARQUET_CELL = """
import sys
import pyarrow as pa, pyarrow.parquet as pq
pq.write_table(pa.table({"text": ["a" * (int(sys.argv[2]) << 20)]}), sys.argv[1])
"""
"""Write a Parquet file of one cell. A child process's peak memory (max RSS) starts at its
parent's size, so the parent never holds a record itself."""

_LINES = (b"a" * 99 + b"\n") * 10_000
"""A mebibyte or so of short lines: a record no single line of which is long."""

RECORDS = {
    # name: (the user's file name, the reader, what comes before the record's filling, its
    # filling ("a" on one line, or lines of 100 bytes), what comes after)
    "corpus JSONL line": ("c.jsonl", "corpus", b'{"text":"', b"a" * (1 << 20), b'"}\n'),
    "QA JSON array item (HotpotQA)": ("qa.json", "qa", b'[{"_id":null,"question":"q",'
                                      b'"answer":"a","level":"', b"a" * (1 << 20), b'"}]'),
    "corpus CSV cell of many lines": ("c.csv", "corpus", b'text\n"', _LINES, b'"\n'),
    "corpus txt paragraph": ("c.txt", "corpus", b"", _LINES, b""),
    "corpus Parquet cell": ("c.parquet", "corpus", b"", b"a" * (1 << 20), b""),
    "exemplars text block": ("ex.txt", "exemplars", b"===== Example 1 =====\nExample Problem: "
                             b"q\nExample Solution: ", _LINES, b""),
}


def _write_record(folder: Path, fmt: str, mebibytes: int) -> Path:
    filename, _, head, filling, tail = RECORDS[fmt]
    path = folder / filename
    if filename.endswith(".parquet"):  # in a process of its own, which holds the cell
        subprocess.run([sys.executable, "-c", PARQUET_CELL, str(path), str(mebibytes)],
                       check=True)
        return path
    with open(path, "wb") as out:
        out.write(head)
        for _ in range(mebibytes):
            out.write(filling)
        out.write(tail)
    return path


def _record_table(folder: Path, mebibytes: int, limit_mb: int) -> None:
    print(f"\nOne record of {mebibytes} MiB: refused with the record limit at {limit_mb} MiB, "
          "against read whole\n")
    print("| record | refused at | refused, s | refused, peak memory growth MB | "
          "read whole, s | read whole, peak memory growth MB |")
    print("|---|---|---|---|---|---|")
    for fmt, (filename, reader, *_) in RECORDS.items():
        path = _write_record(folder, fmt, mebibytes)
        refused = _read(path, filename, reader, 1, limit_mb << 20)
        whole = _read(path, filename, reader, 1, (mebibytes + 1) << 20)
        assert refused["refusal"] and not whole["refusal"], (refused, whole)
        place = refused["refusal"].split(": the ")[0].split(" ", 1)[1]
        print(f"| {fmt} | {place} | {refused['seconds']:.3g} | {refused['grown_mb']:.0f} | "
              f"{whole['seconds']:.3g} | {whole['grown_mb']:.0f} |", flush=True)
        path.unlink()


def _write(folder: Path, fmt: str, rows: int) -> Path:
    filename, _, head, row = FORMATS[fmt]
    path = folder / f"{rows}-{filename}"
    with open(path, "wb") as out:
        out.write(head)
        for start in range(0, rows, 100_000):
            out.write(row * min(100_000, rows - start))
        if filename.endswith(".json"):
            out.seek(-1, 2)
            out.truncate()
            out.write(b"]")
    return path


def _read(path: Path, filename: str, reader: str, limit: int,
          record_limit: int = Limits().max_record_bytes) -> dict:
    done = subprocess.run([sys.executable, "-c", READ, str(path), filename, reader, str(limit),
                           str(record_limit)], cwd=ROOT, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="the limit of the refusals")
    parser.add_argument("--accepted-rows", type=int, default=1_000_000,
                        help="rows of the files read whole")
    parser.add_argument("--text-mb", default="10,50,200",
                        help="sizes of the one text file, in MiB, comma-separated")
    parser.add_argument("--record-mb", type=int, default=256,
                        help="size of the one long record, in MiB")
    parser.add_argument("--record-limit-mb", type=int, default=Limits().max_record_bytes >> 20,
                        help="the record limit it is refused with, in MiB")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"Refused: {args.rows + 1:,} rows with the limit at {args.rows:,}\n")
        print("| format | file MB | refused at | seconds | peak memory growth MB |")
        print("|---|---|---|---|---|")
        for fmt in FORMATS:
            path = _write(folder, fmt, args.rows + 1)
            result = _read(path, *FORMATS[fmt][:2], args.rows)
            place = result["refusal"].split(": more than")[0].split(" ", 1)[1]
            print(f"| {fmt} | {path.stat().st_size / 1e6:.1f} | {place} | "
                  f"{result['seconds']:.3g} | {result['grown_mb']:.1f} |")
            path.unlink()
        n = args.accepted_rows
        print(f"\nAccepted: {n:,} rows read whole, against the counting pass alone\n")
        print("| format | read whole, s | peak memory growth MB | counting pass, s | share |")
        print("|---|---|---|---|---|")
        for fmt in FORMATS:
            whole = _read(_write(folder, fmt, n), *FORMATS[fmt][:2], n)
            counted = _read(_write(folder, fmt, n + 1), *FORMATS[fmt][:2], n)
            assert whole["rows"] == n and counted["refusal"], (whole, counted)
            # seconds to 3 significant digits: a small --accepted-rows reads in milliseconds
            print(f"| {fmt} | {whole['seconds']:.3g} | {whole['grown_mb']:.0f} | "
                  f"{counted['seconds']:.3g} | {counted['seconds'] / whole['seconds']:.0%} |")
            for path in folder.iterdir():
                path.unlink()
        _text_file_table(folder, [int(size) for size in args.text_mb.split(",")])
        _record_table(folder, args.record_mb, args.record_limit_mb)
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    sys.exit(code)
