"""Entry point of a training process: `python -m worker.engines.native.main RUN_ID`.

The worker spawns it (a fresh interpreter, never a fork, so CUDA is safe) in
its own process group; a failure is recorded on the run with its reason.
"""

from __future__ import annotations

import sys
import traceback

from studio.services.runs import finish_run
from studio.settings import get_settings
from studio.tables import RunState
from worker.engines.native.trainer import RunCancelled, Trainer


def main(run_id: int) -> int:
    settings = get_settings()
    try:
        Trainer(settings, run_id).run()
    except RunCancelled:
        return 0
    except Exception as exc:
        traceback.print_exc()
        finish_run(settings, run_id, RunState.failed, f"{type(exc).__name__}: {exc}")
        return 1
    finish_run(settings, run_id, RunState.succeeded)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
