"""The README documents every setting the studio reads."""

from __future__ import annotations

from pathlib import Path

from studio.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_setting_is_in_the_readme_table():
    text = README.read_text()
    missing = [f"STUDIO_{name.upper()}" for name in Settings.model_fields
               if f"| `STUDIO_{name.upper()}` |" not in text]
    assert missing == []
