"""An evaluation's process: `python -m worker.evaluation ID --parent-pid PID`, spawned by
its worker's task (`worker.evaluation_process`). `run_evaluation` is its body (also called
in-process by tests and benches): load the model and the tool, evaluate, store the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import torch

from studio.jobs.heartbeats import keep_beating
from studio.jobs.lifecycle import RunState
from studio.method.evaluation import EvalConfig
from studio.method.exemplars import Exemplar
from studio.models.base_models import load_causal_lm, load_tokenizer
from studio.services import qa_sets, runs
from studio.services.evaluation_files import evaluation_records_path
from studio.services.evaluations import (
    EVALUATION_JOBS,
    claim_evaluation,
    get_evaluation,
    update_evaluation,
)
from studio.settings import Settings, get_settings
from worker.engines.native.evaluate import evaluate
from worker.engines.native.trainer import corpus_index, search_fn
from worker.lora import load_checkpoint
from worker.parent_watch import watch_parent
from worker.tools import build_tools


def _load_model(settings: Settings, evaluation: dict):
    """(model, tokenizer): a run's checkpoint (stored relative to the data directory; a LoRA
    run's adapter merged into the run's base model), or a model reference as given."""
    data_dir = settings.resolved_data_dir
    candidate = data_dir / evaluation["model"]
    if evaluation["run_id"] is not None:
        base = runs.get_run(settings, evaluation["run_id"])["config"]["model"]
        return load_checkpoint(candidate, base, data_dir)
    ref = str(candidate) if candidate.is_dir() else evaluation["model"]
    return load_causal_lm(ref, data_dir), load_tokenizer(ref, data_dir)


def run_evaluation(settings: Settings, evaluation_id: int) -> dict:
    """Evaluate here and record the outcome; on queue gpu the model goes to the GPU this
    process was given."""
    evaluation = get_evaluation(settings, evaluation_id)
    claim_evaluation(settings, evaluation_id)  # evaluated in place; else its task took it
    with keep_beating(settings, EVALUATION_JOBS, evaluation_id):
        try:
            params = evaluation["params"]
            rows = qa_sets.load_rows(settings, evaluation["qa_set_id"],
                                     positions=params.get("rows"))[:params.get("limit")]
            index = corpus_index(settings, params["corpus_id"])  # None: no search
            config = EvalConfig(**params.get("protocol", {}))
            tools = build_tools(config.tools, settings, search_fn(index, config.top_k),
                                config.top_k)
            model, tokenizer = _load_model(settings, evaluation)
            if params.get("queue") == "gpu" and torch.cuda.is_available():
                model = model.to("cuda")
            result = evaluate(model, tokenizer, rows, tools, config,
                              on_progress=lambda done, total: update_evaluation(
                                  settings, evaluation_id, progress=(done, total)),
                              exemplars=[Exemplar.coerce(e) for e in params.get("exemplars", [])])
            out = evaluation_records_path(settings, evaluation_id)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("".join(json.dumps(r) + "\n" for r in result["records"]))
        except Exception as exc:
            update_evaluation(settings, evaluation_id, state=RunState.failed,
                              error=f"{type(exc).__name__}: {exc}")
            raise
    update_evaluation(settings, evaluation_id, state=RunState.succeeded,
                      metrics=result["metrics"])
    return get_evaluation(settings, evaluation_id)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="worker.evaluation")
    parser.add_argument("evaluation_id", type=int)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    settings = get_settings()
    watch_parent(args.parent_pid, lambda: update_evaluation(
        settings, args.evaluation_id, state=RunState.failed,
        error=f"its worker (pid {args.parent_pid}) died while it evaluated"))
    try:
        run_evaluation(settings, args.evaluation_id)
    except Exception:
        traceback.print_exc()  # into the log; the evaluation holds the reason
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
