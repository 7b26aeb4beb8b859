"""Entry point of a veRL run's process: `python -m worker.engines.verl.main RUN_ID`.

The worker spawns it in its own process group, as it does the native
engine's; a failure is recorded on the run with its reason.
"""

from __future__ import annotations

import sys
import traceback

from studio.services.runs import finish_run
from studio.settings import get_settings
from studio.tables import RunState
from worker.engines.native.trainer import RunCancelled
from worker.engines.verl.launcher import LaunchError, VerlLaunch


def main(run_id: int) -> int:
    settings = get_settings()
    try:
        VerlLaunch(settings, run_id).run()
    except RunCancelled:
        return 0
    except LaunchError as exc:
        print(exc, file=sys.stderr)
        finish_run(settings, run_id, RunState.failed, str(exc))
        return 1
    except Exception as exc:
        traceback.print_exc()
        finish_run(settings, run_id, RunState.failed, f"{type(exc).__name__}: {exc}")
        return 1
    finish_run(settings, run_id, RunState.succeeded)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
