"""Mirrors a run's metric rows to TensorBoard event files while it trains (`mirror.tensorboard`).

The training process writes its metrics to SQL only. The task that watches it follows
the run's rows in the order they were written and appends them to event files under
`runs/<id>/tensorboard/`, so native and veRL runs mirror alike and `tensorboard --logdir`
shows what the studio's charts show. A step written again (a resumed attempt re-runs the
steps after its checkpoint, with new row ids) purges what the files held from that step
on, so they never hold two values for one step. A mirror that cannot write is recorded
once as a warning event on the run and then left alone: it never stops training.
"""

from __future__ import annotations

import logging
from pathlib import Path

from studio.services import run_history, runs
from studio.services.run_folder import RunFolder
from studio.settings import Settings

log = logging.getLogger(__name__)
SCALAR_PREFIX = "train/"
NOT_SCALARS = ("id", "step")
PAGE_ROWS = 1000  # metric rows read per query


def tensorboard_folder(settings: Settings, run_id: int) -> Path:
    return RunFolder.of(settings, run_id).tensorboard


class TensorBoardMirror:
    """Follows one run's metric rows; `sync` appends what is new, `close` flushes."""

    def __init__(self, settings: Settings, run_id: int):
        self.settings, self.run_id = settings, run_id
        self.folder = tensorboard_folder(settings, run_id)
        self._writer = None
        self._after_id = 0
        self._next_step = 0
        self._broken = False

    def _open(self, purge_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        if self._writer is not None:
            self._writer.close()
        self._writer = SummaryWriter(str(self.folder), purge_step=purge_step)

    def _write(self, row: dict) -> None:
        step = row["step"]
        if self._writer is None or step < self._next_step:
            self._open(purge_step=step)
        for name, value in row.items():
            if name not in NOT_SCALARS and isinstance(value, int | float) \
                    and not isinstance(value, bool):
                self._writer.add_scalar(SCALAR_PREFIX + name, value, step)
        self._next_step = step + 1

    def sync(self) -> int:
        """Write the rows recorded since the last call; the number written."""
        if self._broken:
            return 0
        try:
            written, page_full = 0, True
            while page_full:  # a short page is the last: no extra query to learn that
                rows = run_history.metrics_written_after(self.settings, self.run_id,
                                                         self._after_id, limit=PAGE_ROWS)
                for row in rows:
                    self._write(row)
                    self._after_id = row["id"]
                written += len(rows)
                page_full = len(rows) == PAGE_ROWS
            if self._writer is not None:
                self._writer.flush()
            return written
        except Exception as exc:  # an optional copy: report it, keep training
            self._broken = True
            reason = ("the worker has no tensorboard package (pip install tensorboard)"
                      if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}")
            log.warning("run %s: TensorBoard mirror stopped: %s", self.run_id, reason)
            runs.record_event(self.settings, self.run_id, "warning",
                              f"metrics are not mirrored to TensorBoard: {reason}",
                              step=self._next_step)
            return 0

    def close(self) -> None:
        self.sync()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
