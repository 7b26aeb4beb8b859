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
fixed cost per decoding forward and per optimizer step), at shapes near a real step's.

Two estimates come out of the same count. The worst case of the configured budgets: every
model turn uses `max_turn_tokens` until `max_response_tokens` is used up, and what is left
of that budget goes to information blocks ("at most about"). And the expected step, given
how long a stage's responses were on average when runs of the config were measured
(`TypicalResponse`): every row's own work at those lengths, while a rollout pass decodes
until its longest row ends and a scoring micro-batch is as wide as its longest sequence
(`longest_row_factor`).
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
#: An assumption from the operation count, for a calibration without `lora_rates` (measured
#: with adapters in place since 2026-12-07: on one CPU thread 0.75-0.86 of a full update in
#: two calibrations, and decoding about 1.3x slower).
LORA_UPDATE_FACTOR = 2 / 3

#: Below these many shared tokens the engine does not share a prefix (rollout.py, logprobs.py).
MIN_SHARED_ROLLOUT = 16
MIN_SHARED_UPDATE = 32


def longest_row_factor(rows: int) -> float:
    """How many times the mean response the longest of `rows` responses is: 1 + 0.2 log2
    rows. Drawing 1, 2, 4, 8 and 16 of the logged rollouts of two calculator runs (their
    turns' lengths, stage by stage) gave 1.0, 1.23, 1.41, 1.6 and 1.76 (docs/engine.md)."""
    return 1 + 0.2 * math.log2(max(rows, 1))


@dataclass(frozen=True)
class TypicalResponse:
    """A stage's responses on average, as measured: tokens the model sampled and tokens of
    information blocks and notes."""

    model_tokens: float
    env_tokens: float


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
    """What one training step runs: its prompts and responses, every response alike (the
    worst case) or, with `most`, of the given mean lengths."""

    batch: int  # distinct prompts (questions) per step
    group: int  # samples per question
    prompt: int  # tokens of each prompt
    shared: int  # tokens every prompt of the step starts with
    model_tokens: float  # tokens each response samples
    env_tokens: float  # tokens of information blocks and notes in each response
    micro_batch: int = 4
    mini_batch: int | None = None
    reference: bool = True  # a KL term: the reference pass runs
    lora: bool = False
    epochs: int = 1  # PPO epochs over the batch
    rescored: int = 0  # groups the sampling weights score again (the logged rollouts')
    most: tuple[int, int] | None = None  # with mean lengths: the budgets' (model, env) tokens

    @property
    def rows(self) -> int:
        return self.batch * self.group

    @property
    def mini_batches(self) -> int:
        return math.ceil(self.rows / min(self.mini_batch or self.rows, self.rows))

    @property
    def forwards(self) -> float:
        """Decoding forwards of one rollout pass over the step's rows: until its longest
        row has sampled its tokens."""
        if self.most is None:
            return self.model_tokens
        return min(self.most[0], longest_row_factor(self.rows) * self.model_tokens)

    @property
    def scored_width(self) -> float:
        """Response tokens a scoring pass runs per row: a micro-batch (a group's rows) is as
        wide as its longest sequence."""
        response = self.model_tokens + self.env_tokens
        if self.most is None:
            return response
        rows = min(self.group, self.micro_batch)
        return min(sum(self.most), longest_row_factor(rows) * response)


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
    return (mini_batches * token_work(shape, shared, 0)
            + prompt_passes * token_work(shape, step.prompt - shared, shared)
            + step.rows * token_work(shape, step.scored_width, step.prompt,
                                     head_tokens=step.model_tokens))


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


def rollout_work_seconds(shape: ModelShape, rates: Rates, step: StepShape) -> float:
    """Seconds of the rows' own work in sampling them (prefill, decoding, the tools' blocks),
    without the fixed cost of each decoding forward."""
    return ((rollout_prefill_work(shape, step) + rollout_env_work(shape, step)) / rates.prefill
            + decode_work(shape, step) / rates.decode)


def rollout_seconds(shape: ModelShape, rates: Rates, step: StepShape) -> float:
    """Seconds to sample the step's rows in one pass."""
    return rollout_work_seconds(shape, rates, step) + step.forwards * rates.decode_forward


def step_seconds(shape: ModelShape, rates: Rates, step: StepShape,
                 rollout: float | None = None, adapted: Rates | None = None
                 ) -> dict[str, float]:
    """Seconds of each phase of one step as the trainer times them (rollout; reference: the
    reference pass and the sampling weights' pass; update) and their sum; `rollout`: the
    sampling's seconds when it is not one pass over `step`'s prompts
    (`mixed_rollout_seconds`); `adapted`: the rates of the model with LoRA adapters in place
    (`lora_rates`), which samples, scores for the logs and trains in a LoRA run, while the
    reference is the base (its adapters off)."""
    policy = adapted or rates
    rollout = rollout_seconds(shape, policy, step) if rollout is None else rollout
    reference = scoring_work(shape, step) / rates.reference if step.reference else 0.0
    optimizer_steps = step.mini_batches * step.epochs
    # the sampling weights score the logged groups, or every group when the update takes
    # several optimizer steps (their log-probs, before the first one)
    rescored = step.batch if optimizer_steps > 1 else min(step.rescored, step.batch)
    if rescored:
        reference += scoring_work(shape, replace(step, batch=rescored)) / policy.reference
    update = step.epochs * scoring_work(shape, step, step.mini_batches) / policy.update
    if step.lora and adapted is None:
        update *= LORA_UPDATE_FACTOR
    else:
        update += optimizer_steps * policy.optimizer_step
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
    forwards = sum(part.forwards for part in parts) if passes > 1 else trained.forwards
    return (sum(rollout_work_seconds(shape, rates, part) for part in parts)
            + forwards * rates.decode_forward)


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


def step_shape(config: RunConfig, prompt_tokens: int, shared_tokens: int,
               typical: TypicalResponse | None = None) -> StepShape:
    """A stage's step under the config's worst case (see `worst_case_response`), or with
    responses of the `typical` lengths within the same budgets."""
    grpo = config.grpo
    most = worst_case_response(grpo)
    model_tokens, env_tokens = most if typical is None else (typical.model_tokens,
                                                             typical.env_tokens)
    # the penalties in the reward need every group's log-probs under the sampling weights
    rescored = (grpo.batch_size if grpo.kl_in == "reward" and grpo.kl_coef > 0
                else config.engine.log_groups_per_step)
    return StepShape(batch=grpo.batch_size, group=grpo.group_size, prompt=prompt_tokens,
                     shared=shared_tokens, model_tokens=model_tokens, env_tokens=env_tokens,
                     micro_batch=grpo.micro_batch_size, mini_batch=grpo.mini_batch_size,
                     reference=grpo.kl_coef > 0, lora=config.lora is not None,
                     epochs=grpo.ppo_epochs, rescored=rescored,
                     most=None if typical is None else most)


def _prompt(stage: dict, zero_shot: bool = False) -> tuple[int, int]:
    """(tokens, shared tokens) of a stage's longest prompt, or of its prompt without
    exemplars, as the engine sees it: prompts cut from the left no longer start alike, so
    nothing is shared."""
    lead = "zero_shot_" if zero_shot else ""
    tokens, limit = stage[f"{lead}prompt_tokens"], stage["max_prompt_tokens"]
    return min(tokens, limit), 0 if tokens > limit else stage[f"{lead}shared_tokens"]


def estimate_run(figures: dict, config: RunConfig, stages: Sequence[dict],
                 typical: Sequence[TypicalResponse] | None = None) -> dict:
    """Seconds per step of each stage and the run's total, from a calibration's `figures`
    and the launch check's stages (`stage`, `exemplars`, `steps`, `prompt_tokens`,
    `shared_tokens`, their `zero_shot_` twins for the prompt without exemplars, and
    `max_prompt_tokens`): the worst case, or the expected step with each stage's responses
    as long as `typical`'s (one per stage). `steps` per stage in the answer are the steps
    this run spends in it (`grpo.steps` may cut or extend the plan). In a mixed-guidance
    stage with exemplars only the hinted part of the sampling pays for them
    (`mixed_rollout_seconds`)."""
    shape, rates = ModelShape.from_dict(figures["shape"]), Rates.from_dict(figures["rates"])
    adapted = (Rates.from_dict(figures["lora_rates"])
               if config.lora is not None and "lora_rates" in figures else None)
    counts = steps_per_stage([s["steps"] for s in stages], config.total_steps)
    responses = [None] * len(stages) if typical is None else typical
    guidance = config.guidance
    rows, total = [], 0.0
    for stage, count, response in zip(stages, counts, responses, strict=True):
        if guidance.mode == "mixed" and stage["exemplars"] > 0:
            trained = step_shape(config, *_prompt(stage, zero_shot=True), response)
            rollout = mixed_rollout_seconds(
                shape, adapted or rates, trained, guided_count(guidance.share, trained.group),
                *_prompt(stage), passes=2 if guidance.when == "all-failed" else 1)
            seconds = step_seconds(shape, rates, trained, rollout, adapted)
        else:
            seconds = step_seconds(shape, rates, step_shape(config, *_prompt(stage), response),
                                   adapted=adapted)
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
