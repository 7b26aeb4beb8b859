"""What the python tool's sandbox costs a call: `print(1)` sandboxed against a plain
`python -c` subprocess of the same interpreter.

    .venv/bin/python bench/sandbox.py                # 20 repeats, a few seconds
    .venv/bin/python bench/sandbox.py --repeats 2    # checks the script

Arms, interleaved so that whatever else loads the machine hits them alike:

* ``plain python -c``: `subprocess.run([python, "-I", "-B", "-u", "-c", "print(1)"])`;
* ``sandboxed``: `Sandbox().run("print(1)")` (bwrap, namespaces, mounts, prlimit, python);
* ``sandboxed, batch of 8``: `run_batch` of 8 snippets, 4 at a time, per snippet.

Prints a markdown table of median and 90th-percentile milliseconds and each arm's median
over the plain one. Nothing is asserted beyond each run printing 1.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from studio.sandbox import Sandbox  # noqa: E402

BATCH = 8
CODE = "print(1)"


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    sandbox = Sandbox(concurrency=4)
    plain = [sys.executable, "-I", "-B", "-u", "-c", CODE]

    def run_plain():
        assert subprocess.run(plain, capture_output=True, text=True).stdout == "1\n"

    def run_sandboxed():
        assert sandbox.run(CODE).stdout == "1\n"

    def run_batch():
        assert [r.stdout for r in sandbox.run_batch([CODE] * BATCH)] == ["1\n"] * BATCH

    arms = {"plain python -c": (run_plain, 1), "sandboxed": (run_sandboxed, 1),
            f"sandboxed, batch of {BATCH}": (run_batch, BATCH)}
    for call, _ in arms.values():  # warm-up: page cache, imports
        call()
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, (call, per) in arms.items():
            times[name].append(timed(call) / per)
    base = statistics.median(times["plain python -c"])
    print(f"`{CODE}`, {args.repeats} repeats, milliseconds per snippet\n")
    print("| arm | median ms | p90 ms | median / plain |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
        print(f"| {name} | {median:.1f} | {p90:.1f} | {median / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
