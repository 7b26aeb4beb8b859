"""Time one GRPO step of the native engine against TRL's GRPOTrainer on CPU.

    .venv/bin/python bench/grpo_step.py                      # full run (~15-20 min)
    .venv/bin/python bench/grpo_step.py --quick              # tiny shapes, checks the script
    .venv/bin/python bench/grpo_step.py --only native --steps 2
    .venv/bin/python bench/grpo_step.py --native-dtypes float32   # without the bf16 arm

The same step for both: SmolLM2-135M-Instruct (fp32, one thread), 8 prompts
(demo questions through the chat template, ~40-60 tokens) x 4 completions,
128 sampled tokens each (TRL: ``min_new_tokens`` = ``max_new_tokens``; native:
EOS is no stop; the table prints the mean each side sampled), temperature 1,
single turn, the
studio's reward, a frozen reference model loaded (KL coefficient 0.001),
micro-batches of 4 sequences, one optimizer step (AdamW) per step, gradient
checkpointing off.

* native: the engine's rollout loop (``generate_rollouts``: what the trainer
  runs, with its shared prompt prefill and grouped attention; one turn, no
  tool), then ``worker.engines.native``: ``logprobs.reference_logprobs`` and
  ``grpo.update_step``.
* TRL: ``GRPOTrainer`` (per-device batch 4, gradient accumulation 8, so one
  generation of 32 completions per optimizer step, ``beta`` 0.001); the
  rollout is its ``_generate``, the reference its no-grad log-prob pass, the
  update the rest of the step (rewards, advantages, loss, backward, optimizer).
* floor (native child, after its steps): one plain forward + backward over
  the same tokens (full logits, the model's own cross-entropy loss), in the
  same micro-batches: what any policy update has to pay at least.
* native, ``bfloat16-autocast`` (a run's ``engine.dtype``): the same steps with
  float32 weights and bfloat16 matmuls (``worker.engines.native.precision``);
  its child also scores its last batch with the reference model both ways and
  reports how far the log-probs moved (what the tests bound on a tiny model).

Each engine runs in its own child process, whose peak RSS (``VmHWM``) is read
at its end. Times are medians over ``--steps`` steps after ``--warmup``
warm-up steps. Nothing is asserted; it prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# No tags in the prompt: the native rollout stops at </search> and </answer> (TRL's generate
# does not), so a prompt that asks for them would let the native side sample fewer tokens.
INSTRUCTION = "Answer the question in a few sentences.\nQuestion: "


def vm_hwm_gib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024**2
    return float("nan")


def load_questions(n: int) -> list[dict]:
    rows = []
    with open(ROOT / "studio" / "demo" / "qa.jsonl") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


def reward_fn(text: str, golds) -> float:
    from studio.method.reward import score

    return score(text, golds).score


# --------------------------------------------------------------------------
# native
# --------------------------------------------------------------------------


def run_native(args) -> dict:
    import torch

    torch.set_num_threads(1)
    from studio.method.grpo import group_advantages
    from studio.models.base_models import load_causal_lm, load_tokenizer
    from studio.run_config import BF16_AUTOCAST
    from worker.engines.native.grpo import GrpoConfig, update_step
    from worker.engines.native.logprobs import frozen_copy, reference_logprobs
    from worker.engines.native.optimizer import make_optimizer
    from worker.engines.native.policy_batch import make_batch
    from worker.engines.native.precision import bf16_compute
    from worker.engines.native.rollout import RolloutConfig, generate_rollouts

    mixed = args.dtype == BF16_AUTOCAST

    tok = load_tokenizer(args.model, args.data_dir)
    model = load_causal_lm(args.model, args.data_dir, dtype=torch.float32)
    ref_model = frozen_copy(model)
    optimizer, scheduler = make_optimizer(model, lr=1e-6)
    config = GrpoConfig(kl_coef=0.001, micro_batch_size=args.micro_batch)
    rows = load_questions(args.prompts)
    prompt_ids = [
        tok.apply_chat_template(
            [{"role": "user", "content": INSTRUCTION + r["question"]}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for r in rows
    ]
    prompt_ids = [list(p["input_ids"]) if isinstance(p, dict) else list(p) for p in prompt_ids]
    pad = tok.pad_token_id
    rollout_config = RolloutConfig(max_turns=0, max_turn_tokens=args.new_tokens,
                                   max_response_tokens=args.new_tokens, temperature=1.0)

    def no_search(queries):  # a single turn: never called
        return [[] for _ in queries]

    steps = []
    last_batch = None
    for step in range(args.warmup + args.steps):
        c0, t0 = time.process_time(), time.perf_counter()
        # rollout: the engine's own loop (what the trainer runs), one turn, no tool; EOS is
        # not a stop (an id that is never sampled), as min_new_tokens does for TRL
        with bf16_compute(mixed):
            rollouts = generate_rollouts(
                model, tok, [p for p in prompt_ids for _ in range(args.group)], no_search,
                rollout_config, generator=torch.Generator().manual_seed(step), eos_token_id=-1)
        c1, t1 = time.process_time(), time.perf_counter()
        prompts, responses, masks, rewards, groups = [], [], [], [], []
        for k, rollout in enumerate(rollouts):
            q = k // args.group
            prompts.append(prompt_ids[q])
            responses.append(rollout.response_ids)
            masks.append(rollout.response_mask)
            rewards.append(reward_fn(tok.decode(rollout.response_ids, skip_special_tokens=True),
                                     rows[q]["golden_answers"]))
            groups.append(q)
        adv = group_advantages(rewards, groups)
        batch = make_batch(prompts, responses, masks, adv, pad)
        c2, t2 = time.process_time(), time.perf_counter()
        with bf16_compute(mixed):
            ref_logp = reference_logprobs(ref_model, batch, config.micro_batch_size)
            c3, t3 = time.process_time(), time.perf_counter()
            stats = update_step(model, optimizer, scheduler, batch, ref_logp, config)
        c4, t4 = time.process_time(), time.perf_counter()
        steps.append(
            {
                "rollout": t1 - t0,
                "reference": t3 - t2,
                "update": t4 - t3 + (t2 - t1),  # rewards, advantages, batch, loss, optimizer
                "step": t4 - t0,
                "rollout_cpu": c1 - c0,
                "reference_cpu": c3 - c2,
                "update_cpu": c4 - c3 + (c2 - c1),
                "step_cpu": c4 - c0,
                "tokens": stats["num_tokens"],
                "completion_tokens": statistics.mean(len(r) for r in responses),
                "prompt_tokens": float(batch.prompt_lengths.float().mean()),
                "kl": stats["kl"],
                "grad_norm": stats["grad_norm"],
            }
        )
        print(f"native step {step}: {steps[-1]}", file=sys.stderr, flush=True)
        last_batch = batch

    floor = []
    if args.floor:
        model.train()
        b = last_batch
        for _ in range(args.floor):
            c0, t0 = time.process_time(), time.perf_counter()
            for start in range(0, len(b), args.micro_batch):
                sl = slice(start, start + args.micro_batch)
                labels = b.input_ids[sl].masked_fill(b.loss_mask[sl] == 0, -100)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
                    loss = model(input_ids=b.input_ids[sl], attention_mask=b.attention_mask[sl],
                                 labels=labels).loss
                loss.backward()
            model.zero_grad(set_to_none=True)
            floor.append({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0})
            print(f"floor fwd+bwd: {floor[-1]}", file=sys.stderr, flush=True)
    drift = {}
    if mixed:  # the last batch scored both ways by the same (reference) weights
        scored = last_batch.loss_mask > 0
        with bf16_compute():
            bf16 = reference_logprobs(ref_model, last_batch, config.micro_batch_size)
        fp32 = reference_logprobs(ref_model, last_batch, config.micro_batch_size)
        diff = (bf16 - fp32)[scored].abs()
        drift = {"max": float(diff.max()), "mean": float(diff.mean())}
    return {
        "steps": steps,
        "floor": floor,
        "logp_drift": drift,
        "threads": torch.get_num_threads(),
        "peak_rss_gib": vm_hwm_gib(),
    }


# --------------------------------------------------------------------------
# TRL
# --------------------------------------------------------------------------


def run_trl(args) -> dict:
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from studio.models.base_models import load_causal_lm, load_tokenizer

    tok = load_tokenizer(args.model, args.data_dir)
    model = load_causal_lm(args.model, args.data_dir, dtype=torch.float32)
    rows = load_questions(args.prompts)
    data = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": INSTRUCTION + r["question"]}],
                "golden_answers": r["golden_answers"],
            }
            for r in rows
        ]
    )

    def reward(completions, golden_answers, **_):
        return [
            reward_fn(c[0]["content"], g) for c, g in zip(completions, golden_answers, strict=True)
        ]

    n_seq = args.prompts * args.group
    out_dir = tempfile.mkdtemp(prefix="bench-trl-")
    cfg = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=n_seq // args.micro_batch,
        num_generations=args.group,
        max_completion_length=args.new_tokens,
        generation_kwargs={"min_new_tokens": args.new_tokens},
        temperature=1.0,
        beta=0.001,
        epsilon=0.2,
        learning_rate=1e-6,
        max_grad_norm=1.0,
        max_steps=args.warmup + args.steps,
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=cfg, train_dataset=data, processing_class=tok
    )
    assert trainer.ref_model is not None, "TRL did not load a reference model"

    phases = dict.fromkeys(("rollout", "reference", "rollout_cpu", "reference_cpu"), 0.0)
    original_generate = trainer._generate
    original_logps = trainer._get_per_token_logps_and_entropies

    def timed_generate(*a, **k):
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            return original_generate(*a, **k)
        finally:
            phases["rollout"] += time.perf_counter() - t0
            phases["rollout_cpu"] += time.process_time() - c0

    def timed_logps(*a, **k):
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            return original_logps(*a, **k)
        finally:
            if not torch.is_grad_enabled():  # the reference (and old log-probs, if any)
                phases["reference"] += time.perf_counter() - t0
                phases["reference_cpu"] += time.process_time() - c0

    trainer._generate = timed_generate
    trainer._get_per_token_logps_and_entropies = timed_logps

    steps: list[dict] = []
    log_rows: list[dict] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            for key in ("rollout", "reference", "rollout_cpu", "reference_cpu"):
                phases[key] = 0.0
            phases["started"], phases["started_cpu"] = time.perf_counter(), time.process_time()

        def on_step_end(self, *_a, **_k):
            total = time.perf_counter() - phases["started"]
            total_cpu = time.process_time() - phases["started_cpu"]
            steps.append(
                {
                    "rollout": phases["rollout"],
                    "reference": phases["reference"],
                    "update": total - phases["rollout"] - phases["reference"],
                    "step": total,
                    "rollout_cpu": phases["rollout_cpu"],
                    "reference_cpu": phases["reference_cpu"],
                    "update_cpu": total_cpu - phases["rollout_cpu"] - phases["reference_cpu"],
                    "step_cpu": total_cpu,
                    "threads": torch.get_num_threads(),
                }
            )
            print(f"trl step {len(steps) - 1}: {steps[-1]}", file=sys.stderr, flush=True)

        def on_log(self, _args, _state, _control, logs=None, **_k):
            if logs:
                log_rows.append({k: v for k, v in logs.items() if isinstance(v, (int, float))})

    trainer.add_callback(Timer())
    trainer.train()
    tokens = [lg["num_tokens"] for lg in log_rows if "num_tokens" in lg]
    lengths = [lg["completions/mean_length"] for lg in log_rows if "completions/mean_length" in lg]
    return {
        "steps": steps,
        "completion_mean_length": lengths[-1] if lengths else None,
        "num_tokens_total": tokens[-1] if tokens else None,
        "threads": torch.get_num_threads(),
        "peak_rss_gib": vm_hwm_gib(),
    }


# --------------------------------------------------------------------------
# Parent: children and the table
# --------------------------------------------------------------------------


def child(engine: str, args, dtype: str = "float32") -> dict | str:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        result_path = fh.name
    cmd = [
        sys.executable,
        __file__,
        "--child",
        engine,
        "--result",
        result_path,
        "--model",
        args.model,
        "--data-dir",
        str(args.data_dir),
        "--prompts",
        str(args.prompts),
        "--group",
        str(args.group),
        "--new-tokens",
        str(args.new_tokens),
        "--micro-batch",
        str(args.micro_batch),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--floor",
        str(args.floor),
        "--dtype",
        dtype,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = proc.stdout.decode(errors="replace")
    print(text[-4000:], file=sys.stderr)
    if proc.returncode != 0:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        return f"{engine} failed (exit {proc.returncode}): {lines[-1] if lines else '?'}"
    result = json.loads(Path(result_path).read_text())
    result["wall_s"] = time.perf_counter() - started
    return result


def median(steps: list[dict], key: str, skip: int) -> float:
    values = [s[key] for s in steps[skip:]] or [s[key] for s in steps]
    return statistics.median(values)


def table(args, arms: dict[str, dict | str]) -> str:
    """Each arm's phases side by side (wall seconds, process CPU seconds in brackets), then
    each native arm against TRL and the bfloat16 arm against float32."""
    def med(res, key):
        return median(res["steps"], key, args.warmup) if isinstance(res, dict) else None

    def cell(x):  # three significant digits: a tiny model's step is a few hundredths of a second
        return "-" if x is None else f"{x:.3g}"

    def ratio(a, b):
        return f"{a / b:.2f}x" if a is not None and b else "-"

    def figures(res, key) -> tuple[float | None, float | None]:
        if key != "train":
            return med(res, key), med(res, key + "_cpu")
        if not isinstance(res, dict):
            return None, None
        return (med(res, "step") - med(res, "rollout"),
                med(res, "step_cpu") - med(res, "rollout_cpu"))

    pairs = [(a, b) for a, b in (("native fp32", "TRL"), ("native bf16-autocast", "TRL"),
                                 ("native bf16-autocast", "native fp32"))
             if a in arms and b in arms]
    lines = [
        f"GRPO step, CPU 1 thread, {args.model}: {args.prompts} prompts x {args.group} "
        f"completions x {args.new_tokens} tokens, single turn, reference loaded, micro-batch "
        f"{args.micro_batch}, no gradient checkpointing; medians of {args.steps} steps after "
        f"{args.warmup} warm-up; wall seconds (process CPU seconds); TRL in float32",
        "",
        "| phase | " + " | ".join(arms) + "".join(f" | {a} / {b}" for a, b in pairs) + " |",
        "|---|" + "---|" * (len(arms) + len(pairs)),
    ]
    rows = (
        ("rollout", "rollout (native: its rollout loop; TRL: `model.generate`)"),
        ("reference", "reference log-probs"),
        ("update", "policy update (rewards, fwd + bwd, AdamW)"),
        ("train", "training part (step - rollout)"),
        ("step", "**whole step**"),
    )
    for key, name in rows:
        values = {arm: figures(res, key) for arm, res in arms.items()}
        cells = [f"{cell(w)} ({cell(c)})" for w, c in values.values()]
        cells += [f"{ratio(values[a][0], values[b][0])} ({ratio(values[a][1], values[b][1])})"
                  for a, b in pairs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    rss = [f"{res['peak_rss_gib']:.2f}" if isinstance(res, dict) else "-" for res in arms.values()]
    lines.append("| peak RSS (GiB, child process) | " + " | ".join(rss) + " |" * len(pairs) + " |")
    floors = [statistics.median(f["wall"] for f in res["floor"])
              if isinstance(res, dict) and res.get("floor") else None for res in arms.values()]
    if any(floors):
        cells = [f"{cell(f)}; update / floor {ratio(med(res, 'update'), f)}" if f else ""
                 for f, res in zip(floors, arms.values(), strict=True)]
        lines.append("| floor: plain fwd + bwd, same tokens, full logits, no optimizer | "
                     + " | ".join(cells) + " |" * len(pairs) + " |")
    notes = []
    for arm, res in arms.items():
        if isinstance(res, str):
            notes.append(f"{arm}: {res}")
            continue
        last = res["steps"][-1]
        if "completion_tokens" in last:
            notes.append(f"{arm}: mean completion length {last['completion_tokens']:.1f}, "
                         f"{last['tokens']:.0f} scored tokens/step, prompts "
                         f"{last['prompt_tokens']:.0f} tokens on average, torch threads "
                         f"{res['threads']}")
        else:
            notes.append(f"{arm}: mean completion length {res.get('completion_mean_length')}, "
                         f"torch threads {res['threads']}")
        if res.get("logp_drift"):
            notes.append(f"{arm}: the reference's log-probs of the last batch, bfloat16 "
                         f"against float32: max |diff| {res['logp_drift']['max']:.4f}, mean "
                         f"{res['logp_drift']['mean']:.4f} nats per scored token")
    from worker.engines.native.precision import cpu_bf16_support

    notes.append(f"CPU: {cpu_bf16_support()}")
    try:
        load = os.getloadavg()
        notes.append(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    except OSError:
        pass
    return "\n".join(lines + [""] + notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/studio-models"))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="measured steps")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--floor", type=int, default=1, help="plain fwd+bwd repetitions")
    parser.add_argument("--only", choices=["native", "trl"])
    parser.add_argument("--native-dtypes", nargs="+", default=["float32", "bfloat16-autocast"],
                        choices=["float32", "bfloat16-autocast"],
                        help="engine.dtype of each native arm")
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny shapes to check the script")
    parser.add_argument("--child", choices=["native", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.group, args.new_tokens, args.steps, args.warmup = 2, 2, 8, 1, 1

    if args.child:
        run = run_native if args.child == "native" else run_trl
        result = run(args)
        Path(args.result).write_text(json.dumps(result))
        return 0

    arms = {}
    if args.only in (None, "native"):
        for dtype in args.native_dtypes:
            arms["native " + dtype.replace("bfloat16", "bf16").replace("float32", "fp32")] = \
                child("native", args, dtype)
    if args.only in (None, "trl"):
        arms["TRL"] = child("trl", args)
    print(table(args, arms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
