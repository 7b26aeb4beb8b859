"""Every config the studio generates composes with veRL's own Hydra config and passes its checks."""

from __future__ import annotations

import pytest

from studio.run_config import RunConfigError, parse_run_config
from worker.engines.verl.config import RunFiles, compose, hydra_overrides, hydra_value

PRESETS = {
    "1 GPU": {"nnodes": 1, "gpus_per_node": 1},
    "8 GPUs": {"nnodes": 1, "gpus_per_node": 8, "tensor_parallel": 2},
    "2 nodes x 8": {"nnodes": 2, "gpus_per_node": 8, "tensor_parallel": 4,
                    "ray_address": "10.0.0.5:6379"},
}


def run_config(verl: dict, **extra):
    return parse_run_config({
        "name": "preset", "backend": "verl", "model": "Qwen/Qwen2.5-3B-Instruct",
        "data": {"corpus": "wiki", "train": "nq", "eval": ["hotpot"], "exemplars": "icrl"},
        "grpo": {"batch_size": 64, "group_size": 4, "mini_batch_size": 32, "lr": 1e-6,
                 "max_response_tokens": 2048, "max_prompt_tokens": 5000, "micro_batch_size": 4},
        "verl": verl, **extra})


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_composes_with_verls_config_and_passes_validate_config(verl, tmp_path, preset):
    config = run_config(PRESETS[preset])
    files = RunFiles(tmp_path / "runs" / "7" / "verl")
    cfg = compose(hydra_overrides(config, files, model_path="/models/qwen 3b",
                                  metrics_log=files.metrics_log(1)))

    a = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.norm_adv_by_std_in_grpo
    assert a.rollout.n == 4 and a.rollout.name == "vllm" and a.rollout.mode == "async"
    assert a.actor.use_kl_loss and a.actor.kl_loss_type == "low_var_kl"
    assert a.actor.kl_loss_coef == 0.001 and a.actor.clip_ratio == 0.2
    assert a.actor.optim.lr == 1e-6 and a.actor.ppo_mini_batch_size == 32
    assert cfg.data.train_batch_size == 64
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (5000, 2048)
    assert a.rollout.prompt_length == 5000 and a.rollout.response_length == 2048
    assert a.rollout.multi_turn.max_assistant_turns == 7
    assert a.model.path == "/models/qwen 3b"
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (
        PRESETS[preset]["nnodes"], PRESETS[preset]["gpus_per_node"])
    assert a.rollout.tensor_model_parallel_size == PRESETS[preset].get("tensor_parallel", 1)
    assert cfg.ray_kwargs.ray_init.get("address") == PRESETS[preset].get("ray_address")
    assert a.rollout.agent.agent_loop_config_path == str(files.agent_loops)
    assert a.rollout.agent.default_agent_loop == "icrl_search"
    assert cfg.reward.custom_reward_function.path == "pkg://worker.engines.verl.reward"
    assert dict(cfg.reward.custom_reward_function.reward_kwargs) == {
        "acc_weight": 0.8, "format_weight": 0.2}
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.rollout_data_dir == str(files.rollouts)
    assert cfg.trainer.validation_data_dir == str(files.validation)
    assert cfg.trainer.default_local_dir == str(files.checkpoints)
    assert cfg.trainer.total_training_steps == 300 and cfg.trainer.save_freq == 50
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == str(
        files.metrics_log(1))


def test_veRL_rejects_a_bad_extra_override_and_batches_that_do_not_divide(verl, tmp_path):
    files = RunFiles(tmp_path / "verl")
    config = run_config({"overrides": ["actor_rollout_ref.actor.no_such_key=1"]})
    with pytest.raises(Exception, match="no_such_key"):
        compose(hydra_overrides(config, files, model_path="m", metrics_log=files.metrics_log(1)))
    config = run_config({"overrides": ["actor_rollout_ref.actor.ppo_mini_batch_size=128"]})
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        compose(hydra_overrides(config, files, model_path="m", metrics_log=files.metrics_log(1)))


def test_hydra_values_round_trip_through_the_override_grammar(verl, tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for value in ["plain", "with space", "quote's \\ back", "end\\", "x\\'y", "<think>", 1e-6, 3,
                  True, None, ["console", "file"]]:
        parsed = parser.parse_override(f"a.b={hydra_value(value)}")
        assert parsed.value() == value


@pytest.mark.parametrize(("extra", "message"), [
    ({"queue": "cpu"}, "queue: the verl backend trains on GPU workers"),
    ({"curriculum": {"preset": "3-2-0", "adaptive": {}}}, "curriculum.adaptive"),
    ({"grpo": {"batch_size": 3, "group_size": 3}, "verl": {"gpus_per_node": 2}},
     "multiple of the GPUs"),
    ({"verl": {"gpus_per_node": 4, "tensor_parallel": 3}}, "verl.tensor_parallel"),
    ({"verl": {"overrides": ["no-equals-sign"]}}, "verl: overrides[0]"),
])
def test_configs_the_verl_backend_cannot_run_are_refused_with_the_field(extra, message):
    data = {"name": "x", "backend": "verl", "data": {"corpus": "c", "train": "t"}, **extra}
    with pytest.raises(RunConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_run_config(data)


def test_a_verl_run_goes_to_the_gpu_queue_unless_told_otherwise():
    config = parse_run_config({"name": "x", "backend": "verl",
                               "data": {"corpus": "c", "train": "t"}})
    assert config.queue == "gpu"
    assert parse_run_config(config.to_yaml()) == config


def test_lora_maps_onto_verls_fsdp_lora_keys_and_composes(verl, tmp_path):
    files = RunFiles(tmp_path / "verl")
    overrides = {"model_path": "m", "metrics_log": files.metrics_log(1)}
    # validate_config checks a LoRA rank against vLLM's own list, which needs vLLM installed
    # (GPU machines only); SGLang skips that check, the rest of the config is the same.
    one_gpu = {**PRESETS["1 GPU"], "rollout_engine": "sglang"}
    config = run_config(one_gpu, lora={"rank": 32, "alpha": 64,
                                       "target_modules": ["q_proj", "v_proj"]})
    a = compose(hydra_overrides(config, files, **overrides)).actor_rollout_ref
    assert (a.model.lora_rank, a.model.lora_alpha) == (32, 64)
    assert list(a.model.target_modules) == ["q_proj", "v_proj"]
    assert a.rollout.load_format == "safetensors"  # the rollout engine loads the base itself
    everything = run_config(one_gpu, lora={"target_modules": "all-linear"})
    assert compose(hydra_overrides(everything, files, **overrides)
                   ).actor_rollout_ref.model.target_modules == "all-linear"

    full = compose(hydra_overrides(run_config(PRESETS["1 GPU"]), files, **overrides))
    assert full.actor_rollout_ref.model.lora_rank == 0  # no lora: full fine-tuning, as before
    assert full.actor_rollout_ref.rollout.load_format == "dummy"
    with pytest.raises(RunConfigError, match="lora.dropout: veRL's LoRA has no dropout"):
        run_config(PRESETS["1 GPU"], lora={"dropout": 0.1})
