"""The bubblewrap command line that isolates one snippet (see docs/sandbox.md).

Every snippet runs in fresh mount, PID, network, IPC, UTS and cgroup namespaces, as an
unprivileged user (`isolation`: a user namespace too when the studio is not root).
The filesystem is an allow-list: /usr (with Debian's /bin, /lib... links), the few /etc
files the dynamic loader reads, and the interpreter's own prefixes, all read-only; a
size-capped tmpfs at /tmp is the working directory and, with /dev/shm, the only place
that can be written. The environment is cleared. Resource limits are set by `prlimit`
inside, as that user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

WORKDIR = "/tmp"
NOBODY = "65534"
PRLIMIT, SETPRIV = "/usr/bin/prlimit", "/usr/bin/setpriv"
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "TMPDIR": WORKDIR,
    "LANG": "C.UTF-8",
    # One thread each: a numerical library's thread pool would eat the memory limit.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


class SandboxUnavailable(RuntimeError):
    """This machine cannot isolate a snippet; the python tool refuses to run code."""


@dataclass(frozen=True)
class Limits:
    """What one snippet may use. Defaults suit a tool call in a training rollout."""

    cpu_seconds: int = 5
    wall_seconds: float = 10.0
    memory_mb: int = 512  # address space: Python raises MemoryError past it
    processes: int = 8  # tasks, threads included; memory is per process
    output_bytes: int = 16_384  # per stream; more ends the run
    tmp_mb: int = 64  # each of /tmp and /dev/shm; also the largest file
    code_bytes: int = 100_000  # a command-line argument holds at most 128 KiB

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"sandbox limit {name} must be positive, got {value!r}")


@dataclass(frozen=True)
class Interpreter:
    """A Python and the folders it needs, as the sandbox must show them."""

    executable: str
    prefixes: tuple[str, ...]


@cache
def interpreter(executable: str) -> Interpreter:
    """`executable` and its prefixes (a venv's and its base install's), asked of it once."""
    ask = "import sys; print(sys.prefix, sys.base_prefix, sep='\\n')"
    try:
        out = subprocess.run([executable, "-I", "-c", ask], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"cannot run the sandbox's Python {executable}: {exc}") from exc
    return Interpreter(executable, tuple(dict.fromkeys(out.splitlines())))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _open_parents(path: Path) -> list[str]:
    """Make `path`'s parents 0755: bwrap (as root) makes missing ones 0700, which the
    snippet's user could not pass."""
    args: list[str] = []
    for parent in reversed(path.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def mounts(python: Interpreter, hidden: tuple[Path, ...]) -> list[str]:
    """bwrap's filesystem arguments: the allow-list, then a tmpfs over every hidden folder
    that a bound folder would show."""
    args = ["--ro-bind", "/usr", "/usr"]
    for link in SYSTEM_LINKS:
        path = Path(link)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), link]
        elif path.exists():
            args += ["--ro-bind", link, link]
    args += _open_parents(Path(LOADER_FILES[0]))
    for name in LOADER_FILES:
        args += ["--ro-bind-try", name, name]
    bound: list[tuple[Path, Path]] = [(Path("/usr"), Path("/usr"))]
    for prefix in python.prefixes:
        dest = Path(prefix).absolute()
        if any(_under(dest, d) or _under(dest.resolve(), s) for s, d in bound):
            continue
        args += _open_parents(dest) + ["--ro-bind", str(dest), str(dest)]
        bound.append((dest.resolve(), dest))
    for path in hidden:
        real = path.resolve()
        for source, dest in bound:
            if _under(real, source):
                args += ["--tmpfs", str(dest / real.relative_to(source))]
    return args


def isolation(as_root: bool) -> tuple[list[str], list[str]]:
    """bwrap's namespace arguments and what to run first inside, for the caller's user.

    The snippet must run as an unprivileged user outside every namespace too: a process
    whose real user is root ignores RLIMIT_NPROC, even in a user namespace of its own. A
    plain user's bwrap makes a user namespace (kernel user: the caller; nested ones
    disabled) and the process count is this sandbox's own. Root's bwrap sets up the other
    namespaces with no user namespace, and `setpriv` then becomes `nobody` with no
    capabilities: the process count is then shared by every snippet running at once."""
    common = ["--die-with-parent", "--new-session", "--hostname", "sandbox", "--clearenv"]
    if not as_root:
        return ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
                "--uid", NOBODY, "--gid", NOBODY, *common], []
    drop = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", *common], drop


def command(bwrap: str, python: Interpreter, hidden: tuple[Path, ...], limits: Limits,
            code: str, status_fd: int | None = None) -> list[str]:
    """The whole argv that runs `code` with `limits` in a fresh sandbox; bwrap reports the
    host pid of the sandbox's init on `status_fd` (as JSON) so that it can be killed."""
    tmp_bytes = str(limits.tmp_mb * 1024 * 1024)
    namespaces, first = isolation(os.geteuid() == 0)
    args = [bwrap, *namespaces]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    for key, value in ENVIRONMENT.items():
        args += ["--setenv", key, value]
    # The private folders first: an interpreter under /tmp is bound on top of them.
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", tmp_bytes, "--perms", "1777", "--tmpfs", WORKDIR,
             "--size", tmp_bytes, "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += mounts(python, hidden)
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR, "--", *first]
    cpu = limits.cpu_seconds
    args += [PRLIMIT, f"--cpu={cpu}:{cpu + 1}",
             f"--as={limits.memory_mb * 1024 * 1024}", f"--nproc={limits.processes}",
             f"--fsize={tmp_bytes}", "--nofile=256", "--core=0", "--"]
    return args + [python.executable, "-I", "-B", "-u", "-c", code]


@cache
def require(bwrap: str | None, python: Interpreter) -> str:
    """The path of a bwrap that can build this sandbox here; else SandboxUnavailable naming
    what is missing. Never a reason to run code without it."""
    path = shutil.which(bwrap or "bwrap")
    if path is None:
        raise SandboxUnavailable(
            "the python tool runs code only inside a bubblewrap sandbox, and 'bwrap' is not "
            f"on PATH: {INSTALL_HINT}")
    for tool in (PRLIMIT, SETPRIV):
        if not Path(tool).exists():
            raise SandboxUnavailable(f"the sandbox needs {tool}, which is missing: "
                                     "install util-linux")
    probe = command(path, python, (), Limits(), "pass")
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL, env={"PATH": ENVIRONMENT["PATH"]})
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"bwrap could not start a sandbox: {exc}") from exc
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"bwrap could not start a sandbox here ({done.stderr.strip() or done.returncode}); "
            "it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            "user.max_user_namespaces > 0; in a container, a seccomp profile that allows "
            "them, e.g. docker run --security-opt seccomp=unconfined).")
    return path
