"""Zero-shot evaluation with the run's tools (method.md, "Evaluation protocol").

k = 0 exemplars, temperature 0.1, at most 512 new tokens per turn and 6 tool
calls, top-3 passages; EM (primary), SubEM, F1, plus how the model used the
tools: calls per tool, and with a tool whose calls can fail (python, the calculator) its tool
errors (an `<output>` of a failed program, a `<result>` the calculator refused), stored as
`code_errors`, the key they had when python was the only such tool. Each question's record
keeps every call with its result and a failure label in the words of the run's tools
(`studio.method.failures`). The same code evaluates a base model and a trained checkpoint.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict

import torch

from studio.ingest import QARow
from studio.method.evaluation import EvalConfig
from studio.method.exemplars import Exemplar
from studio.method.failures import failure_label, label_split, tool_results
from studio.method.prompt import PromptTemplate, build_prompt, instruction_for
from studio.method.reward import score
from studio.method.rollouts import answer_metrics, tool_counts
from studio.method.tags import SEARCH_TOOL
from studio.method.tools import Tool, specs
from worker.engines.native.rollout import RolloutConfig, generate_rollouts


def evaluate(model, tokenizer, rows: list[QARow], tools: list[Tool], config: EvalConfig,
             on_progress: Callable[[int, int], None] | None = None,
             exemplars: Sequence[Exemplar] = ()) -> dict:
    """Metrics over `rows` and one record per question (prediction, scores, tool use, each
    call with its result (`calls`) and the search queries among them (`searches`), its
    failure label in the words of `tools` and its prompt's length); `metrics["labels"]`
    counts the questions per label, `metrics["tool_calls"]` the calls per question of each of
    `tools` (`config.tools`). `config.exemplars` of `exemplars` precede each question (0 in
    the protocol). `on_progress` hears (questions answered, questions) after each turn of the
    model's: a question is answered when its rollout is over, whatever its batch does."""
    rollout_config = RolloutConfig(**asdict(config.limits()), temperature=config.temperature,
                                   top_k_passages=config.top_k)
    prefix = config.assistant_prefix or ""
    tool_specs = specs(tools)
    template = PromptTemplate(instruction=config.instruction or instruction_for(config.tools))
    device = next(model.parameters()).device
    records = []
    model.eval()
    for start in range(0, len(rows), config.batch_size):
        chunk = rows[start:start + config.batch_size]
        prompt_ids = [build_prompt(row.question, exemplars, config.exemplars, template,
                                   layout=config.layout,
                                   assistant_prefix=config.assistant_prefix).token_ids(tokenizer)
                      for row in chunk]
        answered = (lambda over, done=start: on_progress(done + over, len(rows))) \
            if on_progress else None
        rollouts = generate_rollouts(
            model, tokenizer, prompt_ids, tools, rollout_config,
            generator=torch.Generator(device).manual_seed(config.seed + start),
            eos_token_id=tokenizer.eos_token_id, on_finished=answered)
        for row, rollout, prompt in zip(chunk, rollouts, prompt_ids, strict=True):
            response = prefix + rollout.response_text
            reward = score(response, row.golden_answers, answer_match=config.answer_match,
                           tools=tool_specs)
            calls, failed = tool_counts(rollout)
            failed_flags = [s.failed for s in rollout.segments if s.tool is not None]
            results = tool_results(response, tool_specs, failed=failed_flags)
            records.append({"id": row.id, "question": row.question,
                            "golden_answers": row.golden_answers, "prediction": reward.answer,
                            "em": reward.em, "subem": reward.subem, "f1": reward.f1,
                            "acc": reward.acc, "format": reward.format,
                            "search_calls": rollout.num_tool_calls,
                            "tool_calls": calls, "code_errors": failed,
                            "searches": [c.input for c in results
                                         if c.tool == SEARCH_TOOL.name],
                            "calls": [asdict(c) for c in results],
                            "label": failure_label(response, row.golden_answers, tool_specs,
                                                   answer_match=config.answer_match,
                                                   failed=failed_flags),
                            "stop_reason": rollout.stop_reason, "prompt_tokens": len(prompt)})
        if on_progress:
            on_progress(len(records), len(rows))

    metrics = answer_metrics(records)
    metrics["tool_calls"] = {
        t.name: float(statistics.fmean(r["tool_calls"].get(t.name, 0) for r in records))
        if records else 0.0 for t in tool_specs}
    if any(tool.can_fail for tool in tools):
        metrics["code_errors"] = sum(r["code_errors"] for r in records)
    metrics["labels"] = label_split((r["label"] for r in records), tool_specs)
    return {"metrics": metrics, "records": records}
