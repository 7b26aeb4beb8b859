"""Entry point of a training process: `python -m worker.engines.native.main RUN_ID
--attempt N --parent-pid PID`.

The worker spawns it (a fresh interpreter, never a fork, so CUDA is safe) in
its own process group; a failure is recorded on the run with its reason. It
acts on the run only as its attempt N, and stops when its worker PID is gone.
"""

from __future__ import annotations

import sys
import traceback

from studio.services.runs import finish_run
from studio.settings import get_settings
from studio.tables import RunState
from worker.engines.native.trainer import RunStopped, Trainer
from worker.parent_watch import start_training_process


def main(argv: list[str]) -> int:
    run_id, attempt = start_training_process("worker.engines.native.main", argv)
    settings = get_settings()
    try:
        Trainer(settings, run_id, attempt).run()
    except RunStopped as stopped:
        print(f"stopped: {stopped}", file=sys.stderr)
        return 0
    except Exception as exc:
        traceback.print_exc()
        finish_run(settings, run_id, RunState.failed, f"{type(exc).__name__}: {exc}",
                   attempt=attempt)
        return 1
    finish_run(settings, run_id, RunState.succeeded, attempt=attempt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
