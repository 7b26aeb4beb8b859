"""The calibration's figures on a tiny model: the model's own rates and, for LoRA runs, the
rates with adapters in place, both counted with the base's shape; and its CPU-time clock."""

from __future__ import annotations

import pytest

from studio.settings import get_settings
from tests.support.tiny_model import build_tiny_model
from worker.engines.native.calibrate import calibrate, main


def test_the_calibration_measures_the_model_and_again_with_lora_adapters(tmp_path,
                                                                         monkeypatch):
    model = build_tiny_model(tmp_path / "tiny")
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    try:
        figures = calibrate(str(model), dtype="float32", threads=1, device="cpu")
    finally:
        get_settings.cache_clear()
    assert set(figures["lora_rates"]) == set(figures["rates"])
    for rates in (figures["rates"], figures["lora_rates"]):
        assert rates["decode_forward"] >= 0
        assert all(value > 0 for key, value in rates.items() if key != "decode_forward")
    # 2 layers of q, k, v, o (64 x 64, k and v 64 x 32) and the MLP (64 x 128, 3 of them):
    # the base's weights, not the adapters'
    assert figures["shape"]["linear"] == 2.0 * 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128)


def test_the_cpu_time_clock_is_for_one_thread_on_a_cpu(capsys):
    """`--cpu-time` measures the CPU's speed on a busy machine (docs/engine.md, "Time
    estimate"): the process's CPU time is the work's time only with one thread."""
    for args in (["--threads", "2"], ["--device", "cuda"]):
        with pytest.raises(SystemExit):
            main(["m", "--cpu-time", *args])
        assert "--cpu-time: one thread on a cpu" in capsys.readouterr().err
