"""The Launch page's time of a ready-made run: about so many seconds a step with answers as
long as its measured runs', beside the measured step and their ratio, then the worst case."""

from __future__ import annotations

import re

from frontend.pages import launch
from studio.services import calibrations, demo, presets
from tests.support.actors import admin
from tests.support.calibrated import measured, worker_with
from tests.support.tiny_model import build_tiny_model


def test_a_measured_preset_shows_its_expected_step_beside_the_measured_one(settings,
                                                                           tmp_path):
    settings = settings.model_copy(update={"default_model": str(build_tiny_model(
        tmp_path / "tiny"))})
    actor = admin(settings)
    demo.load_calc_pack(settings, actor)
    worker_with(settings)
    measured(settings, calibrations.request_calibration(
        settings, actor, model=settings.default_model, start=False)["id"])

    text = launch.quick_start_estimate(settings, actor, presets.CALCULATOR).replace("\\", "")
    step = presets.measured_step_seconds(presets.measured_runs(presets.CALCULATOR))
    lines = text.split("\n")
    assert re.match(rf"Estimate: about [\d,]+ s per step \(.+ for the run\), measured: "
                    rf"{step:,.0f} s per step on .+ \(estimate / measured: \d\.\d\d\), the "
                    r"answers as long as the measured ones\.$", lines[0]), lines[0]
    assert lines[2].startswith(f"Measured: 68-69 minutes of training ({step:,.0f} s per step)")
    at_most = next(i for i, line in enumerate(lines) if line.startswith("**At most:**"))
    assert lines[at_most].startswith("**At most:** at most about ")
    assert re.match(r"- stage 1: 3 exemplars for 6 steps, prompts up to [\d,]+ tokens, about "
                    r"[\d,]+ s a step \(at most [\d,]+\)$", lines[at_most + 1]), lines
    # a preset never measured: the worst case alone
    demo.load_math_pack(settings, actor)
    unmeasured = launch.quick_start_estimate(settings, actor, presets.MATH).replace("\\", "")
    assert unmeasured.startswith("**Estimate:** at most about "), unmeasured
    assert ", at most about " in unmeasured and "s a step" in unmeasured
    assert unmeasured.endswith("Measured: not yet with these settings; the estimate is all "
                               "there is.")
