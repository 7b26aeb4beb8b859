"""Write a pack's files, or say which are stale: what the pack scripts share.

A pack script (scripts/math_pack.py, scripts/calc_pack.py) computes its files' text with a
fixed seed; `write_or_check` writes them, or with ``--check`` exits 1 naming each file that
differs from what the script writes (the test suite runs the check).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path


def answer_text(value: Decimal) -> str:
    """The gold answer: an integer without decimals, else the decimal without trailing zeros."""
    value = value.normalize()
    return str(value.quantize(Decimal(1))) if value == value.to_integral() else format(value, "f")


def draw_rows(templates: Iterable[Callable], seed: int, per_kind: int, heldout: int,
              id_prefix: str, fields: Callable[[object], dict],
              taken: Iterable[str] = ()) -> list[dict]:
    """`per_kind` distinct questions per template (a template draws a problem with a
    ``question`` from a random generator), none of them in `taken`; `heldout` of them, spread
    over the templates and drawn with the seed, have ``split`` "heldout", the rest "train".
    Rows are interleaved by template, so any prefix of the file mixes the kinds; each is
    ``{"id": id_prefix + number, **fields(problem), "split"}``."""
    rng = random.Random(seed)
    templates = list(templates)
    drawn: dict[str, list] = {}
    seen = set(taken)
    for template in templates:
        problems = drawn.setdefault(template.__name__, [])
        while len(problems) < per_kind:
            problem = template(rng)
            if problem.question not in seen:
                seen.add(problem.question)
                problems.append(problem)
    per_template = [heldout // len(templates) + (i < heldout % len(templates))
                    for i in range(len(templates))]
    held = {(kind, i) for (kind, problems), n in zip(drawn.items(), per_template, strict=True)
            for i in rng.sample(range(len(problems)), n)}
    rows = []
    for round_ in range(per_kind):
        for kind, problems in drawn.items():
            rows.append({"id": f"{id_prefix}{len(rows) + 1:03d}", **fields(problems[round_]),
                         "split": "heldout" if (kind, round_) in held else "train"})
    return rows


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_or_check(description: str, script: str, files: dict[Path, str],
                   argv: list[str] | None = None) -> int:
    """Write `files` (path -> text), or with ``--check`` in `argv` say which are stale."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only say whether files are stale")
    args = parser.parse_args(argv)
    stale = [path for path, text in files.items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python scripts/{script}")
        return 1 if stale else 0
    for path, text in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0
