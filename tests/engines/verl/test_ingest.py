"""veRL's file log and rollout dumps, written by veRL's own writers, become the rows a native
run writes: the same metric names, the same rollout segments, stage events, advantages."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from studio.method.grpo import group_advantages, zero_spread_share
from studio.method.reward import score
from studio.method.rollouts import Rollout, Segment, rollout_metrics, rollout_segments
from studio.method.tags import PYTHON_TOOL, corrective_message, format_information
from studio.run_config import RunConfig
from studio.services import corpora, runs
from studio.services.run_recorder import RunRecorder
from tests.support.actors import admin
from worker.engines.native.trainer import Trainer
from worker.engines.verl.ingest import METRIC_NAMES, Ingestor, rebuild_rollout

GROUPS = [("Which town holds the Herring Moon Fair?", ["Gorsemouth"]),
          ("In what year was Fennick Light first lit?", ["1702"])]
VERL_METRICS = {  # one step of veRL's metrics (names from veRL's source), values made up
    "critic/score/mean": 0.41, "critic/score/max": 1.0, "critic/score/min": 0.0,
    "critic/advantages/mean": 0.0, "response_length/mean": 57.5,
    "actor/pg_loss": -0.012, "actor/kl_loss": 0.0004, "actor/entropy": 2.3,
    "actor/pg_clipfrac": 0.01, "actor/ppo_kl": 0.0001, "actor/grad_norm": 0.8,
    "actor/lr": 1e-6, "timing_s/gen": 12.0, "timing_s/ref": 1.5, "timing_s/update_actor": 3.0,
    "timing_s/step": 17.0, "perf/throughput": 900.0, "training/global_step": 1,
    "num_turns/mean": 3.0, "prompt_length/mean": 700.0,
}


def encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def native_rollout(tokenizer, parts):
    """A response as the native engine holds it: (source, text) segments, ids as encoded."""
    segments = [Segment(source, encode(tokenizer, text), text) for source, text in parts]
    calls = sum(1 for source, text in parts if source == "env" and text != corrective_message())
    return Rollout(prompt_ids=[], segments=segments, stop_reason="answer", num_tool_calls=calls)


def responses(tokenizer, passages, step):
    """Two questions x two samples of varied shape; differ by step so rewards move."""
    info = format_information(passages)
    search = [("model", " look </think><search> Herring Moon Fair </search>"), ("env", info),
              ("model", "<think> found it </think><answer> Gorsemouth </answer>")]
    corrected = [("model", " hmm </think>"), ("env", corrective_message()),
                 ("model", f"<answer> {'Dunnerfold' if step % 2 else 'Gorsemouth'} </answer>")]
    direct = [("model", " easy </think><answer> 1702 </answer>")]
    rambling = [("model", "no tags at all, step " + str(step))]
    return [native_rollout(tokenizer, p) for p in (search, corrected, direct, rambling)]


def write_step(files, logger, tokenizer, config, step, rollouts, *, dump=True, log=True):
    """veRL's own writers: the trainer's rollout dump and the file logger."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    prefix = config.prompt.assistant_prefix
    golds = [GROUPS[i // 2] for i in range(4)]
    scores = [score(prefix + r.response_text, g).score for r, (_, g) in
              zip(rollouts, golds, strict=True)]
    if dump:
        PPOTrainer._write_generations(
            inputs=[f"system ... {q}\nassistant\n{prefix}" for q, _ in golds],
            outputs=[r.response_text for r in rollouts],
            gts=[{"target": g, "question": q} for q, g in golds], scores=scores,
            reward_extra_infos_dict={"uid": [f"p{i // 2}-{step}_{i % 2}_0" for i in range(4)]},
            dump_path=str(files.rollouts), global_steps=step)
    if log:
        logger.log(data={**VERL_METRICS, "training/global_step": step}, step=step)
    return scores


@pytest.fixture
def native_metric_names(studio):
    """The metric names of a real one-step native run (the rows to match)."""
    settings, model = studio
    run = runs.create_run(settings, admin(settings), {
        "name": "native", "model": str(model),
        "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"},
        "curriculum": {"stages": [{"exemplars": 0, "steps": 1}]},
        "grpo": {"batch_size": 1, "group_size": 2, "max_turns": 1, "max_turn_tokens": 8,
                 "max_response_tokens": 24, "max_obs_tokens": 16, "micro_batch_size": 2}},
        start=False)
    Trainer(settings, run["id"]).run()
    [row] = runs.run_metrics(settings, run["id"])
    return set(row) - {"step"}


def test_verl_files_become_the_rows_a_native_run_writes(verl, verl_run, native_metric_names,
                                                       monkeypatch):
    from verl.utils.tracking import FileLogger

    settings, run, files, model = verl_run()
    config = RunConfig.model_validate(run["config"])
    tokenizer = AutoTokenizer.from_pretrained(model)
    corpus_id = corpora.find_corpus(settings, "demo")["id"]
    passages = [(h["title"], h["text"]) for h in
                corpora.search(settings, corpus_id, "Herring Moon Fair", 3)["hits"]]
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(files.metrics_log(1)))
    files.attempt_dir(1).mkdir(parents=True)
    logger = FileLogger("icrl-studio", f"run-{run['id']}")
    ingest = Ingestor(settings, run["id"], config, files, tokenizer, files.metrics_log(1))

    expected = {}
    for step in (1, 2, 3, 4):
        rollouts = responses(tokenizer, passages, step)
        # the log line first, the dump later (veRL writes dumps from a background thread)
        write_step(files, logger, tokenizer, config, step, rollouts, dump=False)
        assert ingest.poll() == 0, "a step waits for its rollout dump"
        scores = write_step(files, logger, tokenizer, config, step, rollouts, log=False)
        assert ingest.poll() == 1
        expected[step - 1] = (rollouts, scores)
    logger.finish()

    rows = runs.run_metrics(settings, run["id"])
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert [r["exemplars"] for r in rows] == [1, 0, 0, 0] and [r["stage"] for r in rows] == [
        0, 1, 1, 1]
    prefix = config.prompt.assistant_prefix
    for row in rows:
        rollouts, scores = expected[row["step"]]
        rewards = [score(prefix + r.response_text, GROUPS[i // 2][1]) for i, r in
                   enumerate(rollouts)]
        native = rollout_metrics(rollouts, rewards)
        names = set(row) - {"step"}
        assert names <= native_metric_names, names - native_metric_names
        for name in native:  # what the responses say, computed as the native engine does
            if name not in ("reward_mean", "reward_max", "reward_min", "response_length"):
                assert row[name] == pytest.approx(native[name]), name
        for verl_name, name in METRIC_NAMES.items():  # what veRL measured, renamed
            assert row[name] == VERL_METRICS[verl_name], name
        assert row["search_calls"] == 0.25 and row["valid_search_rate"] == 0.25
        assert row["zero_spread_groups"] == zero_spread_share(scores, [0, 0, 1, 1])

    kept = runs.run_rollouts(settings, run["id"], limit=100)
    assert len(kept) == 8  # log_groups_per_step = 1 group of 2 per step
    for r in kept:
        rollouts, scores = expected[r["step"]]
        i = r["sample"]  # the first group: responses 0 and 1
        assert r["group"] == 0 and r["question"] == GROUPS[0][0]
        assert r["golden_answers"] == GROUPS[0][1]
        stored = [{k: v for k, v in seg.items() if k != "trained"} for seg in r["segments"]]
        assert stored == rollout_segments(rollouts[i], prefix)  # the view adds `trained`
        assert r["reward"] == scores[i] == r["breakdown"]["score"]
        assert r["advantage"] == pytest.approx(group_advantages(scores, [0, 0, 1, 1])[i])
        assert r["exemplars"] == (1 if r["step"] == 0 else 0)
    masked = [s for s in kept[0]["segments"] if s["source"] == "env"]
    assert masked and all(s["parts"][0]["kind"] == "information" for s in masked)

    events = runs.run_events(settings, run["id"])
    assert [(e["step"], e["message"]) for e in events if e["kind"] == "stage_change"] == [
        (0, "stage 1: 1 exemplars"), (1, "stage 2: 1 -> 0 exemplars")]
    assert runs.get_run(settings, run["id"])["current_step"] == 4

    # a restart after veRL's checkpoint at step 2: later steps are forgotten, ingest goes on
    RunRecorder(settings, run["id"]).forget_steps_from(2)
    again = Ingestor(settings, run["id"], config, files, tokenizer, files.metrics_log(2))
    assert again.next_step == 2 and again.watch.history == [0.25, 0.25]
    assert [m["search_calls"] for m in again.sentinel.history] == [0.25, 0.25]


def test_a_step_whose_dump_stays_short_is_written_once_the_process_ends(verl, verl_run,
                                                                      monkeypatch):
    from verl.utils.tracking import FileLogger

    settings, run, files, model = verl_run()
    config = RunConfig.model_validate(run["config"])
    tokenizer = AutoTokenizer.from_pretrained(model)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(files.metrics_log(1)))
    files.attempt_dir(1).mkdir(parents=True)
    logger = FileLogger("icrl-studio", "short")
    rollouts = responses(tokenizer, [("T", "text")], 1)[:3]  # 3 of the 4 responses
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    PPOTrainer._write_generations(
        inputs=["q"] * 3, outputs=[r.response_text for r in rollouts],
        gts=[{"target": ["x"], "question": "q?"}] * 3, scores=[0.0] * 3,
        reward_extra_infos_dict={"uid": ["a_0_0", "a_1_0", "b_0_0"]},
        dump_path=str(files.rollouts), global_steps=1)
    logger.log(data=VERL_METRICS, step=1)
    logger.finish()
    ingest = Ingestor(settings, run["id"], config, files, tokenizer, files.metrics_log(1))
    assert ingest.poll() == 0
    assert ingest.poll(finished=True) == 1
    assert len(runs.run_rollouts(settings, run["id"])) == 2


def test_a_python_runs_dumped_response_splits_at_its_output_blocks(studio):
    """A dumped response of a python run: `<output>` blocks (and the corrective message in
    them) are the environment's, a program's output is a tool call, a correction is not."""
    _, model = studio
    tokenizer = AutoTokenizer.from_pretrained(model)
    parts = [("model", "<think>x</think><code>print(6*7)</code>"),
             ("env", "\n\n<output>42</output>\n\n"), ("model", "no tags here"),
             ("env", corrective_message(PYTHON_TOOL)), ("model", "<answer> 42 </answer>")]
    text = "".join(t for _, t in parts)
    rebuilt = rebuild_rollout(text, tokenizer, (PYTHON_TOOL,))
    assert [(s.source, s.text) for s in rebuilt.segments] == parts
    assert (rebuilt.num_tool_calls, rebuilt.stop_reason) == (1, "answer")
    assert rebuild_rollout(text, tokenizer).num_tool_calls == 0  # search's tags: no blocks


def ingest_one_step(settings, run, config, files, tokenizer, rollouts, golds, rewarded,
                    monkeypatch):
    """Step 1 of `run` as veRL writes it (the responses dumped with every key the reward
    function gave back, one metrics line), ingested."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.tracking import FileLogger

    extra = {key: [out[key] for out in rewarded] for key in rewarded[0] if key != "score"}
    PPOTrainer._write_generations(
        inputs=["q"] * 4, outputs=[r.response_text for r in rollouts],
        gts=[{"target": g, "question": q} for q, g in golds],
        scores=[out["score"] for out in rewarded],
        reward_extra_infos_dict={**extra, "uid": [f"p{i // 2}_{i % 2}_0" for i in range(4)]},
        dump_path=str(files.rollouts), global_steps=1)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(files.metrics_log(1)))
    files.attempt_dir(1).mkdir(parents=True)
    logger = FileLogger("icrl-studio", "step")
    logger.log(data=VERL_METRICS, step=1)
    logger.finish()
    assert Ingestor(settings, run["id"], config, files, tokenizer,
                    files.metrics_log(1)).poll() == 1


def test_a_call_bonus_runs_rows_carry_the_bonus_the_reward_paid(verl, verl_run, monkeypatch):
    """`reward.call_bonus` on veRL: the reward function pays it for a response whose tool
    call worked (the agent loop's `working_calls`); the ingest's reward breakdown of each
    rollout row shows it, and the row's reward is the one veRL trained on."""
    from worker.engines.verl.reward import compute_score

    settings, run, files, model = verl_run(reward={"call_bonus": 0.1})
    config = RunConfig.model_validate(run["config"])
    tokenizer = AutoTokenizer.from_pretrained(model)
    rollouts = responses(tokenizer, [("Herring Moon Fair", "held in Gorsemouth")], 1)
    golds = [GROUPS[i // 2] for i in range(4)]
    worked = [1, 0, 0, 0]  # the first response's search came back
    rewarded = [compute_score("demo", r.response_text, {"target": g, "question": q},
                              {"assistant_prefix": config.prompt.assistant_prefix,
                               "working_calls": w},
                              tools=config.tools, call_bonus=config.reward.call_bonus)
                for r, (q, g), w in zip(rollouts, golds, worked, strict=True)]
    ingest_one_step(settings, run, config, files, tokenizer, rollouts, golds, rewarded,
                    monkeypatch)

    kept = {r["sample"] + 2 * r["group"]: r for r in runs.run_rollouts(settings, run["id"],
                                                                        limit=10)}
    assert kept, "no rollout rows kept"
    for index, row in kept.items():
        assert row["reward"] == pytest.approx(rewarded[index]["score"])
        assert row["breakdown"].get("call_bonus", 0.0) == (0.1 if worked[index] else 0.0)


def test_a_mixed_runs_dump_gives_the_halves_and_the_hints(verl, verl_run, monkeypatch):
    """A mixed-guidance run: the reward function's `guided` and `hint_exemplar_*` keys,
    dumped by veRL beside each response, become the native engine's per-step halves and
    each rollout row's `hint_exemplars`."""
    from worker.engines.verl.config import hint_slots
    from worker.engines.verl.reward import compute_score

    settings, run, files, model = verl_run(guidance={"mode": "mixed", "share": 0.5})
    config = RunConfig.model_validate(run["config"])
    assert hint_slots(config) == 1
    tokenizer = AutoTokenizer.from_pretrained(model)
    rollouts = responses(tokenizer, [("Herring Moon Fair", "held in Gorsemouth")], 1)
    hints = [[0], [], [0], []]  # each group's first sample guided (guided_count(0.5, 2) == 1)
    golds = [GROUPS[i // 2] for i in range(4)]
    rewarded = [compute_score("demo", r.response_text, {"target": g, "question": q},
                              {"assistant_prefix": config.prompt.assistant_prefix,
                               "guided": int(bool(h)), "hint_exemplars": h},
                              tools=config.tools, hint_slots=hint_slots(config))
                for r, (q, g), h in zip(rollouts, golds, hints, strict=True)]
    ingest_one_step(settings, run, config, files, tokenizer, rollouts, golds, rewarded,
                    monkeypatch)

    [row] = runs.run_metrics(settings, run["id"])
    prefix = config.prompt.assistant_prefix
    rewards = [score(prefix + r.response_text, g) for r, (_, g) in zip(rollouts, golds, strict=True)]
    for part, picked in (("guided", [0, 2]), ("zero_shot", [1, 3])):
        alone = rollout_metrics([rollouts[i] for i in picked], [rewards[i] for i in picked])
        for name in ("acc", "valid_search_rate", "answer_rate", "reward_mean"):
            assert row[f"{part}_{name}"] == pytest.approx(alone[name]), (part, name)
    assert row["guided_share"] == 0.5
    assert row["guided_valid_search_rate"] != row["zero_shot_valid_search_rate"]
    kept = runs.run_rollouts(settings, run["id"], limit=10)
    assert sorted((r["sample"], r["hint_exemplars"]) for r in kept) == [(0, [0]), (1, None)]
