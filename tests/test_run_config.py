"""The run config: the issue's YAML shape, method.md's defaults, errors that name the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from studio.run_config import VERL_OVERRIDE_KEYS, RunConfigError, parse_run_config
from studio.services import runs
from studio.services.errors import InvalidInput
from studio.services.run_validation import verl_places_problem
from tests.support.actors import admin, user

EXAMPLE = """
name: demo-3-2-0
model: smollm2-135m-instruct
backend: native
queue: cpu
data: {corpus: demo, train: demo, eval: [demo], exemplars: demo}
curriculum: {preset: "3-2-0", steps_per_stage: 100}
prompt: {layout: chat, assistant_prefix: "<think>"}
grpo: {steps: 300, batch_size: 8, group_size: 4, lr: 1.0e-6, kl_coef: 0.001, clip: 0.2, temperature: 1.0, max_turns: 6, top_k: 3, max_response_tokens: 512, max_obs_tokens: 500}
reward: {acc_weight: 0.8, format_weight: 0.2}
seed: 0
"""


def test_the_documented_yaml_parses_and_round_trips():
    config = parse_run_config(EXAMPLE)
    assert config.curriculum.build().spec == "3-2-0"
    assert [s.exemplars for s in config.curriculum.build().stages] == [3, 2, 0]
    assert config.total_steps == 300
    assert parse_run_config(config.to_yaml()) == config


def test_defaults_are_the_methods():
    config = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"}})
    g = config.grpo
    assert (g.group_size, g.lr, g.kl_coef, g.clip, g.temperature, g.max_turns, g.top_k,
            g.max_obs_tokens) == (4, 1e-6, 0.001, 0.2, 1.0, 6, 3, 500)
    assert (config.reward.acc_weight, config.reward.format_weight) == (0.8, 0.2)
    assert config.total_steps == 300  # 3-2-0 x 100 steps
    # The GRPO family's options default to method.md's update: std-normalised advantages,
    # token-mean, symmetric clip without a dual clip, token ratios, k3 KL in the loss.
    assert (g.norm_adv_by_std, g.loss_agg_mode, g.clip_high, g.dual_clip, g.ratio_level,
            g.kl_estimator, g.kl_in, g.dynamic_sampling, g.overlong_buffer, g.ppo_epochs) == (
        True, "token-mean", None, None, "token", "k3", "loss", False, 0, 1)


def test_sampled_exemplars_are_drawn_per_question_unless_the_draw_is_per_step():
    """`prompt.exemplar_draw`: per-question (the default) seeds each question of a step
    apart, per-step one draw for all of them; with the first k there is no draw at all."""
    from studio.services.run_history import unused_keys

    def config(**prompt):
        return parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"},
                                 "prompt": prompt, "seed": 4})

    default = config(exemplar_selection="sample")
    assert default.prompt.exemplar_draw == "per-question"
    assert default.exemplar_seed(7, 0) != default.exemplar_seed(7, 1)
    per_step = config(exemplar_selection="sample", exemplar_draw="per-step")
    assert per_step.exemplar_seed(7, 0) == per_step.exemplar_seed(7, 1)
    assert per_step.exemplar_seed(7, 0) != per_step.exemplar_seed(8, 0)
    assert "prompt.exemplar_draw" in unused_keys(config().model_dump(mode="json"))
    assert "prompt.exemplar_draw" not in unused_keys(per_step.model_dump(mode="json"))
    with pytest.raises(RunConfigError, match="prompt.exemplar_draw"):
        config(exemplar_draw="per-batch")


def test_a_run_calls_search_unless_it_chooses_its_tools():
    data = {"name": "x", "data": {"corpus": "c", "train": "t"}}
    assert parse_run_config(data).tools == ["search"]
    config = parse_run_config({**data, "tools": ["python", "search"]})
    assert config.tools == ["python", "search"]  # the order is kept: the first is corrected
    assert parse_run_config(config.to_yaml()) == config


def test_a_run_names_a_corpus_only_when_it_searches():
    for tools in (["python"], ["calculator"], ["calculator", "python"]):
        alone = parse_run_config({"name": "x", "tools": tools, "data": {"train": "t"}})
        assert alone.data.corpus is None and alone.tools == tools
    for tools in (["search"], ["python", "search"]):
        with pytest.raises(RunConfigError, match="^run config: data.corpus: the search tool "
                                                 "searches a corpus; name one"):
            parse_run_config({"name": "x", "tools": tools, "data": {"train": "t"}})
    with pytest.raises(RunConfigError, match="data.corpus"):
        parse_run_config({"name": "x", "data": {"train": "t"}})  # search by default


@pytest.mark.parametrize(("tools", "message"), [
    ([], "tools: name at least one tool"),
    (["python", "python"], "tools: 'python' is listed more than once"),
    (["perl"], "tools: unknown tool 'perl'; known tools: search, python, calculator"),
    ("python", "tools: Input should be a valid list"),
])
def test_tools_are_named_once_each(tools, message):
    with pytest.raises(RunConfigError) as err:
        parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"}, "tools": tools})
    assert message in str(err.value)


@pytest.mark.parametrize(("grpo", "message"), [
    ({"dual_clip": 3.0, "ratio_level": "sequence"},
     "grpo: dual_clip is not used with ratio_level: sequence"),
    ({"overlong_buffer": 512}, "grpo: overlong_buffer must be smaller than max_response_tokens"),
    ({"dynamic_sampling": True, "group_size": 1}, "grpo: dynamic_sampling needs groups of two"),
    ({"dual_clip": 1.0}, "grpo.dual_clip: Input should be greater than 1"),
    ({"loss_agg_mode": "seq-sum"}, "grpo.loss_agg_mode: Input should be 'token-mean'"),
    ({"kl_estimator": "k4"}, "grpo.kl_estimator: Input should be 'k1', 'k2' or 'k3'"),
])
def test_grpo_options_that_cannot_work_together_name_the_fields(grpo, message):
    with pytest.raises(RunConfigError) as err:
        parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"}, "grpo": grpo})
    assert message in str(err.value)


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "x"}, "data: Field required"),
    ({"name": "x", "data": {"corpus": "c", "train": "t"}, "grpo": {"lr": -1}},
     "grpo.lr: Input should be greater than 0"),
    ({"name": "x", "data": {"corpus": "c", "train": "t"}, "grpo": {"learning_rate": 1}},
     "grpo: unknown setting 'learning_rate'"),
    ({"name": "x", "data": {"corpus": "c", "train": "t"}, "curriculum": {"preset": "9-9"}},
     "curriculum.preset: '9-9' is not one of 3-2-0, 3-0, 3-2-1-0, 0"),
    ({"name": "x", "data": {"corpus": "c", "train": "t"},
      "curriculum": {"stages": [{"exemplars": 2, "steps": 0}]}}, "stages[0].steps"),
])
def test_errors_name_the_field(data, message):
    with pytest.raises(RunConfigError, match=None) as err:
        parse_run_config(data)
    assert message in str(err.value)


def test_yaml_syntax_error():
    with pytest.raises(RunConfigError, match="not valid YAML"):
        parse_run_config("name: [unclosed")


BASE = {"name": "x", "data": {"corpus": "c", "train": "t"}}


def test_lora_is_off_unless_asked_and_takes_its_defaults_when_asked():
    assert parse_run_config(BASE).lora is None  # full fine-tuning
    lora = parse_run_config({**BASE, "lora": {}}).lora
    assert (lora.rank, lora.alpha, lora.dropout) == (16, 32, 0.0)
    assert lora.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                   "up_proj", "down_proj"]
    config = parse_run_config({**BASE, "lora": {"rank": 8, "target_modules": "q_proj, v_proj"}})
    assert config.lora.target_modules == ["q_proj", "v_proj"]
    assert parse_run_config(config.to_yaml()) == config
    assert parse_run_config({**BASE, "lora": {"target_modules": "all-linear"}}
                            ).lora.target_modules == "all-linear"


@pytest.mark.parametrize(("lora", "message"), [
    ({"rank": 0}, "lora.rank: 0 is out of range: use 1..256"),
    ({"rank": 512}, "lora.rank: 512 is out of range: use 1..256"),
    ({"alpha": 0}, "lora.alpha: 0 must be > 0"),
    ({"dropout": 1.0}, "lora.dropout: 1.0 must be in [0, 1)"),
    ({"dropout": -0.1}, "lora.dropout: -0.1 must be in [0, 1)"),
    ({"target_modules": []}, "lora.target_modules: name at least one layer"),
    ({"target_modules": " , "}, "lora.target_modules: name at least one layer"),
    ({"rnak": 8}, "lora: unknown setting 'rnak'"),
])
def test_lora_values_out_of_bounds_name_the_field_and_the_range(lora, message):
    with pytest.raises(RunConfigError) as err:
        parse_run_config({**BASE, "lora": lora})
    assert message in str(err.value)


def test_lora_keeps_one_reference_so_it_refuses_a_reset_per_stage():
    with pytest.raises(RunConfigError, match="grpo.reset_each_stage: not available with lora"):
        parse_run_config({**BASE, "lora": {}, "grpo": {"reset_each_stage": True}})


@pytest.mark.parametrize(("section", "key", "value", "bound"), [
    ("grpo", "steps", 1e7, "1000000"),
    ("grpo", "steps", 1e30, "maximum size"),
    ("grpo", "batch_size", 10**12, "4096"),
    ("grpo", "max_response_tokens", 2**63, "131072"),
    ("grpo", "lr", 2.0, "1"),
    ("reward", "acc_weight", 1.5, "1"),
    ("reward", "format_weight", -0.1, "0"),
    ("engine", "threads", 10**6, "1024"),
    ("prompt", "instruction", "x" * 4_000_000, "8000"),  # 4 MB cost 10 s of CPU
])
def test_every_number_is_bounded_to_what_can_run(section, key, value, bound):
    with pytest.raises(RunConfigError) as err:
        parse_run_config({**BASE, section: {key: value}})
    assert f"{section}.{key}" in str(err.value) and bound in str(err.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "NaN", "-Infinity"])
def test_no_nan_or_infinity(value):
    with pytest.raises(RunConfigError, match="grpo.temperature"):
        parse_run_config({**BASE, "grpo": {"temperature": value}})


def test_stage_counts_and_lengths_are_bounded():
    with pytest.raises(RunConfigError, match="curriculum.stages"):
        parse_run_config({**BASE, "curriculum": {"stages": [{"exemplars": 0, "steps": 1}] * 101}})
    with pytest.raises(RunConfigError, match=r"curriculum.stages.0.steps.*1000000"):
        parse_run_config({**BASE, "curriculum": {"stages": [{"exemplars": 0, "steps": 10**7}]}})


def test_the_sentinel_watches_every_signal_and_warns_by_default():
    config = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"}})
    rules = config.sentinel.rules()
    assert {r.action for r in rules.values()} == {"warn"}
    assert (rules["search_stopped"].window, rules["search_stopped"].threshold) == (5, 0.9)


def test_a_signal_given_in_part_keeps_its_own_defaults_and_round_trips():
    config = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"},
                               "sentinel": {"kl_spike": {"action": "pause"}}})
    kl = config.sentinel.kl_spike
    assert (kl.action, kl.window, kl.threshold) == ("pause", 10, 10.0)
    assert parse_run_config(config.to_yaml()) == config


@pytest.mark.parametrize(("sentinel", "message"), [
    ({"kl_spike": {"threshold": 0.5}},
     "sentinel.kl_spike: threshold: how many times the median a spike is, above 1"),
    ({"format_falling": {"threshold": 1.5}},
     "sentinel.format_falling: threshold: the share of the earlier high lost, between 0 and 1"),
    ({"format_falling": {"window": 0}}, "sentinel.format_falling.window: Input should be "
     "greater than or equal to 1"),
    ({"entropy_collapse": {"action": "stop"}},
     "sentinel.entropy_collapse.action: Input should be 'off', 'warn' or 'pause'"),
    ({"entropy": {}}, "sentinel: unknown setting 'entropy'"),
])
def test_sentinel_errors_name_the_signal_and_the_bound(sentinel, message):
    with pytest.raises(RunConfigError) as err:
        parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"},
                          "sentinel": sentinel})
    assert message in str(err.value)


def test_the_verl_backend_warns_but_cannot_pause():
    base = {"name": "x", "data": {"corpus": "c", "train": "t"}, "backend": "verl"}
    assert parse_run_config(base).sentinel.kl_spike.action == "warn"
    with pytest.raises(RunConfigError, match="sentinel.kl_spike.action: the verl backend cannot "
                       "pause at a checkpoint yet; use warn or backend: native"):
        parse_run_config({**base, "sentinel": {"kl_spike": {"action": "pause"}}})


@pytest.mark.parametrize(("name", "problem"), [
    ("run\u202egnp", "invisible formatting character (U+202E at character 4)"),
    ("run\u200b1", "invisible formatting character (U+200B at character 4)"),
    ("run\n1", "control character (U+000A at character 4)")])
def test_a_run_name_shows_as_itself(name, problem):
    with pytest.raises(RunConfigError, match=r"^name: the name holds an? " + re.escape(problem)):
        parse_run_config({**BASE, "name": name})
    assert parse_run_config({**BASE, "name": "Lämp run 🪔 #1"}).name == "Lämp run 🪔 #1"


NOT_A_SETTING = "is not a training setting that overrides may change"
UPLOADED = "/srv/studio/ui-uploads/4f1c/tool.py"  # a file a member uploaded through the UI


@pytest.mark.parametrize(("override", "problem"), [
    ("reward.custom_reward_function.path=/tmp/x.py", NOT_A_SETTING),
    ("actor_rollout_ref.model.trust_remote_code=true", NOT_A_SETTING),
    ("actor_rollout_ref.rollout.agent.agent_loop_config_path=/tmp/a.yaml", NOT_A_SETTING),
    ("+actor_rollout_ref.actor.hook._target_=os.system", NOT_A_SETTING),
    ("trainer.default_local_dir=/etc", NOT_A_SETTING),
    ("actor_rollout_ref.rollout.multi_turn.enable=false", NOT_A_SETTING),
    ("trainer.save_freq=${oc.env:HF_TOKEN}", "interpolations"),
    ("~actor_rollout_ref.actor.optim.lr=", "deletes a key"),
    ("actor_rollout_ref.actor.checkpoint={_target_:os.system}", "a mapping"),
    ("actor_rollout_ref.rollout.multi_turn={enable: true, function_tool_path: " + UPLOADED + "}",
     "a mapping"),
    ("actor_rollout_ref.actor.optim.lr=[1e-6, 2e-6]", "a list"),
    ("actor_rollout_ref.actor.loss_agg_mode=" + UPLOADED, "one word"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=my_package.losses", "one word"),
    ("actor_rollout_ref.actor.policy_loss.loss_mode=MyLoss()", "one word"),
    ("algorithm.adv_estimator=https://example.org/estimator", "one word"),
    ("algorithm.adv_estimator=null", "one word"),
    ("actor_rollout_ref.actor.optim.lr=fast", "a number"),
    ("actor_rollout_ref.actor.optim.lr=nan", "a number"),
    ("actor_rollout_ref.rollout.n=2.5", "a whole number"),
    ("actor_rollout_ref.rollout.n=1,2", "a whole number"),
    ("algorithm.use_kl_in_reward=yes", "true or false"),
    ("no-equals-sign", "must be key=value"),
])
def test_verl_overrides_set_training_settings_and_name_no_code(override, problem):
    """A member's override reached Hydra as it was: a reward-function path, an agent-loop
    `_target_`, `trust_remote_code` or a mapping naming a tool file ran code on the GPU
    workers (S1, issue 41 N1). Only a known training setting, set to one value of its type."""
    with pytest.raises(RunConfigError, match=r"^verl: .*overrides\[0\]: .*" + re.escape(problem)):
        parse_run_config({**BASE, "verl": {"overrides": [override]}})
    allowed = ["actor_rollout_ref.actor.optim.lr=2e-6", "+trainer.val_before_train=false",
               "algorithm.norm_adv_by_std_in_grpo=False",
               "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
               "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.rollout.n=8",
               "actor_rollout_ref.actor.entropy_coeff=0", "data.max_response_length=4096"]
    assert parse_run_config({**BASE, "verl": {"overrides": allowed}}).verl.overrides == allowed


def test_docs_list_exactly_the_keys_overrides_may_set():
    """docs/verl.md says what a member may set; it must be what the check allows."""
    text = (Path(__file__).parents[1] / "docs" / "verl.md").read_text()
    section = text.split("### What `verl.overrides` may set")[1].split("### ")[0]
    listed = set(re.findall(r"`([a-z_.]+)`", section)) - {
        "actor", "rollout", "actor_rollout_ref.actor", "actor_rollout_ref.rollout"}
    assert listed == {key.replace("actor_rollout_ref.actor.", "actor.")
                      .replace("actor_rollout_ref.rollout.", "rollout.")
                      for key in VERL_OVERRIDE_KEYS}


@pytest.mark.parametrize(("override", "key"), [
    ("actor_rollout_ref.rollout.multi_turn={enable: true, function_tool_path: " + UPLOADED + "}",
     "actor_rollout_ref.rollout.multi_turn"),
    ("actor_rollout_ref.rollout.agent={agent_loop_config_path: " + UPLOADED + "}",
     "actor_rollout_ref.rollout.agent")])
def test_a_mapping_override_naming_an_uploaded_file_is_refused_naming_its_key(settings,
                                                                              override, key):
    """The probe of issue 41 (N1): a member's launch whose overrides set veRL's tool loader or
    agent loop to a file uploaded through the UI is a 422 naming the key; nothing is stored."""
    with pytest.raises(InvalidInput) as refused:
        runs.create_run(settings, user(settings, "mallory"), {
            **BASE, "backend": "verl", "verl": {"overrides": [
                "actor_rollout_ref.actor.optim.lr=2e-6", override]}})
    assert refused.value.status_code == 422
    assert str(refused.value).startswith(f"verl: overrides[1]: {key!r} takes one "
                                         "value, not a mapping")
    assert runs.list_runs(settings) == []


def test_a_run_goes_only_to_a_ray_cluster_an_admin_listed(settings):
    """`verl.ray_address` sends the run, and its owner's token, to that cluster: an admin's
    or a member's run may name only one listed in STUDIO_VERL_RAY_ADDRESSES (issue 41 N1)."""
    elsewhere = {**BASE, "backend": "verl", "verl": {"ray_address": "ray.attacker.example:6379"}}
    for actor in (admin(settings), user(settings, "mallory")):
        with pytest.raises(InvalidInput, match=r"^verl.ray_address: 'ray.attacker.example:6379' "
                           r"is not a Ray cluster an admin listed; .* none is listed "
                           r"\(STUDIO_VERL_RAY_ADDRESSES\)"):
            runs.create_run(settings, actor, elsewhere)
    assert runs.list_runs(settings) == []
    listed = settings.model_copy(update={"verl_ray_addresses": "10.0.0.5:6379, head:6379"})
    with pytest.raises(InvalidInput, match=r"must be one of 10.0.0.5:6379, head:6379 "):
        runs.create_run(listed, admin(settings), elsewhere)
    head = parse_run_config({**elsewhere, "verl": {"ray_address": "head:6379"}})
    assert verl_places_problem(listed, head.verl) is None
    assert verl_places_problem(settings, head.verl).startswith("verl.ray_address: 'head:6379'")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://studio:70/", "studio:7860",
                                 "http://user:pw@studio:7860/"])
def test_the_studio_url_is_a_plain_web_address(url):
    """Ray workers send the run owner's token to it: no other scheme, no credentials."""
    with pytest.raises(RunConfigError, match=r"^verl\.studio_url: .*http\(s\) address"):
        parse_run_config({**BASE, "verl": {"studio_url": url}})
    assert parse_run_config({**BASE, "verl": {"studio_url": "https://studio.internal:7860"}})
