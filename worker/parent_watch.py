"""A training process stops when the worker that spawned it is gone.

The worker starts the training process in a session of its own (so that a
cancel can kill the whole process group), which also means the process
outlives a worker killed with SIGKILL. Left alone it would go on writing to a
run the studio has marked interrupted, or race a resumed attempt. So it
watches its parent: once re-parented (the worker died), it runs a last
callback (mark its attempt interrupted) and kills its own process group.
Everything it wrote before is kept: each step is one transaction and each
checkpoint a rename, so dying between them loses nothing already written.

Both engines' entry points start with `start_training_process` and end with
`run_attempt`, which records the outcome on the run as their attempt.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable

from studio.services.run_recorder import RunStopped

POLL_SECONDS = 0.5


def watch_parent(parent_pid: int, on_orphaned: Callable[[], None]) -> threading.Thread:
    """Poll the parent pid from a daemon thread; when it is no longer `parent_pid`, call
    `on_orphaned` and kill this process group (SIGKILL: no handler can keep it alive)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(POLL_SECONDS)
        try:
            on_orphaned()
        except Exception as exc:  # the kill below matters more than the record
            print(f"worker {parent_pid} is gone; not recorded: {exc}", file=sys.stderr)
        finally:
            sys.stderr.flush()
            os.killpg(os.getpgrp(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def start_training_process(prog: str, argv: list[str]) -> tuple[int, int]:
    """An engine's process start: `RUN_ID --attempt N --parent-pid PID`, then watch the worker
    (its attempt is marked interrupted if the worker dies). Returns (run id, attempt)."""
    from studio.services.runs import interrupt_run
    from studio.settings import get_settings

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("run_id", type=int)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args(argv)
    settings = get_settings()
    watch_parent(args.parent_pid, lambda: interrupt_run(
        settings, args.run_id, args.attempt,
        f"its worker (pid {args.parent_pid}) died while it trained"))
    return args.run_id, args.attempt


def run_attempt(run_id: int, attempt: int, train: Callable[[], None],
                known_errors: tuple[type[Exception], ...] = ()) -> int:
    """Run `train()` and record the outcome as `attempt`: succeeded, or failed with its reason
    (`known_errors` by their message alone, anything else with its type and a traceback in
    the log; a `UserError`, such as data the run's plan pins that is gone, is known). A
    stopped run is already recorded. Returns the process's exit code."""
    from studio.jobs.lifecycle import RunState
    from studio.services.errors import UserError
    from studio.services.runs import finish_run
    from studio.settings import get_settings

    settings = get_settings()
    try:
        train()
    except RunStopped as stopped:
        print(f"stopped: {stopped}", file=sys.stderr)
        return 0
    except (UserError, *known_errors) as exc:
        reason = str(exc)
    except Exception as exc:
        traceback.print_exc()
        reason = f"{type(exc).__name__}: {exc}"
    else:
        finish_run(settings, run_id, RunState.succeeded, attempt=attempt)
        return 0
    print(reason, file=sys.stderr)
    finish_run(settings, run_id, RunState.failed, reason, attempt=attempt)
    return 1
