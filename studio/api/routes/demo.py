"""The demo packs, one request away."""

from __future__ import annotations

from fastapi import APIRouter

from studio.api.deps import CurrentUser, JsonBodyRoute, SettingsDep
from studio.services.demo import (
    DemoPack,
    ToolPack,
    load_calc_pack,
    load_demo_pack,
    load_math_pack,
)

router = APIRouter(tags=["demo"], route_class=JsonBodyRoute)


@router.post("/demo")
def load_demo(actor: CurrentUser, settings: SettingsDep) -> DemoPack:
    """Store the demo corpus (indexed at once: it is small), QA set and exemplar set as `demo`,
    the held-out questions as the QA set `demo-heldout` (purpose eval), and the short-answer
    questions as `demo-span` and `demo-span-heldout` (purpose eval)."""
    return load_demo_pack(settings, actor, index_now=True)


@router.post("/demo/math")
def load_math(actor: CurrentUser, settings: SettingsDep) -> ToolPack:
    """Store the math pack for the python tool: the QA sets `math` and `math-heldout` (purpose
    eval) and the exemplar set `math` (no corpus)."""
    return load_math_pack(settings, actor)


@router.post("/demo/calc")
def load_calc(actor: CurrentUser, settings: SettingsDep) -> ToolPack:
    """Store the arithmetic pack for the calculator tool: the QA sets `calc` and `calc-heldout`
    (purpose eval) and the exemplar set `calc` (no corpus)."""
    return load_calc_pack(settings, actor)
