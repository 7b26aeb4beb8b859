"""What exemplars cost a training step: 3 exemplars against 0, same questions and lengths.

    .venv/bin/python bench/exemplar_cost.py                  # ~15 min on 2 vCPU
    .venv/bin/python bench/exemplar_cost.py --quick          # tiny shapes, checks the script
    .venv/bin/python bench/exemplar_cost.py --pack calc      # the calculator world's prompts

One native GRPO step (rollout, reference log-probs, update) of SmolLM2-135M-Instruct
(fp32, one thread) on the demo questions, built as the trainer builds them (chat layout,
``<think>`` pre-filled, the demo pack's exemplars), in three arms:

* ``0 exemplars``: the zero-shot prompts (~140 tokens);
* ``3 exemplars``: the same questions with three exemplars (~1,580 tokens, ~1,430 of them
  the same for every question; ``--pack calc``: the arithmetic pack's questions and
  calculator exemplars, ~450 tokens): the engine as it is, whose reference and update run the
  step's common prefix once (``worker.engines.native.logprobs.step_prefix``);
* ``3 exemplars, prefix per group``: the alternative, the prefix run once per group (the
  engine before the step prefix), by raising ``MIN_STEP_PREFIX`` out of reach.

Every response is exactly ``--new-tokens`` long (one turn, no tool, neither EOS nor a
closing tag ends it: the rollout loop's ``tag_stops=False``), so the arms differ only in
their prompts. The arms are interleaved step by step, so that
whatever else loads the machine hits them alike; times are medians over ``--steps``
steps after one warm-up step of each arm. Prints a markdown table with each phase's
seconds and the ratio of each arm's step to the 0-exemplar step. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARMS = (("0 exemplars", 0, True), ("3 exemplars", 3, True),
        ("3 exemplars, prefix per group", 3, False))
PHASES = ("rollout", "reference", "update", "step")


def pack_files(pack: str) -> tuple[Path, Path, str]:
    """A bundled pack's questions, exemplars and the tool its prompts name."""
    from studio import demo

    return {"demo": (demo.QA, demo.EXEMPLARS, "search"),
            "calc": (demo.CALC_QA, demo.CALC_EXEMPLARS, "calculator")}[pack]


def load_rows(path: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return rows[:n]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/studio-bench"))
    parser.add_argument("--batch", type=int, default=4, help="questions per step")
    parser.add_argument("--group", type=int, default=4, help="responses per question")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--pack", choices=("demo", "calc"), default="demo",
                        help="demo: search prompts; calc: the calculator world's")
    parser.add_argument("--without-per-group", action="store_true",
                        help="time only the engine's two arms (the larger shapes, whose "
                        "third arm would double the run)")
    parser.add_argument("--quick", action="store_true", help="a tiny random model, 1 step")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from studio.method.exemplars import parse_jsonl
    from studio.method.grpo import group_advantages
    from studio.method.reward import score
    from studio.models.base_models import load_causal_lm, load_tokenizer
    from studio.run_config import PromptSpec
    from worker.engines.native import logprobs
    from worker.engines.native.grpo import GrpoConfig, update_step
    from worker.engines.native.logprobs import frozen_copy, reference_logprobs
    from worker.engines.native.optimizer import make_optimizer
    from worker.engines.native.policy_batch import make_batch
    from worker.engines.native.rollout import RolloutConfig, generate_rollouts

    if args.quick:
        from tests.support.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.data_dir / "models" / "tiny"))
        args.batch, args.group, args.new_tokens, args.steps = 2, 2, 8, 1
    arms = ARMS[:2] if args.without_per_group else ARMS
    qa_path, exemplars_path, tool = pack_files(args.pack)
    exemplars = parse_jsonl(exemplars_path.read_text())
    tok = load_tokenizer(args.model, args.data_dir)
    model = load_causal_lm(args.model, args.data_dir, dtype=torch.float32)
    reference = frozen_copy(model)
    optimizer, scheduler = make_optimizer(model, lr=1e-6)
    config = GrpoConfig(kl_coef=0.001, micro_batch_size=args.micro_batch)
    rows = load_rows(qa_path, args.batch)
    spec = PromptSpec(layout="chat", assistant_prefix="<think>")
    prompts = {k: [spec.build(r["question"], exemplars, k, tools=[tool]).token_ids(tok)
                   for r in rows]
               for k in {k for _, k, _ in arms}}
    rollout_config = RolloutConfig(max_turns=0, max_turn_tokens=args.new_tokens,
                                   max_response_tokens=args.new_tokens, temperature=1.0)
    min_step_prefix = logprobs.MIN_STEP_PREFIX

    def one_step(k: int, step_prefix: bool, seed: int) -> dict[str, float]:
        logprobs.MIN_STEP_PREFIX = min_step_prefix if step_prefix else 1 << 30
        ids = [p for p in prompts[k] for _ in range(args.group)]
        t0 = time.perf_counter()
        rollouts = generate_rollouts(
            model, tok, ids, lambda queries: [[] for _ in queries], rollout_config,
            generator=torch.Generator().manual_seed(seed), eos_token_id=-1, tag_stops=False)
        t1 = time.perf_counter()
        rewards = [score("<think>" + r.response_text, rows[i // args.group]["golden_answers"])
                   .score for i, r in enumerate(rollouts)]
        advantages = group_advantages(rewards, [i // args.group for i in range(len(ids))])
        batch = make_batch(ids, [r.response_ids for r in rollouts],
                           [r.response_mask for r in rollouts], advantages, tok.pad_token_id)
        ref_logp = reference_logprobs(reference, batch, config.micro_batch_size)
        t2 = time.perf_counter()
        update_step(model, optimizer, scheduler, batch, ref_logp, config)
        t3 = time.perf_counter()
        return {"rollout": t1 - t0, "reference": t2 - t1, "update": t3 - t2, "step": t3 - t0,
                "tokens": statistics.fmean(len(r.response_ids) for r in rollouts)}

    times: dict[str, list[dict]] = {name: [] for name, _, _ in arms}
    for step in range(1 + args.steps):  # step 0 warms each arm up
        for name, k, shared in arms:
            result = one_step(k, shared, seed=step)
            print(f"  step {step} {name}: {result['step']:.1f} s", file=sys.stderr, flush=True)
            if step:
                times[name].append(result)
    logprobs.MIN_STEP_PREFIX = min_step_prefix

    def median(name: str, key: str) -> float:
        return statistics.median(t[key] for t in times[name])

    base = median(ARMS[0][0], "step")
    print(f"\n# Exemplar cost: {args.model}, {args.pack} pack, {args.batch} questions x "
          f"{args.group} responses x {args.new_tokens} tokens, micro-batch {args.micro_batch}; "
          f"medians of {args.steps} steps (seconds)\n")
    print("| arm | prompt tokens | response tokens | rollout | reference | update | step "
          "| step / 0-exemplar step |")
    print("|---|---|---|---|---|---|---|---|")
    for name, k, _ in arms:
        length = statistics.fmean(len(p) for p in prompts[k])
        cells = " | ".join(f"{median(name, key):.2f}" for key in PHASES)
        print(f"| {name} | {length:.0f} | {median(name, 'tokens'):.0f} | {cells} | "
              f"{median(name, 'step') / base:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
