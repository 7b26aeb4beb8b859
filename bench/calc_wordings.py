"""Does a calculator habit carry to arithmetic asked in words no pack uses? Models side by side.

    .venv/bin/python bench/calc_wordings.py MODEL_FOLDER [MODEL_FOLDER ...] --names a,b
    .venv/bin/python bench/calc_wordings.py --quick       # a tiny random model: checks the script

The arithmetic pack (studio/demo/calc) asks in ten templates ("What is A × B?", "A metre of
cloth costs ..."); a model trained on it may have learned the templates, not the tool.
This writes 40 questions in eight other wordings (seeded numbers past mental arithmetic:
"Compute A multiplied by B.", "Take C away from the total of A and B.", ...), stores them as
the QA set `calc-new-wordings` and evaluates each model zero-shot with the calculator
preset's protocol (`studio.services.evaluations.run_protocol`: k = 0, temperature 0.1, the
preset's budgets), one after another in this process (one thread). Prints valid-call rate,
answer rate and EM per model, and the failure labels.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.actors import admin  # noqa: E402

QA_SET = "calc-new-wordings"
WORDINGS = (
    ("Compute {a} multiplied by {b}.", lambda a, b, c: a * b),
    ("How much is {a} plus {b} minus {c}?", lambda a, b, c: a + b - c),
    ("Take {c} away from the total of {a} and {b}. What do you get?", lambda a, b, c: a + b - c),
    ("Add {a} and {b}, then multiply the result by {c}. What number comes out?",
     lambda a, b, c: (a + b) * c),
    ("If {b} workers each earn {a} dollars a day, how many dollars do they earn together "
     "in a day?", lambda a, b, c: a * b),
    ("A farmer packs {n} apples into boxes of {b}, filling every box. How many boxes does "
     "she fill?", lambda a, b, c: a),
    ("What do you get when you divide {n} by {b}?", lambda a, b, c: a),
    ("A printer prints {a} pages an hour for {b} hours, and then {c} more pages. How many "
     "pages did it print?", lambda a, b, c: a * b + c),
)
"""(question, answer) templates none of the packs use; {n} is a * b, so every quotient is
whole."""


def questions(per_wording: int = 5, seed: int = 0) -> list[dict]:
    """The QA rows: `per_wording` questions a wording, numbers drawn by a seeded generator
    (3-4 digits and 2 digits, so that closed-book arithmetic fails)."""
    draw = random.Random(seed)
    rows = []
    for w, (question, answer) in enumerate(WORDINGS):
        for i in range(per_wording):
            a, b, c = draw.randint(120, 9800), draw.randint(12, 97), draw.randint(110, 990)
            rows.append({"id": f"wording{w}-{i}",
                         "question": question.format(a=a, b=b, c=c, n=a * b),
                         "golden_answers": [str(answer(a, b, c))]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="Hugging Face model folders")
    parser.add_argument("--names", help="a name per model, comma-separated")
    parser.add_argument("--base", action="store_true", help="also the untrained default model")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/calc-wordings"))
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--quick", action="store_true", help="a tiny random model, 4 questions")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from studio.run_config import RunConfig
    from studio.services import evaluations, presets, qa_sets
    from studio.services.errors import NotFound
    from studio.settings import Settings
    from studio.storage import db
    from worker.evaluation import run_evaluation

    settings = Settings(data_dir=args.data_dir)
    settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    db.upgrade(settings.sqlalchemy_url)
    limit = None
    if args.quick:
        from tests.support.tiny_model import build_tiny_model

        tiny = build_tiny_model(args.data_dir / "models" / "tiny")
        args.models, args.names, limit = [tiny], "tiny", 4
    names = args.names.split(",") if args.names else [m.name for m in args.models]
    targets = dict(zip(names, map(str, args.models), strict=True))
    if args.base:
        targets = {"base": settings.default_model, **targets}
    rows = questions()
    try:
        qa_sets.find_qa_set(settings, QA_SET)
    except NotFound:  # not stored yet
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
        qa_sets.create_qa_set(settings, admin(settings), io.BytesIO(data), f"{QA_SET}.jsonl",
                              QA_SET, purpose="eval")
    config = RunConfig.model_validate(presets.preset_config(presets.CALCULATOR, settings))
    protocol = {**evaluations.run_protocol(config), "tools": list(config.tools)}
    results = {}
    for name, model in targets.items():
        queued = evaluations.create_evaluation(settings, admin(settings), qa_set=QA_SET,
                                               model=model, protocol=protocol, limit=limit,
                                               start=False)
        run_evaluation(settings, queued["id"])
        results[name] = evaluations.get_evaluation(settings, queued["id"])["metrics"]
    print(f"# {len(rows) if limit is None else limit} arithmetic questions in "
          f"{len(WORDINGS)} wordings no pack uses, zero-shot, the calculator preset's "
          "protocol\n")
    print("| model | valid-call rate | answer rate | EM | labels |")
    print("|---|---|---|---|---|")
    for name, m in results.items():
        labels = ", ".join(f"{k} {v}" for k, v in m.get("labels", {}).items() if v)
        print(f"| {name} | {m['valid_search_rate']:.2f} | {m['answer_rate']:.2f} | "
              f"{m['em']:.3f} | {labels} |")
    if args.out:
        args.out.write_text(json.dumps({"models": targets, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
