"""Benchmark of the row limit on uploads: how fast, and in how much memory, a file over the
limit is refused, and what the counting pass costs a file within it.

    .venv/bin/python bench/uploads.py                  # limit 5,000,000 (the default), 1M rows read
    .venv/bin/python bench/uploads.py --rows 20000 --accepted-rows 20000   # a few seconds

* Refused: a file of ROWS + 1 rows of each format, read with the limit at ROWS, in a process
  of its own; the time to the refusal, and how much the process's peak memory (max RSS)
  grew from the moment the readers were imported.
* Accepted: a file of ACCEPTED rows read whole with the limit at ACCEPTED (counting pass,
  then reading pass), against the same file with one row more, refused at the end of the
  counting pass: the counting pass's share of a full read.

Rows are short (a few bytes), which is the worst case for a row limit: a 5,000,001-row QA
CSV is 20 MB. Nothing here asserts timings; it prints markdown tables (docs/uploads.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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

READ = """
import json, resource, sys, time
from pathlib import Path
from studio.ingest import IngestError, Limits, read_documents, read_exemplar_file, read_qa

path, filename, reader, limit = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
limits = Limits(max_rows=limit)
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


def _read(path: Path, fmt: str, limit: int) -> dict:
    filename, reader, _, _ = FORMATS[fmt]
    done = subprocess.run([sys.executable, "-c", READ, str(path), filename, reader, str(limit)],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000, help="the limit of the refusals")
    parser.add_argument("--accepted-rows", type=int, default=1_000_000,
                        help="rows of the files read whole")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"Refused: {args.rows + 1:,} rows with the limit at {args.rows:,}\n")
        print("| format | file MB | refused at | seconds | peak memory growth MB |")
        print("|---|---|---|---|---|")
        for fmt in FORMATS:
            path = _write(folder, fmt, args.rows + 1)
            result = _read(path, fmt, args.rows)
            place = result["refusal"].split(": more than")[0].split(" ", 1)[1]
            print(f"| {fmt} | {path.stat().st_size / 1e6:.1f} | {place} | "
                  f"{result['seconds']:.3g} | {result['grown_mb']:.1f} |")
            path.unlink()
        n = args.accepted_rows
        print(f"\nAccepted: {n:,} rows read whole, against the counting pass alone\n")
        print("| format | read whole, s | peak memory growth MB | counting pass, s | share |")
        print("|---|---|---|---|---|")
        for fmt in FORMATS:
            whole = _read(_write(folder, fmt, n), fmt, n)
            counted = _read(_write(folder, fmt, n + 1), fmt, n)
            assert whole["rows"] == n and counted["refusal"], (whole, counted)
            # seconds to 3 significant digits: a small --accepted-rows reads in milliseconds
            print(f"| {fmt} | {whole['seconds']:.3g} | {whole['grown_mb']:.0f} | "
                  f"{counted['seconds']:.3g} | {counted['seconds'] / whole['seconds']:.0%} |")
            for path in folder.iterdir():
                path.unlink()
    return 0


if __name__ == "__main__":
    t0 = time.perf_counter()
    code = main()
    print(f"\n({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    sys.exit(code)
