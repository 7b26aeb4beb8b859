"""Run snippets of Python in the sandbox, a batch at a time, and say how each ended."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .bwrap import ENVIRONMENT, Limits, command, interpreter, require

_CHILD_PID = re.compile(r'"child-pid"\s*:\s*(\d+)')
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")


@dataclass(frozen=True)
class Execution:
    """How one snippet ended. `error` is None for a clean exit, else one of "timeout",
    "memory", "output limit", "exception: <Name>", "exit <code>", "killed: <SIGNAL>",
    "code too long", "invalid code: a NUL byte": the kinds evaluation counts."""

    stdout: str
    stderr: str
    exit_code: int | None  # None when the run was stopped or killed by a signal
    timed_out: bool  # past the wall-clock or the CPU-time limit
    killed: bool  # ended by a signal (the sandbox's own kill included)
    error: str | None
    seconds: float


def _marker(limit: int) -> str:
    return f"\n[output truncated: more than {limit} bytes]"


_COMPILE_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})
"""Raised before the code runs: Python prints them with no "Traceback" header."""


def _exception_kind(stderr: str) -> str | None:
    """The exception's name from a traceback's last line ("NameError: name 'x' ..."), or
    from a compile error's ("SyntaxError: invalid syntax"), which has no traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    match = _EXCEPTION_LINE.match(lines[-1]) if lines else None
    if not match:
        return None
    kind = match.group(1).rsplit(".", 1)[-1]
    traceback = "Traceback (most recent call last):" in stderr
    return kind if traceback or kind in _COMPILE_ERRORS else None


def _error(returncode: int | None, stderr: str, timed_out: bool, over_output: bool) -> str | None:
    if over_output:
        return "output limit"
    if timed_out:
        return "timeout"
    if returncode == 0:
        return None
    kind = _exception_kind(stderr)
    if kind == "MemoryError":
        return "memory"
    if kind:
        return f"exception: {kind}"
    # bwrap passes a signal's death on as 128 + the signal's number.
    if returncode is not None and returncode > 128 and returncode - 128 < signal.NSIG:
        sig = signal.Signals(returncode - 128)
        return "timeout" if sig == signal.SIGXCPU else f"killed: {sig.name}"
    return f"exit {returncode}"


def _stop(proc: subprocess.Popen, status: bytearray) -> None:
    """Kill the sandbox and return once all of it is gone. Killing its init (bwrap's
    `child-pid`) makes the kernel kill everything in the PID namespace, and bwrap exits
    only after that; bwrap's own group is killed too in case init was not started yet."""
    found = _CHILD_PID.search(status.decode("utf-8", "replace"))
    if found:
        try:
            os.kill(int(found.group(1)), signal.SIGKILL)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    if proc.poll() is None:  # not reaped yet, so its group id is still its own
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Sandbox:
    """Runs Python snippets isolated by bubblewrap (see docs/sandbox.md), `concurrency`
    at a time. Built only where isolation works: otherwise SandboxUnavailable says what
    to install, and nothing runs."""

    def __init__(self, limits: Limits | None = None, hidden: Iterable[Path] = (),
                 python: str = sys.executable, concurrency: int = 4, bwrap: str | None = None):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.limits = limits or Limits()
        self.hidden = tuple(Path(p) for p in hidden)
        self.python = interpreter(python)
        self.concurrency = concurrency
        self.bwrap = require(bwrap, self.python)

    def run_batch(self, codes: list[str]) -> list[Execution]:
        """One Execution per snippet, in order."""
        if len(codes) <= 1:
            return [self.run(code) for code in codes]
        with ThreadPoolExecutor(min(self.concurrency, len(codes))) as pool:
            return list(pool.map(self.run, codes))

    def run(self, code: str) -> Execution:
        """Run one snippet in a fresh sandbox and say how it ended."""
        limits = self.limits
        if len(code.encode("utf-8", "surrogatepass")) > limits.code_bytes:
            return Execution("", "", None, False, False, "code too long", 0.0)
        if "\0" in code:  # a command line cannot carry it, and Python refuses it anyway
            return Execution("", "", None, False, False, "invalid code: a NUL byte", 0.0)
        status_read, status_write = os.pipe()
        argv = command(self.bwrap, self.python, self.hidden, limits, code, status_write)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, pass_fds=(status_write,),
                                    start_new_session=True, env={"PATH": ENVIRONMENT["PATH"]})
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        reads = {out_fd: bytearray(), err_fd: bytearray(), status_read: bytearray()}
        timed_out = over = False
        try:
            timed_out, over = self._collect(proc, reads, start + limits.wall_seconds)
        finally:
            if proc.poll() is None:  # stopped, or an exception on the way
                _stop(proc, reads[status_read])
            for f in (proc.stdout, proc.stderr):
                f.close()
            os.close(status_read)
        out, err = (self._text(reads[fd], limits.output_bytes) for fd in (out_fd, err_fd))
        signalled = timed_out or over or proc.returncode > 128
        error = _error(proc.returncode, err, timed_out, over)
        return Execution(out, err, None if signalled else proc.returncode, error == "timeout",
                         signalled, error, time.monotonic() - start)

    def _collect(self, proc: subprocess.Popen, reads: dict[int, bytearray],
                 deadline: float) -> tuple[bool, bool]:
        """Read the pipes into `reads` until they close and bwrap exits, the deadline passes
        or stdout or stderr passes the output limit: returns (timed_out, over_output)."""
        cap = self.limits.output_bytes
        status = list(reads)[-1]
        with selectors.DefaultSelector() as selector:
            for fd in reads:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    return True, False
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fd)
                    reads[key.fd] += chunk
                    if key.fd != status and len(reads[key.fd]) > cap:
                        return False, True
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            return True, False
        return False, False

    @staticmethod
    def _text(data: bytearray, cap: int) -> str:
        text = bytes(data[:cap]).decode("utf-8", "replace")
        return text + _marker(cap) if len(data) > cap else text
