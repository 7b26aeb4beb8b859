"""The curriculum designer's checks, as the Curriculum page uses them: presets and a design's
plan, errors and warnings."""

from __future__ import annotations

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from studio.api.deps import MAX_SQL_INT, JsonBodyRoute
from studio.run_config import MAX_STEPS
from studio.services import curricula
from studio.services.curricula import CurriculumDesign, CurriculumPresets, DesignReport

router = APIRouter(tags=["curricula"], route_class=JsonBodyRoute)


class DesignCheck(BaseModel):
    design: dict = Field(description="The run config's `curriculum` part (stages, adaptive)")
    available_exemplars: int | None = Field(
        default=None, ge=0, le=MAX_SQL_INT,
        description="The exemplar set's size, to check the stages against")


@router.get("/curricula/presets")
def presets() -> CurriculumPresets:
    """The named presets (exemplars per stage) and the one that worked best in the paper."""
    return {"presets": {name: list(counts) for name, counts in curricula.PRESETS.items()},
            "best": curricula.BEST_PRESET, "adaptive_metrics": list(curricula.ADAPTIVE_METRICS)}


@router.get("/curricula/presets/{name}")
def preset(name: str, steps_per_stage: int = Query(50, gt=0, le=MAX_STEPS)
           ) -> CurriculumDesign:
    """A preset's design, each stage `steps_per_stage` steps long (422 for an unknown name)."""
    return curricula.preset_design(name, steps_per_stage)


@router.post("/curricula/check")
def check(body: DesignCheck) -> DesignReport:
    """A design's stage starts and total steps, the errors that block a launch and the
    paper's warnings that do not."""
    return curricula.describe(body.design, body.available_exemplars)
