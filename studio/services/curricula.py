"""Curricula as the designer edits them: presets, checks and warnings in one answer.

A design is the `curriculum` part of a run config (`stages`, `adaptive`); the
answer holds what a page draws (stage starts, total steps) and what it says
(errors that block a launch, the paper's warnings that do not, what a preset's
schedule is), all from the same curriculum, so the words never contradict the chart.
"""

from __future__ import annotations

from typing_extensions import NotRequired, TypedDict  # pydantic reads them on Python 3.11

from studio.method.curriculum import ADAPTIVE_METRICS, PRESETS, Curriculum, CurriculumError
from studio.services.errors import InvalidInput

BEST_PRESET = "3-2-0"
"""method.md, "The curriculum": the schedule that worked best in the paper."""

__all__ = ["ADAPTIVE_METRICS", "BEST_PRESET", "PRESETS", "describe", "preset_design"]


class CurriculumPresets(TypedDict):
    presets: dict[str, list[int]]  # name -> exemplars per stage
    best: str  # the preset that worked best in the paper
    adaptive_metrics: list[str]  # what an adaptive rule may watch


class CurriculumDesign(TypedDict):
    """A run config's `curriculum` part."""

    stages: list[dict]  # {exemplars, steps}
    adaptive: dict | None  # {metric, threshold, window, min_steps, max_steps, direction}
    soft: NotRequired[dict]  # {start}


class DesignReport(TypedDict):
    """A design's plan, the errors that block a launch and the warnings that do not."""

    ok: bool
    errors: list[str]
    warnings: list[str]
    starts: list[int]  # the step each stage starts at
    total_steps: int
    spec: str  # exemplars per stage, e.g. 3-2-0
    about: str | None  # what this schedule is, when it is a preset's
    shortest_stage: int | None  # adaptive: the fewest steps a stage takes


def preset_design(name: str, steps_per_stage: int) -> CurriculumDesign:
    """The stages of a named preset, each `steps_per_stage` steps long."""
    try:
        return Curriculum.preset(name, steps_per_stage=steps_per_stage).to_dict()
    except CurriculumError as exc:
        raise InvalidInput(str(exc)) from None


def describe(design: dict, available_exemplars: int | None = None) -> DesignReport:
    """Check a design; with the plan (starts, total) when it can be built at all."""
    try:
        curriculum = Curriculum.from_dict(design)
    except CurriculumError as exc:
        return {"ok": False, "errors": exc.errors, "warnings": [], "starts": [],
                "total_steps": 0, "spec": "", "about": None, "shortest_stage": None}
    errors = curriculum.validate(available_exemplars)
    rule = curriculum.adaptive
    return {"ok": not errors, "errors": errors, "warnings": curriculum.warnings(),
            "starts": curriculum.boundaries(), "total_steps": curriculum.total_steps,
            "spec": curriculum.spec, "about": curriculum.about(),
            "shortest_stage": rule.shortest_stage if rule else None}
