"""Calibration: how fast one model trains on this device, measured with the engine's own code.

`python -m worker.engines.native.calibrate MODEL --dtype float32 --threads 1 --device cpu`
prints one JSON object: the model's shape and the rates of `studio.services.estimates`, of
the model itself (`rates`) and again with LoRA adapters in place (`lora_rates`: the
default `lora:` spec, set up as the trainer sets a LoRA policy up; their decoding and
update run at other rates than the operation count says). The worker's calibration task
(`worker.calibration`) runs it in a fresh process set up as a training process is (the
same threads, one GPU of its own), so the rates are what a run there would get. About 45 s
of one CPU thread for SmolLM2-135M (both halves), after the model loads.

What runs, each once after a short warm-up, in shapes near a step with exemplars:

* rollouts (`generate_rollouts`, no tool, EOS no stop) of 4 prompts x 4 samples that share
  a 768-token prefix: one sampled token (the prefill), then 1 + 12 tokens: the difference is
  12 decoding forwards at 16 rows and ~800 tokens of context; the same for one short prompt
  gives the fixed cost of a forward;
* one AdamW step on its own (its cost is per optimizer step, not per token; the first
  step also allocates AdamW's state, so it is slightly high), then `reference_logprobs` and
  `update_step` on 2 groups x 2 responses of 64 tokens after prompts that share 256 tokens
  (with shorter responses the update's matrices are small and run slower per operation
  than a real step's).

Each time is divided by the operations `studio.services.estimates` counts for that shape,
so the estimate of a run only scales the measured figures to the run's shapes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from studio.models.base_models import load_causal_lm, load_tokenizer
from studio.run_config import BF16_AUTOCAST, LoraSpec
from studio.services.estimates import (
    ModelShape,
    StepShape,
    rollout_prefill_work,
    scoring_work,
    token_work,
)
from studio.settings import get_settings
from worker.engines.native.grpo import GrpoConfig, update_step
from worker.engines.native.logprobs import reference_logprobs
from worker.engines.native.optimizer import make_optimizer
from worker.engines.native.policy_batch import make_batch
from worker.engines.native.precision import (
    bf16_compute,
    store_frozen_projections_in_bf16,
    weights_dtype,
)
from worker.engines.native.rollout import RolloutConfig, generate_rollouts
from worker.lora import add_adapters, inner

PROMPTS, SAMPLES = 4, 4  # the rollouts' distinct prompts and samples of each
SHARED_TOKENS, OWN_TOKENS = 768, 32  # the prompts' common prefix and each one's rest
DECODE_STEPS = 12
# the update is the slowest part to measure: a shorter prompt than the rollouts'
TRAIN = StepShape(batch=2, group=2, prompt=272, shared=256, model_tokens=64, env_tokens=0,
                  micro_batch=2)
TEXT = ("The lighthouse on the northern cape was first lit in the winter of 1852, after two "
        "ships were lost on the rocks below it. Its keeper kept a log of every storm, every "
        "ship that passed and every repair to the lamp, and the village still reads it. ")


def model_shape(model) -> ModelShape:
    """Operations per token: 2 x the decoder's linear weights, 2 x the head's, and the
    attention's 4 x layers x heads x head dim per token of context."""
    head = model.get_output_embeddings()
    linear = sum(m.weight.numel() for m in model.modules()
                 if isinstance(m, torch.nn.Linear) and m is not head)
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return ModelShape(linear=2.0 * linear, head=2.0 * head.weight.numel(),
                      attention=4.0 * config.num_hidden_layers * config.num_attention_heads
                      * head_dim)


def _clock(device: torch.device, cpu_time: bool = False):
    """A timer that waits for the device's queued work; `cpu_time`: the process's CPU time
    (one CPU thread: the device's speed on a busy machine rather than the share it got)."""
    if cpu_time:
        return time.process_time

    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()
    return now


def _token_ids(tokenizer, count: int, offset: int = 0) -> list[int]:
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    return [ids[(offset + i) % len(ids)] for i in range(count)]


def with_adapters(model, mixed: bool):
    """`model` with the default LoRA adapters in place, as the trainer sets a LoRA policy up
    (`worker.engines.native.trainer`: under bf16 autocast its frozen projections stored in
    bfloat16; the inputs' embeddings carry a gradient)."""
    adapted = inner(add_adapters(model, LoraSpec(), seed=0))
    if mixed:
        store_frozen_projections_in_bf16(adapted)
    adapted.enable_input_require_grads()
    return adapted


class _Measure:
    def __init__(self, model, tokenizer, device: torch.device, shape: ModelShape | None = None,
                 cpu_time: bool = False):
        """`shape`: the operations counted per token (the model's own by default; a model
        with adapters is counted as its base, the rates taking in the adapters' cost)."""
        self.model, self.tokenizer, self.now = model, tokenizer, _clock(device, cpu_time)
        self.shape = shape or model_shape(model)
        self.generator = torch.Generator(device).manual_seed(0)

    def prompts(self, count: int, shared: int, own: int) -> list[list[int]]:
        """`count` prompts that start with the same `shared` tokens, then differ."""
        prefix = _token_ids(self.tokenizer, shared)
        return [prefix + _token_ids(self.tokenizer, own, offset=7 * (i + 1))
                for i in range(count)]

    def _optimizer_step(self, optimizer, params) -> float:
        """Seconds of gradient clipping and one AdamW step (on zero gradients)."""
        for p in params:
            p.grad = torch.zeros_like(p)
        start = self.now()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        seconds = self.now() - start
        optimizer.zero_grad(set_to_none=True)
        return seconds

    def rollout(self, prompts: list[list[int]], tokens: int) -> tuple[float, list[int]]:
        """Seconds to roll out `prompts` for `tokens` sampled tokens each, and how many each
        sampled (a stop string ends a row early)."""
        config = RolloutConfig(max_turns=0, max_turn_tokens=tokens, max_response_tokens=tokens)
        start = self.now()
        out = generate_rollouts(self.model, self.tokenizer, prompts, lambda q: [[] for _ in q],
                                config, generator=self.generator, eos_token_id=-1)
        return self.now() - start, [len(r.response_ids) for r in out]

    def decoding(self, prompts: list[list[int]]) -> tuple[float, tuple[int, float, float]]:
        """Seconds of the prefill (one sampled token), and (forwards, operations, seconds) of
        DECODE_STEPS decoding steps after it."""
        prefill, _ = self.rollout(prompts, 1)
        seconds, sampled = self.rollout(prompts, 1 + DECODE_STEPS)
        work = sum(token_work(self.shape, n - 1, len(p), head_tokens=n - 1)
                   for p, n in zip(prompts, sampled, strict=True))
        return prefill, (max(sampled) - 1, work, max(seconds - prefill, 1e-9))

    def rates(self) -> dict[str, float]:
        self.rollout(self.prompts(2, 8, 8), 4)  # warm-up
        distinct = self.prompts(PROMPTS, SHARED_TOKENS, OWN_TOKENS)
        prefill_s, wide = self.decoding([p for p in distinct for _ in range(SAMPLES)])
        _, narrow = self.decoding(self.prompts(1, 0, OWN_TOKENS))
        decode_forward, decode = _fit_decoding(wide, narrow)
        step = StepShape(batch=PROMPTS, group=SAMPLES, prompt=SHARED_TOKENS + OWN_TOKENS,
                         shared=SHARED_TOKENS, model_tokens=0, env_tokens=0)
        return {"prefill": rollout_prefill_work(self.shape, step) / prefill_s,
                "decode": decode, "decode_forward": decode_forward, **self.training(TRAIN)}

    def training(self, step: StepShape) -> dict[str, float]:
        """The reference pass, the update and one optimizer step on responses after the
        prompts (every response token sampled by the model)."""
        prompts = [p for p in self.prompts(step.batch, step.shared, step.prompt - step.shared)
                   for _ in range(step.group)]
        responses = [_token_ids(self.tokenizer, step.model_tokens, offset=3 * i)
                     for i in range(len(prompts))]
        masks = [[1] * len(r) for r in responses]
        advantages = [(-1.0) ** i for i in range(len(prompts))]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        batch = make_batch(prompts, responses, masks, advantages, pad)
        optimizer, scheduler = make_optimizer(self.model, lr=1e-7)
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer_s = self._optimizer_step(optimizer, params)  # with AdamW's state allocated
        start = self.now()
        ref = reference_logprobs(self.model, batch, step.micro_batch)
        reference_s = self.now() - start
        start = self.now()
        update_step(self.model, optimizer, scheduler, batch, ref,
                    GrpoConfig(micro_batch_size=step.micro_batch))
        update_s = self.now() - start
        work = scoring_work(self.shape, step)
        return {"reference": work / reference_s,
                "update": work / max(update_s - optimizer_s, 1e-9),
                "optimizer_step": optimizer_s}


def _fit_decoding(wide: tuple[int, float, float],
                  narrow: tuple[int, float, float]) -> tuple[float, float]:
    """(seconds per forward, operations per second): seconds = forwards x fixed + work / rate
    through the two measurements. Noise can push the fit out of range: the fixed cost is
    kept within [0, the narrow forward's time], and at least a tenth of the wide
    measurement is put down to its work."""
    (f1, w1, s1), (f2, w2, s2) = wide, narrow
    if not (f1 and f2 and w1):
        raise RuntimeError("the model ended its sequences before decoding: nothing to time")
    det = f2 * w1 - f1 * w2
    fixed = (s2 * w1 - s1 * w2) / det if det > 0 else 0.0
    fixed = min(max(fixed, 0.0), s2 / f2)
    return fixed, w1 / max(s1 - f1 * fixed, 0.1 * s1)


def calibrate(model_ref: str, *, dtype: str, threads: int, device: str,
              cpu_time: bool = False) -> dict:
    """The figures of one calibration (see the module's docstring) and how long it took;
    `cpu_time`: timed by the process's CPU time (one thread on a CPU; the worker's
    calibration times the wall clock, what a run there gets)."""
    started = time.perf_counter()
    torch.set_num_threads(threads)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("this worker's queue is gpu but PyTorch sees no CUDA device")
    target = torch.device(device)
    data_dir = get_settings().resolved_data_dir
    tokenizer = load_tokenizer(model_ref, data_dir)
    mixed = dtype == BF16_AUTOCAST  # float32 weights, bfloat16 matmuls, as a run has them
    model = load_causal_lm(model_ref, data_dir, dtype=weights_dtype(dtype)).to(target)
    loaded, cpu = time.perf_counter(), time.process_time()
    measure = _Measure(model, tokenizer, target, cpu_time=cpu_time)
    with bf16_compute(mixed):
        rates = measure.rates()
        lora_rates = _Measure(with_adapters(model, mixed), tokenizer, target, measure.shape,
                              cpu_time).rates()
    shape = measure.shape
    return {"shape": {"linear": shape.linear, "head": shape.head, "attention": shape.attention},
            "rates": rates, "lora_rates": lora_rates, "dtype": dtype, "threads": threads,
            "device": device, "torch": torch.__version__, "load_seconds": loaded - started,
            "measure_seconds": time.perf_counter() - loaded,
            "measure_cpu_seconds": time.process_time() - cpu}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.engines.native.calibrate")
    parser.add_argument("model")
    parser.add_argument("--dtype", default="float32",
                        choices=("float32", "bfloat16", BF16_AUTOCAST))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--cpu-time", action="store_true", dest="cpu_time",
                        help="time by the process's CPU time (--threads 1 on a cpu): the "
                        "CPU's speed on a machine busy with other work")
    args = parser.parse_args(argv)
    if args.cpu_time and (args.threads != 1 or args.device != "cpu"):
        parser.error("--cpu-time: one thread on a cpu (--threads 1 --device cpu)")
    figures = calibrate(args.model, dtype=args.dtype, threads=args.threads, device=args.device,
                        cpu_time=args.cpu_time)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
