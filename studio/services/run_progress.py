"""Following a run from a polling client: the CLI's `--wait` and the Live run page.

A `RunFollower` reads with the SSE stream's own reader and cursor (`run_streams.read_new`,
`StreamCursor`, `Settler`): each poll returns the rows written since the last one, in
the order they were written, so nothing is missed or repeated even while two writers
commit out of id order, and a step run again after a resume comes back as a new row. The
stream's `RunFeed` is the same follower shared by every browser of a process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from studio.jobs.lifecycle import FINAL_STATES
from studio.services.run_streams import (
    EVENTS_TABLE,
    METRICS_TABLE,
    Settler,
    StreamCursor,
    StreamOptions,
    read_new,
)
from studio.services.runs import get_run
from studio.settings import Settings


@dataclass(frozen=True)
class RunProgress:
    run: dict  # the run as `runs.get_run` shows it, read before the rows
    metrics: list[dict]  # metric rows new since the last poll, in the order written
    events: list[dict]  # events new since the last poll, in the order written
    final: bool  # the run has stopped and everything it wrote has been returned


class RunFollower:
    def __init__(self, settings: Settings, run_id: int, options: StreamOptions | None = None):
        self.settings, self.run_id = settings, run_id
        self.options = options or StreamOptions()
        self.cursor = StreamCursor()
        self.settler = Settler(self.options.settle_seconds)

    def poll(self) -> RunProgress:
        run = get_run(self.settings, self.run_id)
        new: dict[int, list[dict]] = {METRICS_TABLE: [], EVENTS_TABLE: []}
        while True:
            snapshot = read_new(self.settings.sqlalchemy_url, self.run_id, self.cursor,
                                self.options.batch)
            now = time.monotonic()
            for row in snapshot.in_time_order():
                self.settler.seen(row.table, row.id, now)
                self.cursor = self.cursor.add(row.table, row.id)
                if row.table in new:
                    new[row.table].append(row.data)
            self.cursor = self.settler.settle(self.cursor, now)
            if snapshot.drained:
                break
        return RunProgress(run, new[METRICS_TABLE], new[EVENTS_TABLE],
                           run["state"] in FINAL_STATES)
