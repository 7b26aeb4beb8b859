"""The native training loop: ICRL with GRPO on one machine, the whole curriculum in one run.

Each step: the curriculum says how many exemplars the prompts show; B questions
x G samples are rolled out with the run's tools; the method core scores each
response and computes group advantages; one loss-masked GRPO update follows.
Every step writes one metrics row, its events (stage changes, warnings) and a
sample of rollouts in one transaction, and says which phase it is in as it goes (the
run's `phase`: rolling out, scoring, updating); checkpoints hold the weights
(Hugging Face format; with `lora:` the adapter only), the optimizer and the
scheduler. All randomness of a step is seeded from (run seed, step), so a
resumed run repeats nothing and skips nothing.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from studio.ingest import QARow
from studio.jobs.devices import cpu_name
from studio.method.curriculum import (
    AdaptiveController,
    Curriculum,
    PrematureWatch,
    premature_message,
)
from studio.method.exemplars import Exemplar
from studio.method.grpo import (
    group_advantages,
    groups_with_spread,
    sequence_kl,
    zero_spread_share,
)
from studio.method.guidance import guided_count, needs_guidance
from studio.method.prompt import derive_seed
from studio.method.reward import RewardBreakdown, overlong_penalty, score
from studio.method.rollouts import (
    Rollout,
    guidance_metrics,
    part_metrics,
    rollout_metrics,
    rollout_segments,
    working_calls,
)
from studio.method.sentinel import Sentinel, alarm_message
from studio.method.token_arrays import TokenArrays, char_counts, token_ends
from studio.method.tools import specs, using_words
from studio.models.base_models import load_causal_lm, load_tokenizer
from studio.retrieval import SearchIndex
from studio.run_config import BF16_AUTOCAST, RunConfig
from studio.services import corpora, qa_sets
from studio.services.reproduce import write_bundle
from studio.services.run_folder import Checkpoint, RunFolder
from studio.services.run_plans import RunPlan, load_plan
from studio.services.run_recorder import CHECKPOINTING, LOADING, STEP_PHASES, RunRecorder
from studio.settings import Settings
from studio.steps import shown_step
from studio.storage.tables import Rollout as RolloutRow
from worker.engines.native.grpo import GrpoConfig, update_needs_old_logprobs, update_step
from worker.engines.native.logprobs import (
    FrozenPrefix,
    frozen_copy,
    reference_logprobs,
    token_logprobs,
)
from worker.engines.native.optimizer import make_optimizer
from worker.engines.native.policy_batch import make_batch
from worker.engines.native.precision import (
    bf16_compute,
    store_frozen_projections_in_bf16,
    weights_dtype,
)
from worker.engines.native.rollout import RolloutConfig, generate_rollouts
from worker.lora import add_adapters, inner, load_adapters
from worker.tools import build_tools

STATE_FILE = "trainer_state.pt"
KEEP_CHECKPOINTS = 2


@dataclass
class TrainingData:
    questions: list[QARow]
    exemplars: list[Exemplar]
    index: SearchIndex | None  # None: the run does not search


def corpus_index(settings: Settings, corpus_id: int | None) -> SearchIndex | None:
    """The corpus's BM25 index; None for a run or evaluation without search (no corpus)."""
    return corpora.open_index(settings, corpus_id) if corpus_id is not None else None


def load_training_data(settings: Settings, plan: RunPlan) -> TrainingData:
    """The data the run's plan pins: its training set, exemplar snapshot and corpus index."""
    return TrainingData(questions=qa_sets.load_rows(settings, plan.train.id),
                        exemplars=plan.exemplar_list(),
                        index=corpus_index(settings, plan.corpus and plan.corpus.id))


def device_facts(device: torch.device, dtype: torch.dtype, mixed: bool = False) -> dict:
    """The device a run trains on, as its reproducibility bundle names it (`mixed`: float32
    weights with bfloat16 matmuls)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {"kind": device.type, "name": name,
            "dtype": BF16_AUTOCAST if mixed else str(dtype).removeprefix("torch.")}


def determinism_settings() -> dict:
    """What decides whether a run repeats exactly, as PyTorch has it now (after `setup`)."""
    return {"torch_threads": torch.get_num_threads(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "seeding": "every draw (question order, exemplar sampling, rollouts, LoRA "
                       "initialisation) has its own generator seeded from (seed, step, what)"}


def search_fn(index: SearchIndex | None, k: int):
    """The tool: queries -> per query the top-k passages as (title, text); None without an
    index (a run that does not search)."""
    if index is None:
        return None
    return lambda queries: index.titled_passages(queries, k)


def questions_for_step(n_questions: int, batch_size: int, seed: int, step: int) -> list[int]:
    """Row indices of a step: epochs are seeded permutations, consumed batch by batch."""
    picked = []
    for flat in range(step * batch_size, (step + 1) * batch_size):
        epoch, position = divmod(flat, n_questions)
        order = torch.randperm(n_questions,
                               generator=torch.Generator().manual_seed(derive_seed(seed, epoch)))
        picked.append(int(order[position]))
    return picked


def resampled_questions(n_questions: int, batch_size: int, seed: int, step: int,
                        round_: int) -> list[int]:
    """Row indices of dynamic sampling's later round `round_` (1, 2, ...) of a step: a
    seeded draw of its own, so the epochs' order (`questions_for_step`) stays the same
    whatever earlier steps resampled, and a resumed run repeats nothing."""
    order = torch.randperm(n_questions, generator=torch.Generator().manual_seed(
        derive_seed(seed, step, "resample", round_)))
    return [int(order[i % n_questions]) for i in range(batch_size)]


@dataclass
class StepPrompts:
    rows: list[QARow]
    prefix: str
    ids: list[list[int]]  # one per question (not yet repeated per sample)
    exemplars: list[int]  # per question, how many exemplars its prompt shows
    cut: int = 0  # prompts longer than grpo.max_prompt_tokens, cut from the left
    shown: list[tuple[int, ...]] = field(default_factory=list)  # per question, which ones


def question_exemplars(config: RunConfig, curriculum: Curriculum, step: int, k: int,
                       draw: int | tuple[int, int], questions: int) -> list[int]:
    """Per question of a step (or of dynamic sampling's later round) the exemplars it is
    shown: the stage's `k`, or in a soft curriculum 0 for some (a seeded draw each)."""
    return [curriculum.question_exemplars(step, k, derive_seed(config.seed, draw, i, "soft"))
            for i in range(questions)]


def build_step_prompts(config: RunConfig, tokenizer, data: TrainingData, rows: list[QARow],
                       ks: list[int], draw: int | tuple[int, int]) -> StepPrompts:
    """The step's prompts, question i's with `ks[i]` exemplars; one over
    `grpo.max_prompt_tokens` keeps its last tokens (the question and the assistant prefix),
    as veRL's left truncation does. Launching warns when the first stage's prompts would be
    cut (`studio.services.run_validation`). `draw`: the step, or (step, round) for dynamic
    sampling's later rounds; it seeds the exemplar samples (`RunConfig.exemplar_seed`: per
    question, or one for the whole draw)."""
    limit = config.grpo.max_prompt_tokens
    ids, shown, cut = [], [], 0
    for i, (row, k) in enumerate(zip(rows, ks, strict=True)):
        prompt = config.build_prompt(row.question, data.exemplars, k,
                                     sample_seed=config.exemplar_seed(draw, i))
        prompt_ids = prompt.token_ids(tokenizer)
        cut += len(prompt_ids) > limit
        ids.append(prompt_ids[-limit:])
        shown.append(prompt.exemplar_indices)
    return StepPrompts(rows, config.prompt.assistant_prefix or "", ids, list(ks), cut, shown)


@dataclass
class StepSample:
    """Whole groups of a step's rollouts: per question its row and the prompt its rollouts
    train on, per rollout (`group` of them per question, in order) the rollout, its reward,
    its overlong penalty (`studio.method.reward.overlong_penalty`; 0 when off) and, for a
    rollout sampled with exemplars as a hint (`guidance.mode: mixed`), which exemplars it
    saw (None: it was sampled on the prompt it trains on)."""

    group: int
    rows: list[QARow] = field(default_factory=list)
    prompt_ids: list[list[int]] = field(default_factory=list)
    exemplars: list[int] = field(default_factory=list)  # per question, in the trained prompt
    rollouts: list[Rollout] = field(default_factory=list)
    rewards: list[RewardBreakdown] = field(default_factory=list)
    overlong: list[float] = field(default_factory=list)
    hints: list[tuple[int, ...] | None] = field(default_factory=list)  # per rollout
    prompts_cut: int = 0

    @property
    def group_ids(self) -> list[int]:
        return [i // self.group for i in range(len(self.rollouts))]

    @property
    def shaped_rewards(self) -> list[float]:
        """What the advantages start from (before a KL in the reward): score + penalty."""
        return [r.score + o for r, o in zip(self.rewards, self.overlong, strict=True)]

    def extend(self, other: StepSample) -> None:
        for name in ("rows", "prompt_ids", "exemplars", "rollouts", "rewards", "overlong",
                     "hints"):
            getattr(self, name).extend(getattr(other, name))
        self.prompts_cut += other.prompts_cut

    def groups(self, indices: list[int]) -> StepSample:
        """The groups at `indices`, in that order."""
        rollouts = [q * self.group + j for q in indices for j in range(self.group)]
        return StepSample(self.group, [self.rows[q] for q in indices],
                          [self.prompt_ids[q] for q in indices],
                          [self.exemplars[q] for q in indices],
                          [self.rollouts[i] for i in rollouts], [self.rewards[i] for i in rollouts],
                          [self.overlong[i] for i in rollouts], [self.hints[i] for i in rollouts])

    def zero_shot(self) -> StepSample:
        """The groups whose prompts showed no exemplar."""
        return self.groups([q for q, k in enumerate(self.exemplars) if k == 0])


def step_line(step: int, total: int, metrics: dict) -> str:
    """The training log's line for a finished step (train.log): its progress once, where
    progress bars would redraw (the job's environment turns them off: worker.child_process)."""
    return (f"step {shown_step(step)} of {total}: reward {metrics['reward_mean']:.2f}, "
            f"{metrics['exemplars']} exemplars, {metrics['time_step']:.1f} s")


def save_checkpoint(folder: RunFolder, step: int, model, tokenizer, optimizer, scheduler,
                    extra: dict) -> Path:
    """Weights (HF format; a `PeftModel` saves its adapter only), tokenizer, optimizer and
    scheduler; written whole or not at all."""
    with folder.writing_checkpoint(step, keep=KEEP_CHECKPOINTS) as partial:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        torch.save({"step": step, "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), **extra}, partial / STATE_FILE)
    return folder.checkpoint(step)


class Trainer:
    """Trains one run. With `attempt` (the worker path) every write first checks that the run
    is still running as that attempt; without it (tests, benches) only a cancel stops it."""

    def __init__(self, settings: Settings, run_id: int, attempt: int | None = None):
        self.settings, self.run_id, self.attempt = settings, run_id, attempt
        self.recorder = RunRecorder(settings, run_id, attempt)
        self.plan = load_plan(settings, run_id)
        self.config = self.plan.config
        self.folder = RunFolder.of(settings, run_id)
        self.curriculum: Curriculum = self.plan.curriculum
        self.total_steps = self.config.total_steps
        #: float32 weights, bfloat16 matmuls (worker.engines.native.precision)
        self.mixed = self.config.engine.dtype == BF16_AUTOCAST

    # --- set-up ------------------------------------------------------------------------

    def _device_and_dtype(self) -> tuple[torch.device, torch.dtype]:
        use_cuda = torch.cuda.is_available() and self.config.queue == "gpu"
        device = torch.device("cuda" if use_cuda else "cpu")
        if self.config.engine.dtype == "auto":
            return device, torch.bfloat16 if use_cuda else torch.float32
        return device, getattr(torch, weights_dtype(self.config.engine.dtype))

    def setup(self) -> None:
        cfg = self.config
        torch.set_num_threads(cfg.engine.threads)
        self.data = load_training_data(self.settings, self.plan)
        self.device, dtype = self._device_and_dtype()
        data_dir = self.settings.resolved_data_dir
        self.tokenizer = load_tokenizer(cfg.model, data_dir)
        write_bundle(self.settings, self.run_id, self.plan,
                     device=device_facts(self.device, dtype, self.mixed),
                     determinism=determinism_settings())
        resume = self.folder.latest_checkpoint()
        self._load_policy(resume, dtype)
        self.grpo = GrpoConfig.from_spec(cfg.grpo, guided_shaping=cfg.guidance.shaping,
                                         luffy_gamma=cfg.guidance.gamma)
        self.rollout_config = RolloutConfig(**asdict(cfg.grpo.limits()),
                                            temperature=cfg.grpo.temperature,
                                            top_p=cfg.grpo.top_p, top_k_passages=cfg.grpo.top_k)
        self.tools = build_tools(cfg.tools, self.settings,
                                 search_fn(self.data.index, cfg.grpo.top_k), cfg.grpo.top_k)
        self.tool_specs = specs(self.tools)
        self._new_optimizer()
        self.reference = self._reference_model(resume)
        self.reference_prefix = FrozenPrefix()  # its exemplars' keys and values, kept
        self.controller = AdaptiveController(self.curriculum)
        self.watch = PrematureWatch(cfg.engine.premature_drop)
        self.using = using_words(cfg.tools)  # the warnings name the run's tools
        self.sentinel = self._sentinel([])
        self.adaptive_values: list[float | None] = []
        self.start_step = 0
        if resume:
            self._restore(resume)
        self.recorder.forget_steps_from(self.start_step)
        if resume:
            self._event(resume.step, "info", f"resumed from the checkpoint after step "
                        f"{resume.step}", {"checkpoint": str(resume.folder)})

    def _load_policy(self, resume: Checkpoint | None, dtype: torch.dtype) -> None:
        """`self.model`, the causal LM that rolls out and trains. With LoRA it is the model
        inside `self.peft` (the base, frozen, with adapters in place; see worker.lora), and
        only the adapters train."""
        cfg, data_dir = self.config, self.settings.resolved_data_dir
        self.peft = None
        if cfg.lora is None:
            source = str(resume.folder) if resume else cfg.model
            self.model = load_causal_lm(source, data_dir, dtype=dtype).to(self.device)
            return
        base = load_causal_lm(cfg.model, data_dir, dtype=dtype)
        self.peft = load_adapters(base, resume.folder, trainable=True) if resume \
            else add_adapters(base, cfg.lora, derive_seed(cfg.seed, "lora"))
        self.model = inner(self.peft.to(self.device))
        if self.mixed:
            store_frozen_projections_in_bf16(self.model)
        # Every layer's keys and values then carry a gradient, also where k_proj or v_proj
        # has no adapter: GRPO's shared prompt prefix sends gradients back through them.
        self.model.enable_input_require_grads()

    def _reference_model(self, resume: Checkpoint | None):
        """The frozen KL reference: the initial weights (or, with reset_each_stage, the stage's).
        None without a KL term, and with LoRA: there the reference is the policy's own base,
        its adapters switched off (`_reference_logprobs`), not a second model."""
        if self.config.grpo.kl_coef == 0 or self.peft is not None:
            return None
        if resume is None:
            return frozen_copy(self.model)
        ref_dir = self.folder.reference
        source = str(ref_dir) if ref_dir.exists() else self.config.model
        _, dtype = self._device_and_dtype()
        reference = load_causal_lm(source, self.settings.resolved_data_dir, dtype=dtype)
        return frozen_copy(reference.to(self.device))

    def _new_optimizer(self) -> None:
        warmup = int(self.config.grpo.warmup_ratio * self.total_steps)
        self.optimizer, self.scheduler = make_optimizer(
            self.model, self.config.grpo.lr, weight_decay=self.config.grpo.weight_decay,
            warmup_steps=warmup, total_steps=self.total_steps)

    def _restore(self, checkpoint: Checkpoint) -> None:
        state = torch.load(checkpoint.folder / STATE_FILE, map_location="cpu",
                           weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.adaptive_values = state["adaptive_values"]
        self.controller = AdaptiveController.replay(self.curriculum, self.adaptive_values)
        self.watch = PrematureWatch(self.config.engine.premature_drop, **state["watch"])
        self.sentinel = self._sentinel(state.get("sentinel", []))
        self.start_step = checkpoint.step

    def _sentinel(self, history: list[dict]) -> Sentinel:
        """The collapse sentinel, having seen `history` (a checkpoint's; a checkpoint from
        before the sentinel has none, and the sentinel starts there)."""
        return Sentinel.replay(self.config.sentinel.rules(),
                               self.config.grpo.limits().max_response_tokens, history)

    # --- one step ------------------------------------------------------------------------

    def step(self, step: int) -> dict[str, float]:
        cfg, tokenizer = self.config, self.tokenizer
        k = self.controller.exemplars
        updating = STEP_PHASES[2]
        t0 = time.perf_counter()
        self.model.eval()
        sampled, trained, rounds = self._sample(step, k)
        t1 = time.perf_counter()
        prompt_ids = [ids for ids in trained.prompt_ids for _ in range(cfg.grpo.group_size)]
        batch = make_batch(prompt_ids, [r.response_ids for r in trained.rollouts],
                           [r.response_mask for r in trained.rollouts],
                           [0.0] * len(trained.rollouts), tokenizer.pad_token_id)
        if any(hint is not None for hint in trained.hints):
            batch = replace(batch, guided=torch.tensor([h is not None for h in trained.hints]))
        ref_logp = self._reference_logprobs(batch)
        logged = self._logged(len(trained.rollouts))
        sampling = self._sampling_logprobs(batch, ref_logp, logged)
        kl_penalties = self._kl_penalties(batch, ref_logp, sampling)
        shaped = [r - p for r, p in zip(trained.shaped_rewards, kl_penalties, strict=True)]
        advantages = group_advantages(shaped, trained.group_ids,
                                      norm_by_std=cfg.grpo.norm_adv_by_std)
        batch = replace(batch, advantages=torch.tensor(advantages, dtype=torch.float32))
        arrays = self._token_arrays(batch, trained.rollouts, logged, sampling)
        t2 = time.perf_counter()
        self.recorder.phase(updating, step)
        self.model.train()
        update = update_step(self.model, self.optimizer, self.scheduler, batch,
                             None if cfg.grpo.kl_in == "reward" else ref_logp, self.grpo,
                             old_logp=sampling[0] if sampling[2] == len(batch) else None)
        t3 = time.perf_counter()
        metrics = rollout_metrics(sampled.rollouts, sampled.rewards)
        metrics["zero_spread_groups"] = zero_spread_share(sampled.shaped_rewards,
                                                          sampled.group_ids)
        metrics.update(self._shaping_metrics(sampled, trained, kl_penalties, rounds))
        metrics.update(self._zero_shot_metrics(sampled, k))
        metrics.update(self._guidance_metrics(sampled))
        metrics.update({key: float(v) for key, v in update.items()})
        metrics.update({"stage": self.controller.stage, "exemplars": k,
                        "prompt_tokens": statistics.fmean(len(ids) for ids in sampled.prompt_ids),
                        "prompts_cut": sampled.prompts_cut / len(sampled.rows),
                        "time_rollout": t1 - t0, "time_reference": t2 - t1,
                        "time_update": t3 - t2, "time_step": t3 - t0})
        logged = self._rollout_rows(step, trained, advantages, kl_penalties, arrays)
        self.recorder.write_step(step, metrics, logged)
        return metrics

    def _sample(self, step: int, k: int) -> tuple[StepSample, StepSample, int]:
        """Everything the step sampled, the groups it trains on, and how many rounds it took.

        One round: `grpo.batch_size` questions x `group_size` rollouts, scored. With
        `grpo.dynamic_sampling` (DAPO) a group whose rewards (score + overlong penalty, as
        veRL's `filter_groups` metric "reward") are all equal is dropped and another
        round of questions is sampled, until `batch_size` groups have a spread or
        `dynamic_sampling_max_batches` rounds ran; the step trains on the first
        `batch_size` of them, or, when no group had a spread, on the first round's."""
        g = self.config.grpo
        sampled = StepSample(g.group_size)
        kept = StepSample(g.group_size)
        rounds = 0
        for round_ in range(g.dynamic_sampling_max_batches if g.dynamic_sampling else 1):
            rounds += 1
            batch = self._sample_round(step, k, round_)
            sampled.extend(batch)
            if not g.dynamic_sampling:
                return sampled, batch, rounds
            kept.extend(batch.groups(groups_with_spread(batch.shaped_rewards, batch.group_ids)))
            if len(kept.rows) >= g.batch_size:
                break
        if not kept.rows:
            return sampled, sampled.groups(list(range(g.batch_size))), rounds
        return sampled, kept.groups(list(range(min(len(kept.rows), g.batch_size)))), rounds

    def _sample_round(self, step: int, k: int, round_: int) -> StepSample:
        """One batch of questions rolled out and scored; round 0 is the step's own batch
        (`questions_for_step`, seeded by the step as without dynamic sampling). With
        `guidance.mode: mixed` and exemplars in the stage, part of each group is sampled
        with them as a hint and every rollout trains on the prompt without them
        (`_guided_rollouts`)."""
        cfg, tokenizer, g = self.config, self.tokenizer, self.config.grpo
        n = len(self.data.questions)
        if round_ == 0:
            draw, picked = step, questions_for_step(n, g.batch_size, cfg.seed, step)
        else:
            draw = (step, round_)
            picked = resampled_questions(n, g.batch_size, cfg.seed, step, round_)
        rows = [self.data.questions[i] for i in picked]
        ks = question_exemplars(cfg, self.curriculum, step, k, draw, len(rows))
        prompts = build_step_prompts(cfg, tokenizer, self.data, rows, ks, draw)
        rolling_out, scoring, _ = STEP_PHASES
        self.recorder.phase(rolling_out, step)
        if cfg.guidance.mode == "mixed" and k > 0:
            trained = build_step_prompts(cfg, tokenizer, self.data, rows, [0] * len(rows), draw)
            rollouts, hints = self._guided_rollouts(prompts, trained, draw)
        else:
            trained = prompts
            rollouts = self._rollouts([ids for ids in prompts.ids for _ in range(g.group_size)],
                                      draw)
            hints = [None] * len(rollouts)
        self.recorder.phase(scoring, step)
        limit = self.rollout_config.max_response_tokens
        return StepSample(
            g.group_size, rows, trained.ids, trained.exemplars, rollouts,
            self._scores(rollouts, [rows[i // g.group_size] for i in range(len(rollouts))]),
            [overlong_penalty(len(r.response_ids), limit, g.overlong_buffer, g.overlong_penalty)
             for r in rollouts],
            hints, prompts.cut)

    def _rollouts(self, prompt_ids: list[list[int]], draw, *what) -> list[Rollout]:
        """Rollouts of `prompt_ids` (one each), seeded by the draw (and `what`)."""
        return generate_rollouts(
            self.model, self.tokenizer, prompt_ids, self.tools, self.rollout_config,
            generator=torch.Generator(self.device).manual_seed(
                derive_seed(self.config.seed, draw, "roll", *what)),
            eos_token_id=self.tokenizer.eos_token_id)

    def _scores(self, rollouts: list[Rollout], rows: list[QARow]) -> list[RewardBreakdown]:
        """Each rollout's reward against its question's gold answers (method.md, "The
        reward"; with `reward.call_bonus`, the calls whose result came back count)."""
        cfg = self.config
        prefix = cfg.prompt.assistant_prefix or ""
        return [score(prefix + r.response_text, row.golden_answers,
                      acc_weight=cfg.reward.acc_weight, format_weight=cfg.reward.format_weight,
                      answer_match=cfg.reward.answer_match, tools=self.tool_specs,
                      call_bonus=cfg.reward.call_bonus, working_calls=working_calls(r))
                for r, row in zip(rollouts, rows, strict=True)]

    def _guided_rollouts(self, hinted: StepPrompts, plain: StepPrompts,
                         draw) -> tuple[list[Rollout], list[tuple[int, ...] | None]]:
        """Each group's rollouts, the guided ones first (`studio.method.guidance`): with
        `when: always`, `guided_count` of them sampled on the prompt with the stage's
        exemplars and the rest on `plain` (the prompt without, which all of them train on);
        with `when: all-failed`, the unguided part first, then the guided part on `hinted`
        only for a question whose unguided rollouts were all wrong, on `plain` for the
        others. Also, per rollout, the exemplars it saw (None: none)."""
        guidance, group = self.config.guidance, self.config.grpo.group_size
        guided = guided_count(guidance.share, group)
        questions = range(len(plain.ids))
        if guidance.when == "always":
            rollouts = self._rollouts(
                [ids for q in questions
                 for ids in [hinted.ids[q]] * guided + [plain.ids[q]] * (group - guided)], draw)
            hints = [h for q in questions
                     for h in [hinted.shown[q]] * guided + [None] * (group - guided)]
            return rollouts, hints
        unguided = self._rollouts([plain.ids[q] for q in questions
                                   for _ in range(group - guided)], draw)
        accuracies = [r.acc for r in self._scores(
            unguided, [plain.rows[q] for q in questions for _ in range(group - guided)])]
        hint = [needs_guidance(accuracies[q * (group - guided):(q + 1) * (group - guided)])
                for q in questions]
        second = self._rollouts([(hinted if hint[q] else plain).ids[q] for q in questions
                                 for _ in range(guided)], draw, "guided")
        rollouts, hints = [], []
        for q in questions:
            rollouts += second[q * guided:(q + 1) * guided]
            rollouts += unguided[q * (group - guided):(q + 1) * (group - guided)]
            hints += [hinted.shown[q] if hint[q] else None] * guided + [None] * (group - guided)
        return rollouts, hints

    def _sampling_logprobs(self, batch, ref_logp: torch.Tensor | None,
                           logged: int) -> tuple[torch.Tensor | None, torch.Tensor | None, int]:
        """(log-probs, entropies, rows scored) of the weights that sampled the step: one pass
        without gradients serves the KL-in-reward penalties, the logged rollouts' token
        figures and the old log-probs of an update of several optimizer steps. Over the whole
        batch when the penalties or the update need it, else over the logged rollouts only
        (the batch's first rows), or none."""
        g = self.config.grpo
        whole = ((g.kl_in == "reward" and ref_logp is not None)
                 or update_needs_old_logprobs(self.grpo, len(batch)))
        rows = len(batch) if whole else logged
        if not rows:
            return None, None, 0
        part = batch if rows == len(batch) else batch.rows(list(range(rows)))
        logp, entropy = token_logprobs(self.model, part, g.micro_batch_size,
                                       with_entropy=bool(logged),
                                       share_prompt=self.grpo.share_prompt)
        return logp, entropy, rows

    def _kl_penalties(self, batch, ref_logp: torch.Tensor | None, sampling) -> list[float]:
        """With `grpo.kl_in: reward`, per rollout `kl_coef` x its KL to the reference (the
        sampling policy's log-probs, `_sampling_logprobs`; `grpo.kl_estimator`, summed over
        the model's tokens); else 0 each."""
        g = self.config.grpo
        if g.kl_in != "reward" or ref_logp is None:
            return [0.0] * len(batch)
        logp = sampling[0]
        scored = batch.loss_mask > 0
        return [g.kl_coef * sequence_kl(logp[i][scored[i]].tolist(),
                                        ref_logp[i][scored[i]].tolist(), g.kl_estimator)
                for i in range(len(batch))]

    def _shaping_metrics(self, sampled: StepSample, trained: StepSample,
                         kl_penalties: list[float], rounds: int) -> dict[str, float]:
        """The figures of the options that change rewards or sampling, when they are on."""
        g, out = self.config.grpo, {}
        if g.overlong_buffer:
            out["overlong_penalty"] = statistics.fmean(sampled.overlong)
        if g.kl_in == "reward":
            out["kl_reward_penalty"] = statistics.fmean(kl_penalties)
        if g.dynamic_sampling:
            kept = groups_with_spread(trained.shaped_rewards, trained.group_ids)
            out.update(sampling_rounds=float(rounds), groups_sampled=float(len(sampled.rows)),
                       groups_kept=float(len(kept)))
        return out

    def _zero_shot_metrics(self, sampled: StepSample, k: int) -> dict[str, float]:
        """In a soft curriculum's steps with exemplars: the share of questions shown none,
        and how those questions' rollouts did (the curves that show a zero-shot habit
        forming before the exemplars go)."""
        if self.curriculum.soft is None or k == 0:
            return {}
        out = {"zero_shot_share": sampled.exemplars.count(0) / len(sampled.exemplars)}
        zero = sampled.zero_shot()
        return {**out, **part_metrics("zero_shot", zero.rollouts, zero.rewards)}

    def _guidance_metrics(self, sampled: StepSample) -> dict[str, float]:
        """In a mixed-guidance run, every step: the share of rollouts sampled with a hint,
        and the figures of the unhinted rollouts (`zero_shot_*`, all of a step without
        exemplars) and of the hinted ones (`guided_*`) apart: the habit forming without
        the exemplars before they go."""
        if self.config.guidance.mode != "mixed":
            return {}
        return guidance_metrics(sampled.rollouts, sampled.rewards,
                                [h is not None for h in sampled.hints])

    def _reference_logprobs(self, batch) -> torch.Tensor | None:
        if self.config.grpo.kl_coef == 0:
            return None
        micro = self.config.grpo.micro_batch_size
        if self.peft is None:
            return reference_logprobs(self.reference, batch, micro, self.reference_prefix)
        with self.peft.disable_adapter():  # the base: frozen, its prefix kept as well
            return reference_logprobs(self.model, batch, micro, self.reference_prefix)

    def _logged(self, n_rollouts: int) -> int:
        """How many of the step's rollouts are logged: the first groups."""
        return min(self.config.engine.log_groups_per_step * self.config.grpo.group_size,
                   n_rollouts)

    def _token_arrays(self, batch, rollouts, logged: int, sampling) -> list[TokenArrays]:
        """The logged rollouts' per-token figures, scored by the weights that sampled them
        (before the update: `_sampling_logprobs`, whose first rows they are)."""
        if not logged:
            return []
        part = batch.rows(list(range(logged)))
        logp, entropy, _ = sampling
        arrays = []
        for i, rollout in enumerate(rollouts[:logged]):
            start = int(part.prompt_lengths[i])
            end = start + len(rollout.response_ids)
            mask = part.loss_mask[i, start:end]
            arrays.append(TokenArrays(
                logprob=logp[i, start:end].tolist(), entropy=entropy[i, start:end].tolist(),
                advantage=(mask * part.advantages[i]).tolist(),
                mask=[int(m) for m in mask.tolist()],
                chars=[c for seg in rollout.segments for c in self._segment_chars(seg)]))
        return arrays

    def _segment_chars(self, segment) -> list[int]:
        """Per token of a segment the characters of its text it covers."""
        ids = segment.token_ids
        decoded = [self.tokenizer.decode(ids[:n]) for n in range(1, len(ids) + 1)]
        return char_counts(token_ends(segment.text, decoded))

    def _rollout_rows(self, step, trained: StepSample, advantages, kl_penalties, arrays):
        group, prefix = self.config.grpo.group_size, self.config.prompt.assistant_prefix or ""
        return [RolloutRow(
            run_id=self.run_id, step=step, group_index=i // group, sample_index=i % group,
            stage=self.controller.stage,
            exemplars=len(trained.hints[i]) if trained.hints[i] is not None
            else trained.exemplars[i // group],
            hint_exemplars=None if trained.hints[i] is None else list(trained.hints[i]),
            question=trained.rows[i // group].question,
            golden_answers=trained.rows[i // group].golden_answers,
            segments=rollout_segments(trained.rollouts[i], prefix, self.tool_specs),
            reward=trained.rewards[i].score,
            breakdown=self._breakdown(trained.rewards[i], trained.overlong[i], kl_penalties[i]),
            advantage=float(advantages[i]), token_arrays=arrays[i].pack())
            for i in range(len(arrays))]

    def _breakdown(self, reward: RewardBreakdown, overlong: float, kl: float) -> dict:
        """The reward's parts; with overlong shaping or the KL in the reward, also what
        each took off before the advantage."""
        out = reward.to_dict()
        if self.config.grpo.overlong_buffer:
            out["overlong_penalty"] = overlong
        if self.config.grpo.kl_in == "reward":
            out["kl_penalty"] = kl
        return out

    def _event(self, step: int, kind: str, message: str, data: dict | None = None) -> None:
        self.recorder.event(step, kind, message, data)

    def _after_step(self, step: int, metrics: dict) -> str | None:
        """The watches, the sentinel and the curriculum after a step; the reason to pause
        when a sentinel signal set to `pause` fired."""
        rule = self.curriculum.adaptive
        value = metrics.get(rule.metric) if rule else None
        self.adaptive_values.append(value)
        warning = self.watch.observe(metrics["search_calls"])
        if warning:
            self._event(step, "warning", premature_message(warning, self.using), warning)
        pause = None
        for alarm in self.sentinel.observe(metrics):
            message = alarm_message(alarm, self.using)
            self._event(step, "warning", message, alarm.to_dict())
            if alarm.action == "pause":
                pause = pause or message
        before = self.controller.exemplars
        if self.controller.observe(value):
            after = self.controller.exemplars
            self._event(step + 1, "stage_change",
                        f"stage {self.controller.stage + 1}: {before} -> {after} exemplars",
                        {"stage": self.controller.stage, "from": before, "to": after})
            self.watch.stage_changed()
            if self.config.grpo.reset_each_stage:
                self._new_optimizer()
                if self.reference is not None:
                    self.reference = frozen_copy(self.model)
        return pause

    def _checkpoint(self, steps_done: int) -> None:
        self.recorder.phase(CHECKPOINTING, steps_done - 1)
        folder = save_checkpoint(
            self.folder, steps_done, self.model if self.peft is None else self.peft,
            self.tokenizer, self.optimizer, self.scheduler,
            {"adaptive_values": self.adaptive_values,
             "watch": {"history": self.watch.history, "change_at": self.watch.change_at,
                       "before": self.watch.before},
             "sentinel": self.sentinel.history})
        if self.config.grpo.reset_each_stage and self.reference is not None:
            self.reference.save_pretrained(self.folder.reference)
        self.recorder.checkpointed(str(folder.relative_to(self.settings.resolved_data_dir)))

    def run(self) -> None:
        with bf16_compute(self.mixed):
            self._run()

    def _run(self) -> None:
        self.recorder.phase(LOADING)
        self.setup()
        if self.start_step == 0:
            self._event(0, "stage_change", f"stage 1: {self.controller.exemplars} exemplars",
                        {"stage": 0, "from": None, "to": self.controller.exemplars})
        every = self.config.engine.checkpoint_every
        for step in range(self.start_step, self.total_steps):
            metrics = self.step(step)
            print(step_line(step, self.total_steps, metrics), flush=True)
            pause = self._after_step(step, metrics)
            if pause or (step + 1) % every == 0 or step + 1 == self.total_steps:
                self._checkpoint(step + 1)
            if pause:
                self.recorder.pause(pause)
                return

