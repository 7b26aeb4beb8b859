"""What exemplars cost a training step: each way a step can show 3 exemplars, against 0.

    .venv/bin/python bench/exemplar_cost.py                  # ~25 min on 2 vCPU
    .venv/bin/python bench/exemplar_cost.py --quick          # tiny shapes, checks the script
    .venv/bin/python bench/exemplar_cost.py --pack calc      # the calculator world's prompts
    .venv/bin/python bench/exemplar_cost.py --arms zero-shot,first,mixed

One native GRPO step of SmolLM2-135M-Instruct (fp32, one thread) on the demo questions,
its prompts built as the trainer builds them (chat layout, ``<think>`` pre-filled, the
pack's exemplars, ``RunConfig.build_prompt`` seeded by ``RunConfig.exemplar_seed``), timed
phase by phase as the trainer runs them: the rollout (prefill and sampling), the frozen
reference's log-probs (its exemplars kept from step to step while they stay the same:
``logprobs.FrozenPrefix``), the old log-probs (the trainer's pass without gradients over the
logged group: ``engine.log_groups_per_step`` 1, with entropies) and the update. Arms:

* ``zero-shot``: 0 exemplars (~140 tokens);
* ``first``: the set's first 3 (``prompt.exemplar_selection: first``, the default; ~1,580
  tokens in all, ~1,430 of them the same for every question): the engine runs that block
  once per step (the rollout's shared prefix, ``logprobs.step_prefix`` in the other passes);
* ``per-question``: 3 sampled for each question (``exemplar_selection: sample``): the
  prompts share the instruction only, and each group runs its own exemplars;
* ``per-step``: 3 sampled once for the whole step (``exemplar_draw: per-step``);
* ``mixed``: ``guidance.mode: mixed`` (share 0.5, when always) with the first 3: half of
  each group sampled with the exemplars, every rollout trained on the zero-shot prompt.

Every response is exactly ``--new-tokens`` long (one turn, no tool, neither EOS nor a
closing tag ends it: the rollout loop's ``tag_stops=False``), so the arms differ only in
their prompts. The arms are interleaved step by step, so that whatever else loads the
machine hits them alike; times are medians over ``--steps`` steps after one warm-up step
of each arm. Prints a markdown table with each phase's seconds and each arm's step against
the first arm's, then the ratios the exemplar levers are judged by. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXEMPLARS = 3
MIXED_SHARE = 0.5


class Arm(NamedTuple):
    """How a step shows its exemplars: how many, the run config's prompt and guidance."""

    exemplars: int
    selection: str = "first"
    draw: str = "per-question"
    mixed: bool = False


ARMS = {"zero-shot": Arm(0), "first": Arm(EXEMPLARS),
        "per-question": Arm(EXEMPLARS, "sample"),
        "per-step": Arm(EXEMPLARS, "sample", "per-step"),
        "mixed": Arm(EXEMPLARS, mixed=True)}
RATIOS = (("per-step", "per-question"), ("per-step", "zero-shot"), ("first", "zero-shot"),
          ("mixed", "first"), ("mixed", "zero-shot"))
"""(arm, against): the ratios printed under the table, where both arms ran."""
PHASES = ("rollout", "reference", "old", "update", "step")


def pack_files(pack: str) -> tuple[Path, Path, str]:
    """A bundled pack's questions, exemplars and the tool its prompts name."""
    from studio import demo

    return {"demo": (demo.QA, demo.EXEMPLARS, "search"),
            "calc": (demo.CALC_QA, demo.CALC_EXEMPLARS, "calculator")}[pack]


def load_rows(path: Path, n: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return rows[:n]


def arm_names(text: str) -> list[str]:
    """``--arms``: comma-separated names of `ARMS`, in the order given."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{','.join(unknown) or 'nothing'}: choose among {', '.join(ARMS)}")
    return names


def arm_config(arm: Arm, tool: str):
    """The run config whose prompts the arm's steps show."""
    from studio.run_config import RunConfig

    return RunConfig(
        name="exemplar-cost", tools=[tool],
        data={"corpus": "corpus" if tool == "search" else None, "train": "train"},
        prompt={"layout": "chat", "assistant_prefix": "<think>",
                "exemplar_selection": arm.selection, "exemplar_draw": arm.draw},
        guidance={"mode": "mixed", "share": MIXED_SHARE} if arm.mixed else {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/studio-bench"))
    parser.add_argument("--batch", type=int, default=4, help="questions per step")
    parser.add_argument("--group", type=int, default=4, help="responses per question")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--pack", choices=("demo", "calc"), default="demo",
                        help="demo: search prompts; calc: the calculator world's")
    parser.add_argument("--arms", type=arm_names, default=list(ARMS),
                        help=f"comma-separated, the first is the base (default: "
                        f"{','.join(ARMS)})")
    parser.add_argument("--quick", action="store_true", help="a tiny random model, 1 step")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from studio.method.exemplars import parse_jsonl
    from studio.method.grpo import group_advantages
    from studio.method.guidance import guided_count
    from studio.method.reward import score
    from studio.models.base_models import load_causal_lm, load_tokenizer
    from worker.engines.native.grpo import GrpoConfig, update_step
    from worker.engines.native.logprobs import (
        FrozenPrefix,
        frozen_copy,
        reference_logprobs,
        token_logprobs,
    )
    from worker.engines.native.optimizer import make_optimizer
    from worker.engines.native.policy_batch import make_batch
    from worker.engines.native.rollout import RolloutConfig, generate_rollouts

    if args.quick:
        from tests.support.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.data_dir / "models" / "tiny"))
        args.batch, args.group, args.new_tokens, args.steps = 2, 2, 8, 1
    qa_path, exemplars_path, tool = pack_files(args.pack)
    exemplars = parse_jsonl(exemplars_path.read_text())
    tok = load_tokenizer(args.model, args.data_dir)
    model = load_causal_lm(args.model, args.data_dir, dtype=torch.float32)
    reference = frozen_copy(model)
    optimizer, scheduler = make_optimizer(model, lr=1e-6)
    config = GrpoConfig(kl_coef=0.001, micro_batch_size=args.micro_batch)
    rows = load_rows(qa_path, args.batch)
    configs = {name: arm_config(ARMS[name], tool) for name in args.arms}
    kept = {name: FrozenPrefix() for name in args.arms}  # the trainer's, one per arm
    rollout_config = RolloutConfig(max_turns=0, max_turn_tokens=args.new_tokens,
                                   max_response_tokens=args.new_tokens, temperature=1.0)

    def prompts(name: str, step: int, k: int) -> list[list[int]]:
        """Each question's prompt with `k` exemplars at `step`, one per rollout."""
        run = configs[name]
        return [ids for i, r in enumerate(rows) for ids in [run.build_prompt(
            r["question"], exemplars, k, sample_seed=run.exemplar_seed(step, i)
        ).token_ids(tok)] * args.group]

    def one_step(name: str, step: int) -> dict[str, float]:
        arm = ARMS[name]
        trained = prompts(name, step, 0 if arm.mixed else arm.exemplars)
        sampled, guided = trained, None
        if arm.mixed:  # the first guided_count of each group see the exemplars (trainer)
            hinted = prompts(name, step, arm.exemplars)
            guided = [i % args.group < guided_count(MIXED_SHARE, args.group)
                      for i in range(len(trained))]
            sampled = [h if g else t for h, t, g in zip(hinted, trained, guided, strict=True)]
        t0 = time.perf_counter()
        rollouts = generate_rollouts(
            model, tok, sampled, lambda queries: [[] for _ in queries], rollout_config,
            generator=torch.Generator().manual_seed(step), eos_token_id=-1, tag_stops=False)
        t1 = time.perf_counter()
        rewards = [score("<think>" + r.response_text, rows[i // args.group]["golden_answers"])
                   .score for i, r in enumerate(rollouts)]
        advantages = group_advantages(rewards, [i // args.group for i in range(len(trained))])
        batch = make_batch(trained, [r.response_ids for r in rollouts],
                           [r.response_mask for r in rollouts], advantages, tok.pad_token_id)
        if guided is not None:
            batch = replace(batch, guided=torch.tensor(guided))
        ref_logp = reference_logprobs(reference, batch, config.micro_batch_size, kept[name])
        t2 = time.perf_counter()
        token_logprobs(model, batch.rows(list(range(args.group))), config.micro_batch_size,
                       with_entropy=True)
        t3 = time.perf_counter()
        update_step(model, optimizer, scheduler, batch, ref_logp, config)
        t4 = time.perf_counter()
        return {"rollout": t1 - t0, "reference": t2 - t1, "old": t3 - t2, "update": t4 - t3,
                "step": t4 - t0, "tokens": statistics.fmean(len(r.response_ids) for r in rollouts),
                "prompt": statistics.fmean(len(p) for p in sampled)}

    times: dict[str, list[dict]] = {name: [] for name in args.arms}
    for step in range(1 + args.steps):  # step 0 warms each arm up
        for name in args.arms:
            result = one_step(name, step)
            print(f"  step {step} {name}: {result['step']:.1f} s", file=sys.stderr, flush=True)
            if step:
                times[name].append(result)

    def median(name: str, key: str) -> float:
        return statistics.median(t[key] for t in times[name])

    base = args.arms[0]
    print(f"\n# Exemplar cost: {args.model}, {args.pack} pack, {args.batch} questions x "
          f"{args.group} responses x {args.new_tokens} tokens, micro-batch {args.micro_batch}; "
          f"medians of {args.steps} steps (seconds)\n")
    print("| arm | prompt tokens (sampled) | response tokens | rollout | reference "
          f"| old log-probs | update | step | step / {base} step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.arms:
        cells = " | ".join(f"{median(name, key):.2f}" for key in PHASES)
        print(f"| {name} | {median(name, 'prompt'):.0f} | {median(name, 'tokens'):.0f} | "
              f"{cells} | {median(name, 'step') / median(base, 'step'):.2f}x |")
    print()
    for arm, against in RATIOS:
        if arm in times and against in times:
            print(f"- {arm} / {against}: "
                  f"{median(arm, 'step') / median(against, 'step'):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
