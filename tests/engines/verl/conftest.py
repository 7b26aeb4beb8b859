"""Fixtures for the veRL backend: a studio with the demo pack, a tiny model, veRL's config.

Tests that need veRL itself use the `verl` fixture: it skips, saying why,
where veRL is not installed (CI installs it: `scripts/install.sh --dev`).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time

import pytest
import uvicorn

from studio.services import runs
from studio.services.demo import load_demo_pack
from tests.conftest import free_port
from tests.support.actors import admin
from tests.support.tiny_model import build_tiny_model
from worker.engines.verl.config import RunFiles

# veRL's Ray and tokenizer threads stay small on this 2-core machine.
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def verl():
    if importlib.util.find_spec("verl") is None:
        pytest.skip("veRL is not installed here (CI installs it: scripts/install.sh --dev, the "
                    "verl-cpu extra)")
    import verl as module

    return module


@pytest.fixture
def studio(settings, tmp_path):
    """A migrated studio with the demo pack (indexed), an admin, and a tiny model folder."""
    load_demo_pack(settings, admin(settings), index_now=True)
    return settings, build_tiny_model(tmp_path / "tiny")


def verl_config(model, **overrides) -> dict:
    """A small verl run: 1 exemplar for one step, then none for three (the tiny model's
    positions, 2048, hold a prompt with one of the demo exemplars, not two)."""
    config = {
        "name": "tiny-verl", "model": str(model), "backend": "verl",
        "data": {"corpus": "demo", "train": "demo", "eval": ["demo-heldout"],
                 "exemplars": "demo"},
        "curriculum": {"stages": [{"exemplars": 1, "steps": 1}, {"exemplars": 0, "steps": 3}]},
        "grpo": {"batch_size": 2, "group_size": 2, "max_turns": 2, "max_turn_tokens": 64,
                 "max_response_tokens": 160, "max_obs_tokens": 40, "micro_batch_size": 2,
                 "max_prompt_tokens": 2000},
        "engine": {"checkpoint_every": 2, "log_groups_per_step": 1},
        "seed": 5,
    }
    for key, value in overrides.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


@pytest.fixture
def verl_run(studio):
    """A stored (not queued) verl run of `verl_config`; returns (settings, run, files, model)."""
    settings, model = studio

    def make(**overrides):
        run = runs.create_run(settings, admin(settings), verl_config(model, **overrides), start=False)
        files = RunFiles(settings.resolved_data_dir / "runs" / str(run["id"]) / "verl")
        return settings, run, files, model

    return make


@pytest.fixture
def studio_api(studio):
    """The studio's REST API served on a free port (a real server); yields its base URL, which
    becomes the settings' public address (where veRL runs may call the studio)."""
    from studio.api.app import create_api

    settings, _ = studio
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_api(settings), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    settings.public_url = f"http://127.0.0.1:{port}"
    yield settings.public_url
    server.should_exit = True
    thread.join(10)

