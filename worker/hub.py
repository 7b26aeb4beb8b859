"""Push an export folder to the Hugging Face Hub: one commit, bounded retries, clear failures.

The files go up one by one (`preupload_lfs_files`, so progress can be shown),
then a single commit adds them all: the repository gets the whole model or
nothing. Transient failures (5xx, 408, 429, the network) are retried with
exponential backoff; a refused token (401), missing rights (403) or a
missing namespace (404) fail at once with a message that says what to do.
The token is only ever passed to `HfApi`; every message is scrubbed of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

ATTEMPTS = 4
BACKOFF_S = 2.0  # waits 2, 4, 8 s between attempts
TRANSIENT_STATUS = (408, 429, 500, 502, 503, 504)

Progress = Callable[[float, str], None]


class PushError(Exception):
    """A push that failed; the message says why and what to do."""


@dataclass
class Pushed:
    repo_id: str  # namespace/name as the Hub created it
    url: str
    commit: str


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def describe_failure(exc: BaseException, repo_id: str) -> tuple[str, bool]:
    """(message, transient) for an exception raised while pushing to `repo_id`."""
    while isinstance(exc, RuntimeError) and exc.__cause__ is not None:  # LFS upload wrappers
        exc = exc.__cause__
    status = _status_of(exc)
    server = (getattr(exc, "server_message", None) or "").strip().rstrip(".")
    detail = f" ({server})" if server else ""
    if status == 401:
        return (f"the Hub refused the token (401 Unauthorized{detail}): it is invalid, expired "
                "or revoked; create an access token with write access in your Hugging Face "
                "account settings and retry the export with it"), False
    if status == 403:
        return (f"the token may not write to '{repo_id}' (403 Forbidden{detail}): use a token "
                "with write access to that namespace (a fine-grained token needs write "
                "permission on it), or choose a repo id in your own namespace"), False
    if status == 404:
        return (f"the Hub has no repository or namespace '{repo_id}' that this token can see "
                f"(404 Not Found{detail}): check the repo id's namespace (your user name or an "
                "organization you belong to)"), False
    if status in TRANSIENT_STATUS:
        return f"the Hub answered {status}{detail}", True
    if status is not None:
        return f"the Hub refused the push ({status}{detail})", False
    if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
        return f"could not reach the Hub ({type(exc).__name__}: {exc})", True
    return f"{type(exc).__name__}: {exc}", False


def scrub(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def _push_once(api, folder: Path, repo_id: str, private: bool, message: str,
               on_progress: Progress) -> Pushed:
    from huggingface_hub import CommitOperationAdd

    on_progress(0.0, f"creating the repository {repo_id} (if new)")
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    sizes = {p: p.stat().st_size for p in files}
    total = max(sum(sizes.values()), 1)
    operations, done = [], 0
    for n, path in enumerate(files, 1):
        name = path.relative_to(folder).as_posix()
        on_progress(done / total, f"uploading {name} (file {n} of {len(files)}, "
                                  f"{_megabytes(done)} of {_megabytes(total)} sent)")
        operation = CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(path))
        api.preupload_lfs_files(url.repo_id, [operation])
        operations.append(operation)
        done += sizes[path]
    on_progress(1.0, f"committing {len(files)} files to {url.repo_id}")
    commit = api.create_commit(url.repo_id, operations=operations, commit_message=message)
    return Pushed(url.repo_id, str(url), commit.oid)


def push_folder(folder: Path, repo_id: str, *, token: str, private: bool, message: str,
                on_progress: Progress) -> Pushed:
    """Create `repo_id` if needed and commit every file of `folder` to it, retrying what may
    pass on a second try (ATTEMPTS in all, waits doubling from BACKOFF_S). The Hub is
    huggingface_hub's endpoint (HF_ENDPOINT)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # worker logs get the stage messages instead
    api = HfApi(token=token, library_name="icrl-studio")
    attempt, attempts = 1, ATTEMPTS
    while True:
        try:
            return _push_once(api, folder, repo_id, private, message, on_progress)
        except Exception as exc:  # classified below; nothing is swallowed
            reason, transient = describe_failure(exc, repo_id)
            reason = scrub(reason, token)
            if not transient:
                raise PushError(reason) from None
            if attempt == attempts:
                raise PushError(f"{reason}; gave up after {attempts} attempts: retry the "
                                "export later") from None
            wait = BACKOFF_S * 2 ** (attempt - 1)
            on_progress(0.0, f"attempt {attempt} of {attempts} failed: {reason}; "
                             f"retrying in {wait:.0f} s")
            time.sleep(wait)
            attempt += 1
