"""The team's real data samples beside the project root (`../shared/data`, see its README):
used by path, never copied into the repository; tests that need them skip where they are
not (a fresh clone in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
HOTPOT = SHARED / "hotpotqa-dev100"
HOTPOT_TRAIN = SHARED / "hotpotqa-train100"
MUSIQUE = SHARED / "musique-train100"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared data is not at {SHARED}")
