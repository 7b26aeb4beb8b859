"""Where an evaluation's files live in the data folder: its per-question records and its
process's log. Apart from the evaluations service so that the runs service, which deletes a
run's evaluations with their files, need not import it (the evaluations service reads runs)."""

from __future__ import annotations

from pathlib import Path

from studio.settings import Settings


def evaluation_records_path(settings: Settings, evaluation_id: int) -> Path:
    """One JSON line per question of an evaluation (prediction, scores, tool use)."""
    return settings.resolved_data_dir / "evaluations" / f"{evaluation_id}.jsonl"


def evaluation_log_path(settings: Settings, evaluation_id: int) -> Path:
    """The evaluation process's output."""
    return settings.resolved_data_dir / "evaluations" / f"{evaluation_id}.log"
