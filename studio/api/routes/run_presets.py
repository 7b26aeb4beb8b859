"""The ready-made runs (studio.services.presets): what each is, the data it needs and what it
did when measured, as the Launch page offers them."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from studio.api.deps import JsonBodyRoute, SettingsDep
from studio.services import presets

router = APIRouter(tags=["runs"], route_class=JsonBodyRoute)


class MeasuredSeed(BaseModel):
    seed: int
    held_out: str = Field(description="The held-out QA set it was evaluated on, zero-shot")
    arm: dict = Field(description="The trained model's evaluation (valid_search_rate is the "
                      "share of questions with a tool call that ran; em, answer_rate, ...)")
    base: dict | None = Field(description="The untrained model's, where it was measured")
    minutes: float = Field(description="Training and evaluation")
    training_minutes: float | None = Field(description="Training alone, where stored")
    model: str | None = Field(description="The model the run trained")
    machine: str = Field(description="What ran them, and what else ran beside")
    command: str
    date: str | None


class RunPreset(BaseModel):
    name: str
    tools: list[str]
    description: str
    pack: str = Field(description="The demo pack it trains on, stored when it launches")
    needs: str = Field(description="What it needs, in words: its pack and what its tools need")
    data_ready: bool = Field(description="Whether that pack is stored already")
    config: dict = Field(description="The run config it launches (POST /runs takes it)")
    expectation: str = Field(description="What it did when measured, in words, from `measured` "
                             "('not measured with these settings yet' when nothing is stored)")
    measured: list[MeasuredSeed]


@router.get("/run-presets")
def run_presets(settings: SettingsDep) -> list[RunPreset]:
    """Every ready-made run, with what it did when measured (bench/icrl_effect.py's stored
    results, one per seed)."""
    return presets.listing(settings)
