"""What a run wrote, read back: metrics and rollouts page by page, one rollout's segments,
several runs compared, the run's YAML and its reproducibility bundle."""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from studio.api.deps import CurrentUser, Id, JsonBodyRoute, Offset, SettingsDep, Step
from studio.services import exemplar_drafts, reproduce, run_history
from studio.services.exemplar_sets import ExemplarSetView
from studio.services.reproduce import BundleView
from studio.services.run_history import (
    MetricPage,
    RolloutDetail,
    RolloutFilter,
    RolloutPage,
    RolloutTokens,
    RunComparison,
)
from studio.settings import comma_separated

router = APIRouter(tags=["runs"], route_class=JsonBodyRoute)


class YamlResponse(PlainTextResponse):
    media_type = "application/yaml"


@router.get("/runs/compare")
def compare(settings: SettingsDep, ids: str = Query(..., description="Run ids, e.g. 1,2,3"),
            metrics: str | None = Query(None, description="e.g. reward_mean,acc (default: all)")
            ) -> RunComparison:
    """Metric series of several runs on one step axis (null where a run has no row), their
    configs and the config keys that differ."""
    names = comma_separated(metrics) if metrics else None
    return run_history.compare_runs(settings, run_history.parse_ids(ids), names)


@router.get("/runs/{run_id}/metrics")
def metrics(run_id: Id, settings: SettingsDep, from_step: Step = None, to_step: Step = None,
            limit: int = Query(1000, ge=1, le=run_history.MAX_METRIC_PAGE),
            cursor: str | None = Query(None)) -> MetricPage:
    """One row per training step, in step order: `{items, total, next_cursor}`."""
    return run_history.metric_page(settings, run_id, from_step=from_step, to_step=to_step,
                                   limit=limit, cursor=cursor)


@router.get("/runs/{run_id}/rollouts")
def rollouts(run_id: Id, settings: SettingsDep, step_min: Step = None, step_max: Step = None,
             stage: Step = None, exemplars: Step = None,
             reward_min: float | None = Query(None, allow_inf_nan=False),
             reward_max: float | None = Query(None, allow_inf_nan=False),
             limit: int = Query(50, ge=1, le=run_history.MAX_ROLLOUT_PAGE), offset: Offset = 0,
             cursor: str | None = Query(None)) -> RolloutPage:
    """Sampled rollouts newest first, without their segments: `{items, total, next_cursor}`."""
    filters = RolloutFilter(step_min, step_max, stage, exemplars, reward_min, reward_max)
    return run_history.rollout_page(settings, run_id, filters, limit=limit, offset=offset,
                                    cursor=cursor)


@router.get("/runs/{run_id}/rollouts/{rollout_id}")
def rollout(run_id: Id, rollout_id: Id, settings: SettingsDep) -> RolloutDetail:
    """One rollout's segments, each with `source` (prompt, model, env), `tokens` and `trained`
    (false for what the loss ignores), and the token counts per source."""
    return run_history.rollout_detail(settings, run_id, rollout_id)


class KeepIn(BaseModel):
    exemplar_set: str = Field(max_length=128, description="The set it joins (made if none "
                              "has this name)")


@router.post("/runs/{run_id}/rollouts/{rollout_id}/keep", status_code=201)
def keep(run_id: Id, rollout_id: Id, body: KeepIn, actor: CurrentUser,
         settings: SettingsDep) -> ExemplarSetView:
    """Keep a correct rollout as an exemplar, its segments exactly as stored: the set, with
    each exemplar's findings."""
    return exemplar_drafts.keep_rollout(settings, actor, run_id, rollout_id, body.exemplar_set)


@router.get("/runs/{run_id}/rollouts/{rollout_id}/tokens")
def rollout_tokens(run_id: Id, rollout_id: Id, settings: SettingsDep) -> RolloutTokens:
    """Per response token of one rollout, as parallel arrays: `text`, `segment` (index into
    the rollout's segments), `mask` (1: sampled by the model and trained on, 0: inserted by
    the environment), `logprob` and `entropy` under the policy that sampled it (null where
    masked), `advantage`; `recorded` false (arrays empty) where the engine kept none."""
    return run_history.rollout_tokens(settings, run_id, rollout_id)


@router.get("/runs/{run_id}/reproduce.json")
def reproduction_bundle(run_id: Id, settings: SettingsDep) -> BundleView:
    """The run's reproducibility bundle (docs/export.md): `POST /runs/from-card` and `studio
    run launch --from-card` take it back."""
    return reproduce.run_bundle(settings, run_id)


@router.get("/runs/{run_id}/config.yaml", response_class=YamlResponse)
def config_yaml(run_id: Id, settings: SettingsDep) -> YamlResponse:
    """The run's config as a YAML file (`studio run launch` takes it back)."""
    filename, text = run_history.run_config_yaml(settings, run_id)
    return YamlResponse(text, headers={"Content-Disposition":
                                       f'attachment; filename="{filename}"'})
