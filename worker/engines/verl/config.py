"""A run config as veRL sees it: Hydra overrides of veRL's own `ppo_trainer` config.

`hydra_overrides` maps the studio's hyper-parameters onto veRL's keys (GRPO,
the group size, the GRPO family's options of `grpo_overrides`, lengths, turns,
GPUs and nodes, the Ray address, LoRA) and points veRL's file logger, rollout
dumps and checkpoints at the run's folder (`RunFiles`). `compose` loads
veRL's config with them and runs veRL's `validate_config`, the check
`main_ppo` makes first; it needs veRL installed, nothing else does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from studio.run_config import GrpoSpec, LoraSpec, RunConfig

AGENT_NAME = "icrl_search"
AGENT_LOOP_TARGET = "worker.engines.verl.agent_loop.IcrlSearchAgentLoop"
REWARD_MODULE = "worker.engines.verl.reward"
PROJECT_NAME = "icrl-studio"
FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"

#: veRL's names of the KL estimators (`kl_penalty_forward` takes both spellings).
KL_ESTIMATORS = {"k1": "kl", "k2": "mse", "k3": "low_var_kl"}

#: `clip_ratio_c` when `grpo.dual_clip` is empty. veRL's vanilla loss always applies its
#: dual clip (3.0 by default); it clamps the log-ratio to +-20 first, so no ratio exceeds
#: e^20 (4.9e8), and a bound above that never binds: method.md's loss, no dual clip.
NO_DUAL_CLIP = 1e9


@dataclass(frozen=True)
class RunFiles:
    """Every file of a veRL run, under `<data dir>/runs/<id>/verl/`."""

    root: Path

    @property
    def train_data(self) -> Path:
        return self.root / "train.parquet"

    @property
    def val_data(self) -> Path:
        return self.root / "val.parquet"

    @property
    def agent_spec(self) -> Path:
        """What the agent loop needs beyond veRL's config (JSON, see agent_loop.AgentSpec)."""
        return self.root / "agent.json"

    @property
    def agent_loops(self) -> Path:
        """veRL's agent loop registry file (`agent_loop_config_path`)."""
        return self.root / "agent_loops.yaml"

    @property
    def token_file(self) -> Path:
        """The run's API token for /retrieve; never in a config, a log or a row."""
        return self.root / "retriever.token"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts"

    @property
    def validation(self) -> Path:
        return self.root / "validation"

    def attempt_dir(self, attempt: int) -> Path:
        """Each attempt of the run (one `main_ppo`) has its own folder: veRL's file logger
        truncates its file when it opens it."""
        return self.root / f"attempt-{attempt}"

    def metrics_log(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "metrics.jsonl"

    def process_log(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "main_ppo.log"


def hydra_value(value: object) -> str:
    """A value as Hydra's override grammar reads it back unchanged (strings quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    # Hydra's quoted strings: backslashes are escapes only before a quote or the closing quote.
    text = re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), str(value))
    return f"'{text}'"


def lora_overrides(lora: LoraSpec) -> dict[str, object]:
    """veRL's FSDP LoRA (PEFT's, as the native engine's; it has no dropout). The reference is
    then the actor with its adapters off (veRL's ref_in_actor), as in the native engine."""
    return {
        "actor_rollout_ref.model.lora_rank": lora.rank,
        "actor_rollout_ref.model.lora_alpha": lora.alpha,
        "actor_rollout_ref.model.target_modules": lora.target_modules,
        # veRL's LoRA guide: required. vLLM loads the base weights from the model folder
        # itself, and each step receives the adapter only (the default, dummy, would need
        # the whole base sent from the actor first).
        "actor_rollout_ref.rollout.load_format": "safetensors",
    }


def grpo_overrides(g: GrpoSpec) -> dict[str, object]:
    """The GRPO family's options (docs/verl.md, "GRPO options") as veRL 0.9.1's keys.

    The KL goes either into the loss (`actor.use_kl_loss`) or into the reward
    (`algorithm.use_kl_in_reward`, a fixed `kl_ctrl`), never both; dynamic sampling is
    the V1 trainer's `filter_groups` on the reward; the overlong penalty is the studio's
    reward function's (`reward_kwargs`, see `worker.engines.verl.reward`).
    """
    kl_in_loss = g.kl_in == "loss" and g.kl_coef > 0
    kl_in_reward = g.kl_in == "reward" and g.kl_coef > 0
    sum_norm = g.loss_agg_mode == "seq-mean-token-sum-norm"
    return {
        "algorithm.norm_adv_by_std_in_grpo": g.norm_adv_by_std,
        "algorithm.use_kl_in_reward": kl_in_reward,
        "algorithm.kl_penalty": KL_ESTIMATORS[g.kl_estimator],
        "algorithm.kl_ctrl.type": "fixed",
        "algorithm.kl_ctrl.kl_coef": g.kl_coef,
        "algorithm.filter_groups.enable": g.dynamic_sampling,
        "algorithm.filter_groups.metric": "reward",
        "actor_rollout_ref.actor.ppo_epochs": g.ppo_epochs,
        "actor_rollout_ref.actor.clip_ratio": g.clip,
        "actor_rollout_ref.actor.clip_ratio_low": g.clip,
        "actor_rollout_ref.actor.clip_ratio_high": g.clip if g.clip_high is None else g.clip_high,
        "actor_rollout_ref.actor.clip_ratio_c": g.dual_clip or NO_DUAL_CLIP,
        "actor_rollout_ref.actor.policy_loss.loss_mode":
            "gspo" if g.ratio_level == "sequence" else "vanilla",
        "actor_rollout_ref.actor.loss_agg_mode": g.loss_agg_mode,
        # Dr. GRPO's fixed length: the response budget (veRL's default, the padded width,
        # changes with each micro-batch).
        "actor_rollout_ref.actor.loss_scale_factor": g.max_response_tokens if sum_norm else None,
        "actor_rollout_ref.actor.use_kl_loss": kl_in_loss,
        "actor_rollout_ref.actor.kl_loss_coef": g.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": KL_ESTIMATORS[g.kl_estimator],
        "+reward.custom_reward_function.reward_kwargs.overlong_buffer": g.overlong_buffer,
        "+reward.custom_reward_function.reward_kwargs.overlong_penalty": g.overlong_penalty,
        "+reward.custom_reward_function.reward_kwargs.max_response_tokens":
            g.max_response_tokens,
    }


def hint_slots(config: RunConfig) -> int:
    """How many exemplar indices a response's reward carries (`reward.hint_fields`): the
    most a stage shows in a mixed-guidance run, else none."""
    if config.guidance.mode != "mixed":
        return 0
    return max(stage.exemplars for stage in config.curriculum.build().stages)

def hydra_overrides(config: RunConfig, files: RunFiles, *, model_path: str,
                    metrics_log: Path) -> list[str]:
    """The overrides `python -m verl.trainer.main_ppo` runs this config with.

    Lengths: veRL's prompt budget is the run's `max_prompt_tokens` (the data
    set writer checks the largest stage's prompts fit); its response budget
    is `max_response_tokens`, model and tool tokens together, as in the
    native engine. A validation set runs at the end of training with the
    evaluation protocol's temperature (0.1) and no exemplars.
    """
    g, v = config.grpo, config.verl
    has_val = bool(config.data.eval)
    mini_batch = g.mini_batch_size or g.batch_size
    values: dict[str, object] = {
        "algorithm.adv_estimator": "grpo",
        "data.train_files": str(files.train_data),
        "data.val_files": str(files.val_data if has_val else files.train_data),
        "data.train_batch_size": g.batch_size,
        "data.max_prompt_length": g.max_prompt_tokens,
        "data.max_response_length": g.max_response_tokens,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": False,
        "data.truncation": "error",
        "data.shuffle": True,
        "data.seed": config.seed,
        "data.dataloader_num_workers": 0,
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "actor_rollout_ref.actor.optim.lr": g.lr,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": g.warmup_ratio,
        "actor_rollout_ref.actor.optim.weight_decay": g.weight_decay,
        "actor_rollout_ref.actor.ppo_mini_batch_size": mini_batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": g.micro_batch_size,
        "actor_rollout_ref.actor.grad_clip": g.max_grad_norm,
        "actor_rollout_ref.actor.entropy_coeff": g.entropy_coef,
        "actor_rollout_ref.actor.calculate_entropy": True,
        "actor_rollout_ref.actor.data_loader_seed": config.seed,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": g.micro_batch_size,
        "actor_rollout_ref.rollout.name": v.rollout_engine,
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": g.group_size,
        "actor_rollout_ref.rollout.temperature": g.temperature,
        "actor_rollout_ref.rollout.top_p": g.top_p,
        "actor_rollout_ref.rollout.seed": config.seed,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": v.tensor_parallel,
        "actor_rollout_ref.rollout.gpu_memory_utilization": v.gpu_memory_utilization,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": g.micro_batch_size,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        # Stop strings need the engine's tokenizer: SGLang skips it unless told (vLLM never does).
        "actor_rollout_ref.rollout.skip_tokenizer_init": False,
        "actor_rollout_ref.rollout.multi_turn.enable": True,
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": g.max_turns + 1,
        "actor_rollout_ref.rollout.val_kwargs.temperature": 0.1,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "actor_rollout_ref.rollout.val_kwargs.n": 1,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(files.agent_loops),
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
        "reward.custom_reward_function.path": f"pkg://{REWARD_MODULE}",
        "reward.custom_reward_function.name": "compute_score",
        "+reward.custom_reward_function.reward_kwargs.acc_weight": config.reward.acc_weight,
        "+reward.custom_reward_function.reward_kwargs.format_weight":
            config.reward.format_weight,
        "+reward.custom_reward_function.reward_kwargs.answer_match": config.reward.answer_match,
        "+reward.custom_reward_function.reward_kwargs.call_bonus": config.reward.call_bonus,
        "+reward.custom_reward_function.reward_kwargs.tools": config.tools,
        "+reward.custom_reward_function.reward_kwargs.hint_slots": hint_slots(config),
        "trainer.project_name": PROJECT_NAME,
        "trainer.experiment_name": f"run-{files.root.parent.name}",
        "trainer.logger": ["console", "file"],
        "trainer.n_gpus_per_node": v.gpus_per_node,
        "trainer.nnodes": v.nnodes,
        "trainer.total_training_steps": config.total_steps,
        "trainer.total_epochs": 1_000_000,  # the step count ends the run, not epochs
        "trainer.save_freq": config.engine.checkpoint_every,
        "trainer.test_freq": config.total_steps if has_val else -1,
        "trainer.val_before_train": False,
        "trainer.default_local_dir": str(files.checkpoints),
        "trainer.resume_mode": "auto",
        "trainer.rollout_data_dir": str(files.rollouts),
        "trainer.validation_data_dir": str(files.validation),
        "trainer.max_actor_ckpt_to_keep": 2,
        "+ray_kwargs.ray_init.runtime_env.env_vars." + FILE_LOGGER_ENV: str(metrics_log),
        **grpo_overrides(g),
    }
    if config.lora:
        values.update(lora_overrides(config.lora))
    if v.ray_address:
        values["+ray_kwargs.ray_init.address"] = v.ray_address
    return [f"{key}={hydra_value(value)}" for key, value in values.items()] + list(v.overrides)


def verl_config_dir() -> Path:
    """veRL's own Hydra config folder (the one `main_ppo` composes)."""
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def compose(overrides: list[str]):
    """veRL's `ppo_trainer` config with `overrides`, resolved and validated as `main_ppo` does.

    Raises veRL's or Hydra's own error for an unknown key, a wrong type or
    batch sizes that do not divide. Hydra's global state is cleared after.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        cfg = hydra_compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(cfg)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg),
                    use_critic=need_critic(cfg))
    return cfg

