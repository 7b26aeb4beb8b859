"""Entry point of a veRL run's process: `python -m worker.engines.verl.main RUN_ID
--attempt N --parent-pid PID`.

The worker spawns it in its own process group, as it does the native
engine's, and it stops when its worker is gone (`watch_parent`). It checks
the machine first, before importing transformers or veRL, so a run that
cannot start here fails in seconds; every failure is recorded on the run
with its reason.
"""

from __future__ import annotations

import socket
import sys

from studio.services.run_plans import load_plan
from studio.settings import get_settings
from worker.engines.verl.preflight import LaunchError, preflight
from worker.parent_watch import run_attempt, start_training_process


def main(argv: list[str]) -> int:
    run_id, attempt = start_training_process("worker.engines.verl.main", argv)
    settings = get_settings()

    def train() -> None:
        preflight(load_plan(settings, run_id).config, socket.gethostname())
        from worker.engines.verl.launcher import VerlLaunch  # heavy: only once the machine fits

        VerlLaunch(settings, run_id, attempt).run()

    return run_attempt(run_id, attempt, train, known_errors=(LaunchError,))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
