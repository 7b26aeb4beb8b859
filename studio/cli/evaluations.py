"""`studio eval`: zero-shot evaluations of a run's checkpoint or a model, a table per QA set."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from studio.cli.common import (
    POLL_SECONDS,
    DataDir,
    Wait,
    acting_user,
    call,
    fail,
    num,
    print_table,
    studio_ready,
)
from studio.settings import Settings


def _protocol(pairs: list[str]) -> dict:
    import yaml

    protocol = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise fail(ValueError(f"--protocol: '{pair}' is not KEY=VALUE, e.g. temperature=0.1"))
        protocol[key.strip()] = yaml.safe_load(value)
    return protocol


EVAL_COLUMNS = [("EM", "em"), ("SubEM", "subem"), ("F1", "f1"), ("answer rate", "answer_rate"),
                ("valid search", "valid_search_rate"), ("tool calls", "search_calls")]



def evaluate(qa_set: list[str] = typer.Option(..., "--qa-set", help="QA set to evaluate on "
                                              "(repeat for several)."),
             run: int = typer.Option(None, "--run", help="A run: its latest checkpoint."),
             model: str = typer.Option(None, "--model", help="Or a model: bundled name, HF id, "
                                       "folder."),
             corpus: str = typer.Option(None, help="Corpus to search (default: the run's)."),
             limit: int = typer.Option(None, help="Only the first N questions of each set."),
             queue: str = typer.Option("cpu", help="Queue: cpu or gpu."),
             protocol: list[str] = typer.Option(None, "--protocol", help="KEY=VALUE override "
                                                "of the zero-shot protocol, e.g. max_turns=2."),
             wait: bool = Wait, data_dir: Path = DataDir) -> None:
    """Zero-shot evaluation (k = 0) of a run's checkpoint or a model; a table per QA set."""
    from studio.services import evaluations, qa_sets

    settings = studio_ready(data_dir, queue=True)
    for name in qa_set:
        call(qa_sets.find_qa_set, settings, name, prefix="--qa-set: ")
    overrides, actor = _protocol(protocol or []), acting_user(settings)
    created = [call(evaluations.create_evaluation, settings, actor, qa_set=name, corpus=corpus,
                    model=model, run_id=run, limit=limit, protocol=overrides, queue=queue)
               for name in qa_set]
    for evaluation, name in zip(created, qa_set, strict=True):
        typer.echo(f"evaluation {evaluation['id']} of {evaluation['model']} on '{name}': "
                   f"{evaluation['state']}"
                   + (f", {evaluation['waiting']}" if evaluation["waiting"] else ""))
    if not wait:
        return
    final = _wait_for_evaluations(settings, [e["id"] for e in created])
    rows, failed = [], False
    for evaluation, name in zip(final, qa_set, strict=True):
        if evaluation["state"] != "succeeded":
            failed = True
            typer.echo(f"evaluation {evaluation['id']} on '{name}' {evaluation['state']}: "
                       f"{evaluation['error']}")
            continue
        metrics = evaluation["metrics"]
        rows.append([name, metrics["questions"]] + [num(metrics[key]) for _, key in
                                                    EVAL_COLUMNS])
    if rows:
        print_table(["QA SET", "QUESTIONS"] + [title.upper() for title, _ in EVAL_COLUMNS], rows)
    if failed:
        raise typer.Exit(1)


def _wait_for_evaluations(settings: Settings, ids: list[int]) -> list[dict]:
    from studio.services.evaluations import get_evaluation

    progress: dict[int, object] = {}
    while True:
        current = [get_evaluation(settings, i) for i in ids]
        for evaluation in current:
            done = (evaluation["state"], evaluation["params"].get("done"))
            if progress.get(evaluation["id"]) != done:
                progress[evaluation["id"]] = done
                typer.echo(f"evaluation {evaluation['id']}: {done[0]}, "
                           f"{done[1]}/{evaluation['params'].get('total')} questions")
        if all(e["state"] in ("succeeded", "failed", "cancelled") for e in current):
            return current
        time.sleep(POLL_SECONDS)
