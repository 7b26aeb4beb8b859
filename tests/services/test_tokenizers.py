"""The services' tokenizer cache under the web app's threads, and the folders a model may
be read from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from studio.models.base_models import models_dir
from studio.services import calibrations, evaluations, runs
from studio.services.errors import InvalidInput
from studio.services.tokenizers import checked_tokenizer
from tests.support.actors import user
from tests.support.tiny_model import build_tiny_model
from tests.support.training import tiny_config

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


def test_a_model_is_read_only_from_the_studios_model_folders(studio, tmp_path):
    """A run's model was any folder holding config.json, another studio's data dir included
    (issue 41 N7). Only the studio's models folder, the Hugging Face cache and the folders an
    admin lists in STUDIO_MODEL_FOLDERS are read: a path elsewhere is refused at launch, at
    evaluation and at calibration, with one message whether or not a model is there."""
    listed, _ = studio
    settings = listed.model_copy(update={"model_folders": None})
    member = user(settings, "mallory")
    other = build_tiny_model(tmp_path / "other-studio" / "data" / "models" / "tiny")
    refused = r"^model: '.+' is not in a folder this studio reads models from"
    for ref in (str(other), str(tmp_path / "nothing-here"), f"{other}/../tiny"):
        with pytest.raises(InvalidInput, match=refused + r" \(its models folder, the Hugging "
                           r"Face cache or one an admin lists in STUDIO_MODEL_FOLDERS\)"):
            checked_tokenizer(settings, ref)
    with pytest.raises(InvalidInput, match=refused):
        runs.create_run(settings, member, tiny_config(other))
    assert runs.list_runs(settings) == []
    with pytest.raises(InvalidInput, match=refused):
        calibrations.request_calibration(settings, member, model=str(other), start=False)
    with pytest.raises(InvalidInput, match=refused):
        evaluations.create_evaluation(settings, member, qa_set="demo-heldout", model=str(other),
                                      corpus="demo", start=False)

    own = shutil.copytree(other, models_dir(settings.resolved_data_dir) / "tiny")
    assert checked_tokenizer(settings, str(own)) is not None
    assert runs.create_run(settings, member, tiny_config(own), start=False)["owner"] == "mallory"
    admins_list = settings.model_copy(update={"model_folders": f"/srv/models, {other.parent}"})
    assert checked_tokenizer(admins_list, str(other)) is not None
