"""The project's scripts/ as modules, for tests that run them in-process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(path: Path):
    """A script of scripts/ as a module (registered, as its dataclasses need)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    script = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = script
    spec.loader.exec_module(script)
    return script
