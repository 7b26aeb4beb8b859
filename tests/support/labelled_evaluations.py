"""Finished evaluations written straight into the database and the data folder, each question
with its failure label, for the API and page tests (the engine's tests label real rollouts)."""

from __future__ import annotations

import json

from studio.method.failures import CORRECT, FORMAT_MISS, label_split, tool_misses
from studio.method.tools import named_specs
from studio.services.evaluation_files import evaluation_records_path
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Evaluation, RunState, utcnow


def labelled_record(number: int, label: str, text: str = "", tool: str = "search") -> dict:
    """Question `number` of an evaluation with `tool` as it stores it, answered the way
    `label` says (one call, none for the tool's "no call" label); `text` ends its question, its
    answer, its call and the result it got back (hostile text, for the escaping tests)."""
    gold = f"gold {number}"
    answer = None if label == FORMAT_MISS else gold if label == CORRECT \
        else f"wrong {number} {text}"
    no_call = tool_misses(named_specs([tool])).no_call.key
    calls = [] if label == no_call else [
        {"tool": tool, "input": f"query {number} {text}",
         "result": f"Doc 1(Title: Page {number}) passage {number} {text}", "failed": False}]
    return {"id": str(number), "question": f"Question {number}? {text}",
            "golden_answers": [gold], "prediction": answer,
            "searches": [call["input"] for call in calls], "calls": calls,
            "label": label, "em": float(label == CORRECT)}


def finished_evaluation(settings: Settings, qa_set_id: int, labels: list[str], *,
                        model_ref: str, run_id: int | None = None, metrics: dict | None = None,
                        text: str = "", tool: str = "search") -> int:
    """A succeeded evaluation of `model_ref` (of run `run_id`'s checkpoint, if given) with
    `tool`, whose questions got `labels` in order; its metrics are `metrics` plus the question
    count and the split. Returns its id."""
    records = [labelled_record(i, label, text, tool) for i, label in enumerate(labels, 1)]
    with session_scope(settings.sqlalchemy_url) as session:
        evaluation = Evaluation(
            run_id=run_id, model_ref=model_ref, qa_set_id=qa_set_id, state=RunState.succeeded,
            metrics={**(metrics or {}), "questions": len(labels),
                     "labels": label_split(labels, named_specs([tool]))},
            params={"total": len(labels), "done": len(labels), "protocol": {"tools": [tool]}},
            finished_at=utcnow())
        session.add(evaluation)
        session.flush()
        evaluation_id = evaluation.id
    path = evaluation_records_path(settings, evaluation_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return evaluation_id
