"""Can the model read an answer off passages it is handed? The ceiling over the ICRL bench's EM.

    .venv/bin/python bench/reader_ceiling.py                  # SmolLM2-135M, demo-heldout
    .venv/bin/python bench/reader_ceiling.py --split train --model FOLDER
    .venv/bin/python bench/reader_ceiling.py --quick          # a tiny random model: checks it

The reward pays 0.8 for an exact answer and at most 0.2 for the format. A model that does
not write the answer even when the passage holding it sits in its own reply can never earn
the 0.8 by searching, so RL has only the format score to reinforce (what the ICRL-effect
bench found: accuracy 0 in 950 of 960 training rollouts). This measures that ceiling
directly, without training and without the model having to choose a good query.

Each question of the demo pack is asked with the quick-start preset's prompt (its layout
and instruction; `--exemplars` shown as in training, 0 as in the evaluation), and the reply
is pre-filled up to `<answer>`, so the model only has to write the answer:

* ``closed book``: `<answer>` at once (the floor: the demo world is invented);
* ``BM25 top 3``: `<search> QUESTION </search>`, then the environment's block of the top 3
  passages for the question itself, cut to the preset's `max_obs_tokens`, then `<answer>`;
* ``support passages``: the same with the question's own support passages (the one that
  holds the answer last), the best any query can get.

Greedy, stopping at `</answer>` or after the preset's tokens for a turn (64); the answer is
read as the reward reads it (the last closed `<answer>`: one left open is no answer) and
matched with method.md's normalisation.
Prints EM, SubEM and F1 per condition and hop count, and for BM25 the share of blocks that
hold a golden answer (reachability).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONDITIONS = ("closed book", "BM25 top 3", "support passages")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reply_prefixes(question: str, support: list[tuple[str, str]], search, tokenizer,
                   limits) -> dict[str, str]:
    """Per condition, the pre-filled reply."""
    from studio.method.protocol import fit_observation
    from studio.method.tools import SearchTool

    call = f"<search> {question} </search>"
    prefixes = {CONDITIONS[0]: "<answer>"}
    for name, backend in ((CONDITIONS[1], search), (CONDITIONS[2], lambda qs: [support])):
        tool = SearchTool(backend, top_k=3 if name == CONDITIONS[1] else len(support))
        (result,) = tool.execute([question])
        fitted = fit_observation(tokenizer, tool, result,
                                 len(tokenizer(call, add_special_tokens=False)["input_ids"]),
                                 limits)
        prefixes[name] = f"{call}{fitted[0] if fitted else ''}<answer>"
    return prefixes


def holds_answer(reply: str, golden_answers: list[str]) -> bool:
    """Whether the passages in the reply's result block hold a golden answer as whole words
    (the data doctor's test; read inside the block, whose tags would glue to its last word)."""
    from studio.method.failures import retrieved_texts
    from studio.method.reward import contains_answer

    return any(contains_answer(text, golden_answers) for text in retrieved_texts(reply))


def greedy(model, tokenizer, text: str, new_tokens: int) -> str:
    import torch

    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id,
                             stop_strings=["</answer>"], tokenizer=tokenizer)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def measure(model, tokenizer, config, questions: list[dict], passages: dict[str, dict],
            exemplars: list[dict], k: int, on_question=None) -> list[dict]:
    """One record per question and condition: hops, what the model wrote after `<answer>`,
    the answer read, EM, SubEM, F1, and whether the information block held a golden
    answer."""
    from studio.method.reward import exact_match, substring_match, token_f1
    from studio.method.tags import final_answer
    from studio.retrieval.index import build_index
    from studio.retrieval.passages import Passage

    index = build_index(Passage(p["id"], p["title"], p["text"]) for p in passages.values())

    def search(queries):
        return [[(h.passage.title, h.passage.text) for h in hits]
                for hits in index.search(queries, 3)]

    limits = config.grpo.limits()
    records = []
    for done, row in enumerate(questions, 1):
        support = [(passages[i]["title"], passages[i]["text"]) for i in row["support"]]
        prompt = config.build_prompt(row["question"], exemplars, k)
        for condition, prefix in reply_prefixes(row["question"], support, search, tokenizer,
                                                limits).items():
            shown = replace(prompt, assistant_prefix=prefix)
            written = greedy(model, tokenizer, shown.text(tokenizer),
                             config.grpo.max_turn_tokens)
            answer = final_answer(shown.response_text(written))
            golds = row["golden_answers"]
            records.append({"id": row["id"], "hops": row["hops"], "kind": question_kind(row),
                            "condition": condition,
                            "written": written, "answer": answer,
                            "em": exact_match(answer, golds),
                            "subem": substring_match(answer, golds),
                            "f1": token_f1(answer, golds),
                            "reachable": holds_answer(prefix, golds)})
        if on_question:
            on_question(done, len(questions))
    return records


def question_kind(row: dict) -> str:
    """One-hop or two-hop (qa.jsonl), or a short span's kind (span_qa.jsonl)."""
    return f"span: {row['kind']}" if row.get("kind") else f"{row['hops']}-hop"


KINDS = ("1-hop", "2-hop", "span: date", "span: count", "span: name")


def table(records: list[dict], k: int) -> list[str]:
    lines = ["| exemplars | reply pre-filled with | questions | how many | block holds the "
             "answer | EM | SubEM | F1 |", "|---|---|---|---|---|---|---|---|"]
    for condition in CONDITIONS:
        for kind in (*KINDS, "all"):
            rows = [r for r in records if r["condition"] == condition
                    and kind in ("all", r["kind"])]
            if not rows:
                continue
            n = len(rows)
            reach = ("-" if condition == CONDITIONS[0]
                     else f"{sum(r['reachable'] for r in rows) / n:.2f}")
            lines.append(f"| {k} | {condition} | {kind} | {n} | {reach} "
                         f"| {sum(r['em'] for r in rows) / n:.2f} "
                         f"| {sum(r['subem'] for r in rows) / n:.2f} "
                         f"| {sum(r['f1'] for r in rows) / n:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a model folder or name (default: the studio's)")
    parser.add_argument("--split", choices=("heldout", "train"), default="heldout")
    parser.add_argument("--questions", choices=("hops", "spans", "all"), default="all",
                        help="qa.jsonl's one- and two-hop questions, span_qa.jsonl's short "
                        "spans (dates, counts, names), or both")
    parser.add_argument("--layout", choices=("chat", "inline"),
                        help="the prompt's layout (default: chat when the model has a chat "
                        "template, else inline)")
    parser.add_argument("--exemplars", default="0,2",
                        help="exemplar counts to show, comma-separated (default 0,2)")
    parser.add_argument("--limit", type=int, help="the first N questions of the split")
    parser.add_argument("--threads", type=int,
                        help="torch threads (default 2; 1 with --quick, whose tiny model gains "
                        "nothing from a second thread on a machine busy with other work)")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/reader-ceiling"))
    parser.add_argument("--out", type=Path, help="write every answer as JSON lines here")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny random model, 4 questions, one thread: checks the script")
    args = parser.parse_args(argv)
    counts = [int(k) for k in args.exemplars.split(",")]

    import torch

    from studio import demo
    from studio.models.base_models import load_causal_lm, load_tokenizer
    from studio.run_config import parse_run_config
    from studio.services.presets import QUICK_START, preset_config
    from studio.settings import Settings

    torch.set_num_threads(args.threads or (1 if args.quick else 2))
    torch.manual_seed(0)
    if args.quick:
        from tests.support.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.data_dir / "models" / "tiny"))
        args.limit = 4
    settings = Settings(data_dir=args.data_dir)
    model_ref = args.model or settings.default_model
    tokenizer = load_tokenizer(model_ref, settings.resolved_data_dir)
    model = load_causal_lm(model_ref, settings.resolved_data_dir)
    preset = preset_config(QUICK_START, settings)
    layout = args.layout or ("chat" if tokenizer.chat_template else "inline")
    config = parse_run_config({**preset, "model": model_ref,
                               "prompt": {**preset.get("prompt", {}), "layout": layout}})
    files = {"hops": [demo.QA], "spans": [demo.SPAN_QA], "all": [demo.QA, demo.SPAN_QA]}
    questions = [r for path in files[args.questions] for r in read_jsonl(path)
                 if r["split"] == args.split][:args.limit]
    passages = {p["id"]: p for p in read_jsonl(demo.CORPUS)}
    exemplars = read_jsonl(demo.EXEMPLARS)

    def progress(done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            print(f"  {done}/{total} questions", file=sys.stderr, flush=True)

    print(f"Model {model_ref}; demo pack, split {args.split}; the quick-start preset's prompt "
          f"({config.prompt.layout} layout); greedy, {config.grpo.max_turn_tokens} new tokens\n")
    records, lines = [], []
    for k in counts:
        start = time.perf_counter()
        found = measure(model, tokenizer, config, questions, passages, exemplars, k, progress)
        took = time.perf_counter() - start
        print(f"  {k} exemplars: {took:.0f} s, {took / len(questions):.1f} s per question "
              f"(3 replies)", file=sys.stderr)
        records += [{**r, "exemplars": k} for r in found]
        lines += table(found, k)[0 if not lines else 2:]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
