"""Following a run by polling: what the CLI's `--wait` and the Live run page read each tick.

One poll (`run_progress`) reads the run first and its metric rows after, so the poll that
first sees a stopped run also holds every step it wrote. The follower keeps only the next
step it wants (`since_step`). The SSE stream (`run_streams.py`) follows by row cursors
instead, because it must resume from any event id a browser hands back.
"""

from __future__ import annotations

from dataclasses import dataclass

from studio.services.run_history import run_events, run_metrics
from studio.services.runs import FINAL_STATES, get_run
from studio.settings import Settings


@dataclass(frozen=True)
class RunProgress:
    run: dict
    rows: list[dict]  # metric rows from `since_step` on, in step order
    events: list[dict]  # every event so far, in step order
    final: bool  # the run has stopped: nothing more will come

    def next_step(self, since_step: int) -> int:
        """The step the next poll asks from."""
        return self.rows[-1]["step"] + 1 if self.rows else since_step


def run_progress(settings: Settings, run_id: int, since_step: int = 0) -> RunProgress:
    run = get_run(settings, run_id)
    return RunProgress(run, run_metrics(settings, run_id, since_step),
                       run_events(settings, run_id), run["state"] in FINAL_STATES)
