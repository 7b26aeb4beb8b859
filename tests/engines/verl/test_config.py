"""Every config the studio generates composes with veRL's own Hydra config and passes its checks."""

from __future__ import annotations

import math

import pytest

from studio.run_config import RunConfigError, parse_run_config
from studio.services.demo import load_calc_pack, load_math_pack
from tests.support.actors import admin
from worker.engines.verl.config import RunFiles, compose, hydra_overrides, hydra_value
from worker.engines.verl.launcher import LaunchError, VerlLaunch
from worker.engines.verl.protocol import AgentSpec

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
        "acc_weight": 0.8, "format_weight": 0.2, "tools": ["search"], "overlong_buffer": 0,
        "overlong_penalty": 1.0, "max_response_tokens": 2048, "answer_match": "exact",
        "call_bonus": 0.0, "hint_slots": 0}
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.rollout_data_dir == str(files.rollouts)
    assert cfg.trainer.validation_data_dir == str(files.validation)
    assert cfg.trainer.default_local_dir == str(files.checkpoints)
    assert cfg.trainer.total_training_steps == 300 and cfg.trainer.save_freq == 50
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == str(
        files.metrics_log(1))


def test_veRL_rejects_a_bad_extra_override_and_batches_that_do_not_divide(verl, tmp_path):
    files = RunFiles(tmp_path / "verl")
    generated = hydra_overrides(run_config({}), files, model_path="m",
                                metrics_log=files.metrics_log(1))
    with pytest.raises(Exception, match="no_such_key"):
        compose([*generated, "actor_rollout_ref.actor.no_such_key=1"])
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
    ({"engine": {"dtype": "bfloat16-autocast"}}, "engine.dtype: the verl backend trains in "
                                                 "veRL's own precision"),
    ({"guidance": {"mode": "mixed", "when": "all-failed"}},
     "guidance.when: 'all-failed' needs the unguided answers scored before"),
    ({"guidance": {"mode": "mixed", "shaping": "luffy"}},
     "guidance.shaping: 'luffy' needs to know in the loss which answers were guided"),
])
def test_configs_the_verl_backend_cannot_run_are_refused_with_the_field(extra, message):
    data = {"name": "x", "backend": "verl", "data": {"corpus": "c", "train": "t"}, **extra}
    with pytest.raises(RunConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_run_config(data)


def test_mixed_guidance_runs_on_verl_guiding_always_without_shaping():
    """What veRL can do of guidance: mixed, always, no shaping; `when` and `shaping` of a
    shown run do nothing, so they are not refused."""
    base = {"name": "x", "backend": "verl", "data": {"corpus": "c", "train": "t"}}
    mixed = parse_run_config({**base, "guidance": {"mode": "mixed", "share": 0.25}})
    assert (mixed.guidance.when, mixed.guidance.shaping) == ("always", "none")
    shown = parse_run_config({**base, "guidance": {"when": "all-failed", "shaping": "luffy"}})
    assert shown.guidance.mode == "shown"


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


def with_grpo(**options):
    """The 1-GPU preset with some GRPO options set."""
    base = run_config(PRESETS["1 GPU"]).model_dump(mode="json")
    base["grpo"].update(options)
    return parse_run_config(base)


def resolved(verl, tmp_path, **options):
    files = RunFiles(tmp_path / "verl")
    return compose(hydra_overrides(with_grpo(**options), files, model_path="m",
                                   metrics_log=files.metrics_log(1)))


ACTOR = "actor_rollout_ref.actor."
REWARD_KWARGS = "reward.custom_reward_function.reward_kwargs."
# Per GRPO option: settings of it, and the veRL keys and values they resolve to.
GRPO_OPTIONS = {
    "norm_adv_by_std": [({"norm_adv_by_std": False},
                         {"algorithm.norm_adv_by_std_in_grpo": False})],
    "loss_agg_mode": [
        ({"loss_agg_mode": "seq-mean-token-mean"},
         {ACTOR + "loss_agg_mode": "seq-mean-token-mean", ACTOR + "loss_scale_factor": None}),
        ({"loss_agg_mode": "seq-mean-token-sum-norm"},
         {ACTOR + "loss_agg_mode": "seq-mean-token-sum-norm", ACTOR + "loss_scale_factor": 2048}),
    ],
    "clip": [({"clip": 0.1}, {ACTOR + "clip_ratio": 0.1, ACTOR + "clip_ratio_low": 0.1,
                               ACTOR + "clip_ratio_high": 0.1})],
    "clip_high": [({"clip_high": 0.28}, {ACTOR + "clip_ratio_low": 0.2,
                                          ACTOR + "clip_ratio_high": 0.28})],
    "dual_clip": [({"dual_clip": 3.0}, {ACTOR + "clip_ratio_c": 3.0}),
                  ({"dual_clip": None}, {ACTOR + "clip_ratio_c": 1e9})],
    "ratio_level": [({"ratio_level": "sequence", "clip": 3e-4, "clip_high": 4e-4},
                     {ACTOR + "policy_loss.loss_mode": "gspo", ACTOR + "clip_ratio_low": 3e-4,
                      ACTOR + "clip_ratio_high": 4e-4}),
                    ({"ratio_level": "token"}, {ACTOR + "policy_loss.loss_mode": "vanilla"})],
    "kl_estimator": [({"kl_estimator": k}, {ACTOR + "kl_loss_type": name,
                                            "algorithm.kl_penalty": name})
                     for k, name in (("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl"))],
    "kl_in": [({"kl_in": "reward", "kl_coef": 0.01},
               {"algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.type": "fixed",
                "algorithm.kl_ctrl.kl_coef": 0.01, ACTOR + "use_kl_loss": False}),
              ({"kl_in": "loss", "kl_coef": 0.01},
               {"algorithm.use_kl_in_reward": False, ACTOR + "use_kl_loss": True,
                ACTOR + "kl_loss_coef": 0.01}),
              ({"kl_in": "reward", "kl_coef": 0.0},
               {"algorithm.use_kl_in_reward": False, ACTOR + "use_kl_loss": False})],
    "dynamic_sampling": [({"dynamic_sampling": True},
                          {"algorithm.filter_groups.enable": True,
                           "algorithm.filter_groups.metric": "reward"})],
    "overlong_buffer": [({"overlong_buffer": 512, "overlong_penalty": 0.5},
                         {REWARD_KWARGS + "overlong_buffer": 512,
                          REWARD_KWARGS + "overlong_penalty": 0.5,
                          REWARD_KWARGS + "max_response_tokens": 2048})],
    "ppo_epochs": [({"ppo_epochs": 2}, {ACTOR + "ppo_epochs": 2})],
}


@pytest.mark.parametrize(("options", "expected"), [
    pytest.param(options, expected, id=f"{name}-{i}")
    for name, cases in GRPO_OPTIONS.items() for i, (options, expected) in enumerate(cases)])
def test_each_grpo_option_reaches_its_verl_key(verl, tmp_path, options, expected):
    from omegaconf import OmegaConf

    cfg = resolved(verl, tmp_path, **options)
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key, default="missing") == value, key


def test_the_default_grpo_options_are_method_md_in_verl(verl, tmp_path):
    """GRPO divided by the std, token mean, clip 0.2 both ways, no dual clip, token ratios,
    k3 as a loss term, no group filter, one epoch, no overlong penalty."""
    cfg = resolved(verl, tmp_path)
    a = cfg.actor_rollout_ref.actor
    assert cfg.algorithm.norm_adv_by_std_in_grpo and not cfg.algorithm.use_kl_in_reward
    assert not cfg.algorithm.filter_groups.enable
    assert (a.loss_agg_mode, a.clip_ratio_low, a.clip_ratio_high) == ("token-mean", 0.2, 0.2)
    assert a.policy_loss.loss_mode == "vanilla" and a.ppo_epochs == 1
    assert a.use_kl_loss and a.kl_loss_type == "low_var_kl" and a.kl_loss_coef == 0.001
    assert a.clip_ratio_c > math.exp(20), "veRL's ratio cannot reach the bound: no dual clip"
    assert cfg.reward.custom_reward_function.reward_kwargs.overlong_buffer == 0


def test_every_grpo_key_is_one_of_verls_own(verl):
    """Each key the GRPO options set is in veRL 0.9.1's shipped trainer config (the
    reward function's kwargs are the studio's own: their parent is veRL's)."""
    from omegaconf import OmegaConf

    from worker.engines.verl.config import grpo_overrides, verl_config_dir

    assert verl.__version__ == "0.9.1"
    shipped = OmegaConf.load(verl_config_dir() / "_generated_ppo_trainer.yaml")
    keys = set()
    for cases in GRPO_OPTIONS.values():
        for options, _ in cases:
            keys |= set(grpo_overrides(with_grpo(**options).grpo))
    assert {k.removeprefix("+") for k in keys} >= {k for c in GRPO_OPTIONS.values()
                                                   for _, e in c for k in e}
    for key in keys:
        if key.startswith("+"):
            parent, _, name = key[1:].rpartition(".")
            assert parent == REWARD_KWARGS.rstrip(".")
            assert OmegaConf.select(shipped, parent.rpartition(".")[0] + ".path",
                                    default="missing") != "missing", key
            continue
        assert OmegaConf.select(shipped, key, default="missing") != "missing", key


def test_every_override_key_is_a_setting_of_verls_config_of_its_type(verl):
    """`verl.overrides` may set only `VERL_OVERRIDE_KEYS`: each is in veRL 0.9.1's shipped
    trainer config, a value there (no group of settings), whose default is of the declared
    type where it has one (veRL reads an int where a float is declared)."""
    from omegaconf import OmegaConf

    from studio.run_config import VERL_OVERRIDE_KEYS
    from worker.engines.verl.config import verl_config_dir

    shipped = OmegaConf.load(verl_config_dir() / "_generated_ppo_trainer.yaml")
    for key, kind in VERL_OVERRIDE_KEYS.items():
        default = OmegaConf.select(shipped, key, default="missing")
        assert default != "missing" and not OmegaConf.is_config(default), key
        if default is not None and not str(default).startswith("${"):
            wanted = (int, float) if kind is float else kind
            assert isinstance(default, wanted) and (kind is bool) == isinstance(default, bool), \
                (key, default)


def test_dynamic_sampling_cannot_bound_its_rounds_on_verl():
    assert with_grpo(dynamic_sampling=True, dynamic_sampling_max_batches=3).grpo.dynamic_sampling
    with pytest.raises(RunConfigError, match="grpo.dynamic_sampling_max_batches: the verl "
                       "backend cannot bound"):
        with_grpo(dynamic_sampling=True, dynamic_sampling_max_batches=5)


@pytest.mark.parametrize(("tool", "load", "pack"), [("python", load_math_pack, "math"),
                                                    ("calculator", load_calc_pack, "calc")])
def test_a_verl_run_without_search_neither_checks_nor_names_retrieve(verl, studio, verl_run,
                                                                     tool, load, pack):
    """tools: [python] on the math pack, or [calculator] on the arithmetic pack (no corpus):
    the launcher prepares the run with the studio's /retrieve unreachable, the agent spec
    names none and the reward gets the run's tools; a search run is refused."""
    settings, _ = studio
    load(settings, admin(settings))
    settings.public_url = "http://127.0.0.1:1"  # where nothing answers
    _, run, files, _ = verl_run(
        tools=[tool], reward={"answer_match": "numeric"},
        data={"corpus": None, "train": pack, "eval": [f"{pack}-heldout"], "exemplars": pack})
    overrides = VerlLaunch(settings, run["id"]).prepare()
    spec = AgentSpec.model_validate_json(files.agent_spec.read_text())
    assert spec.retrieve_url is None and spec.run_config.tools == [tool]
    assert f"+reward.custom_reward_function.reward_kwargs.tools=['{tool}']" in overrides
    _, searching, _, _ = verl_run()
    with pytest.raises(LaunchError, match="/retrieve"):
        VerlLaunch(settings, searching["id"]).prepare()


def test_a_worker_sends_the_token_only_to_an_address_its_own_settings_list(verl, studio,
                                                                           verl_run):
    """The web app accepted `verl.studio_url` from its admin's list; a worker whose settings
    do not list it refuses the run before writing the owner's token (S1)."""
    settings, _ = studio
    settings.verl_studio_urls = "http://10.1.2.3:7860"
    _, run, files, _ = verl_run(verl={"studio_url": "http://10.1.2.3:7860/"})
    settings.verl_studio_urls = None
    with pytest.raises(LaunchError, match=r"^verl.studio_url: 'http://10.1.2.3:7860/' is not "
                       "this studio's address"):
        VerlLaunch(settings, run["id"]).prepare()
    assert not files.token_file.exists()



def test_a_worker_sends_a_run_only_to_a_ray_cluster_its_own_settings_list(studio, verl_run):
    """The web app accepted `verl.ray_address` from its admin's list; a worker whose settings
    do not list it refuses the run before writing the owner's token (issue 41 N1)."""
    settings, _ = studio
    settings.verl_ray_addresses = "10.0.0.5:6379"
    _, run, files, _ = verl_run(verl={"ray_address": "10.0.0.5:6379"})
    settings.verl_ray_addresses = None
    with pytest.raises(LaunchError, match=r"^verl.ray_address: '10.0.0.5:6379' is not a Ray "
                       r"cluster an admin listed; .*STUDIO_VERL_RAY_ADDRESSES"):
        VerlLaunch(settings, run["id"]).prepare()
    assert not files.token_file.exists()
