"""A run's plan pins its data at launch: every attempt trains on what the run started with,
whatever was deleted, uploaded again under the same name, or edited since."""

from __future__ import annotations

import io
import json

import pytest
from sqlmodel import delete

from studio.services import corpora, exemplar_sets, qa_sets, run_plans, runs
from studio.services.errors import NotFound
from studio.storage import db
from studio.storage.tables import Corpus, QAItem, QASet, RunState
from tests.support.actors import admin
from tests.support.jobs import job_key
from tests.support.training import Crash, CrashingTrainer, tiny_config
from worker.engines.native.trainer import Trainer

NEW_QUESTION = "Which colour is the new lighthouse?"


class CrashAfterSecondStep(CrashingTrainer):
    crash_after = 1  # step 0 is checkpointed, step 1 written, not checkpointed


def _replace_the_demo_data(settings) -> None:
    """What a user does between two attempts: delete `demo` and upload another `demo`, and
    edit the first exemplar of the exemplar set the run was launched with."""
    corpora.delete_corpus(settings, admin(settings), corpora.find_corpus(settings, "demo")["id"])
    qa_sets.delete_qa_set(settings, admin(settings), qa_sets.find_qa_set(settings, "demo")["id"])
    doc = {"id": "n1", "title": "New lighthouse", "text": "The new lighthouse is green."}
    new = corpora.create_corpus(settings, admin(settings), io.BytesIO(json.dumps(doc).encode() + b"\n"),
                                "corpus.jsonl", "demo", start_indexing=False)
    corpora.build_corpus_index(settings, new["id"])
    row = {"question": NEW_QUESTION, "golden_answers": ["green"]}
    qa_sets.create_qa_set(settings, admin(settings), io.BytesIO(json.dumps(row).encode() + b"\n"), "qa.jsonl",
                          "demo")
    exemplars = exemplar_sets.find_exemplar_set(settings, "demo")
    exemplar_sets.update_exemplar(settings, admin(settings), exemplars["id"], 1, {"question": "Edited?"})


def test_a_resumed_run_trains_on_its_original_data_after_a_same_name_upload(studio):
    settings, model = studio
    original = {r.question for r in qa_sets.load_rows(
        settings, qa_sets.find_qa_set(settings, "demo")["id"])}
    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=3), start=False)
    plan = run_plans.load_plan(settings, run["id"])
    shown = plan.exemplar_list()
    assert runs.claim_run(settings, run["id"], 1, job_key(settings, run["id"]), "cpu@a")
    with pytest.raises(Crash):
        CrashAfterSecondStep(settings, run["id"], attempt=1).run()
    runs.cancel_run(settings, admin(settings), run["id"])

    _replace_the_demo_data(settings)
    assert [c["name"] for c in corpora.list_corpora(settings)] == ["demo"]
    with pytest.raises(NotFound):
        corpora.get_corpus(settings, plan.corpus.id)  # retired: gone for its users
    assert corpora.find_corpus(settings, "demo")["id"] != plan.corpus.id

    runs.resume_run(settings, admin(settings), run["id"])
    assert runs.claim_run(settings, run["id"], 2, job_key(settings, run["id"]), "cpu@b")
    trainer = Trainer(settings, run["id"], attempt=2)
    trainer.run()
    assert trainer.start_step == 1, "it continued from its checkpoint"
    assert {r.question for r in trainer.data.questions} == original
    assert trainer.data.exemplars == shown and shown[0].question != "Edited?"
    hits = trainer.data.index.search(["Herring Moon Fair"], 1)[0]
    assert hits and "lighthouse" not in hits[0].passage.text
    asked = {r["question"] for r in runs.run_rollouts(settings, run["id"], limit=100)}
    assert asked and asked <= original and NEW_QUESTION not in asked

    # the retired data goes with the last run that pins it; the new upload stays
    runs.finish_run(settings, run["id"], RunState.succeeded, attempt=2)
    runs.delete_run(settings, admin(settings), run["id"])
    with db.session_scope(settings.sqlalchemy_url) as session:
        assert session.get(Corpus, plan.corpus.id) is None
        assert session.get(QASet, plan.train.id) is None
    assert corpora.find_corpus(settings, "demo")["num_documents"] == 1
    assert qa_sets.find_qa_set(settings, "demo")["num_rows"] == 1


def test_data_not_pinned_by_a_run_is_deleted_at_once(studio):
    settings, _ = studio
    held = qa_sets.find_qa_set(settings, "demo-heldout")
    qa_sets.delete_qa_set(settings, admin(settings), held["id"])
    with db.session_scope(settings.sqlalchemy_url) as session:
        assert session.get(QASet, held["id"]) is None


def test_a_run_whose_pinned_data_is_gone_fails_with_a_plain_message(studio):
    settings, model = studio
    run = runs.create_run(settings, admin(settings), tiny_config(model), start=False)
    train_id = run_plans.load_plan(settings, run["id"]).train.id
    with db.session_scope(settings.sqlalchemy_url) as session:  # removed behind the studio
        session.exec(delete(QAItem).where(QAItem.qa_set_id == train_id))
        session.exec(delete(QASet).where(QASet.id == train_id))
    with pytest.raises(run_plans.PlannedDataGone,
                       match=rf"data.train: the QA set 'demo' \(#{train_id}\) that run "
                             rf"{run['id']} started with is no longer stored"):
        Trainer(settings, run["id"])
