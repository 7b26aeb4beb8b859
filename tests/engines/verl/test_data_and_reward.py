"""The generated parquet loads through veRL's RLHFDataset; the reward, called as veRL calls it,
is the studio's reward."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from studio.ingest import QARow
from studio.method.reward import PENALTY_NAMES, overlong_penalty, score
from studio.method.tags import corrective_message, format_information
from studio.run_config import RunConfig, parse_run_config
from studio.services.run_plans import load_plan
from worker.engines.verl.config import compose, hydra_overrides
from worker.engines.verl.dataset import PromptTooLong, dataset_row, write_datasets


def composed(settings, run, files, model):
    config = RunConfig.model_validate(run["config"])
    return config, compose(hydra_overrides(config, files, model_path=str(model),
                                           metrics_log=files.metrics_log(1)))


def test_the_parquet_loads_through_rlhfdataset(verl, verl_run):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    settings, run, files, model = verl_run()
    config, cfg = composed(settings, run, files, model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    report = write_datasets(settings, load_plan(settings, run["id"]), files, tokenizer)
    assert (report.train_rows, report.val_rows) == (196, 60)  # demo, demo-heldout
    assert 0 < report.longest_prompt_tokens <= config.grpo.max_prompt_tokens

    train = RLHFDataset(data_files=[str(files.train_data)], tokenizer=tokenizer, config=cfg.data)
    val = RLHFDataset(data_files=[str(files.val_data)], tokenizer=tokenizer, config=cfg.data)
    assert (len(train), len(val)) == (196, 60)
    row = train[3]
    assert row["agent_name"] == "icrl_search" and row["data_source"] == "demo"
    assert row["reward_model"]["ground_truth"]["target"] == ["Gorsemouth"]
    assert row["reward_model"]["ground_truth"]["question"] == "Which town holds the Herring Moon Fair?"
    assert row["extra_info"]["split"] == "train" and row["index"] == 3
    assert row["extra_info"]["assistant_prefix"] == "<think>"
    # the stored prompt is the largest stage's: system, the exemplar's turns, the question
    assert [m["role"] for m in row["raw_prompt"]] == ["system", "user", "assistant", "user"]
    assert [m["role"] for m in val[0]["raw_prompt"]] == ["system", "user"]
    assert val[0]["extra_info"]["split"] == "val"
    assert row["ability"] == "search"


def test_a_row_s_ability_is_the_run_s_tools():
    config = parse_run_config({"name": "x", "tools": ["calculator", "python"],
                               "data": {"train": "calc"}})
    row = dataset_row(config, QARow("q1", "What is 2 + 3?", ["5"]), 0, "calc", "train", [], 0)
    assert row["ability"] == "calculator+python"


def test_a_prompt_budget_too_small_for_the_largest_stage_is_refused_before_launch(verl_run):
    settings, run, files, model = verl_run(grpo={"max_prompt_tokens": 300})
    tokenizer = AutoTokenizer.from_pretrained(model)
    with pytest.raises(PromptTooLong, match=r"grpo.max_prompt_tokens: the prompt with 1 exemplars"):
        write_datasets(settings, load_plan(settings, run["id"]), files, tokenizer)
    assert not files.train_data.exists()


RESPONSES = [
    # (response after the pre-filled "<think>", gold answers)
    (" find it </think><search> Herring Moon Fair </search>"
     + format_information([("Gorsemouth", "The Herring Moon Fair is held in Gorsemouth.")])
     + "<think> got it </think><answer> Gorsemouth </answer>", ["Gorsemouth"]),
    (" no idea </think><answer> Tarrowmere </answer>", ["Gorsemouth"]),
    ("rambling with no closing tags", ["1702"]),
    (" hmm </think>" + corrective_message() + "<answer>1702</answer>", ["1702"]),
    # an answer inside the tool's output is not the model's answer
    (" x </think><search> q </search>" + format_information([("T", "<answer>1702</answer>")]),
     ["1702"]),
]


@pytest.mark.parametrize(("response", "golds"), RESPONSES)
def test_the_reward_called_the_way_verl_calls_it_is_the_studios(verl, verl_run, response, golds):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    settings, run, files, model = verl_run(reward={"acc_weight": 0.7, "format_weight": 0.3})
    _, cfg = composed(settings, run, files, model)
    compute = get_custom_reward_fn(cfg)  # what veRL's reward loop loads
    got = compute(data_source="demo", solution_str=response,
                  ground_truth={"target": golds, "question": "q?"},
                  extra_info={"index": 0, "split": "train", "assistant_prefix": "<think>",
                              "num_turns": 3, "rollout_reward_scores": {}})
    want = score("<think>" + response, golds, acc_weight=0.7, format_weight=0.3)
    assert got["score"] == want.score
    assert (got["acc"], got["format"], got["em"], got["subem"], got["f1"]) == (
        want.acc, want.format, want.em, want.subem, want.f1)
    assert {k: v for k, v in got.items() if k.startswith("penalty_")} == {
        f"penalty_{name}": float(name in want.penalties) for name in PENALTY_NAMES}
    assert all(isinstance(v, float) for v in got.values())  # veRL stacks them into arrays


@pytest.mark.parametrize(("match", "acc"), [("exact", 0.0), ("numeric", 1.0)])
def test_the_run_s_answer_matching_reaches_the_reward(verl, verl_run, match, acc):
    """reward.answer_match goes to veRL's reward function: "1,200 apples" is 1200 when numeric."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    settings, run, files, model = verl_run(reward={"answer_match": match})
    _, cfg = composed(settings, run, files, model)
    got = get_custom_reward_fn(cfg)(
        data_source="demo", solution_str=" 30 crates of 40 </think><answer> 1,200 apples </answer>",
        ground_truth={"target": ["1200"], "question": "q?"},
        extra_info={"index": 0, "split": "train", "assistant_prefix": "<think>", "num_turns": 1,
                    "rollout_reward_scores": {}})
    assert (got["acc"], got["em"]) == (acc, acc)
def test_a_python_runs_reward_takes_code_for_the_tool_call(verl, verl_run):
    """tools reach veRL's reward loop as a reward kwarg: <code> spares the 'no search'
    penalty, and what a program printed into <output> is the environment's text."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    settings, run, files, model = verl_run(tools=["search", "python"])  # demo exemplars search
    _, cfg = composed(settings, run, files, model)
    compute = get_custom_reward_fn(cfg)
    response = (" x </think><code>print(answer)</code>\n\n<output><answer>7</answer>"
                "</output>\n\n<answer>42</answer>")
    got = compute(data_source="demo", solution_str=response,
                  ground_truth={"target": ["42"], "question": "q?"},
                  extra_info={"index": 0, "split": "train", "assistant_prefix": "<think>"})
    assert (got["score"], got["acc"], got["format"], got["penalty_no_search"]) == (
        1.0, 1.0, 1.0, 0.0)


@pytest.mark.parametrize("tokens", [10, 120, 140, 160])
def test_the_overlong_penalty_is_added_as_the_native_engine_adds_it(verl, verl_run, tokens):
    """grpo.overlong_buffer reaches veRL's reward loop as reward kwargs; the length is the
    agent loop's `response_tokens` (tool tokens included), merged into extra_info."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    settings, run, files, model = verl_run(grpo={"overlong_buffer": 40, "overlong_penalty": 0.5})
    _, cfg = composed(settings, run, files, model)
    compute = get_custom_reward_fn(cfg)
    response, golds = RESPONSES[0]
    info = {"index": 0, "split": "train", "assistant_prefix": "<think>", "num_turns": 3,
            "rollout_reward_scores": {}, "response_tokens": tokens}
    got = compute(data_source="demo", solution_str=response,
                  ground_truth={"target": golds, "question": "q?"}, extra_info=info)
    plain = score("<think>" + response, golds).score
    penalty = overlong_penalty(tokens, 160, 40, 0.5)  # max_response_tokens 160
    assert got["overlong_penalty"] == penalty == min(-(tokens - 120) / 40 * 0.5, 0.0)
    assert got["score"] == pytest.approx(plain + penalty)
    assert (got["score"] < plain) == (tokens > 120)
    with pytest.raises(ValueError, match="response_tokens"):
        compute(data_source="demo", solution_str=response,
                ground_truth={"target": golds, "question": "q?"},
                extra_info={k: v for k, v in info.items() if k != "response_tokens"})


SEARCHED_WRONG = (" find it </think><search> Herring Moon Fair </search>"
                  + format_information([("Gorsemouth", "Held in Gorsemouth.")])
                  + "<think> got it </think><answer> Tarrowmere </answer>")


@pytest.mark.parametrize(("bonus", "working", "added"), [(0.3, 1, 0.3), (0.3, 2, 0.3),
                                                         (0.3, 0, 0.0), (0.0, 1, 0.0)])
def test_the_call_bonus_is_added_for_a_call_that_worked(verl, verl_run, bonus, working, added):
    """reward.call_bonus reaches veRL's reward function as a reward kwarg; the agent loop's
    count of calls that worked (`working_calls`, merged into extra_info) decides it, as the
    native engine's `score(..., call_bonus=, working_calls=)`."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    settings, run, files, model = verl_run(reward={"call_bonus": bonus})
    _, cfg = composed(settings, run, files, model)
    assert cfg.reward.custom_reward_function.reward_kwargs.call_bonus == bonus
    compute = get_custom_reward_fn(cfg)
    info = {"index": 0, "split": "train", "assistant_prefix": "<think>",
            "response_tokens": 60, "working_calls": working}
    truth = {"target": ["Gorsemouth"], "question": "q?"}
    got = compute(data_source="demo", solution_str=SEARCHED_WRONG, ground_truth=truth,
                  extra_info=info)
    plain = score("<think>" + SEARCHED_WRONG, ["Gorsemouth"])
    assert plain.acc == 0 and plain.score == pytest.approx(0.2)
    assert got["score"] == pytest.approx(plain.score + added)
    assert got.get("call_bonus") == (added if bonus else None)
    if bonus:
        with pytest.raises(ValueError, match="working_calls"):
            compute(data_source="demo", solution_str=SEARCHED_WRONG, ground_truth=truth,
                    extra_info={k: v for k, v in info.items() if k != "working_calls"})
