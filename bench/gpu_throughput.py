"""Rollout and GRPO-step throughput of the native engine on one device; prints tables.

On a CUDA GPU it builds a randomly initialised model of Qwen2.5-0.5B's shape
(speed does not depend on the weights' values, and nothing is downloaded); on
CPU a small shape keeps the run short so CI can check the script works. The
vocabulary is the bundled SmolLM2 tokenizer's (49,152 ids; Qwen's is 151,936;
`--tokenizer` names another), so sampled ids always decode.

    python bench/gpu_throughput.py                      # CUDA, Qwen2.5-0.5B shape, bf16
    python bench/gpu_throughput.py --device cpu --shape small --batch 4 --tokens 16
    python bench/gpu_throughput.py --device cpu --shape small --tokenizer FOLDER
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from studio.models.base_models import DEFAULT_MODEL, load_tokenizer
from worker.engines.native.grpo import GrpoConfig, update_step
from worker.engines.native.logprobs import frozen_copy, reference_logprobs
from worker.engines.native.optimizer import make_optimizer
from worker.engines.native.policy_batch import make_batch
from worker.engines.native.rollout import RolloutConfig, generate_rollouts

SHAPES = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2),
    "small": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2),
}
PASSAGE = ("Tarrowmere is the largest island of the Ondrell Archipelago, about 60 kilometres "
           "from north to south.")


def build_model(shape: str, vocab: int, device: str, dtype: torch.dtype):
    config = Qwen2Config(vocab_size=vocab, max_position_embeddings=32768, rope_theta=1e6,
                         tie_word_embeddings=True, **SHAPES[shape])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device)


def prompts(tokenizer, batch: int, prompt_tokens: int) -> list[list[int]]:
    text = " ".join(["Which island holds the capital of the archipelago?"] * 64)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:prompt_tokens]
    return [list(ids) for _ in range(batch)]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(model, tokenizer, device: str, batch: int, tokens: int, prompt_tokens: int,
            repeats: int) -> dict:
    def search(queries):
        return [[("Tarrowmere", PASSAGE)] * 3 for _ in queries]

    config = RolloutConfig(max_turns=2, max_turn_tokens=tokens, max_response_tokens=3 * tokens
                           + 200, temperature=1.0)
    ids = prompts(tokenizer, batch, prompt_tokens)
    rollout_times, generate_times, generated = [], [], []
    for r in range(repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        rollouts = generate_rollouts(model, tokenizer, ids, search, config,
                                     generator=torch.Generator(device).manual_seed(r),
                                     eos_token_id=tokenizer.eos_token_id)
        sync(device)
        t1 = time.perf_counter()
        n_model = sum(sum(x.response_mask) for x in rollouts)
        per_seq = max(1, n_model // batch)
        inputs = torch.tensor(ids, device=device)
        with torch.inference_mode():
            model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=True,
                           max_new_tokens=per_seq, min_new_tokens=per_seq,
                           pad_token_id=tokenizer.pad_token_id)
        sync(device)
        t2 = time.perf_counter()
        if r:  # the first round warms up
            rollout_times.append(t1 - t0)
            generate_times.append(t2 - t1)
            generated.append(n_model)
    tokens_made = statistics.median(generated)
    rollout_s, generate_s = statistics.median(rollout_times), statistics.median(generate_times)

    grpo = GrpoConfig(micro_batch_size=max(1, batch // 2))
    reference = frozen_copy(model)
    optimizer, scheduler = make_optimizer(model, 1e-6)
    advantages = [(-1.0) ** i for i in range(batch)]
    step = make_batch([r.prompt_ids for r in rollouts], [r.response_ids for r in rollouts],
                      [r.response_mask for r in rollouts], advantages, tokenizer.pad_token_id)
    ref_times, update_times = [], []
    for r in range(repeats + 1):
        sync(device)
        t0 = time.perf_counter()
        ref = reference_logprobs(reference, step, grpo.micro_batch_size)
        sync(device)
        t1 = time.perf_counter()
        model.train()
        update_step(model, optimizer, scheduler, step, ref, grpo)
        model.eval()
        sync(device)
        t2 = time.perf_counter()
        if r:
            ref_times.append(t1 - t0)
            update_times.append(t2 - t1)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    return {
        "rollout_tok_s": tokens_made / rollout_s, "generate_tok_s": tokens_made / generate_s,
        "ratio": generate_s / rollout_s, "rollout_s": rollout_s,
        "reference_s": statistics.median(ref_times), "update_s": statistics.median(update_times),
        "tokens": tokens_made, "peak_gib": peak,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None)
    parser.add_argument("--batch", type=int, nargs="+", default=None)
    parser.add_argument("--tokens", type=int, default=None, help="new tokens per turn")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokenizer", default=DEFAULT_MODEL,
                        help="the model whose tokenizer gives the vocabulary (default: the "
                        "bundled SmolLM2, converted into --data-dir once); a small one keeps "
                        "a check of the script on CPU short")
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) /
                        "studio-bench-models")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    shape = args.shape or ("qwen2.5-0.5b" if cuda else "small")
    batches = args.batch or ([16, 64] if cuda else [4])
    tokens = args.tokens or (256 if cuda else 16)
    dtype = torch.bfloat16 if cuda else torch.float32
    if not cuda:
        torch.set_num_threads(1)
    tokenizer = load_tokenizer(args.tokenizer, args.data_dir)
    model = build_model(shape, len(tokenizer), args.device, dtype).eval()
    params = sum(p.numel() for p in model.parameters()) / 1e6
    name = torch.cuda.get_device_name() if cuda else "CPU (1 thread)"
    print(f"# native engine throughput: {name}, shape {shape} ({params:.0f}M params), {dtype}, "
          f"prompts of {args.prompt_tokens} tokens, {tokens} new tokens per turn, 2 turns\n")
    print("| batch | rollout tok/s | plain generate tok/s | rollout / generate | rollout s "
          "| reference s | update s | model tokens | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for batch in batches:
        m = measure(model, tokenizer, args.device, batch, tokens, args.prompt_tokens,
                    args.repeats)
        print(f"| {batch} | {m['rollout_tok_s']:.0f} | {m['generate_tok_s']:.0f} | "
              f"{m['ratio']:.2f} | {m['rollout_s']:.2f} | {m['reference_s']:.2f} | "
              f"{m['update_s']:.2f} | {m['tokens']:.0f} | {m['peak_gib']:.1f} |")
        if cuda:
            torch.cuda.reset_peak_memory_stats()
    return 0


if __name__ == "__main__":
    sys.exit(main())
