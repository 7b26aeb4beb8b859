"""Entry point of a training process: `python -m worker.engines.native.main RUN_ID
--attempt N --parent-pid PID`.

The worker spawns it (a fresh interpreter, never a fork, so CUDA is safe) in
its own process group; a failure is recorded on the run with its reason. It
acts on the run only as its attempt N, and stops when its worker PID is gone.
"""

from __future__ import annotations

import sys

from studio.settings import get_settings
from worker.engines.native.trainer import Trainer
from worker.parent_watch import run_attempt, start_training_process


def main(argv: list[str]) -> int:
    run_id, attempt = start_training_process("worker.engines.native.main", argv)
    return run_attempt(run_id, attempt, lambda: Trainer(get_settings(), run_id, attempt).run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
