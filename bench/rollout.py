"""Benchmark of the native engine's multi-turn tool rollouts against plain ``model.generate``.

    .venv/bin/python bench/rollout.py          # short + exemplar prompts, batch 16 and 64
    .venv/bin/python bench/rollout.py --prompts short --batches 16 --runs 1

* Model: SmolLM2-135M-Instruct (the bundled default, fp32) on CPU with one
  thread (``torch.set_num_threads(1)``; see the perf notes).  The model is
  converted once into ``--data-dir`` (default ``/tmp/studio-models``).
* Prompts: HotpotQA train questions from ``../shared/data/hotpotqa-train100``,
  ``chat`` layout with the assistant turn pre-filled with ``<think>``; each
  question is repeated ``--group`` times (GRPO's G samples, flattened):
  ``short`` = no exemplars (~130 tokens), ``exemplar`` = 1, 2 or 3 demo
  exemplars by question (~500-1,570 tokens), ``exemplar3`` = all 3 for every
  question (~1,530-1,570 tokens; one curriculum stage: only the question
  differs).  Search: BM25 (bm25s) over that
  folder's corpus.jsonl, top 3.
* Rollouts: temperature 1.0, top-p 1.0, ``--max-turns`` / ``--max-turn-tokens``
  / ``--max-response-tokens``.  Tokens/s counts the tokens the model sampled
  (mask 1); the time includes prompt prefill, searches and the environment
  tokens' prefill.
* Plain generate: the same prompts (left padding), the same sampling
  (``top_k=0``), and exactly the mean number of model tokens the rollouts of
  that run produced per sequence (``min_new_tokens = max_new_tokens``), so
  both produce the same number of tokens; one turn, no tool.
* Without cache reuse: the same rollout loop, but after every environment
  turn each continuing sequence's whole context is encoded again (TRL's way).
* Medians of ``--runs`` runs (run i uses generator seed i for both rollout
  variants); the three measurements of a run are interleaved, so background
  load hits them alike.  ``runs`` in the table: rollout / generate /
  no-reuse runs behind the medians (plain generate over exemplar prompts is
  slow enough that ``--generate-runs 1`` may be wanted).

Nothing here asserts timings; it prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from studio.method.exemplars import parse_jsonl  # noqa: E402
from studio.method.prompt import build_prompt  # noqa: E402
from studio.models.base_models import load_causal_lm, load_tokenizer  # noqa: E402
from studio.retrieval import Passage, build_index  # noqa: E402
from worker.engines.native.rollout import RolloutConfig, generate_rollouts  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "hotpotqa-train100"
EXEMPLARS = ROOT / "studio" / "demo" / "exemplars.jsonl"


def build_prompts(tokenizer, kind: str, batch: int, group: int, offset: int) -> list[list[int]]:
    questions = [json.loads(line)["question"]
                 for line in (DATA / "qa.jsonl").read_text().splitlines() if line.strip()]
    exemplars = parse_jsonl(EXEMPLARS.read_text())
    out: list[list[int]] = []
    for i in range(batch // group):
        q = questions[(offset + i) % len(questions)]
        k = {"short": 0, "exemplar": 1 + i % len(exemplars), "exemplar3": len(exemplars)}[kind]
        p = build_prompt(q, exemplars, k, layout="chat", assistant_prefix="<think>")
        out += [p.token_ids(tokenizer)] * group
    return out


def make_search():
    rows = [json.loads(line) for line in (DATA / "corpus.jsonl").read_text().splitlines()
            if line.strip()]
    index = build_index([Passage(str(r["id"]), r["title"], r["text"]) for r in rows])

    def search(queries: list[str]) -> list[list[tuple[str, str]]]:
        return [[(h.passage.title, h.passage.text) for h in hits]
                for hits in index.search(queries, 3)]

    return search


def time_rollouts(model, tokenizer, prompts, search, cfg, seed, **switches) -> dict:
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    rollouts = generate_rollouts(model, tokenizer, prompts, search, cfg, generator=gen,
                                 **switches)
    seconds = time.perf_counter() - start
    model_tokens = sum(sum(r.response_mask) for r in rollouts)
    env_tokens = sum(len(r.response_mask) - sum(r.response_mask) for r in rollouts)
    return {
        "seconds": seconds,
        "model_tokens": model_tokens,
        "tok_s": model_tokens / seconds,
        "env_tokens": env_tokens,
        "searches": sum(r.num_tool_calls for r in rollouts),
        "answers": sum(r.stop_reason == "answer" for r in rollouts),
    }


def time_generate(model, tokenizer, prompts, new_tokens: int, seed: int) -> dict:
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                             top_p=1.0, top_k=0, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, pad_token_id=pad)
    seconds = time.perf_counter() - start
    produced = (out.shape[1] - width) * len(prompts)
    return {"seconds": seconds, "model_tokens": produced, "tok_s": produced / seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("STUDIO_BENCH_DATA",
                                                             "/tmp/studio-models"))
    parser.add_argument("--prompts", default="short,exemplar")
    parser.add_argument("--batches", default="16,64")
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-turn-tokens", type=int, default=64)
    parser.add_argument("--max-response-tokens", type=int, default=512)
    parser.add_argument("--generate-runs", type=int, default=None,
                        help="runs of plain generate (default: --runs; it is the slow one)")
    parser.add_argument("--no-reuse-runs", type=int, default=None,
                        help="runs of the loop without cache reuse (default: --runs; 0 = skip)")
    args = parser.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error(f"--batches: {args.batches!r} is not comma-separated whole numbers")
    wrong = [b for b in batches if b < args.group or b % args.group]
    if args.group < 1 or wrong:
        parser.error(f"--batches counts sequences (questions x --group): {wrong or batches} "
                     f"is not a positive multiple of --group {args.group}; e.g. --batches "
                     f"{max(args.group, 1) * 4} --group {max(args.group, 1)}")

    torch.set_num_threads(1)
    data_dir = Path(args.data_dir)
    model = load_causal_lm("smollm2-135m-instruct", data_dir)
    tokenizer = load_tokenizer("smollm2-135m-instruct", data_dir)
    search = make_search()
    cfg = RolloutConfig(max_turns=args.max_turns, max_turn_tokens=args.max_turn_tokens,
                        max_response_tokens=args.max_response_tokens, temperature=1.0,
                        top_p=1.0)
    print(f"# rollout benchmark: torch {torch.__version__}, {platform.machine()}, "
          f"{torch.get_num_threads()} thread(s), SmolLM2-135M-Instruct fp32 on CPU", flush=True)
    print(f"# {cfg}; group {args.group}; medians of {args.runs} runs", flush=True)

    rows = []
    for kind in args.prompts.split(","):
        for batch in batches:
            prompts = build_prompts(tokenizer, kind, batch, args.group, offset=0)
            lens = [len(p) for p in prompts]
            runs: dict[str, list[dict]] = {"rollout": [], "generate": [], "no_reuse": []}
            generate_runs = args.runs if args.generate_runs is None else args.generate_runs
            no_reuse_runs = args.runs if args.no_reuse_runs is None else args.no_reuse_runs
            for seed in range(args.runs):
                ro = time_rollouts(model, tokenizer, prompts, search, cfg, seed)
                runs["rollout"].append(ro)
                new = max(1, round(ro["model_tokens"] / batch))
                if seed < generate_runs:
                    runs["generate"].append(time_generate(model, tokenizer, prompts, new, seed))
                if seed < no_reuse_runs:
                    runs["no_reuse"].append(time_rollouts(model, tokenizer, prompts, search, cfg,
                                                          seed, reuse_cache=False))
                print(f"  {kind} B={batch} run {seed}: "
                      + ", ".join(f"{k} {v[-1]['tok_s']:.1f} tok/s ({v[-1]['seconds']:.0f} s)"
                                  for k, v in runs.items() if v), flush=True)

            def med(name, key, runs=runs):
                return statistics.median(r[key] for r in runs[name]) if runs[name] else None

            rollout, generate, no_reuse = (med(n, "tok_s") for n in ("rollout", "generate",
                                                                      "no_reuse"))
            rows.append({
                "prompts": kind, "batch": batch,
                "runs": f"{len(runs['rollout'])}/{len(runs['generate'])}/{len(runs['no_reuse'])}",
                "prompt_tokens": f"{min(lens)}-{max(lens)}",
                "model_tokens": med("rollout", "model_tokens") / batch,
                "env_tokens": med("rollout", "env_tokens") / batch,
                "searches": med("rollout", "searches") / batch,
                "rollout": rollout, "generate": generate,
                "ratio": rollout / generate if generate else None,
                "no_reuse": no_reuse,
                "reuse_gain": rollout / no_reuse if no_reuse else None,
                "seconds": med("rollout", "seconds"),
            })

    print()
    print("| prompts | batch | prompt tokens | model tok/rollout | env tok/rollout | "
          "searches/rollout | rollout tok/s | generate tok/s | ratio | no-reuse tok/s | "
          "KV reuse gain | rollout s | runs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        no_reuse = f"{r['no_reuse']:.1f}" if r["no_reuse"] else "-"
        generate = f"{r['generate']:.1f}" if r["generate"] else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        gain = f"{r['reuse_gain']:.2f}x" if r["reuse_gain"] else "-"
        print(f"| {r['prompts']} | {r['batch']} | {r['prompt_tokens']} | "
              f"{r['model_tokens']:.0f} | {r['env_tokens']:.0f} | {r['searches']:.2f} | "
              f"{r['rollout']:.1f} | {generate} | {ratio} | {no_reuse} | "
              f"{gain} | {r['seconds']:.0f} | {r['runs']} |")


if __name__ == "__main__":
    main()
