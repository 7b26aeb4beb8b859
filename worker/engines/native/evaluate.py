"""Zero-shot evaluation with the search tool (method.md, "Evaluation protocol").

k = 0 exemplars, temperature 0.1, at most 512 new tokens per turn and 6 tool
calls, top-3 passages; EM (primary), SubEM, F1, plus how the model used the
tool. The same code evaluates a base model and a trained checkpoint.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict

import torch

from studio.ingest import QARow
from studio.method.evaluation import EvalConfig
from studio.method.failures import failure_label, label_split
from studio.method.prompt import PromptTemplate, build_prompt
from studio.method.reward import score
from studio.method.rollouts import tool_use
from studio.method.tags import search_queries
from studio.method.tools import SearchBackend
from worker.engines.native.rollout import RolloutConfig, generate_rollouts


def evaluate(model, tokenizer, rows: list[QARow], search: SearchBackend, config: EvalConfig,
             on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Metrics over `rows` and one record per question (prediction, scores, tool use, its
    searches and its failure label); `metrics["labels"]` counts the questions per label."""
    rollout_config = RolloutConfig(**asdict(config.limits()), temperature=config.temperature,
                                   top_k_passages=config.top_k)
    prefix = config.assistant_prefix or ""
    device = next(model.parameters()).device
    records = []
    model.eval()
    for start in range(0, len(rows), config.batch_size):
        chunk = rows[start:start + config.batch_size]
        prompt_ids = []
        for row in chunk:
            template = PromptTemplate(instruction=config.instruction) \
                if config.instruction else None
            prompt = build_prompt(row.question, [], 0, template, layout=config.layout,
                                  assistant_prefix=config.assistant_prefix)
            prompt_ids.append(prompt.token_ids(tokenizer))
        rollouts = generate_rollouts(
            model, tokenizer, prompt_ids, search, rollout_config,
            generator=torch.Generator(device).manual_seed(config.seed + start),
            eos_token_id=tokenizer.eos_token_id)
        for row, rollout in zip(chunk, rollouts, strict=True):
            response = prefix + rollout.response_text
            reward = score(response, row.golden_answers, answer_match=config.answer_match)
            records.append({"id": row.id, "question": row.question,
                            "golden_answers": row.golden_answers, "prediction": reward.answer,
                            "em": reward.em, "subem": reward.subem, "f1": reward.f1,
                            "acc": reward.acc, "format": reward.format,
                            "search_calls": rollout.num_tool_calls,
                            "searches": search_queries(response),
                            "label": failure_label(response, row.golden_answers,
                                                   answer_match=config.answer_match),
                            "stop_reason": rollout.stop_reason})
        if on_progress:
            on_progress(len(records), len(rows))

    def mean(key: str) -> float:
        return float(statistics.fmean(r[key] for r in records)) if records else 0.0

    metrics = {key: mean(key) for key in ("em", "subem", "f1", "acc", "format")}
    metrics.update(tool_use([r["prediction"] for r in records],
                            [r["search_calls"] for r in records]))
    metrics["questions"] = len(records)
    metrics["labels"] = label_split(r["label"] for r in records)
    return {"metrics": metrics, "records": records}
