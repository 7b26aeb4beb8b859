"""The run's questions as veRL's `RLHFDataset` reads them (parquet), per the curriculum.

One row per question: `prompt` (the chat messages), `data_source` (the QA
set's name), `ability` (the run's tools, "search+python"), `reward_model.ground_truth`
(the gold answers and the question, which veRL copies into its rollout dumps so the studio
can file them), `extra_info` (`index`, `split`, the assistant prefix the reward must see)
and `agent_name`. The agent loop rebuilds each prompt with the exemplar count of
the step it runs in (`split: train`) or with none (`split: val`); a training
row's stored prompt is the largest stage's, which is the one veRL's prompt
budget (`data.max_prompt_length`) has to hold, and `write_datasets` checks
that it does before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from studio.ingest import QARow
from studio.method.exemplars import Exemplar
from studio.method.prompt import longest_prompt_inputs
from studio.run_config import RunConfig
from studio.services import qa_sets
from studio.services.run_plans import RunPlan
from studio.settings import Settings
from worker.engines.verl.config import AGENT_NAME, RunFiles


class PromptTooLong(ValueError):
    """The largest stage's prompt does not fit the run's prompt budget."""


@dataclass(frozen=True)
class DatasetReport:
    train_rows: int
    val_rows: int
    longest_prompt_tokens: int  # the largest stage's prompt with the longest question


def dataset_row(config: RunConfig, row: QARow, index: int, source: str, split: str,
                exemplars: list[Exemplar], k: int) -> dict:
    """One parquet row (see the module docstring)."""
    prompt = config.build_prompt(row.question, exemplars, k)
    return {
        "data_source": source,
        "prompt": prompt.messages,
        "ability": "+".join(config.tools),
        "reward_model": {"style": "rule",
                         "ground_truth": {"target": list(row.golden_answers),
                                          "question": row.question}},
        "extra_info": {"index": index, "split": split, "question_id": row.id,
                       "assistant_prefix": prompt.assistant_prefix},
        "agent_name": AGENT_NAME,
    }


def longest_prompt_tokens(config: RunConfig, tokenizer, questions: list[QARow],
                          exemplars: list[Exemplar], k: int) -> tuple[int, int]:
    """(tokens, row) of the longest k-exemplar prompt, measured as launch validation does
    (`studio.method.prompt.longest_prompt_inputs`)."""
    longest, shown = longest_prompt_inputs(tokenizer, [q.question for q in questions],
                                           exemplars, config.prompt.exemplar_selection != "first")
    return max(((len(config.build_prompt(questions[i].question, shown, k, first=True)
                     .token_ids(tokenizer)),
                 i) for i in longest), default=(0, 0))


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    pq.write_table(pa.Table.from_pylist(rows), partial)
    partial.replace(path)


def write_datasets(settings: Settings, plan: RunPlan, files: RunFiles,
                   tokenizer) -> DatasetReport:
    """Write `train.parquet` (and `val.parquet` when the run names eval sets), from the
    data the run's plan pins."""
    config, exemplars = plan.config, plan.exemplar_list()
    train = qa_sets.load_rows(settings, plan.train.id)
    k = plan.curriculum.max_exemplars
    tokens, at = longest_prompt_tokens(config, tokenizer, train, exemplars, k)
    if tokens > config.grpo.max_prompt_tokens:
        raise PromptTooLong(
            f"grpo.max_prompt_tokens: the prompt with {k} exemplars and the longest question "
            f"({plan.train.name} row {at + 1}) has {tokens} tokens, more than "
            f"{config.grpo.max_prompt_tokens}; raise grpo.max_prompt_tokens or shorten the "
            "exemplars")
    _write(files.train_data, [dataset_row(config, row, i, plan.train.name, "train",
                                          exemplars, k) for i, row in enumerate(train)])
    val = [dataset_row(config, row, i, ref.name, "val", exemplars, 0)
           for ref in plan.eval for i, row in enumerate(qa_sets.load_rows(settings, ref.id))]
    if val:
        _write(files.val_data, val)
    return DatasetReport(len(train), len(val), tokens)
