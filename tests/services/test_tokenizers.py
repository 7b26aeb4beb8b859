"""The services' tokenizer cache under the web app's threads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.tiny_model import build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter, so transformers is imported for the first time by the threads.
FIRST_CALLS_AT_ONCE = """
import sys, threading
from studio.services.tokenizers import cached_tokenizer
start, failed = threading.Barrier(8), []
def load():
    start.wait()
    try:
        cached_tokenizer(sys.argv[1], sys.argv[2])
    except Exception as exc:
        failed.append(repr(exc))
threads = [threading.Thread(target=load) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failed)
"""


def test_first_calls_at_once_all_get_the_tokenizer(tmp_path):
    """Eight threads at once, as a page load's previews: before the lock, seven failed with
    "cannot import name 'AutoTokenizer' from 'transformers'"."""
    model = build_tiny_model(tmp_path / "tiny")
    done = subprocess.run([sys.executable, "-c", FIRST_CALLS_AT_ONCE, str(model),
                           str(tmp_path / "data")], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]
