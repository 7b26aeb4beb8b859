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


def test_the_quick_starts_figures_are_its_stored_results():
    """The README quotes what the quick start did; the figures come from the stored bench
    results the Launch and Home pages read (studio.services.presets.measured_runs)."""
    from studio.services import presets

    quick_start = " ".join(
        README.read_text().split("**Quick start.**")[1].split("\n\n")[0].split())
    assert "`calculator` is chosen" in quick_start
    runs = presets.measured_runs(presets.RECOMMENDED)
    assert len(runs) == 3
    for key in ("valid_search_rate", "em"):
        assert ", ".join(f"{r['arm'][key]:.0%}" for r in runs) in quick_start, key
    # its time, and what ran it, as the Home and Launch pages quote them
    assert presets.took(runs) in quick_start, presets.took(runs)
