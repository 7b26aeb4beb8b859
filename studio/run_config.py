"""A training run's configuration: one schema for the YAML file, the API, the UI and the engines.

Every omitted key takes its default; the defaults are method.md's (GRPO group
size 4, lr 1e-6, KL 0.001 low-variance, clip 0.2, temperature 1.0, 6 tool
calls, top-3 passages, observations cut at 500 tokens, reward weights 0.8/0.2),
except where the studio's small default model needs less (batch, lengths).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from studio.escaping import name_problem
from studio.jobs.engines import engine_named
from studio.method.curriculum import PRESETS, Curriculum, CurriculumError
from studio.method.evaluation import MAX_TRIED_EXEMPLARS, EvalConfig
from studio.method.exemplars import Exemplar
from studio.method.guidance import GuidanceMode, Shaping, When, guided_count, max_call_bonus
from studio.method.prompt import Prompt, PromptTemplate, build_prompt, derive_seed, instruction_for
from studio.method.protocol import Limits
from studio.method.reward import AnswerMatch
from studio.method.sentinel import MAX_WINDOW, SIGNALS, Rule
from studio.method.tools import DEFAULT_TOOL_NAMES, check_tool_names, corpus_tools

MAX_STEPS = 1_000_000  # every step count; a run of more does not fit a lifetime here anyway
MAX_TOKENS = 131_072  # every token budget (prompt, turn, response, observation)
MAX_BATCH = 4096  # questions per step, sequences per micro- and mini-batch
MAX_STAGES = 100
MAX_RUN_NAME = 128
MAX_INSTRUCTION = 8000  # characters; a 4 MB instruction cost 10 s of CPU per validation
MAX_SEED = 2**63 - 1
MAX_THREADS = 1024
BF16_AUTOCAST = "bfloat16-autocast"  # engine.dtype: float32 weights, bfloat16 matmuls


class _Strict(BaseModel):
    """Unknown keys are errors, and so are NaN and infinity: every number must be one that
    can run (each bound is in the error message)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DataSpec(_Strict):
    corpus: str | None = Field(default=None, description="Name of a stored corpus: the "
                               "documents the model searches (a run without search needs none)")
    train: str = Field(description="Name of the QA set to train on")
    eval: list[str] = Field(default_factory=list, description="QA sets to evaluate on")
    exemplars: str | None = Field(default=None, description="Name of the exemplar set")


class StageSpec(_Strict):
    exemplars: int = Field(le=1000)
    steps: int = Field(le=MAX_STEPS)


class AdaptiveSpec(_Strict):
    metric: str = "format"
    threshold: float = 0.9
    window: int = Field(default=10, le=MAX_STEPS)
    min_steps: int = Field(default=20, le=MAX_STEPS)
    max_steps: int = Field(default=200, le=MAX_STEPS)
    direction: Literal["at_least", "at_most"] = "at_least"


class SoftSpec(_Strict):
    start: float = Field(default=0.25, ge=0, le=1, title="Zero-shot share at the start",
                         description="The share of each step's questions shown no exemplar at "
                         "step 0; it rises to all of them when the last stage begins")


class CurriculumSpec(_Strict):
    preset: str | None = Field(default="3-2-0", description=f"One of {', '.join(PRESETS)}")
    steps_per_stage: int = Field(default=100, gt=0, le=MAX_STEPS)
    stages: list[StageSpec] | None = Field(default=None, max_length=MAX_STAGES,
                                           description="Overrides the preset")
    adaptive: AdaptiveSpec | None = None
    soft: SoftSpec | None = Field(
        default=None, description="Soft curriculum (off by default): some questions of every "
        "step are shown no exemplar, a share rising to all of them by the last stage")

    def build(self) -> Curriculum:
        """The method core's curriculum; CurriculumError names the field that is wrong."""
        if self.stages:
            spec = {"stages": [s.model_dump() for s in self.stages]}
        elif self.preset in PRESETS:
            spec = Curriculum.preset(self.preset, steps_per_stage=self.steps_per_stage).to_dict()
        else:
            raise CurriculumError([f"curriculum.preset: {self.preset!r} is not one of "
                                   f"{', '.join(PRESETS)}; or give stages"])
        spec["adaptive"] = self.adaptive.model_dump() if self.adaptive else None
        spec["soft"] = self.soft.model_dump() if self.soft else None
        return Curriculum.from_dict(spec)


class GuidanceSpec(_Strict):
    """How a stage's exemplars reach the model (studio.method.guidance)."""

    mode: GuidanceMode = Field(
        default="shown", title="How exemplars teach",
        description="shown: every answer sees the stage's exemplars and learns on that prompt "
        "(the paper's way). mixed: part of each question's answers are written with the "
        "exemplars as a hint and the rest without, and all of them learn on the prompt without "
        "exemplars, so the model learns to use the tool without being shown. Stages with 0 "
        "exemplars are the same in both.")
    share: float = Field(
        default=0.5, gt=0, lt=1, title="Share of answers that see the exemplars",
        description="mixed: the share of each question's answers written with the exemplars "
        "(rounded to whole answers, at least one of each kind)")
    shaping: Shaping = Field(
        default="none", title="Weighting of the hinted answers",
        description="mixed: none treats a hinted answer like any other; luffy weighs each of "
        "its words by p / (p + gamma) of its probability without the hint (LUFFY), unclipped, "
        "so words the model finds very unlikely without the hint move it less")
    gamma: float = Field(default=0.1, gt=0, le=10, title="luffy's gamma",
                         description="The gamma of luffy shaping (0.1 in LUFFY)")
    when: When = Field(
        default="always", title="Which questions get the hint",
        description="always: every question of a stage with exemplars; all-failed: only a "
        "question whose answers without the hint were all wrong in the same step "
        "(Guide-GRPO's rule); the others get answers without the hint instead")


class PromptSpec(_Strict):
    layout: Literal["inline", "chat"] = Field(
        default="chat", description="inline: the paper's single message; chat: exemplars as turns")
    assistant_prefix: str | None = Field(default="<think>", description="Pre-filled reply start")
    exemplar_selection: Literal["first", "sample", "similar"] = Field(
        default="first", title="Which exemplars a prompt shows",
        description="first: the set's first k for every question (the paper's code). sample: "
        "k of the set drawn at random (seeded), so training sees the whole set. similar: the "
        "k whose questions are most like the question asked (shared words, rare ones "
        "counting more), for a set with a worked example of each kind of question.")
    exemplar_draw: Literal["per-question", "per-step"] = Field(
        default="per-question", title="One draw per question or per step",
        description="sample: per-question draws each question of a step its own k exemplars; "
        "per-step draws one k for the whole step, so every prompt of the step starts with the "
        "same exemplars and the engine computes them once (a step costs what it costs with "
        "first). Each question still sees k; the draw changes from step to step.")
    instruction: str | None = Field(default=None, max_length=MAX_INSTRUCTION,
                                    description="Replaces the default instruction")

    def build(self, question: str, exemplars: Sequence[Exemplar], k: int,
              sample_seed: int | None = None, *, tools: Sequence[str],
              first: bool = False) -> Prompt:
        """The method core's prompt in this layout and wording; `sample_seed` when sampling;
        without an own instruction, the default one for the run's `tools`. `first`: the
        first k of `exemplars` whatever the selection (the longest-prompt estimates, which
        order them longest first)."""
        template = PromptTemplate(instruction=self.instruction or instruction_for(tools))
        chosen = "first" if first else self.exemplar_selection
        return build_prompt(question, exemplars, k, template, self.layout,
                            sample_seed=sample_seed if chosen == "sample" else None,
                            similar=chosen == "similar",
                            assistant_prefix=self.assistant_prefix)


LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KlEstimator = Literal["k1", "k2", "k3"]


def _variant(**field: Any) -> Any:
    """A field that is one of the GRPO family's options (`GRPO_VARIANTS`)."""
    return Field(json_schema_extra={"grpo_variant": True}, **field)


class GrpoSpec(_Strict):
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS,
                              description="Default: the curriculum's length")
    batch_size: int = Field(default=8, gt=0, le=MAX_BATCH, title="Questions per step",
                            description="How many training questions each step answers; more "
                            "is steadier but slower.")
    group_size: int = Field(default=4, gt=0, le=256, title="Answers per question",
                            description="Answers sampled for each question and compared with "
                            "each other (GRPO); the paper uses 4.")
    lr: float = Field(default=1.0e-6, gt=0, le=1, title="Learning rate",
                      description="How big each update is; 1e-6 in the paper (1e-4 with LoRA: "
                      "ticking it switches an untouched 1e-6 to 1e-4). Larger learns faster "
                      "but can break the model.")
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0, le=1)
    kl_coef: float = Field(default=0.001, ge=0, le=10, title="Stay-close penalty (KL)",
                           description="Keeps the model near where it started, so it learns "
                           "the tool without forgetting how to write; 0.001 in the paper. KL "
                           "(Kullback-Leibler divergence) measures how far the model's word "
                           "choices have moved from the starting model's; the penalty grows "
                           "with it.")
    clip: float = Field(default=0.2, gt=0, le=10, title="Clip range",
                        description="Limits how far one update moves the model, so one lucky "
                        "batch cannot change it much; 0.2 is the usual value. PPO clipping: PPO "
                        "(proximal policy optimization) is the reinforcement-learning update "
                        "GRPO builds on.")
    entropy_coef: float = Field(default=0.0, ge=0, le=10)
    temperature: float = Field(default=1.0, gt=0, le=10, title="Sampling temperature",
                               description="Randomness of answers while training; 1.0 lets the "
                               "model try different ways.")
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_turns: int = Field(default=6, ge=0, le=100, title="Searches per answer, at most",
                           description="The most times one answer may call the search tool.")
    top_k: int = Field(default=3, gt=0, le=50, title="Passages per search",
                       description="How many passages each search returns.")
    max_turn_tokens: int = Field(default=256, gt=0, le=MAX_TOKENS)
    max_response_tokens: int = Field(default=512, gt=0, le=MAX_TOKENS,
                                     title="Answer length, at most (tokens)",
                                     description="Longer answers are cut; the searches' "
                                     "results count towards it.")
    max_obs_tokens: int = Field(default=500, gt=0, le=MAX_TOKENS,
                                title="Search result length, at most (tokens)",
                                description="Longer search results are cut before the model "
                                "reads them.")
    max_prompt_tokens: int = Field(default=5000, gt=0, le=MAX_TOKENS,
                                   title="Prompt length, at most (tokens)",
                                   description="The prompt with its exemplars must fit: see the "
                                   "estimate below.")
    micro_batch_size: int = Field(default=4, gt=0, le=MAX_BATCH)
    mini_batch_size: int | None = Field(default=None, gt=0, le=MAX_BATCH)
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e6)
    reset_each_stage: bool = Field(
        default=False, description="Upstream's behaviour: new optimizer and reference per stage")
    # The GRPO family's options (docs/engine.md, "GRPO options", `GRPO_VARIANTS`); their
    # defaults are method.md's update, which they leave unchanged bit for bit.
    norm_adv_by_std: bool = _variant(
        default=True, title="Divide advantages by the group's spread",
        description="GRPO divides each answer's advantage by its group's standard deviation. "
        "Untick it (Dr. GRPO) when questions differ much in difficulty: a nearly solved "
        "question's small spread would blow its advantages up.")
    loss_agg_mode: LossAggMode = (
        _variant(default="token-mean", title="Loss averaging",
              description="token-mean: every token counts the same (long answers weigh "
              "more); seq-mean-token-mean: every answer counts the same; "
              "seq-mean-token-sum-norm (Dr. GRPO): token sums over a fixed length, no "
              "length bias; use it when answers drift longer or shorter for no reason."))
    clip_high: float | None = _variant(
        default=None, gt=0, le=10, title="Clip range, upwards",
        description="DAPO's clip-higher: a wider upper clip (e.g. 0.28) lets rare good tokens "
        "grow faster and keeps exploring; use it when answers become all alike "
        "(entropy falling). Empty: the clip range both ways.")
    dual_clip: float | None = _variant(
        default=None, gt=1, le=100, title="Dual clip",
        description="Bounds the loss of a negative-advantage token whose ratio is huge "
        "(e.g. 3.0); use it when the loss or gradient norm spikes. Empty: no bound "
        "(method.md).")
    ratio_level: Literal["token", "sequence"] = _variant(
        default="token", title="Importance ratio per",
        description="token: PPO's ratio per token; sequence (GSPO): one length-normalised "
        "ratio per answer, steadier for long answers; use a small clip range (e.g. 3e-4).")
    kl_estimator: KlEstimator = _variant(
        default="k3", title="KL estimator",
        description="How the distance to the starting model is measured: k3 (low-variance, "
        "method.md) suits nearly every run; k2 (half the squared log-ratio) when k3's "
        "penalty explodes on rare tokens; k1 (the log-ratio, unbiased but noisy) to compare "
        "with papers that use it.")
    kl_in: Literal["loss", "reward"] = _variant(
        default="loss", title="KL penalty in",
        description="loss: a term of the loss (method.md); reward: subtracted from each "
        "answer's reward before the advantages (PPO's original place), so answers that "
        "drift far are the ones ranked down; use it to compare with such runs.")
    dynamic_sampling: bool = _variant(
        default=False, title="Resample groups that teach nothing",
        description="DAPO: drop groups whose answers all got the same reward (no learning "
        "signal) and sample more questions, up to the bound below. Use it when most groups "
        "score all alike (the no-learning-signal share on the curves is high); it costs "
        "more sampling per step.")
    dynamic_sampling_max_batches: int = _variant(
        default=3, ge=1, le=20, title="Sampling rounds per step, at most",
        description="With dynamic sampling: how many batches one step may sample before it "
        "trains on what it has.")
    overlong_buffer: int = _variant(
        default=0, ge=0, le=MAX_TOKENS, title="Overlong buffer (tokens)",
        description="DAPO's soft length penalty: an answer within this many tokens of the "
        "length limit loses reward in proportion; use it when answers run into the limit. "
        "0: off.")
    overlong_penalty: float = _variant(
        default=1.0, ge=0, le=10, title="Overlong penalty",
        description="The reward lost by an answer that reaches the length limit.")
    ppo_epochs: int = _variant(
        default=1, ge=1, le=16, title="Passes over each batch",
        description="PPO epochs: more reuse each batch of answers (cheaper learning per "
        "answer) but drift from the policy that sampled them; try 2-4 when sampling is the "
        "slow part of a step. 1 in the paper.")

    @model_validator(mode="after")
    def _options_fit_together(self) -> GrpoSpec:
        problems = []
        if self.dual_clip is not None and self.ratio_level == "sequence":
            problems.append("dual_clip is not used with ratio_level: sequence (GSPO has no "
                            "dual clip); remove one of them")
        if self.overlong_buffer >= self.max_response_tokens:
            problems.append(f"overlong_buffer must be smaller than max_response_tokens "
                            f"({self.max_response_tokens})")
        if self.dynamic_sampling and self.group_size < 2:
            problems.append("dynamic_sampling needs groups of two answers or more "
                            "(group_size)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def limits(self, response_length: int | None = None) -> Limits:
        """The tag protocol's budgets; `response_length` (veRL's) can only lower the
        response budget."""
        return Limits(max_turns=self.max_turns, max_turn_tokens=self.max_turn_tokens,
                      max_response_tokens=min(self.max_response_tokens,
                                              response_length or self.max_response_tokens),
                      max_obs_tokens=self.max_obs_tokens)


GRPO_VARIANTS = tuple(name for name, field in GrpoSpec.model_fields.items()
                      if (field.json_schema_extra or {}).get("grpo_variant"))
"""The GRPO family's options (Dr. GRPO, DAPO, GSPO, ...), marked where they are declared:
the Launch page folds them away; the native update takes them by name
(`GrpoConfig.from_spec`)."""


class RewardSpec(_Strict):
    acc_weight: float = Field(default=0.8, ge=0, le=1, title="Reward for a right answer",
                              description="Share of the reward for matching the gold answer "
                              "(0.8).")
    format_weight: float = Field(default=0.2, ge=0, le=1, title="Reward for good form",
                                 description="Share of the reward for using the tags correctly "
                                 "(0.2).")
    answer_match: AnswerMatch = Field(
        default="exact", title="How answers are matched",
        description="exact: the answer's words must equal a gold answer's (method.md). numeric: "
        "for number answers, the answer must hold one number equal to the gold one, however it "
        "is written (12 = 12.0 = $12 = 12 apples, 1,200 = 1200, 0.5 = .5 = 1/2).")
    call_bonus: float = Field(
        default=0.0, ge=0, lt=1, title="Reward for a tool call that worked",
        description="Added once to an answer that made at least one well-formed tool call "
        "whose result came back (0: off). It must stay below the right-answer share minus "
        "the good-form share, so that a right answer always beats a wrong one.")

    @model_validator(mode="after")
    def _right_beats_wrong(self) -> RewardSpec:
        cap = max_call_bonus(self.acc_weight, self.format_weight)
        if self.call_bonus and not self.call_bonus < cap:
            raise ValueError(f"call_bonus: {self.call_bonus:g} would let a wrong answer that "
                             f"called the tool score as much as a right one; keep it below "
                             f"acc_weight - format_weight ({cap:g})")
        return self


class EngineSpec(_Strict):
    checkpoint_every: int = Field(default=50, gt=0, le=MAX_STEPS,
                                  title="Save a checkpoint every (steps)",
                                  description="A stopped run resumes from its last checkpoint.")
    log_groups_per_step: int = Field(default=1, ge=0, le=1000,
                                     description="Rollout groups kept per step")
    premature_drop: float = Field(
        default=0.5, gt=0, lt=1,
        description="Warn when tool calls per rollout fall by this share after a stage change")
    threads: int = Field(default=1, gt=0, le=MAX_THREADS,
                         description="CPU threads for PyTorch (1 is fastest here)")
    dtype: Literal["auto", "float32", "bfloat16", "bfloat16-autocast"] = Field(
        default="auto", title="Precision", description="The weights' dtype. auto: bfloat16 on "
        "a GPU, float32 on a CPU. bfloat16-autocast: float32 weights, optimizer and loss with "
        "the matmuls in bfloat16 (a faster CPU step where the CPU has AVX512-BF16 or AMX, "
        "instructions of recent Intel and AMD processors for bfloat16 arithmetic: `lscpu` "
        "lists them among its flags as avx512_bf16 and amx_bf16; docs/engine.md)")
    evaluate_at_end: bool = Field(
        default=False, description="When training succeeds, evaluate the base model and the "
        "final checkpoint zero-shot on each data.eval set (the run's own token budgets)")


class SignalSpec(_Strict):
    """One signal of the collapse sentinel; see SentinelSpec."""

    action: Literal["off", "warn", "pause"] = Field(
        default="warn", description="warn: a warning on the run and a red line on its curves; "
        "pause: also stop the run at a checkpoint (Resume continues it); off: not watched")
    window: int = Field(default=5, ge=1, le=MAX_WINDOW, description="Steps averaged")
    threshold: float = Field(
        default=0.5, description="The signal's level: the share lost for a fall, the share "
        "reached, a token count (length_empty), or the factor over the median for a spike "
        "(docs/engine.md, \"The collapse sentinel\")")


def _signal(name: str):
    return Field(default_factory=lambda: SignalSpec(**vars(Rule.default(name))),
                 description=SIGNALS[name].means())


class SentinelSpec(_Strict):
    """The collapse sentinel (studio/method/sentinel.py): leading signs that training is
    breaking down, each with its action, window and threshold (docs/engine.md)."""

    format_falling: SignalSpec = _signal("format_falling")
    search_stopped: SignalSpec = _signal("search_stopped")
    entropy_collapse: SignalSpec = _signal("entropy_collapse")
    length_at_limit: SignalSpec = _signal("length_at_limit")
    length_empty: SignalSpec = _signal("length_empty")
    no_learning_signal: SignalSpec = _signal("no_learning_signal")
    kl_spike: SignalSpec = _signal("kl_spike")
    grad_norm_spike: SignalSpec = _signal("grad_norm_spike")

    @model_validator(mode="before")
    @classmethod
    def _signal_defaults(cls, data: object) -> object:
        """A signal given in part keeps its own defaults for the rest."""
        if not isinstance(data, dict):
            return data
        return {name: {**vars(Rule.default(name)), **value}
                if name in SIGNALS and isinstance(value, dict) else value
                for name, value in data.items()}

    @field_validator(*SIGNALS)
    @classmethod
    def _in_bounds(cls, spec: SignalSpec, info) -> SignalSpec:
        errors = Rule(**spec.model_dump()).errors(info.field_name)
        if errors:
            raise ValueError("; ".join(errors))
        return spec

    def rules(self) -> dict[str, Rule]:
        """The method core's rules, by signal."""
        return {name: Rule(**getattr(self, name).model_dump()) for name in SIGNALS}


#: The attention and MLP projections of Llama/Qwen/Mistral-style models.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_MAX_RANK = 256


class LoraSpec(_Strict):
    """Low-rank adapters (LoRA) instead of full fine-tuning: the base weights stay frozen and
    each targeted projection W learns an update (alpha / rank) * B A of rank `rank`. Updates
    and checkpoints are a small fraction of the model's; it needs a higher learning rate
    (around 1e-4 instead of 1e-6)."""

    rank: int = Field(default=16, description=f"Rank of each adapter, 1..{LORA_MAX_RANK}; "
                      "8-64 is typical, more is closer to full fine-tuning")
    alpha: int = Field(default=32, description="Scale of the update (alpha / rank), > 0; "
                       "twice the rank is usual")
    dropout: float = Field(
        default=0.0, description="Dropout on the adapters' input, in [0, 1). GRPO's ratio "
        "assumes one network computes the old and new log-probs: dropout above 0 makes the "
        "ratio and the KL noisy, so keep 0 unless you know you want it")
    target_modules: list[str] | Literal["all-linear"] = Field(
        default_factory=lambda: list(LORA_TARGETS),
        description="Names of the linear layers that get adapters (a list or "
        "comma-separated), or all-linear")

    @field_validator("rank")
    @classmethod
    def _rank_in_range(cls, rank: int) -> int:
        if not 1 <= rank <= LORA_MAX_RANK:
            raise ValueError(f"{rank} is out of range: use 1..{LORA_MAX_RANK} (8-64 is typical)")
        return rank

    @field_validator("alpha")
    @classmethod
    def _alpha_positive(cls, alpha: int) -> int:
        if alpha <= 0:
            raise ValueError(f"{alpha} must be > 0 (the update is scaled by alpha / rank; "
                             "twice the rank is usual)")
        return alpha

    @field_validator("dropout")
    @classmethod
    def _dropout_in_range(cls, dropout: float) -> float:
        if not 0 <= dropout < 1:
            raise ValueError(f"{dropout} must be in [0, 1); 0 keeps GRPO's ratio exact")
        return dropout

    @field_validator("target_modules", mode="before")
    @classmethod
    def _comma_separated(cls, targets: object) -> object:
        """"q_proj, v_proj" (a form field, a CLI value) means the list of those names."""
        if isinstance(targets, str) and targets != "all-linear":
            return [t.strip() for t in targets.split(",") if t.strip()]
        return targets

    @field_validator("target_modules")
    @classmethod
    def _some_targets(cls, targets: list[str] | str) -> list[str] | str:
        if not targets or (isinstance(targets, list) and not all(t.strip() for t in targets)):
            raise ValueError("name at least one layer (e.g. q_proj, v_proj) or all-linear")
        return targets


class MirrorSpec(_Strict):
    """Copies of the metrics outside the studio (the studio's own tables always get them)."""

    tensorboard: bool = Field(
        default=False, title="Also write TensorBoard logs",
        description="Copies every step's metrics to the run's folder (runs/<id>/tensorboard) "
        "for `tensorboard --logdir`; the worker needs the tensorboard package.")


_ACTOR, _ROLLOUT = "actor_rollout_ref.actor.", "actor_rollout_ref.rollout."
VERL_OVERRIDE_KEYS: dict[str, type] = {
    # the GRPO family's options (/work/shared/grpo-variants.md, veRL 0.9.1's names)
    "algorithm.adv_estimator": str,
    "algorithm.norm_adv_by_std_in_grpo": bool,
    "algorithm.use_kl_in_reward": bool,
    "algorithm.kl_penalty": str,
    "algorithm.kl_ctrl.type": str,
    "algorithm.kl_ctrl.kl_coef": float,
    "algorithm.kl_ctrl.target_kl": float,
    "algorithm.kl_ctrl.horizon": int,
    "algorithm.filter_groups.enable": bool,
    "algorithm.filter_groups.metric": str,
    "algorithm.filter_groups.max_num_gen_batches": int,
    _ACTOR + "loss_agg_mode": str,
    _ACTOR + "policy_loss.loss_mode": str,
    _ACTOR + "clip_ratio": float,
    _ACTOR + "clip_ratio_low": float,
    _ACTOR + "clip_ratio_high": float,
    _ACTOR + "clip_ratio_c": float,
    _ACTOR + "use_kl_loss": bool,
    _ACTOR + "kl_loss_coef": float,
    _ACTOR + "kl_loss_type": str,
    _ACTOR + "entropy_coeff": float,
    _ACTOR + "ppo_epochs": int,
    _ACTOR + "shuffle": bool,
    _ACTOR + "grad_clip": float,
    _ACTOR + "optim.lr": float,
    _ACTOR + "optim.lr_warmup_steps": int,
    _ACTOR + "optim.lr_warmup_steps_ratio": float,
    _ACTOR + "optim.min_lr_ratio": float,
    _ACTOR + "optim.lr_scheduler_type": str,
    _ACTOR + "optim.weight_decay": float,
    _ACTOR + "fsdp_config.full_determinism": bool,
    _ROLLOUT + "full_determinism": bool,
    _ROLLOUT + "seed": int,
    _ROLLOUT + "n": int,
    _ROLLOUT + "temperature": float,
    _ROLLOUT + "top_p": float,
    _ROLLOUT + "top_k": int,
    _ROLLOUT + "multi_turn.max_assistant_turns": int,
    # the sizes a user tunes to fit a GPU (/work/shared/verl-notes.md)
    "data.train_batch_size": int,
    "data.max_prompt_length": int,
    "data.max_response_length": int,
    _ACTOR + "ppo_mini_batch_size": int,
    _ACTOR + "ppo_micro_batch_size_per_gpu": int,
    _ACTOR + "use_dynamic_bsz": bool,
    _ACTOR + "ppo_max_token_len_per_gpu": int,
    _ACTOR + "ulysses_sequence_parallel_size": int,
    _ACTOR + "fsdp_config.param_offload": bool,
    _ACTOR + "fsdp_config.optimizer_offload": bool,
    "actor_rollout_ref.ref.fsdp_config.param_offload": bool,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": int,
    _ROLLOUT + "log_prob_micro_batch_size_per_gpu": int,
    _ROLLOUT + "tensor_model_parallel_size": int,
    _ROLLOUT + "gpu_memory_utilization": float,
    _ROLLOUT + "max_num_batched_tokens": int,
    _ROLLOUT + "max_num_seqs": int,
    _ROLLOUT + "enforce_eager": bool,
    _ROLLOUT + "free_cache_engine": bool,
    "trainer.save_freq": int,
    "trainer.test_freq": int,
    "trainer.val_before_train": bool,
    "trainer.max_actor_ckpt_to_keep": int,
    "trainer.log_val_generations": int,
    "trainer.balance_batch": bool,
}
"""What `verl.overrides` may set, each to one value of its type. None names code, a path, a
file, a module, a class or an address (veRL's tool loader, agent loops and reward functions
import what such keys name on the GPU workers); the studio writes those itself. A key outside
this list needs a change here (reviewed code), not a setting, for admins too."""

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_+-]{0,63}")  # token-mean, low_var_kl, gspo
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")
_NOT_WORDS = ("true", "false", "null", "nan", "inf")  # Hydra reads these as other types
_EXPECTED = {bool: "true or false", int: "a whole number", float: "a number (e.g. 2e-6)",
             str: "one word (letters, digits, _, + and -, e.g. token-mean)"}


def _of_type(value: str, kind: type) -> bool:
    """Whether Hydra reads `value` as one value of `kind`, and only that."""
    if kind is bool:
        return value.lower() in ("true", "false")
    if kind is int:
        return bool(_INTEGER.fullmatch(value)) and abs(int(value)) <= MAX_SEED
    if kind is float:
        return bool(_NUMBER.fullmatch(value))
    return bool(_WORD.fullmatch(value)) and value.lower() not in _NOT_WORDS


def verl_override_problem(item: str) -> str | None:
    """Why a `verl.overrides` item may not reach Hydra, or None: it must set a key of
    `VERL_OVERRIDE_KEYS` to one scalar of that key's type."""
    key, sep, value = item.partition("=")
    key, value = key.strip().lstrip("+"), value.strip()
    if not sep or not key:
        return f"{item!r} must be key=value, e.g. actor_rollout_ref.actor.optim.lr=2e-6"
    if key.startswith("~"):
        return f"{item!r} deletes a key; only setting one is allowed"
    if "${" in value:
        return f"{item!r}: interpolations (${{...}}) are not allowed in an override's value"
    shape = {"{": "a mapping", "[": "a list"}.get(value[:1])
    if shape:
        return (f"{key!r} takes one value, not {shape}: an override sets one training "
                "setting to a number, true/false or a word")
    if key not in VERL_OVERRIDE_KEYS:
        return (f"{key!r} is not a training setting that overrides may change: they set the "
                "GRPO family's options and sizes docs/verl.md lists (verl.overrides); paths, "
                "code, tools and addresses are the studio's")
    kind = VERL_OVERRIDE_KEYS[key]
    if not _of_type(value, kind):
        return f"{key!r} takes {_EXPECTED[kind]}, not {value[:80]!r}"
    return None


class VerlSpec(_Strict):
    """Where and how the veRL backend runs (ignored by the native engine); see docs/verl.md."""

    nnodes: int = Field(default=1, ge=1, le=1024,
                        description="Nodes of the Ray cluster to train on")
    gpus_per_node: int = Field(default=1, ge=1, le=64, description="GPUs used on each node")
    ray_address: str | None = Field(
        default=None, description="A running Ray cluster's head (host:port); none: a local Ray")
    studio_url: str | None = Field(
        default=None, description="The studio's address as the Ray workers reach it (for "
        "/retrieve); default: the worker's STUDIO_PUBLIC_URL")
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    tensor_parallel: int = Field(default=1, ge=1, le=64, description="GPUs per vLLM/SGLang replica")
    gpu_memory_utilization: float = Field(
        default=0.5, gt=0, le=1, description="Share of GPU memory the rollout engine takes")
    overrides: list[str] = Field(
        default_factory=list, max_length=200,
        description="Extra veRL settings (key=value), applied last: a GRPO option or a size "
        "docs/verl.md lists, each set to one number, true/false or word; no mapping, list, "
        "path, code or address")

    @field_validator("studio_url")
    @classmethod
    def _studio_url_is_http(cls, url: str | None) -> str | None:
        """The Ray workers send the run owner's token there: a web address, no more."""
        if url is None:
            return None
        scheme, sep, rest = url.partition("://")
        if scheme.lower() not in ("http", "https") or not sep or "@" in rest.split("/")[0]:
            raise ValueError("give the studio's own http(s) address, e.g. "
                             "http://studio.internal:7860, without a user or password")
        return url

    @model_validator(mode="after")
    def _overrides_are_training_settings(self) -> VerlSpec:
        for i, item in enumerate(self.overrides):
            problem = verl_override_problem(item)
            if problem:
                raise ValueError(f"overrides[{i}]: {problem}")
        return self


class RunConfig(_Strict):
    name: str = Field(min_length=1, max_length=MAX_RUN_NAME)
    model: str = Field(default="smollm2-135m-instruct",
                       description="The bundled model, a Hugging Face id or a local folder")
    tools: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TOOL_NAMES), title="Tools",
        description="What the model may call, any registered tool (studio.method.tools): "
        "search (a query in <search>, passages of the corpus back in <information>), python "
        "(a program in <code>, run in a sandbox, what it prints back in <output>) and "
        "calculator (an arithmetic expression in <calc>, its value back in <result>). The "
        "prompt's instruction names each one.")
    backend: str = Field(default="native", description="The training engine (registered in "
                         "studio.jobs.engines): native or verl")
    queue: Literal["cpu", "gpu"] = "cpu"
    data: DataSpec
    curriculum: CurriculumSpec = Field(default_factory=CurriculumSpec)
    guidance: GuidanceSpec = Field(default_factory=GuidanceSpec)
    prompt: PromptSpec = Field(default_factory=PromptSpec)
    grpo: GrpoSpec = Field(default_factory=GrpoSpec)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    verl: VerlSpec = Field(default_factory=VerlSpec)
    mirror: MirrorSpec = Field(default_factory=MirrorSpec)
    sentinel: SentinelSpec = Field(default_factory=SentinelSpec)
    lora: LoraSpec | None = Field(default=None, description="LoRA adapters; none: full "
                                  "fine-tuning")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, title="Seed",
                      description="The same seed, data and settings give the same run.")

    @field_validator("name")
    @classmethod
    def _name_shows_as_itself(cls, name: str) -> str:
        problem = name_problem(name, "name")
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("backend")
    @classmethod
    def _backend_is_registered(cls, backend: str) -> str:
        return engine_named(backend).name

    @field_validator("tools")
    @classmethod
    def _tools_listed_once(cls, tools: list[str]) -> list[str]:
        return list(check_tool_names(tools))

    def build_prompt(self, question: str, exemplars: Sequence[Exemplar], k: int,
                     sample_seed: int | None = None, *, first: bool = False) -> Prompt:
        """A prompt of this run: its prompt settings and the instruction for its tools."""
        return self.prompt.build(question, exemplars, k, sample_seed, tools=self.tools,
                                 first=first)

    def exemplar_seed(self, draw: object, question: int) -> int:
        """The seed of the exemplars sampled for a step's (`draw`'s) `question`: its own
        (`prompt.exemplar_draw: per-question`), or the step's, the same for every question
        of it (`per-step`). Unused with `prompt.exemplar_selection: first`."""
        if self.prompt.exemplar_draw == "per-step":
            return derive_seed(self.seed, draw, "exemplars")
        return derive_seed(self.seed, draw, question)

    @model_validator(mode="after")
    def _search_has_a_corpus(self) -> RunConfig:
        readers = corpus_tools(self.tools)
        if readers and self.data.corpus is None:
            raise ValueError(f"data.corpus: the {readers[0]} tool searches a corpus; name one "
                             f"(or remove {readers[0]} from tools)")
        return self

    @model_validator(mode="after")
    def _curriculum_is_valid(self) -> RunConfig:
        self.curriculum.build()
        return self

    @model_validator(mode="after")
    def _mixed_groups_hold_both(self) -> RunConfig:
        """A mixed group needs a hinted and an unhinted answer; a soft curriculum already
        mixes zero-shot questions in by its own rule."""
        if self.guidance.mode != "mixed":
            return self
        if self.grpo.group_size < 2:
            raise ValueError("guidance.mode: mixed needs grpo.group_size of at least 2 (a "
                             "group holds answers with and without the hint)")
        if self.curriculum.soft is not None:
            raise ValueError("guidance.mode: mixed does not combine with curriculum.soft; "
                             "remove one of them")
        guided_count(self.guidance.share, self.grpo.group_size)
        return self

    @model_validator(mode="after")
    def _lora_keeps_one_reference(self) -> RunConfig:
        """With LoRA the KL reference is the base model with the adapters off, so it cannot
        move to each stage's start."""
        if self.lora is not None and self.grpo.reset_each_stage:
            raise ValueError("grpo.reset_each_stage: not available with lora (the KL reference "
                             "is the base model with the adapters off); remove one of them")
        return self

    @model_validator(mode="after")
    def _fits_its_engine(self) -> RunConfig:
        """What the chosen engine cannot do with these settings (`studio.jobs.engines`)."""
        engine = engine_named(self.backend)
        if "queue" not in self.model_fields_set:
            self.queue = engine.queue
        problems = engine.problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def total_steps(self) -> int:
        return self.grpo.steps or self.curriculum.build().total_steps

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


class RunConfigError(ValueError):
    """A config that cannot be used; each line names the field path and what is wrong."""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where the YAML breaks and why."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def parse_run_config(data: dict | str) -> RunConfig:
    """From a dict (API) or YAML text (file); errors name each field path."""
    if isinstance(data, str):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            raise RunConfigError(f"run config: not valid YAML ({_yaml_problem(exc)})") from None
    if not isinstance(data, dict):
        raise RunConfigError("run config: must be a mapping of keys (name, data, grpo, ...)")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise RunConfigError(_field_problems(exc)) from None


def _field_problems(exc: ValidationError, *root: str) -> str:
    """Each problem of `exc` after its field's dotted path (below `root`), in one line."""
    lines = []
    for err in exc.errors():
        loc = [*root, *err["loc"]]
        if err["type"] == "extra_forbidden":  # the key is the user's: quoted, not a path
            *loc, key = loc
            path = ".".join(str(p) for p in loc) or "config"
            lines.append(f"{path}: unknown setting {str(key)!r}; remove it or check its "
                         "spelling")
            continue
        path = ".".join(str(p) for p in loc) or "run config"
        cause = err.get("ctx", {}).get("error")
        message = str(cause) if isinstance(cause, ValueError) else err["msg"]
        lines.append(f"{path}: {message}")
    return "; ".join(lines)


PROTOCOL_FIELDS_DECLARED_IN: dict[str, type[BaseModel]] = {
    "temperature": GrpoSpec, "max_turn_tokens": GrpoSpec, "max_turns": GrpoSpec,
    "top_k": GrpoSpec, "max_response_tokens": GrpoSpec, "max_obs_tokens": GrpoSpec,
    "batch_size": GrpoSpec, "layout": PromptSpec, "assistant_prefix": PromptSpec,
    "instruction": PromptSpec, "seed": RunConfig, "answer_match": RewardSpec,
    "tools": RunConfig,
}
"""Where each field of the evaluation protocol (`EvalConfig`) is declared with its type and
bounds: the run config's field of the same name, so the two cannot drift apart."""


def _protocol_field(name: str, default: Any) -> tuple[Any, FieldInfo]:
    if name == "exemplars":  # a "try it" of a set: no run config field shows k of them
        return int, Field(default, ge=0, le=MAX_TRIED_EXEMPLARS,
                          description="Exemplars shown before each question")
    declared = PROTOCOL_FIELDS_DECLARED_IN[name].model_fields[name]
    return declared.annotation, FieldInfo.merge_field_infos(declared, default=default,
                                                            default_factory=None)


EvaluationProtocol = create_model(
    "EvaluationProtocol", __base__=_Strict,
    __doc__="The overrides an evaluation request may give method.md's zero-shot protocol "
    "(`EvalConfig`, whose defaults these are), each typed and bounded as in a run config.",
    **{f.name: _protocol_field(f.name, f.default) for f in dataclasses.fields(EvalConfig)})


def parse_protocol(data: dict) -> dict:
    """The overrides of an evaluation's protocol as its process reads them (numbers as
    numbers); RunConfigError names each field that is wrong (`protocol.max_turns: ...`)."""
    try:
        return EvaluationProtocol.model_validate(data).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise RunConfigError(_field_problems(exc, "protocol")) from None


def config_field(path: str) -> FieldInfo:
    """The field at a dotted path of the run config ("grpo.lr"): its title (a form's label),
    description (its help), default and bounds."""
    model: type[BaseModel] = RunConfig
    *parents, last = path.split(".")
    for key in parents:
        model = model.model_fields[key].annotation
    return model.model_fields[last]
