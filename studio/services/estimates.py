"""How long a native training run will take: seconds per step for each curriculum stage.

A pure cost model (no I/O, no torch), shared by the calibration that measures a worker
(`worker.engines.native.calibrate`) and by the launch check that estimates a run with it
(`studio.services.calibrations`), so that both count the work of a step the same way.

The work of running tokens through the model is counted in floating-point operations from
the model's shape: the decoder's linear layers per token, the output head per token whose
logits are needed, and attention per token per token of context. A step of the engine is
(rollout.py, logprobs.py and grpo.py):

* rollout: the prompts' common prefix prefilled once per step, each distinct prompt's rest
  once per group, then up to `max_turns` + 1 model turns decoded for all B x G sequences at
  once (one forward per token: a fixed cost per forward plus the rows' work), with the
  information blocks prefilled after each search;
* reference: one pass without gradients over prompt + response (the step's common prefix
  once, each group's prompt once per micro-batch, the head at the scored positions only);
* update: the same pass with gradients (the common prefix once per mini-batch), plus one
  optimizer step per mini-batch.

A calibration measures, on the worker's device, how fast each kind of work runs
(operations per second for prefill, decoding, the reference pass and the update; seconds of
fixed cost per decoding forward and per optimizer step), at shapes near a real step's. The
estimate is the worst case of the configured budgets: every model turn uses
`max_turn_tokens` until `max_response_tokens` is used up, and what is left of that budget
goes to information blocks. Real rollouts usually stop earlier (an answer, EOS), so real
steps are faster: the estimate says "at most about".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from studio.method.guidance import guided_count
from studio.method.protocol import Limits
from studio.run_config import GrpoSpec, RunConfig

#: A run longer than this on its queue gets a warning at launch.
LONG_RUN_SECONDS = 3 * 3600

#: With LoRA the base weights get no gradient: the backward pass computes the activations'
#: gradients only (about one forward's work instead of two), so the update costs about
#: (1 + 1) / (1 + 2) of a full fine-tuning update; the adapters' optimizer step is negligible.
#: An assumption from the operation count, not a measurement.
LORA_UPDATE_FACTOR = 2 / 3

#: Below these many shared tokens the engine does not share a prefix (rollout.py, logprobs.py).
MIN_SHARED_ROLLOUT = 16
MIN_SHARED_UPDATE = 32


@dataclass(frozen=True)
class ModelShape:
    """Operations of one token's forward pass, from the model's weights and config."""

    linear: float  # the decoder's linear layers (2 x their weights)
    head: float  # the output head, for a token whose logits are computed
    attention: float  # per token of context (4 x layers x heads x head dim)

    @classmethod
    def from_dict(cls, data: dict) -> ModelShape:
        return cls(float(data["linear"]), float(data["head"]), float(data["attention"]))


def token_work(shape: ModelShape, tokens: float, context: float, head_tokens: float = 0) -> float:
    """Operations to run `tokens` tokens after `context` tokens of cache, with the head on
    `head_tokens` of them (each token attends to the context and the tokens before it)."""
    return (tokens * shape.linear + shape.attention * tokens * (context + tokens / 2)
            + head_tokens * shape.head)


@dataclass(frozen=True)
class StepShape:
    """What one training step runs: its prompts and (worst-case) responses."""

    batch: int  # distinct prompts (questions) per step
    group: int  # samples per question
    prompt: int  # tokens of each prompt
    shared: int  # tokens every prompt of the step starts with
    model_tokens: int  # tokens each response samples
    env_tokens: int  # tokens of information blocks and notes in each response
    micro_batch: int = 4
    mini_batch: int | None = None
    reference: bool = True  # a KL term: the reference pass runs
    lora: bool = False

    @property
    def rows(self) -> int:
        return self.batch * self.group

    @property
    def mini_batches(self) -> int:
        return math.ceil(self.rows / min(self.mini_batch or self.rows, self.rows))


def rollout_prefill_work(shape: ModelShape, step: StepShape) -> float:
    """The prompts: the common prefix once, each distinct prompt's rest once."""
    shared = step.shared if step.batch > 1 and step.shared >= MIN_SHARED_ROLLOUT else 0
    shared = min(shared, step.prompt - 1)
    return (token_work(shape, shared, 0)
            + step.batch * token_work(shape, step.prompt - shared, shared, head_tokens=1))


def rollout_env_work(shape: ModelShape, step: StepShape) -> float:
    """The information blocks, prefilled into every sequence's cache mid-response."""
    middle = step.prompt + (step.model_tokens + step.env_tokens) / 2
    return step.rows * token_work(shape, step.env_tokens, middle - step.env_tokens / 2)


def decode_work(shape: ModelShape, step: StepShape) -> float:
    """The sampled tokens: one forward per token for every row, each with its logits."""
    context = step.prompt + step.env_tokens / 2
    return step.rows * token_work(shape, step.model_tokens, context,
                                  head_tokens=step.model_tokens)


def scoring_work(shape: ModelShape, step: StepShape, mini_batches: int = 1) -> float:
    """One scoring pass over the step's sequences as logprobs.py runs it: the step's common
    prefix once per mini-batch, each group's prompt (past that prefix) once per micro-batch,
    every response token, and the head at the sampled tokens only."""
    shared = step.shared if step.batch > 1 and step.shared >= MIN_SHARED_UPDATE else 0
    shared = min(shared, step.prompt - 1)
    prompt_passes = step.batch * math.ceil(step.group / step.micro_batch)
    response = step.model_tokens + step.env_tokens
    return (mini_batches * token_work(shape, shared, 0)
            + prompt_passes * token_work(shape, step.prompt - shared, shared)
            + step.rows * token_work(shape, response, step.prompt, head_tokens=step.model_tokens))


@dataclass(frozen=True)
class Rates:
    """A calibration's figures: how fast each kind of work runs on one device."""

    prefill: float  # operations per second
    decode: float  # operations per second, on top of the fixed cost per forward
    decode_forward: float  # seconds of fixed cost per decoding forward (weights, overhead)
    reference: float  # operations per second, no gradients
    update: float  # operations per second of forward work, with the backward pass
    optimizer_step: float  # seconds per optimizer step (gradient clipping, AdamW)

    @classmethod
    def from_dict(cls, data: dict) -> Rates:
        return cls(*(float(data[name]) for name in (
            "prefill", "decode", "decode_forward", "reference", "update", "optimizer_step")))


def rollout_seconds(shape: ModelShape, rates: Rates, step: StepShape) -> float:
    """Seconds to sample the step's rows in one pass (prefill, decoding, the tools' blocks)."""
    return ((rollout_prefill_work(shape, step) + rollout_env_work(shape, step)) / rates.prefill
            + step.model_tokens * rates.decode_forward + decode_work(shape, step) / rates.decode)


def step_seconds(shape: ModelShape, rates: Rates, step: StepShape,
                 rollout: float | None = None) -> dict[str, float]:
    """Seconds of each phase of one step (rollout, reference, update) and their sum;
    `rollout`: the sampling's seconds when it is not one pass over `step`'s prompts
    (`mixed_rollout_seconds`)."""
    rollout = rollout_seconds(shape, rates, step) if rollout is None else rollout
    reference = scoring_work(shape, step) / rates.reference if step.reference else 0.0
    mini = step.mini_batches
    update = scoring_work(shape, step, mini) / rates.update
    if step.lora:
        update *= LORA_UPDATE_FACTOR
    else:
        update += mini * rates.optimizer_step
    if mini > 1:  # the old policy's log-probs, once before the first optimizer step
        update += scoring_work(shape, step) / rates.reference
    return {"rollout": rollout, "reference": reference, "update": update,
            "total": rollout + reference + update}


def mixed_rollout_seconds(shape: ModelShape, rates: Rates, trained: StepShape, guided: int,
                          hinted_prompt: int, hinted_shared: int, passes: int) -> float:
    """Sampling a mixed-guidance step with exemplars (`studio.method.guidance`): `guided`
    rows of each group on the prompt with the exemplars (`hinted_prompt` tokens, sharing
    `hinted_shared`), the rest on the prompt all of them train on (`trained`'s). With
    `when: all-failed` the two parts are sampled one after the other (`passes` = 2), each
    paying the fixed cost per decoding forward; with `always` in one pass."""
    hinted = replace(trained, group=guided, prompt=hinted_prompt, shared=hinted_shared)
    plain = replace(trained, group=trained.group - guided)
    parts = [part for part in (hinted, plain) if part.group]
    return (sum(rollout_seconds(shape, rates, part) for part in parts)
            - (len(parts) - min(passes, len(parts))) * trained.model_tokens * rates.decode_forward)


def worst_case_response(grpo: GrpoSpec | Limits) -> tuple[int, int]:
    """(model tokens, environment tokens) of the longest response the budgets allow (a run's
    or an evaluation's), the model writing as much of it as it may (decoding costs more per
    token than prefill)."""
    model = min(grpo.max_response_tokens, (grpo.max_turns + 1) * grpo.max_turn_tokens)
    return model, min(grpo.max_response_tokens - model, grpo.max_turns * grpo.max_obs_tokens)


def answering_seconds(figures: dict, limits: Limits, questions: int, prompt_tokens: int,
                      batch_size: int) -> float:
    """Seconds an evaluation's rollouts take at most: `questions` prompts of up to
    `prompt_tokens` each, `batch_size` at a time, every answer using its whole budget (a
    batch lasts as long as its longest answer, and a small model often writes to the end of
    its budget). Loading the model is not counted."""
    shape, rates = ModelShape.from_dict(figures["shape"]), Rates.from_dict(figures["rates"])
    model_tokens, env_tokens = worst_case_response(limits)
    return sum(rollout_seconds(shape, rates, StepShape(
        batch=min(batch_size, questions - start), group=1, prompt=prompt_tokens, shared=0,
        model_tokens=model_tokens, env_tokens=env_tokens))
        for start in range(0, questions, batch_size))


def steps_per_stage(planned: Sequence[int], total_steps: int) -> list[int]:
    """Steps the run spends in each stage: the plan, cut at `total_steps`; the last stage
    holds after the plan ends (studio.method.curriculum)."""
    steps, start = [], 0
    for i, length in enumerate(planned):
        end = total_steps if i == len(planned) - 1 else min(start + length, total_steps)
        steps.append(max(0, end - start))
        start = end
    return steps


def duration_words(seconds: float) -> str:
    """'40 s', '12 min', '5 h 10 min', '3.2 days'."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    if seconds >= 48 * 3600:
        return f"{seconds / 86400:.1f} days"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def step_shape(config: RunConfig, prompt_tokens: int, shared_tokens: int) -> StepShape:
    """A stage's step under the config's worst case (see `worst_case_response`)."""
    grpo = config.grpo
    model_tokens, env_tokens = worst_case_response(grpo)
    return StepShape(batch=grpo.batch_size, group=grpo.group_size, prompt=prompt_tokens,
                     shared=shared_tokens, model_tokens=model_tokens, env_tokens=env_tokens,
                     micro_batch=grpo.micro_batch_size, mini_batch=grpo.mini_batch_size,
                     reference=grpo.kl_coef > 0, lora=config.lora is not None)


def _prompt(stage: dict, zero_shot: bool = False) -> tuple[int, int]:
    """(tokens, shared tokens) of a stage's longest prompt, or of its prompt without
    exemplars, as the engine sees it: prompts cut from the left no longer start alike, so
    nothing is shared."""
    lead = "zero_shot_" if zero_shot else ""
    tokens, limit = stage[f"{lead}prompt_tokens"], stage["max_prompt_tokens"]
    return min(tokens, limit), 0 if tokens > limit else stage[f"{lead}shared_tokens"]


def estimate_run(figures: dict, config: RunConfig, stages: Sequence[dict]) -> dict:
    """Seconds per step of each stage and the run's total, from a calibration's `figures`
    and the launch check's stages (`stage`, `exemplars`, `steps`, `prompt_tokens`,
    `shared_tokens`, their `zero_shot_` twins for the prompt without exemplars, and
    `max_prompt_tokens`). `steps` per stage in the answer are the steps this run spends in
    it (`grpo.steps` may cut or extend the plan). In a mixed-guidance stage with exemplars
    only the hinted part of the sampling pays for them (`mixed_rollout_seconds`)."""
    shape, rates = ModelShape.from_dict(figures["shape"]), Rates.from_dict(figures["rates"])
    counts = steps_per_stage([s["steps"] for s in stages], config.total_steps)
    guidance = config.guidance
    rows, total = [], 0.0
    for stage, count in zip(stages, counts, strict=True):
        if guidance.mode == "mixed" and stage["exemplars"] > 0:
            trained = step_shape(config, *_prompt(stage, zero_shot=True))
            rollout = mixed_rollout_seconds(
                shape, rates, trained, guided_count(guidance.share, trained.group),
                *_prompt(stage), passes=2 if guidance.when == "all-failed" else 1)
            seconds = step_seconds(shape, rates, trained, rollout)
        else:
            seconds = step_seconds(shape, rates, step_shape(config, *_prompt(stage)))
        total += count * seconds["total"]
        rows.append({"stage": stage["stage"], "exemplars": stage["exemplars"], "steps": count,
                     "seconds_per_step": seconds["total"],
                     **{f"{k}_seconds": v for k, v in seconds.items() if k != "total"}})
    model_tokens, env_tokens = worst_case_response(config.grpo)
    return {"stages": rows, "total_seconds": total, "total_steps": config.total_steps,
            "response_tokens": {"model": model_tokens, "env": env_tokens},
            "long": total > LONG_RUN_SECONDS}


def calibration_summary(figures: dict, context: int = 1000, rows: int = 16) -> str:
    """A calibration's figures in words, at `context` tokens of context and `rows` rows."""
    shape, rates = ModelShape.from_dict(figures["shape"]), Rates.from_dict(figures["rates"])
    prefill = rates.prefill / (shape.linear + shape.attention * context)
    sampled = shape.linear + shape.head + shape.attention * context
    decode = rates.decode_forward + rows * sampled / rates.decode
    update = rates.update / sampled
    return (f"prefill {prefill:,.0f} tokens/s, decoding {decode:.2f} s per token for {rows} "
            f"sequences, update (forward + backward) {update:,.0f} tokens/s, each at "
            f"{context:,} tokens of context; {rates.optimizer_step:.2f} s per optimizer step")
