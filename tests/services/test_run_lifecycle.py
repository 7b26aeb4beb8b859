"""The run lifecycle through the services and the API: heartbeats that turn a dead worker's
run interrupted, attempts that fence every state change, resume, queue positions, delete,
and the checks (with a prompt-length estimate per stage) that run before anything is queued.
Real SQLite and PostgreSQL and the embedded broker; the process tests start real workers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlmodel import select

from frontend.server import create_app
from studio.method.prompt import common_prefix_length
from studio.sandbox import bwrap
from studio.services import (
    evaluation_files,
    evaluations,
    exemplar_sets,
    exports,
    run_plans,
    run_validation,
    runs,
)
from studio.services.demo import load_calc_pack, load_math_pack
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.services.run_folder import RunFolder
from studio.storage import db
from studio.storage.tables import (
    Evaluation,
    Export,
    Rollout,
    Run,
    RunEvent,
    RunMetric,
    RunState,
    utcnow,
)
from tests.support.actors import admin
from tests.support.api_client import admin_headers
from tests.support.jobs import job_key
from tests.support.training import Crash, CrashingTrainer, tiny_config
from worker.child_process import DeviceSlots
from worker.engines.native.trainer import Trainer, build_step_prompts, load_training_data
from worker.evaluation import run_evaluation
from worker.export import run_export


class CrashAfterFirstStep(CrashingTrainer):
    crash_after = 0


def _age_heartbeat(settings, run_id: int, seconds: float) -> None:
    """Make the run's last heartbeat `seconds` old (what a dead worker leaves behind)."""
    with db.session_scope(settings.sqlalchemy_url) as session:
        session.exec(update(Run).where(Run.id == run_id)
                     .values(heartbeat_at=utcnow() - timedelta(seconds=seconds)))


# --- heartbeats and attempts ------------------------------------------------------------------


def test_a_running_run_without_heartbeats_becomes_interrupted_and_its_attempt_is_fenced(studio):
    settings, model = studio
    dead = runs.create_run(settings, admin(settings), tiny_config(model), start=False)
    alive = runs.create_run(settings, admin(settings), {**tiny_config(model), "name": "alive"}, start=False)
    assert runs.claim_run(settings, dead["id"], 1, job_key(settings, dead["id"]), "cpu@gone")
    assert runs.claim_run(settings, alive["id"], 1, job_key(settings, alive["id"]), "cpu@here")
    assert not runs.claim_run(settings, alive["id"], 1, job_key(settings, alive["id"]), "cpu@other"), "one attempt, one worker"

    _age_heartbeat(settings, dead["id"], 2.5)  # under three periods of 1 s: still alive
    assert runs.get_run(settings, dead["id"])["state"] == RunState.running
    _age_heartbeat(settings, dead["id"], 3.5)
    assert runs.keep_alive(settings, alive["id"], 1, 4242)

    listed = {r["id"]: r for r in runs.list_runs(settings)}  # reading the runs reaps them
    assert listed[dead["id"]]["state"] == RunState.interrupted
    assert "no heartbeat from worker cpu@gone for 3 s" in listed[dead["id"]]["error"]
    assert f"studio run resume {dead['id']}" in listed[dead["id"]]["error"]
    assert listed[alive["id"]]["state"] == RunState.running

    # whatever the dead attempt's task or process still tries, the run stays interrupted
    assert not runs.keep_alive(settings, dead["id"], 1, 4242)
    assert not runs.finish_run(settings, dead["id"], RunState.succeeded, attempt=1)
    assert not runs.claim_run(settings, dead["id"], 1, job_key(settings, dead["id"]), "cpu@redelivered")
    assert runs.get_run(settings, dead["id"])["state"] == RunState.interrupted
    assert runs.reap_stale_runs(settings) == [], "reaping twice changes nothing"


def test_a_trainer_of_a_superseded_attempt_writes_nothing(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=2), start=False)
    assert runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@a")
    assert runs.interrupt_run(settings, run["id"], 1, "its worker died")
    from studio.services.run_recorder import RunStopped

    with pytest.raises(RunStopped, match="interrupted at attempt 1"):
        Trainer(settings, run["id"], attempt=1).run()
    assert runs.run_metrics(settings, run["id"]) == []


# --- resume -----------------------------------------------------------------------------------


def test_resume_queues_a_new_attempt_that_continues_from_the_checkpoint(studio):
    settings, model = studio
    config = tiny_config(model, steps=4)
    config["engine"]["checkpoint_every"] = 2
    run = runs.create_run(settings, admin(settings), config)
    with pytest.raises(Conflict, match="is queued; only an interrupted, paused, failed or cancelled"):
        runs.resume_run(settings, admin(settings), run["id"])

    # attempt 1 writes steps 0-2 (a checkpoint after 2) and dies with its worker
    assert runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@a")
    with pytest.raises(Crash):
        CrashingTrainer(settings, run["id"], attempt=1).run()
    with pytest.raises(Conflict, match="is running"):
        runs.resume_run(settings, admin(settings), run["id"])
    assert runs.get_run(settings, run["id"])["phase"] is not None, "what it was doing"
    _age_heartbeat(settings, run["id"], 60)
    interrupted = runs.get_run(settings, run["id"])
    assert (interrupted["state"], interrupted["phase"]) == (RunState.interrupted, None)
    assert [m["step"] for m in runs.run_metrics(settings, run["id"])] == [0, 1, 2]

    resumed = runs.resume_run(settings, admin(settings), run["id"])
    assert (resumed["state"], resumed["attempt"], resumed["error"]) == ("queued", 2, None)
    assert resumed["queue_position"] == 1
    assert not runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@redelivered"), "old attempt's message"
    assert runs.claim_run(settings, run["id"], 2, job_key(settings, run["id"]), "cpu@b")
    Trainer(settings, run["id"], attempt=2).run()
    assert runs.get_run(settings, run["id"])["phase"] is not None, "its last phase, stored"
    assert runs.finish_run(settings, run["id"], RunState.succeeded, attempt=2)
    assert runs.get_run(settings, run["id"])["phase"] is None, "a finished run does nothing now"

    assert [m["step"] for m in runs.run_metrics(settings, run["id"])] == [0, 1, 2, 3]
    assert any(e["message"] == "resumed from the checkpoint after step 2"
               for e in runs.run_events(settings, run["id"]))
    with pytest.raises(Conflict, match="finished all its steps"):
        runs.resume_run(settings, admin(settings), run["id"])


def test_a_run_resumed_before_its_first_checkpoint_starts_over_cleanly(studio):
    settings, model = studio
    config = tiny_config(model, steps=2)
    config["engine"]["checkpoint_every"] = 5
    run = runs.create_run(settings, admin(settings), config, start=False)
    assert runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@a")
    with pytest.raises(Crash):
        CrashAfterFirstStep(settings, run["id"], attempt=1).run()  # no checkpoint yet
    runs.cancel_run(settings, admin(settings), run["id"])
    assert [m["step"] for m in runs.run_metrics(settings, run["id"])] == [0]

    runs.resume_run(settings, admin(settings), run["id"])
    assert runs.claim_run(settings, run["id"], 2, job_key(settings, run["id"]), "cpu@b")
    Trainer(settings, run["id"], attempt=2).run()
    assert [m["step"] for m in runs.run_metrics(settings, run["id"])] == [0, 1]
    assert [e["step"] for e in runs.run_events(settings, run["id"])
            if e["kind"] == "stage_change"] == [0, 1], "step 0's rows were written once"


# --- the queue --------------------------------------------------------------------------------


def test_queue_positions_follow_each_queue_in_order(studio):
    settings, model = studio
    cpu = [runs.create_run(settings, admin(settings), {**tiny_config(model), "name": f"cpu-{i}"})["id"]
           for i in range(3)]
    gpu = runs.create_run(settings, admin(settings), {**tiny_config(model), "name": "gpu", "queue": "gpu"})

    def positions():
        return {r["id"]: r["queue_position"] for r in runs.list_runs(settings)}

    assert positions() == {cpu[0]: 1, cpu[1]: 2, cpu[2]: 3, gpu["id"]: 1}
    assert runs.claim_run(settings, cpu[0], 1, job_key(settings, cpu[0]), "cpu@a")
    runs.cancel_run(settings, admin(settings), cpu[1])
    assert positions() == {cpu[0]: None, cpu[1]: None, cpu[2]: 1, gpu["id"]: 1}
    runs.resume_run(settings, admin(settings), cpu[1])  # queued again: behind the runs already waiting
    assert positions() == {cpu[0]: None, cpu[1]: 2, cpu[2]: 1, gpu["id"]: 1}
    assert runs.get_run(settings, cpu[1])["queue_position"] == 2


def test_a_gpu_worker_lends_each_gpu_to_one_job():
    slots = DeviceSlots(["0", "1"])
    with slots.take() as first, slots.take() as second:
        assert sorted(first + second) == ["0", "1"]
        with slots.take() as third:
            assert third == []
    with slots.take() as again:
        assert again in (["0"], ["1"])
    with slots.take(2) as both:  # a veRL run with verl.gpus_per_node: 2
        assert sorted(both) == ["0", "1"]
        with slots.take() as none_left:
            assert none_left == []


# --- delete -----------------------------------------------------------------------------------


def test_delete_refuses_active_runs_and_removes_a_finished_one_with_its_files(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=1), start=False)
    with pytest.raises(Conflict, match="is queued; cancel it first"):
        runs.delete_run(settings, admin(settings), run["id"])
    assert runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@a")
    with pytest.raises(Conflict, match="is running; cancel it first"):
        runs.delete_run(settings, admin(settings), run["id"])
    Trainer(settings, run["id"], attempt=1).run()
    runs.finish_run(settings, run["id"], RunState.succeeded, attempt=1)
    evaluation = evaluations.create_evaluation(settings, admin(settings), qa_set="demo", run_id=run["id"],
                                               limit=1, protocol={"max_turns": 1,
                                                                  "max_turn_tokens": 4},
                                               start=False)
    run_evaluation(settings, evaluation["id"])
    records = evaluation_files.evaluation_records_path(settings, evaluation["id"])
    export = exports.create_export(settings, admin(settings), run["id"], target="zip", start=False)
    run_export(settings, export["id"])
    exported = exports.export_zip(settings, export["id"])
    folder = RunFolder.of(settings, run["id"]).root
    assert records.exists() and exported.exists()
    assert (folder / "checkpoints" / "step-1").is_dir()

    runs.delete_run(settings, admin(settings), run["id"])
    with pytest.raises(NotFound):
        runs.get_run(settings, run["id"])
    assert not folder.exists() and not records.exists() and not exported.exists()
    with db.session_scope(settings.sqlalchemy_url) as session:
        for table in (RunMetric, RunEvent, Rollout, Evaluation, Export):
            assert session.exec(select(table).where(table.run_id == run["id"])).all() == []


# --- validation before anything is queued ------------------------------------------------------


def test_the_estimate_counts_the_prompts_the_trainer_builds(studio):
    settings, model = studio
    config = tiny_config(model)
    report = run_validation.validate_run(settings, admin(settings), config)
    assert [(s["stage"], s["exemplars"], s["steps"]) for s in report["stages"]] == [
        (1, 2, 1), (2, 0, 2)]

    plan = run_validation.checked_config(settings, config)[0]
    parsed = plan.config
    data = load_training_data(settings, plan)
    from studio.services.tokenizers import cached_tokenizer

    tokenizer = cached_tokenizer(str(model), str(settings.resolved_data_dir))
    for stage in report["stages"]:
        built = build_step_prompts(parsed, tokenizer, data, data.questions,
                                   [stage["exemplars"]] * len(data.questions), 0)
        assert stage["prompt_tokens"] == max(len(ids) for ids in built.ids)
        assert stage["max_prompt_tokens"] == 5000 and stage["cut"] is False
        # what every prompt of a step starts with (the time estimate's shared prefix)
        assert common_prefix_length(built.ids) <= stage["shared_tokens"] \
            < stage["prompt_tokens"]
        assert stage["seconds_per_step"] is None, "no worker measured this model yet"
    assert report["stages"][0]["prompt_tokens"] > report["stages"][1]["prompt_tokens"]
    assert not any("max_prompt_tokens" in w for w in report["warnings"])


def test_prompts_over_the_limit_warn_at_launch_and_are_cut_in_training(studio):
    settings, model = studio
    config = tiny_config(model, steps=1, max_prompt_tokens=300)
    run = runs.create_run(settings, admin(settings), config, start=False)
    first = run["stages"][0]
    assert first["cut"] and first["prompt_tokens"] > 300
    assert run["warnings"][0].startswith(
        f"grpo.max_prompt_tokens: the first stage (2 exemplars) builds prompts of up to "
        f"{first['prompt_tokens']} tokens, more than 300")
    Trainer(settings, run["id"]).run()
    step = runs.run_metrics(settings, run["id"])[0]
    assert step["prompts_cut"] == 1.0 and step["prompt_tokens"] == 300


def test_an_adaptive_curriculum_is_checked_against_the_run_s_own_length(studio):
    """Adaptive stages last 20 steps at least: a 3-step run never reaches its 0-exemplar
    stage, a 21-step one (grpo.steps over the 3-step plan) does."""
    settings, model = studio
    config = tiny_config(model)
    config["curriculum"]["adaptive"] = {"min_steps": 20, "window": 10, "max_steps": 200}
    short = run_validation.validate_run(settings, admin(settings), config)["warnings"]
    assert "curriculum: In 3 steps the run never reaches stage 2 (0 exemplars)" in short[-1]
    config["grpo"]["steps"] = 21
    longer = run_validation.validate_run(settings, admin(settings), config)["warnings"]
    assert not any("never reaches" in w for w in longer), longer
    assert longer == short[:-1] == ["curriculum: The adaptive rule ends a stage after 20 to 200 "
                                    "steps, so the run cannot follow the plan (stage 1: 1 "
                                    "step)."]


@pytest.mark.parametrize(("change", "message"), [
    ({"data": {"corpus": "nope", "train": "demo", "exemplars": "missing"}},
     "data.corpus: 'nope' does not exist; upload it first; "
     "data.exemplars: 'missing' does not exist; upload it first"),
    ({"grpo": {"lr": -1, "group_size": 0}},
     "grpo.group_size: Input should be greater than 0; grpo.lr: Input should be greater than 0"),
    ({"curriculum": {"stages": [{"exemplars": 7, "steps": 2}, {"exemplars": 0, "steps": 1}]}},
     "curriculum.stages[0].exemplars: 7 exemplars, but the set holds only 3"),
    ({"model": "/no/such/model-folder"},
     "model: '/no/such/model-folder' is not in a folder this studio reads models from"),
])
def test_bad_configs_are_refused_naming_the_field_and_nothing_is_stored(studio, change, message):
    settings, model = studio
    with pytest.raises(InvalidInput) as refused:
        runs.create_run(settings, admin(settings), {**tiny_config(model), **change})
    assert str(refused.value).startswith(message)
    assert runs.list_runs(settings) == []


@pytest.fixture
def no_bwrap(monkeypatch, tmp_path):
    """A machine without bubblewrap: PATH holds no bwrap, and the sandbox probes afresh."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    bwrap.require.cache_clear()
    yield
    monkeypatch.undo()
    bwrap.require.cache_clear()


def test_a_python_run_is_refused_where_the_sandbox_cannot_run(studio, no_bwrap):
    """tools: [python] needs the sandbox: without it the launch is a 422 with the sandbox's
    own words, and nothing is stored; a search run launches as before, and a calculator run
    on the arithmetic pack (no corpus) validates."""
    settings, model = studio
    headers = admin_headers(settings)
    with TestClient(create_app(settings)) as client:
        config = {**tiny_config(model), "tools": ["search", "python"]}
        refused = client.post("/api/v1/runs", json=config, headers=headers)
        assert refused.status_code == 422
        assert refused.json()["detail"] == (
            "tools: python cannot run on this machine: the python tool runs code only inside "
            f"a bubblewrap sandbox, and 'bwrap' is not on PATH: {bwrap.INSTALL_HINT}")
        assert client.get("/api/v1/runs", headers=headers).json() == []
        searching = client.post("/api/v1/runs/validate", json=tiny_config(model),
                                headers=headers)
        assert searching.status_code == 200 and searching.json()["config"]["tools"] == ["search"]
        load_calc_pack(settings, admin(settings))  # the calculator needs no sandbox, no corpus
        calculating = client.post("/api/v1/runs/validate", headers=headers, json={
            **tiny_config(model), "tools": ["calculator"], "reward": {"answer_match": "numeric"},
            "data": {"train": "calc", "eval": ["calc-heldout"], "exemplars": "calc"}})
        assert calculating.status_code == 200, calculating.json()
        assert calculating.json()["config"]["data"]["corpus"] is None


def test_exemplars_are_checked_against_the_runs_tools(studio):
    """Worked examples that call <code> are whole for a python run; for a search run they
    lack a search, and the launch names the set."""
    settings, model = studio
    exemplar_sets.create_exemplar_set(settings, admin(settings), "arithmetic", [
        {"question": f"What is 6 times {n}?", "answer": str(6 * n),
         "solution": f"<think>multiply</think><code>print(6*{n})</code>\n<output>{6 * n}"
                     f"</output>\n<answer>{6 * n}</answer>"} for n in (7, 8, 9)])
    config = {**tiny_config(model), "data": {"corpus": "demo", "train": "demo",
                                             "exemplars": "arithmetic"}}
    checked = run_validation.validate_run(settings, admin(settings), {**config,
                                                                       "tools": ["python"]})
    assert checked["config"]["tools"] == ["python"]
    with pytest.raises(InvalidInput, match="data.exemplars: 'arithmetic' has 3 errors"):
        run_validation.validate_run(settings, admin(settings), config)


@pytest.mark.parametrize(("tool", "pack", "load"), [("python", "math", load_math_pack),
                                                   ("calculator", "calc", load_calc_pack)])
def test_a_run_without_search_launches_without_a_corpus(studio, tool, pack, load):
    """tools: [python] on the math pack (or the calculator on the arithmetic pack) names no
    corpus: the API validates and launches it, its plan pins none, and what the check says
    (warnings, the estimate) speaks of its own tool, not of search; with search among the
    tools the missing corpus is a 422 naming data.corpus, and nothing is stored."""
    settings, model = studio
    load(settings, admin(settings))
    headers = admin_headers(settings)
    config = {**tiny_config(model), "tools": [tool], "reward": {"answer_match": "numeric"},
              "data": {"train": pack, "eval": [f"{pack}-heldout"], "exemplars": pack},
              "curriculum": {"stages": [{"exemplars": 1, "steps": 1},
                                        {"exemplars": 0, "steps": 2}]}}
    with TestClient(create_app(settings)) as client:
        refused = client.post("/api/v1/runs", json={**config, "tools": ["search", tool]},
                              headers=headers)
        assert refused.status_code == 422
        assert refused.json()["detail"] == ("run config: data.corpus: the search tool searches "
                                            "a corpus; name one (or remove search from tools)")
        assert client.get("/api/v1/runs", headers=headers).json() == []
        checked = client.post("/api/v1/runs/validate", json=config, headers=headers)
        assert checked.status_code == 200, checked.json()
        assert checked.json()["config"]["data"]["corpus"] is None
        said = " ".join([*checked.json()["warnings"],
                         checked.json()["time_estimate"]["message"]])
        using = {"python": "running Python", "calculator": "calling the calculator"}[tool]
        assert f"stop {using} and answer at once" in said, "the 1-step stage is warned of"
        assert "search" not in said.lower(), said
        launched = client.post("/api/v1/runs", json=config, headers=headers)
        assert launched.status_code == 201, launched.json()
    plan = run_plans.stored_plan(settings, launched.json()["id"])
    assert plan.corpus is None and [ref.name for ref in plan.eval] == [f"{pack}-heldout"]


# --- the same through the API -------------------------------------------------------------------


def test_the_api_validates_launches_resumes_and_deletes(studio):
    settings, model = studio
    headers = admin_headers(settings)
    with TestClient(create_app(settings)) as client:
        def call(method, path, **kw):
            return client.request(method, f"/api/v1{path}", headers=headers, **kw)

        checked = call("POST", "/runs/validate", json=tiny_config(model, max_prompt_tokens=300))
        assert checked.status_code == 200
        assert checked.json()["stages"][0]["cut"] and checked.json()["total_steps"] == 3
        assert checked.json()["time_estimate"]["state"] == "unavailable", "no worker"
        assert call("GET", "/runs").json() == [], "validating stores nothing"

        bad = call("POST", "/runs/validate", json={**tiny_config(model), "seed": "x"})
        assert bad.status_code == 422 and bad.json()["detail"].startswith("seed: ")

        launched = call("POST", "/runs", json=tiny_config(model, max_prompt_tokens=300))
        assert launched.status_code == 201
        run = launched.json()
        assert run["queue_position"] == 1 and run["warnings"]
        assert call("POST", f"/runs/{run['id']}/resume").status_code == 409
        assert call("DELETE", f"/runs/{run['id']}").status_code == 409
        assert call("POST", f"/runs/{run['id']}/cancel").json()["state"] == "cancelled"
        resumed = call("POST", f"/runs/{run['id']}/resume").json()
        assert (resumed["state"], resumed["attempt"]) == ("queued", 2)
        call("POST", f"/runs/{run['id']}/cancel")
        assert call("DELETE", f"/runs/{run['id']}").status_code == 204
        assert call("GET", f"/runs/{run['id']}").status_code == 404
