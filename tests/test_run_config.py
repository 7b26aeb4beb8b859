"""The run config: the issue's YAML shape, method.md's defaults, errors that name the field."""

from __future__ import annotations

import pytest

from studio.run_config import RunConfigError, parse_run_config

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


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "x"}, "data: Field required"),
    ({"name": "x", "data": {"corpus": "c", "train": "t"}, "grpo": {"lr": -1}},
     "grpo.lr: Input should be greater than 0"),
    ({"name": "x", "data": {"corpus": "c", "train": "t"}, "grpo": {"learning_rate": 1}},
     "grpo.learning_rate: Extra inputs are not permitted"),
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
