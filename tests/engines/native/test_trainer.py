"""The native trainer end to end on a tiny random model: metrics, rollouts, stages, resume,
and the worker path (spawned process, cancellation, failures with their reason)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from studio import demo
from studio.ingest import QARow
from studio.method.exemplars import parse_jsonl
from studio.method.reward import score
from studio.method.tags import PYTHON_TOOL
from studio.method.tools import CalculatorTool, PythonTool
from studio.run_config import RunConfig
from studio.services import corpora, evaluations, reproduce, run_history, run_plans, runs
from studio.services.demo import load_calc_pack, load_demo_pack, load_math_pack
from studio.services.run_folder import RunFolder
from studio.services.run_recorder import CHECKPOINTING, LOADING, STEP_PHASES, RunRecorder
from studio.storage.db import session_scope
from studio.storage.tables import Run, RunState
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.processes import running_worker, wait_for
from tests.support.tiny_model import build_tiny_model
from tests.support.training import Crash, CrashingTrainer, tiny_config
from worker.engines.native import attention, logprobs
from worker.engines.native.policy_batch import make_batch
from worker.engines.native.trainer import Trainer, build_step_prompts, question_exemplars
from worker.evaluation import run_evaluation


@pytest.fixture
def studio(settings, tmp_path):
    """A migrated studio with the demo pack and a tiny model folder."""
    load_demo_pack(settings, admin(settings), index_now=True)
    return settings, build_tiny_model(tmp_path / "tiny")


def test_a_three_step_run_writes_metrics_rollouts_events_and_a_checkpoint(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model), start=False)
    Trainer(settings, run["id"]).run()

    metrics = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in metrics] == [0, 1, 2]
    assert [m["exemplars"] for m in metrics] == [2, 0, 0]
    for m in metrics:
        for key in ("reward_mean", "reward_std", "acc", "format", "em", "subem", "f1", "kl",
                    "entropy", "pg_loss", "clip_frac", "grad_norm", "lr", "response_length",
                    "masked_fraction", "search_calls", "valid_search_rate", "answer_rate",
                    "penalty_missing_answer", "time_rollout", "time_reference", "time_update"):
            assert key in m, key
        assert 0.0 <= m["masked_fraction"] <= 1.0

    events = runs.run_events(settings, run["id"])
    assert [(e["step"], e["kind"]) for e in events if e["kind"] == "stage_change"] == [
        (0, "stage_change"), (1, "stage_change")]

    rollouts = runs.run_rollouts(settings, run["id"], limit=100)
    assert sorted({r["step"] for r in rollouts}) == [0, 1, 2]
    assert all(len([r for r in rollouts if r["step"] == s]) == 2 for s in (0, 1, 2))
    for r in rollouts:
        sources = {s["source"] for s in r["segments"]}
        assert sources <= {"prompt", "model", "env"}
        assert r["breakdown"]["score"] == r["reward"]

    checkpoint = RunFolder.of(settings, run["id"]).latest_checkpoint()
    assert checkpoint.step == 3
    assert AutoModelForCausalLM.from_pretrained(checkpoint.folder).config.num_hidden_layers == 2
    assert runs.get_run(settings, run["id"])["current_step"] == 3


def test_a_run_with_the_python_tool_trains_end_to_end(settings, tmp_path):
    """tools: [python] on the math pack, with no corpus stored or named: a worked exemplar
    (its <code> and <output>) in the first step's prompts, then none; the prompts name the
    python tool's tags, the rollouts call it through the studio's sandbox, the reward takes
    <code> for the tool call and matches numbers, two steps train, the bundle pins no
    corpus and launches again, and the end-of-run evaluation on math-heldout runs."""
    load_math_pack(settings, admin(settings))
    assert corpora.list_corpora(settings) == []
    config = tiny_config(build_tiny_model(tmp_path / "tiny"), steps=2)
    config.update(tools=["python"], curriculum={"stages": [{"exemplars": 1, "steps": 1},
                                                           {"exemplars": 0, "steps": 1}]},
                  reward={"answer_match": "numeric"})
    config["data"] = {"train": "math", "eval": ["math-heldout"], "exemplars": "math"}
    config["engine"]["evaluate_at_end"] = True
    config["grpo"]["max_prompt_tokens"] = 1900  # the tiny model's 2048 positions
    run = runs.create_run(settings, admin(settings), config, start=False)
    trainer = Trainer(settings, run["id"])
    trainer.run()

    assert trainer.data.index is None
    bundle = reproduce.run_bundle(settings, run["id"])
    assert bundle["data"]["corpus"] is None and bundle["data"]["train"]["name"] == "math"
    again = reproduce.launch_from_bundle(settings, admin(settings), json.dumps(bundle),
                                         start=False)
    assert run_plans.stored_plan(settings, again["id"]).corpus is None
    with session_scope(settings.sqlalchemy_url) as session:  # as its worker records it
        session.get(Run, run["id"]).state = RunState.succeeded
    base, trained = evaluations.evaluate_finished_run(settings, run["id"])
    assert trained["params"]["corpus"] is None and trained["params"]["protocol"]["tools"] == [
        "python"]
    done = run_evaluation(settings, trained["id"])
    assert done["state"] == RunState.succeeded, done["error"]
    assert done["metrics"]["questions"] == 60
    [row] = evaluations.base_vs_trained(settings, run["id"])
    assert row["qa_set"] == "math-heldout" and row["trained"]["id"] == trained["id"]
    assert [type(t) for t in trainer.tools] == [PythonTool]
    assert trainer.tool_specs == (PYTHON_TOOL,)
    first = build_step_prompts(trainer.config, trainer.tokenizer, trainer.data,
                               trainer.data.questions[:1], [1], 0)
    exemplar = trainer.tokenizer.decode(first.ids[0])
    assert "<code>" in exemplar and "<output>" in exemplar and first.cut == 0
    prompts = build_step_prompts(trainer.config, trainer.tokenizer, trainer.data,
                                 trainer.data.questions[:1], [0], 0)
    text = trainer.tokenizer.decode(prompts.ids[0])
    assert "<code> and </code>" in text and "<search>" not in text
    assert trainer.data.questions[0].question.endswith("?")  # a math pack word problem
    [ran] = trainer.tools[0].execute(["print(6*7)"])  # the run's own sandboxed executor
    assert trainer.tools[0].observation(ran) == "\n\n<output>42</output>\n\n"
    metrics = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in metrics] == [0, 1]
    assert all(m["grad_norm"] >= 0 and 0 <= m["masked_fraction"] <= 1 for m in metrics)
    assert RunFolder.of(settings, run["id"]).latest_checkpoint().step == 2
    for r in runs.run_rollouts(settings, run["id"], limit=100):
        response = "".join(s["text"] for s in r["segments"])
        assert r["breakdown"] == score(response, r["golden_answers"], tools=(PYTHON_TOOL,),
                                       answer_match="numeric").to_dict()


@dataclass(frozen=True)
class PhaseLog(RunRecorder):
    """The trainer's recorder, noting each phase as a reader of the run sees it then."""

    seen: list = field(default_factory=list)

    def phase(self, name: str, step: int | None = None) -> None:
        super().phase(name, step)
        phase = runs.get_run(self.settings, self.run_id)["phase"]
        self.seen.append((phase["name"], phase["step"]))


def test_each_step_says_what_it_is_doing_as_it_goes(studio):
    """Rolling out, scoring, updating, then the checkpoint: the Live run page shows them."""
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=2), start=False)
    # as a worker runs it: a run reports a phase only while it is running
    assert runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@test")
    trainer = Trainer(settings, run["id"], attempt=1)
    trainer.recorder = log = PhaseLog(settings, run["id"], attempt=1)
    trainer.run()
    assert log.seen == [(LOADING, None)] + [
        (name, step) for step in (0, 1) for name in (*STEP_PHASES, CHECKPOINTING)]
    assert STEP_PHASES == ("rolling out", "scoring", "updating")


def test_a_run_killed_mid_way_resumes_at_the_right_step(studio):
    settings, model = studio
    config = tiny_config(model, steps=4)
    config["engine"]["checkpoint_every"] = 2
    run = runs.create_run(settings, admin(settings), config, start=False)
    with pytest.raises(Crash):
        CrashingTrainer(settings, run["id"]).run()
    before = {m["step"]: m for m in runs.run_metrics(settings, run["id"])}
    assert sorted(before) == [0, 1, 2]  # step 2 was written, its checkpoint was not

    Trainer(settings, run["id"]).run()
    after = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in after] == [0, 1, 2, 3], "no step lost, none duplicated"
    assert after[2]["reward_mean"] == before[2]["reward_mean"], "step 2 ran again identically"
    assert any("resumed from the checkpoint after step 2" in e["message"]
               for e in runs.run_events(settings, run["id"]))
    assert len([r for r in runs.run_rollouts(settings, run["id"], limit=100)
                if r["step"] == 2]) == 2


LORA = {"rank": 4, "alpha": 8}
# An entropy bonus gives the adapters a gradient even when every group's rewards are equal.
LORA_GRPO = {"entropy_coef": 0.01, "kl_coef": 0.1}


def test_a_lora_run_trains_only_adapters_on_a_plain_model_and_checkpoints_the_adapter(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), {**tiny_config(model, steps=2, **LORA_GRPO), "lora": LORA},
                          start=False)
    trainer = Trainer(settings, run["id"])
    trainer.run()

    assert trainer.reference is None, "no second model: the reference is the base, adapters off"
    assert type(trainer.model) is LlamaForCausalLM
    assert logprobs._plain_head(trainer.model) is not None, "GRPO's fast path applies"
    with attention.grouped_sdpa_enabled(trainer.model, True) as grouped:
        assert grouped, "the rollout's attention switch applies"
    trained = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    adapters = {id(p) for name, p in trainer.model.named_parameters() if "lora_" in name}
    assert trained == adapters and len(adapters) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    base = AutoModelForCausalLM.from_pretrained(model).state_dict()
    weights = trainer.model.state_dict()
    assert torch.equal(weights["model.layers.0.self_attn.q_proj.base_layer.weight"],
                       base["model.layers.0.self_attn.q_proj.weight"]), "the base stays frozen"
    assert weights["model.layers.0.self_attn.q_proj.lora_B.default.weight"].abs().sum() > 0

    metrics = runs.run_metrics(settings, run["id"])
    assert metrics[0]["kl"] == 0.0, "B starts at 0: the policy is its reference"
    assert metrics[1]["kl"] > 0.0, "after an update the adapters move the policy off its base"
    checkpoint = RunFolder.of(settings, run["id"]).latest_checkpoint()
    files = {p.name for p in checkpoint.folder.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "trainer_state.pt",
            "tokenizer.json"} <= files
    assert "model.safetensors" not in files and "config.json" not in files


def test_a_lora_run_in_bf16_autocast_trains_float32_adapters_and_says_so(studio):
    """engine.dtype bfloat16-autocast, as the quick start would run it: the adapters train in
    float32, the frozen base's projections are kept in bfloat16 (what autocast would cast
    them to), and the bundle names the precision."""
    settings, model = studio
    config = {**tiny_config(model, steps=2, **LORA_GRPO), "lora": LORA,
              "engine": {"dtype": "bfloat16-autocast"}}
    run = runs.create_run(settings, admin(settings), config, start=False)
    trainer = Trainer(settings, run["id"])
    trainer.run()

    assert runs.get_run(settings, run["id"])["current_step"] == 2
    weights = dict(trainer.model.named_parameters())
    assert {p.dtype for p in weights.values() if p.requires_grad} == {torch.float32}
    assert weights["model.layers.0.mlp.up_proj.base_layer.weight"].dtype == torch.bfloat16
    assert weights["model.embed_tokens.weight"].dtype == torch.float32
    adapter = trainer.model.state_dict()["model.layers.0.self_attn.q_proj.lora_B.default.weight"]
    assert adapter.abs().sum() > 0, "the adapters trained"
    device = reproduce.run_bundle(settings, run["id"])["device"]
    assert (device["kind"], device["dtype"]) == ("cpu", "bfloat16-autocast")


def test_a_lora_run_on_queries_and_values_only_trains_them(studio):
    """The classic LoRA targets: layers whose keys come from a frozen k_proj still train."""
    settings, model = studio
    lora = {**LORA, "target_modules": ["q_proj", "v_proj"]}
    run = runs.create_run(settings, admin(settings), {**tiny_config(model, steps=1, **LORA_GRPO), "lora": lora},
                          start=False)
    trainer = Trainer(settings, run["id"])
    trainer.run()
    moved = {name for name, p in trainer.model.named_parameters()
             if "lora_B" in name and p.abs().sum() > 0}
    assert {name.split(".")[4] for name in moved} == {"q_proj", "v_proj"}
    assert {name.split(".")[2] for name in moved} == {"0", "1"}  # both layers


def test_a_lora_run_killed_mid_way_resumes_from_its_adapter_exactly(studio):
    settings, model = studio
    config = {**tiny_config(model, steps=4, **LORA_GRPO), "lora": LORA}
    config["engine"]["checkpoint_every"] = 2
    run = runs.create_run(settings, admin(settings), config, start=False)
    with pytest.raises(Crash):
        CrashingTrainer(settings, run["id"]).run()
    before = {m["step"]: m for m in runs.run_metrics(settings, run["id"])}

    Trainer(settings, run["id"]).run()
    after = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in after] == [0, 1, 2, 3]
    assert before[1]["kl"] > 0.0, "the adapters had moved before the checkpoint"
    def measured(row):  # every figure of the step but its row id and its timings
        return {k: v for k, v in row.items() if k != "id" and not k.startswith("time_")}

    assert measured(after[2]) == measured(before[2]), "step 2 ran again identically"


# The GRPO family's options, away from method.md's defaults; an entropy bonus gives a
# gradient even when every group's rewards are equal.
GRPO_OPTIONS = {
    "dapo-like": {"loss_agg_mode": "seq-mean-token-mean", "clip_high": 0.28, "dual_clip": 3.0,
                  "kl_estimator": "k2", "ppo_epochs": 2, "entropy_coef": 0.01},
    "gspo": {"ratio_level": "sequence", "clip": 3e-4, "loss_agg_mode": "seq-mean-token-sum-norm",
             "kl_estimator": "k1", "entropy_coef": 0.01},
}


@pytest.mark.parametrize("options", GRPO_OPTIONS.values(), ids=GRPO_OPTIONS)
def test_a_run_with_the_grpo_familys_options_trains(studio, options):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=2, **options),
                          start=False)
    trainer = Trainer(settings, run["id"])
    trainer.run()

    assert {key: getattr(trainer.grpo, key) for key in options} == options
    assert trainer.grpo.norm_length == 48  # tiny_config's max_response_tokens
    metrics = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in metrics] == [0, 1]
    for m in metrics:
        assert m["optimizer_steps"] == options.get("ppo_epochs", 1)
        for key in ("loss", "pg_loss", "kl", "clip_frac", "clip_frac_high", "dual_clip_frac",
                    "ratio_mean", "grad_norm"):
            assert m[key] is not None, key
        assert m["grad_norm"] > 0
    moved = trainer.model.state_dict()
    start = AutoModelForCausalLM.from_pretrained(model).state_dict()
    assert any(not torch.equal(moved[name], start[name]) for name in start)

@pytest.mark.slow
def test_the_worker_trains_in_a_spawned_process_and_records_failures(studio, tmp_path):
    settings, model = studio
    with running_worker(settings.resolved_data_dir, tmp_path / "worker.log"):
        good = runs.create_run(settings, admin(settings), tiny_config(model, steps=2))
        broken = shutil.copytree(model, tmp_path / "broken-weights")
        (broken / "model.safetensors").write_bytes(b"not weights")
        bad = runs.create_run(settings, admin(settings), {**tiny_config(model, steps=2), "name": "bad",
                                         "model": str(broken)})
        done = wait_for(lambda: all(
            runs.get_run(settings, r["id"])["state"] in ("succeeded", "failed")
            for r in (good, bad)), 300, "both runs to finish")
        assert done
    good, bad = runs.get_run(settings, good["id"]), runs.get_run(settings, bad["id"])
    assert good["state"] == RunState.succeeded and good["current_step"] == 2
    assert bad["state"] == RunState.failed
    assert bad["error"].startswith("ModelNotAvailable: Cannot load") and "broken-weights" in bad["error"]


@pytest.mark.slow
def test_cancel_stops_the_training_process(studio, tmp_path):
    settings, model = studio
    with running_worker(settings.resolved_data_dir, tmp_path / "worker.log"):
        run = runs.create_run(settings, admin(settings), tiny_config(model, steps=500))
        wait_for(lambda: runs.get_run(settings, run["id"])["current_step"] >= 1, 120,
                 "the first step")
        pid = wait_for(lambda: _pid(settings, run["id"]), 30, "the training pid")
        runs.cancel_run(settings, admin(settings), run["id"])
        wait_for(lambda: _pid(settings, run["id"]) is None, 60, "the process to be stopped")
    final = runs.get_run(settings, run["id"])
    assert final["state"] == RunState.cancelled and final["current_step"] < 500
    from tests.support.processes import pid_alive

    assert not pid_alive(pid)


def _pid(settings, run_id):
    from studio.storage.db import session_scope
    from studio.storage.tables import Run

    with session_scope(settings.sqlalchemy_url) as session:
        return session.get(Run, run_id).pid


class ScoringTrainer(Trainer):
    """Also scores its logged rollouts the plainest way, a full forward pass each with the
    weights that sampled them, before the trainer's own token arrays and the update."""

    def _token_arrays(self, batch, rollouts, logged, sampling):
        self.expected = []
        with torch.no_grad():
            for i, rollout in enumerate(rollouts[:logged]):
                start, length = int(batch.prompt_lengths[i]), len(rollout.response_ids)
                ids = batch.input_ids[i, :start + length].unsqueeze(0)
                logits = self.model(input_ids=ids).logits[0, start - 1:-1].double()
                logp = torch.log_softmax(logits, dim=-1)
                self.expected.append((
                    logp.gather(1, ids[0, start:].unsqueeze(1)).squeeze(1),
                    -(logp.exp() * logp).sum(dim=-1), rollout, float(batch.advantages[i])))
        return super()._token_arrays(batch, rollouts, logged, sampling)


@pytest.mark.parametrize("options", [{}, {"kl_in": "reward", "kl_coef": 0.1, "ppo_epochs": 2}],
                         ids=["logged-rows-only", "one-pass-for-the-whole-batch"])
def test_logged_rollouts_keep_exact_token_logprobs_entropies_and_advantages(studio, options):
    """The stored arrays, read back through the service the API serves, against a plain
    recomputation: equal within float16's rounding (2**-11 relative, plus 1e-4 for the
    float32 sums of the engine's shared-prefix pass). With the KL in the reward and two
    epochs the sampling weights score the whole batch once, and the arrays come from it."""
    settings, model = studio
    # room for the corrective message (88 tokens here) after a rambling first turn
    config = tiny_config(model, steps=1, max_response_tokens=128, **options)
    run = runs.create_run(settings, admin(settings), config, start=False)
    trainer = ScoringTrainer(settings, run["id"])
    trainer.setup()
    trainer.step(0)
    stored = sorted(runs.run_rollouts(settings, run["id"]), key=lambda r: r["sample"])
    assert len(stored) == len(trainer.expected) == 2

    for row, (logp, entropy, rollout, advantage) in zip(stored, trainer.expected, strict=True):
        view = run_history.rollout_tokens(settings, run["id"], row["id"])
        assert view["recorded"] and view["tokens"] == len(rollout.response_ids)
        assert view["bytes"] == 5 + 9 * view["tokens"]
        assert view["mask"] == rollout.response_mask
        assert "".join(view["text"]) == rollout.response_text
        trained = [i for i, m in enumerate(view["mask"]) if m]
        assert trained and len(trained) < len(view["mask"]), "model and environment tokens"
        for i in trained:
            for got, want in ((view["logprob"][i], logp[i]), (view["entropy"][i], entropy[i])):
                assert abs(got - float(want)) <= 2 ** -11 * abs(float(want)) + 1e-4, (i, got)
            assert view["advantage"][i] == pytest.approx(advantage, rel=2 ** -11, abs=1e-6)
        masked = [i for i, m in enumerate(view["mask"]) if not m]
        assert {view["logprob"][i] for i in masked} == {None}
        assert {view["advantage"][i] for i in masked} == {0.0}
        assert row["advantage"] == pytest.approx(advantage)


def _groups(rollouts):
    """The logged rollouts by (step, group), each in sample order."""
    out = {}
    for r in sorted(rollouts, key=lambda r: (r["step"], r["group"], r["sample"])):
        out.setdefault((r["step"], r["group"]), []).append(r)
    return out


def test_dr_grpo_with_overlong_shaping_and_the_kl_in_the_reward_trains(studio):
    """norm_adv_by_std off, DAPO's overlong penalty and kl_in: reward: two steps train, the
    new figures are logged, and each logged advantage is its shaped reward (score +
    overlong penalty - KL penalty) minus its group's mean, not divided by the spread."""
    settings, model = studio
    config = tiny_config(model, steps=2, norm_adv_by_std=False, overlong_buffer=40,
                         overlong_penalty=0.5, kl_in="reward", kl_coef=0.1,
                         kl_estimator="k2")
    run = runs.create_run(settings, admin(settings), config, start=False)
    Trainer(settings, run["id"]).run()

    metrics = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in metrics] == [0, 1]
    for m in metrics:
        assert -0.5 <= m["overlong_penalty"] <= 0.0 and m["kl_reward_penalty"] >= 0.0
        assert m["kl"] == 0.0, "the KL is in the reward, not in the loss"
    assert metrics[0]["kl_reward_penalty"] == 0.0, "step 0 samples with the reference itself"
    assert any(m["overlong_penalty"] < 0 for m in metrics), "48-token limit, 40-token buffer"

    groups = _groups(runs.run_rollouts(settings, run["id"], limit=100))
    assert sorted(groups) == [(0, 0), (1, 0)]
    for group in groups.values():
        shaped = [r["reward"] + r["breakdown"]["overlong_penalty"] - r["breakdown"]["kl_penalty"]
                  for r in group]
        mean = sum(shaped) / len(shaped)
        assert [r["advantage"] for r in group] == pytest.approx([s - mean for s in shaped],
                                                                abs=1e-6)
        for r in group:
            length = sum(s["tokens"] for s in r["segments"] if s["source"] != "prompt")
            assert r["breakdown"]["overlong_penalty"] == pytest.approx(
                min(-(length - 8) / 40 * 0.5, 0.0))


def test_dynamic_sampling_resamples_groups_that_teach_nothing(studio):
    """Up to three rounds of questions a step; the step trains on the groups whose rewards
    differ (with the overlong penalty, answers of different lengths differ), at most
    batch_size of them, and logs the rounds and groups. The tiny model's step 0 keeps one
    group in three rounds, its step 1 none (it then trains on its first round)."""
    settings, model = studio
    config = tiny_config(model, steps=2, dynamic_sampling=True, dynamic_sampling_max_batches=3,
                         overlong_buffer=40)
    run = runs.create_run(settings, admin(settings), config, start=False)
    Trainer(settings, run["id"]).run()

    metrics = runs.run_metrics(settings, run["id"])
    assert [m["step"] for m in metrics] == [0, 1]
    for m in metrics:
        assert 1 <= m["sampling_rounds"] <= 3
        assert m["groups_sampled"] == 2 * m["sampling_rounds"]
        assert 0 <= m["groups_kept"] <= 2
        if m["sampling_rounds"] < 3:
            assert m["groups_kept"] == 2, "it stops sampling once the batch is full"
        # no group with a spread in three rounds: it trains on the first round's
        assert m["num_sequences"] == 2 * (m["groups_kept"] or 2)
    assert any(m["groups_kept"] for m in metrics)
    for (step, _), group in _groups(runs.run_rollouts(settings, run["id"], limit=100)).items():
        shaped = {r["reward"] + r["breakdown"]["overlong_penalty"] for r in group}
        assert (len(shaped) > 1) == bool(metrics[step]["groups_kept"]), "kept groups first"


def test_a_calculator_run_with_a_soft_curriculum_trains(settings, tmp_path):
    """tools: [calculator] on the arithmetic pack (no corpus, no sandbox) with a soft
    curriculum: in the steps with exemplars each question shows them or none, as its seeded
    draw says, the rollout rows record which, and the step logs the zero-shot share and those
    questions' own figures; the last stage shows none."""
    load_calc_pack(settings, admin(settings))
    config = tiny_config(build_tiny_model(tmp_path / "tiny"), steps=3, batch_size=4)
    config.update(tools=["calculator"], reward={"answer_match": "numeric"},
                  curriculum={"stages": [{"exemplars": 2, "steps": 2},
                                         {"exemplars": 0, "steps": 1}], "soft": {"start": 0.5}})
    config["data"] = {"train": "calc", "exemplars": "calc"}
    config["engine"]["log_groups_per_step"] = 4
    run = runs.create_run(settings, admin(settings), config, start=False)
    trainer = Trainer(settings, run["id"])
    trainer.run()

    assert [type(t) for t in trainer.tools] == [CalculatorTool]
    drawn = {step: question_exemplars(trainer.config, trainer.curriculum, step, k, step, 4)
             for step, k in ((0, 2), (1, 2), (2, 0))}
    assert drawn[2] == [0] * 4 and set(drawn[0] + drawn[1]) == {0, 2}, drawn
    metrics = runs.run_metrics(settings, run["id"])
    assert [m["exemplars"] for m in metrics] == [2, 2, 0]
    for m in metrics[:2]:
        assert m["zero_shot_share"] == drawn[m["step"]].count(0) / 4
        assert ("zero_shot_acc" in m) == (0 in drawn[m["step"]])
    assert "zero_shot_share" not in metrics[2]
    rows = runs.run_rollouts(settings, run["id"], limit=100)
    for step, ks in drawn.items():
        logged = sorted((r["group"], r["exemplars"]) for r in rows if r["step"] == step)
        assert logged == sorted((g, k) for g, k in enumerate(ks) for _ in range(2))


@pytest.mark.parametrize("draw", ["per-question", "per-step"])
def test_a_per_step_draw_shows_every_question_one_sample_whose_block_runs_once(tmp_path, draw):
    """`prompt.exemplar_draw`: per-question samples each question its own k, per-step one k
    for the whole step (each question still sees k; the next step draws again). The per-step
    prompts then share the exemplar block, which the log-prob passes run once
    (`logprobs.step_prefix`) with the log-probs of running it in every row (float32)."""
    folder = build_tiny_model(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    config = RunConfig(name="draw", data={"corpus": "demo", "train": "demo"},
                       prompt={"exemplar_selection": "sample", "exemplar_draw": draw}, seed=5)
    data = SimpleNamespace(exemplars=parse_jsonl(demo.EXEMPLARS.read_text()))
    rows = [QARow(str(i), q, ["x"]) for i, q in enumerate(
        ["Who painted the ceiling?", "Where is the tower?", "When did it open?",
         "Which river is longest?"])]
    steps = [build_step_prompts(config, tokenizer, data, rows, [2] * len(rows), step)
             for step in (0, 1, 2)]
    for prompts in steps:
        assert all(len(shown) == 2 for shown in prompts.shown)
        assert (len(set(prompts.shown)) == 1) == (draw == "per-step"), prompts.shown
    if draw == "per-step":
        assert len({prompts.shown[0] for prompts in steps}) > 1, "a new draw each step"
    prompts = steps[0]
    gen = torch.Generator().manual_seed(0)
    responses = [torch.randint(3, 400, (5 + i % 3,), generator=gen).tolist()
                 for i in range(2 * len(rows))]
    batch = make_batch([ids for ids in prompts.ids for _ in range(2)], responses,
                       [[1] * len(r) for r in responses], [0.0] * len(responses), 2)
    prefix = logprobs.step_prefix(model, batch, torch.arange(len(batch)), grad=False)
    zero_shot = build_step_prompts(config, tokenizer, data, rows[:1], [0], 0).ids[0]
    block = len(prompts.ids[0]) - len(zero_shot)  # the exemplar turns' tokens
    if draw == "per-step":
        assert prefix is not None and prefix.length > block
    else:
        assert prefix is None or prefix.length < block
    shared, _ = logprobs.token_logprobs(model, batch, 4)
    unshared, _ = logprobs.token_logprobs(model, batch, 4, share_prompt=False)
    assert (shared != 0).any()
    torch.testing.assert_close(shared, unshared, atol=1e-5, rtol=1e-5)
