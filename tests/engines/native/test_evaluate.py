"""Zero-shot evaluation of a base model and of a run's checkpoint, stored per QA set."""

from __future__ import annotations

import pytest

from studio.services import evaluations, runs
from studio.services.demo import load_demo_pack
from studio.services.errors import InvalidInput
from studio.tables import RunState
from tests.support.actors import admin
from tests.support.tiny_model import build_tiny_model
from tests.support.training import tiny_config
from worker.engines.native.trainer import Trainer
from worker.evaluation import run_evaluation

# the tiny random model never stops by itself: keep its turns short
FAST = {"max_turn_tokens": 16, "max_turns": 2, "max_response_tokens": 64}


def test_evaluate_a_base_model_and_a_trained_run(settings, tmp_path):
    load_demo_pack(settings, admin(settings), index_now=True)
    model = build_tiny_model(tmp_path / "tiny")

    base = evaluations.create_evaluation(settings, admin(settings), qa_set="demo", corpus="demo",
                                         model=str(model), limit=4, protocol=FAST, start=False)
    done = run_evaluation(settings, base["id"])
    assert done["state"] == RunState.succeeded and done["error"] is None
    metrics = done["metrics"]
    assert metrics["questions"] == 4
    for key in ("em", "subem", "f1", "search_calls", "answer_rate", "valid_search_rate"):
        assert 0.0 <= metrics[key] <= (6 if key == "search_calls" else 1.0)
    assert done["params"]["done"] == done["params"]["total"] == 4
    records = (settings.resolved_data_dir / "evaluations" / f"{base['id']}.jsonl").read_text()
    assert len(records.splitlines()) == 4

    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=1), start=False)
    with pytest.raises(InvalidInput, match="has no checkpoint yet"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", run_id=run["id"], start=False)
    Trainer(settings, run["id"]).run()
    trained = evaluations.create_evaluation(settings, admin(settings), qa_set="demo", run_id=run["id"], limit=2,
                                            protocol=FAST, start=False)
    assert trained["params"]["corpus"] == "demo"
    assert run_evaluation(settings, trained["id"])["metrics"]["questions"] == 2
    assert [e["id"] for e in evaluations.list_evaluations(settings, run_id=run["id"])] == [
        trained["id"]]


def test_evaluation_input_errors(settings):
    load_demo_pack(settings, admin(settings), index_now=True)
    with pytest.raises(InvalidInput, match="give either model"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", corpus="demo", start=False)
    with pytest.raises(InvalidInput, match="corpus: name the corpus"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", model="x", start=False)
    with pytest.raises(InvalidInput, match="protocol: unknown key"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", model="x", corpus="demo",
                                      protocol={"temp": 1}, start=False)
