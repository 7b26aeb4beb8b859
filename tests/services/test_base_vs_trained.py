"""Evaluating a run against its base model: both queued per QA set under one protocol, names
checked before anything is queued, and per set the run owner's figures read back (a
member's own beside them)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from studio.services import evaluations
from studio.services.access import Forbidden
from studio.services.demo import load_demo_pack
from studio.services.errors import InvalidInput, NotFound
from studio.storage.db import session_scope
from studio.storage.tables import Run, RunState, utcnow
from tests.support.actors import admin, user
from tests.support.synthetic_runs import finished_run
from tests.support.tiny_model import build_tiny_model


@pytest.fixture
def base_model(tmp_path):
    return str(build_tiny_model(tmp_path / "tiny"))


@pytest.fixture
def run_id(settings, base_model):
    load_demo_pack(settings, admin(settings), index_now=True)
    config = {"name": "r", "model": base_model,
              "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"}}
    return finished_run(settings, config, steps=4)


def _give_checkpoint(settings, run_id):
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, run_id)
        run.checkpoint_dir = f"runs/{run_id}/checkpoints/step-4"
        session.add(run)


def test_both_models_are_queued_per_set_with_the_same_protocol(settings, run_id, base_model):
    with pytest.raises(InvalidInput, match="no checkpoint yet"):
        evaluations.evaluate_base_and_trained(settings, admin(settings), run_id, ["demo"], start=False)
    _give_checkpoint(settings, run_id)
    with pytest.raises(NotFound, match="'nope'"):
        evaluations.evaluate_base_and_trained(settings, admin(settings), run_id, ["demo", "nope"], start=False)
    assert evaluations.list_evaluations(settings) == [], "nothing queued when a name is wrong"
    with pytest.raises(InvalidInput, match="at least one QA set"):
        evaluations.evaluate_base_and_trained(settings, admin(settings), run_id, [], start=False)

    created = evaluations.evaluate_base_and_trained(
        settings, admin(settings), run_id, ["demo"], limit=3, protocol={"max_turns": 2}, start=False)
    base, trained = created
    assert base["model"] == base_model and base["run_id"] is None
    assert trained["run_id"] == run_id and trained["model"].endswith("step-4")
    for e in created:
        assert e["params"]["protocol"] == {"max_turns": 2} and e["params"]["total"] == 3
        assert e["params"]["corpus"] == "demo"


def test_the_table_pairs_the_newest_base_and_trained_figures_per_set(settings, run_id,
                                                                     tmp_path):
    _give_checkpoint(settings, run_id)
    another = str(build_tiny_model(tmp_path / "another"))
    assert evaluations.base_vs_trained(settings, run_id) == []
    old_base, old_trained = evaluations.evaluate_base_and_trained(settings, admin(settings), run_id, ["demo"],
                                                                  start=False)
    base, trained = evaluations.evaluate_base_and_trained(settings, admin(settings), run_id, ["demo"],
                                                          start=False)
    evaluations.update_evaluation(settings, base["id"], state=RunState.succeeded,
                                  metrics={"em": 0.1})
    evaluations.update_evaluation(settings, trained["id"], state=RunState.running,
                                  progress=(1, 50))
    other_base = evaluations.create_evaluation(settings, admin(settings), qa_set="demo",
                                               corpus="demo", model=another, start=False)

    (row,) = evaluations.base_vs_trained(settings, run_id)
    assert row["qa_set"] == "demo"
    assert row["base"]["id"] == base["id"] and row["base"]["metrics"] == {"em": 0.1}
    assert row["trained"]["id"] == trained["id"]
    assert row["trained"]["params"]["done"] == 1
    assert {old_base["id"], old_trained["id"], other_base["id"]}.isdisjoint(
        {row["base"]["id"], row["trained"]["id"]})
    (other,) = evaluations.base_vs_trained(settings, run_id, base_model=another)
    assert other["base"]["id"] == other_base["id"]


def test_a_finished_run_that_asks_is_evaluated_under_its_own_budgets(settings, base_model):
    load_demo_pack(settings, admin(settings), index_now=True)
    config = {"name": "r", "model": base_model,
              "data": {"corpus": "demo", "train": "demo", "eval": ["demo"],
                       "exemplars": "demo"},
              "prompt": {"assistant_prefix": "<think> I will look it up.",
                         "instruction": "Use the tags."},
              "grpo": {"max_turns": 2, "max_turn_tokens": 48, "max_response_tokens": 300,
                       "max_obs_tokens": 120, "top_k": 2},
              "reward": {"answer_match": "numeric"},
              "engine": {"evaluate_at_end": True}}
    asked = finished_run(settings, config, steps=4)
    quiet = finished_run(settings, {**config, "engine": {}}, steps=4)
    for run_id in (asked, quiet):
        _give_checkpoint(settings, run_id)
    assert evaluations.evaluate_finished_run(settings, quiet) == []
    assert evaluations.evaluations_to_come(settings, asked), "its worker is about to queue them"
    assert not evaluations.evaluations_to_come(settings, quiet), "it asks for none"
    base, trained = evaluations.evaluate_finished_run(settings, asked)
    assert not evaluations.evaluations_to_come(settings, asked), "they are queued"
    assert base["model"] == base_model and trained["run_id"] == asked
    protocol = trained["params"]["protocol"]
    assert protocol == base["params"]["protocol"]
    assert protocol == {"max_turn_tokens": 48, "max_turns": 2, "max_response_tokens": 300,
                        "max_obs_tokens": 120, "top_k": 2, "layout": "chat",
                        "assistant_prefix": "<think>", "instruction": "Use the tags.",
                        "seed": 0, "answer_match": "numeric"}, \
        "the training prefix is cut to <think>; answers are matched as the run's reward did"
    from studio.services import runs

    (note,) = [e for e in runs.run_events(settings, asked) if e["kind"] == "info"]
    assert note["data"]["evaluations"] == [base["id"], trained["id"]]
    with session_scope(settings.sqlalchemy_url) as session:
        run = session.get(Run, asked)
        run.state = RunState.failed
        session.add(run)
    assert evaluations.evaluate_finished_run(settings, asked) == []


def test_an_evaluation_prefills_at_most_think(settings, run_id):
    from studio.method.evaluation import EvalConfig

    _give_checkpoint(settings, run_id)
    for prefix in ("<search>", "<think> I should search </think> <search>"):
        with pytest.raises(InvalidInput, match="protocol.assistant_prefix: .*at most '<think>'"):
            evaluations.create_evaluation(settings, admin(settings), qa_set="demo", run_id=run_id,
                                          protocol={"assistant_prefix": prefix}, start=False)
        with pytest.raises(ValueError, match="at most '<think>'"):
            EvalConfig(assistant_prefix=prefix)
    assert evaluations.list_evaluations(settings) == []
    for prefix in (None, "", "<think>"):
        assert EvalConfig(assistant_prefix=prefix).assistant_prefix == prefix


def test_a_model_that_cannot_be_resolved_is_refused_naming_the_field(settings, run_id, tmp_path):
    """As a run's model is: a 422 naming the field, checked before anything is queued."""
    _give_checkpoint(settings, run_id)
    (tmp_path / "not-a-model").mkdir()
    for model in (str(tmp_path / "not-a-model"), str(tmp_path / "nowhere")):
        with pytest.raises(InvalidInput) as refused:
            evaluations.create_evaluation(settings, admin(settings), qa_set="demo", corpus="demo", model=model,
                                          start=False)
        assert str(refused.value).startswith(f"model: {model!r} is not a model folder")
        with pytest.raises(InvalidInput) as refused:
            evaluations.evaluate_base_and_trained(settings, admin(settings), run_id, ["demo"], base_model=model,
                                                  start=False)
        assert str(refused.value).startswith(f"base_model: {model!r} is not a model folder")
    assert evaluations.list_evaluations(settings) == [], "nothing stored or queued"


def test_a_run_s_own_evaluations_are_to_come_while_it_trains_and_just_after(settings, base_model):
    """What keeps the Evaluate page following a run until the evaluations it queues at its end
    appear: they are to come while it is queued or training, and for a short while after it
    succeeds (its worker queues them once it sees the training process exit), not after."""
    load_demo_pack(settings, admin(settings), index_now=True)
    config = {"name": "r", "model": base_model,
              "data": {"corpus": "demo", "train": "demo", "eval": ["demo"], "exemplars": "demo"},
              "engine": {"evaluate_at_end": True}}
    run_id = finished_run(settings, config, steps=4)

    def set_run(state, ended_ago=None):
        with session_scope(settings.sqlalchemy_url) as session:
            run = session.get(Run, run_id)
            run.state = state
            run.finished_at = None if ended_ago is None else utcnow() - ended_ago
            session.add(run)
        return evaluations.evaluations_to_come(settings, run_id)

    assert set_run(RunState.queued) and set_run(RunState.running)
    assert set_run(RunState.succeeded, timedelta(seconds=5))
    assert not set_run(RunState.succeeded, evaluations.QUEUED_AT_END_WITHIN), "never queued"
    assert not set_run(RunState.failed, timedelta(seconds=5)), "a failed run queues none"


def test_the_owner_s_pair_is_shown_and_a_member_s_own_beside_it(settings, run_id, tmp_path):
    """A member's newer pair, cancelled or not, never hides the run owner's (issue 30, D8):
    each member reads the owner's figures, and its own labelled beside them. The owner's new
    pair shows as it runs; another's shows where the owner has none."""
    _give_checkpoint(settings, run_id)
    owner, mel, max_ = admin(settings), user(settings, "mel"), user(settings, "max")

    def pair(actor=None, qa_set="demo"):
        (row,) = [r for r in evaluations.base_vs_trained(settings, run_id, requester=actor)
                  if r["qa_set"] == qa_set]
        return row

    def ids(row) -> list:
        return [row["base"] and row["base"]["id"], row["trained"] and row["trained"]["id"]]

    owners = evaluations.evaluate_base_and_trained(settings, owner, run_id, ["demo"], start=False)
    for e in owners:
        evaluations.update_evaluation(settings, e["id"], state=RunState.succeeded,
                                      metrics={"em": 0.2})
    cancelled = evaluations.evaluate_base_and_trained(settings, mel, run_id, ["demo"],
                                                      start=False)
    assert evaluations.cancel_base_vs_trained(settings, mel, run_id) == 2
    (row,) = evaluations.base_vs_trained(settings, run_id)
    assert ids(row) == [e["id"] for e in owners], "mel's cancelled pair hid the owner's"
    for reader in (owner, max_, mel):
        assert ids(pair(reader)) == [e["id"] for e in owners]
    assert pair(owner)["yours"] is None and pair(max_)["yours"] is None
    yours = pair(mel)["yours"]
    assert yours["requested_by"] == "mel"
    assert [yours["base"]["id"], yours["trained"]["id"]] == [e["id"] for e in cancelled]
    assert pair(mel)["trained"]["owner"] == owner.username

    newer = evaluations.evaluate_base_and_trained(settings, mel, run_id, ["demo"], start=False)
    for e in newer:  # a member's succeeded pair does not replace the owner's either
        evaluations.update_evaluation(settings, e["id"], state=RunState.succeeded,
                                      metrics={"em": 0.9})
    assert ids(pair(max_)) == [e["id"] for e in owners]
    assert ids(pair(mel)["yours"]) == [e["id"] for e in newer]

    running = evaluations.evaluate_base_and_trained(settings, mel, run_id, ["demo"],
                                                    start=False)
    assert evaluations.cancel_base_vs_trained(settings, mel, run_id) == 2, "mel's own"
    assert states(settings, running) == ["cancelled"] * 2
    again = evaluations.evaluate_base_and_trained(settings, owner, run_id, ["demo"],
                                                  start=False)
    assert ids(pair(max_)) == [e["id"] for e in again], "the owner's new pair shows as it runs"
    with pytest.raises(Forbidden):
        evaluations.cancel_base_vs_trained(settings, max_, run_id)
    assert states(settings, again) == ["queued"] * 2

    elsewhere = evaluations.evaluate_base_and_trained(settings, mel, run_id, ["demo-heldout"],
                                                      start=False)
    assert ids(pair(owner, "demo-heldout")) == [e["id"] for e in elsewhere], \
        "where the owner has no pair, another member's shows"
    assert pair(mel, "demo-heldout")["yours"] is None, "it is the one shown"


def states(settings, views) -> list[str]:
    return [evaluations.get_evaluation(settings, e["id"])["state"] for e in views]
