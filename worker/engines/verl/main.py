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
import traceback

from studio.db import session_scope
from studio.run_config import RunConfig
from studio.services.runs import finish_run
from studio.settings import Settings, get_settings
from studio.tables import Run, RunState
from worker.engines.verl.preflight import LaunchError, preflight
from worker.parent_watch import start_training_process


def _failed(settings: Settings, run_id: int, attempt: int, message: str) -> int:
    print(message, file=sys.stderr)
    finish_run(settings, run_id, RunState.failed, message, attempt=attempt)
    return 1


def main(argv: list[str]) -> int:
    run_id, attempt = start_training_process("worker.engines.verl.main", argv)
    settings = get_settings()
    with session_scope(settings.sqlalchemy_url) as session:
        config = RunConfig.model_validate(session.get(Run, run_id).config)
    try:
        preflight(config, socket.gethostname())
    except LaunchError as exc:
        return _failed(settings, run_id, attempt, str(exc))
    from worker.engines.native.trainer import RunStopped
    from worker.engines.verl.launcher import VerlLaunch

    try:
        VerlLaunch(settings, run_id, attempt).run()
    except RunStopped as stopped:
        print(f"stopped: {stopped}", file=sys.stderr)
        return 0
    except LaunchError as exc:
        return _failed(settings, run_id, attempt, str(exc))
    except Exception as exc:
        traceback.print_exc()
        return _failed(settings, run_id, attempt, f"{type(exc).__name__}: {exc}")
    finish_run(settings, run_id, RunState.succeeded, attempt=attempt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
