"""Jobs a dead worker left running: every kind swept by one rule (`studio.jobs.heartbeats`).

A run, an evaluation, an export or an index build whose heartbeat stopped for three periods
is moved to its kind's `lost` state with what to do next: a run is interrupted and resumes
from its checkpoint, an evaluation is interrupted and is asked again, an export is
interrupted and retried, an index build fails and its corpus is uploaded again. Every live
worker sweeps at each of its own heartbeats and `studio up` sweeps at start, so a killed
studio's jobs show what happened as soon as it is back. (A calibration, which never beats,
has its own rule: `calibrations.LOST_AFTER`.)
"""

from __future__ import annotations

from studio.jobs import heartbeats
from studio.services import corpora, evaluations, exports, runs
from studio.settings import Settings

ADVICE = (
    (evaluations.EVALUATION_JOBS, lambda row: "evaluate again (the Evaluate page, `studio eval`)"),
    (exports.EXPORT_JOBS, lambda row: (
        f"retry it (the Export page, POST /api/v1/exports/{row.id}/retry)")),
    (corpora.INDEX_BUILDS, lambda row: "delete the corpus and upload its file again"),
)
"""What to do with a lost job of each kind but runs (`runs.reap_stale_runs` words its own)."""


def reap_lost_jobs(settings: Settings) -> dict[str, list[int]]:
    """Sweep every kind; the ids moved, by kind."""
    reaped = {runs.RUN_JOBS.kind: runs.reap_stale_runs(settings)}
    for job, advice in ADVICE:
        reaped[job.kind] = heartbeats.reap(settings, job, lambda row, advice=advice: (
            f"no heartbeat from its worker for {heartbeats.silence(settings)}; {advice(row)}"))
    return reaped
