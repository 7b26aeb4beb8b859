"""Training runs: validate, launch, follow, cancel, resume, delete; evaluations of models and
runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, Field

from studio.api.deps import MAX_SQL_INT, CurrentUser, Id, JsonBodyRoute, OptionalId, SettingsDep
from studio.run_config import RunConfig
from studio.services import evaluations, reproduce, run_validation, runs
from studio.services.evaluations import (
    BaseVsTrained,
    Cancelled,
    EvaluationView,
    LabelledQuestion,
    LabelShare,
)
from studio.services.run_validation import RunCheck
from studio.services.runs import LaunchedRun, RunView

router = APIRouter(tags=["runs"], route_class=JsonBodyRoute)
Limit = Annotated[int | None, Field(default=None, ge=1, le=MAX_SQL_INT,
                                    description="At most this many questions (default: all)")]


def _inlined_schema(model: type[BaseModel]) -> dict:
    """`model`'s JSON schema with its `$defs` written in place: inside the OpenAPI document a
    `#/$defs/...` reference would resolve from the document's root."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    return inline(schema)


# The body stays a plain mapping so that a bad config gets the studio's own errors (each
# names its field path, `parse_run_config`); the docs show RunConfig's schema.
RunConfigBody = Body(..., description="A run config (the YAML file's schema)",
                     json_schema_extra=_inlined_schema(RunConfig))


@router.post("/runs", status_code=201)
def launch(actor: CurrentUser, settings: SettingsDep, config: dict = RunConfigBody) -> LaunchedRun:
    """Validate the config, store the run as queued and send it to its queue; the answer
    adds `stages` (each stage's longest prompt in tokens and seconds per step),
    `time_estimate` and `warnings`."""
    return runs.create_run(settings, actor, config)


MAX_CARD_CHARS = 1_000_000  # a model card is some kilobytes


class FromCardRequest(BaseModel):
    card: str = Field(max_length=MAX_CARD_CHARS, description="A model card (README.md) or a "
                      "run's reproduce.json, as text")
    model: str | None = Field(default=None, max_length=4096, description="The base model to "
                              "train instead of the card's (a card names a local model folder "
                              "by its name only)")


@router.post("/runs/from-card", status_code=201)
def launch_from_card(body: FromCardRequest, actor: CurrentUser,
                     settings: SettingsDep) -> LaunchedRun:
    """Launch the run a model card or reproduce.json describes, on the same data: 409 naming
    each data set stored with other content or no longer stored; `warnings` name the
    packages whose versions differ."""
    return reproduce.launch_from_bundle(settings, actor, body.card, model=body.model)


@router.post("/runs/validate")
def validate(actor: CurrentUser, settings: SettingsDep, config: dict = RunConfigBody
             ) -> RunCheck:
    """What launching would check and estimate (per stage: exemplars, steps, longest prompt
    in tokens against grpo.max_prompt_tokens, seconds per step on the queue's worker; the
    run's time; warnings), storing nothing; it queues the measurement of the queue's device
    when the time estimate needs one (`time_estimate.state` is then `measuring`; not for a
    viewer, who queues nothing)."""
    return run_validation.validate_run(settings, actor, config)


@router.get("/runs")
def list_all(settings: SettingsDep) -> list[RunView]:
    """Newest first; a queued run carries its `queue_position` (1 = next on its queue)."""
    return runs.list_runs(settings)


@router.get("/runs/{run_id}")
def get(run_id: Id, settings: SettingsDep) -> RunView:
    return runs.get_run(settings, run_id)


@router.delete("/runs/{run_id}", status_code=204)
def delete(run_id: Id, actor: CurrentUser, settings: SettingsDep) -> None:
    """Delete a run that is not queued or running (409), with its rows and files."""
    runs.delete_run(settings, actor, run_id)


@router.post("/runs/{run_id}/cancel")
def cancel(run_id: Id, actor: CurrentUser, settings: SettingsDep) -> RunView:
    """Kill the run's process group; its metrics, rollouts and checkpoints stay."""
    return runs.cancel_run(settings, actor, run_id)


@router.post("/runs/{run_id}/resume")
def resume(run_id: Id, actor: CurrentUser, settings: SettingsDep) -> RunView:
    """Queue an interrupted, paused, failed or cancelled run again; it continues from its latest
    checkpoint (409 for a queued, running or succeeded run)."""
    return runs.resume_run(settings, actor, run_id)


class EvaluationRequest(BaseModel):
    qa_set: str
    corpus: str | None = None
    model: str | None = None
    run_id: int | None = Field(default=None, ge=1, le=MAX_SQL_INT)
    limit: Limit = None
    protocol: dict | None = None
    queue: str = "cpu"
    exemplar_set: str | None = Field(default=None, max_length=128, description="Where the "
                                     "exemplars of protocol.exemplars (k > 0) come from")


@router.post("/evaluations", status_code=201)
def evaluate(body: EvaluationRequest, actor: CurrentUser, settings: SettingsDep) -> EvaluationView:
    """Zero-shot evaluation (k = 0, temperature 0.1) of a model or a run's latest checkpoint
    (any run of the team's); with protocol.exemplars = k and an exemplar set, a "try it" of
    the set: k of its exemplars before each question, as a run's first stage shows them."""
    return evaluations.create_evaluation(settings, actor, **body.model_dump())


class BaseVsTrainedRequest(BaseModel):
    qa_sets: list[str] = Field(description="The QA sets to evaluate both models on")
    base_model: str | None = Field(default=None, description="Default: the run's own model")
    corpus: str | None = Field(default=None, description="Default: the corpus the run trained "
                               "with")
    limit: Limit = None
    protocol: dict | None = None
    queue: str = "cpu"


@router.post("/runs/{run_id}/base-vs-trained", status_code=201)
def evaluate_base_and_trained(run_id: Id, body: BaseVsTrainedRequest, actor: CurrentUser,
                              settings: SettingsDep) -> list[EvaluationView]:
    """Queue, per QA set, the evaluation of the run's base model and of its latest checkpoint
    under one protocol; every name is checked before anything is queued."""
    return evaluations.evaluate_base_and_trained(
        settings, actor, run_id, body.qa_sets, base_model=body.base_model, corpus=body.corpus,
        limit=body.limit, protocol=body.protocol, queue=body.queue)


@router.get("/runs/{run_id}/base-vs-trained")
def base_vs_trained(run_id: Id, actor: CurrentUser, settings: SettingsDep,
                    base_model: str | None = Query(None)) -> list[BaseVsTrained]:
    """Per QA set, an evaluation of the run's checkpoint beside one of its base model: the
    run owner's (another member's only where the owner has none), and, under `yours`, your
    own where you are not the run's owner."""
    return evaluations.base_vs_trained(settings, run_id, base_model, actor)


@router.post("/runs/{run_id}/base-vs-trained/cancel")
def cancel_base_vs_trained(run_id: Id, actor: CurrentUser, settings: SettingsDep,
                           base_model: str | None = Query(None)) -> Cancelled:
    """Cancel those of them still queued or running, your own pair beside the owner's
    included (each must be yours, unless you are an admin)."""
    return {"cancelled": evaluations.cancel_base_vs_trained(settings, actor, run_id,
                                                            base_model)}


@router.get("/evaluations")
def list_evaluations(settings: SettingsDep, run_id: OptionalId = None) -> list[EvaluationView]:
    return evaluations.list_evaluations(settings, run_id)


@router.get("/evaluations/{evaluation_id}")
def get_evaluation(evaluation_id: Id, settings: SettingsDep) -> EvaluationView:
    return evaluations.get_evaluation(settings, evaluation_id)


@router.get("/evaluations/{evaluation_id}/labels")
def evaluation_labels(evaluation_id: Id, settings: SettingsDep) -> list[LabelShare]:
    """Its questions split by failure label, the labels of its tools (search: correct, format
    miss, no search, retrieval miss, reasoning miss); empty until it has succeeded."""
    return evaluations.label_split(settings, evaluation_id)


@router.get("/evaluations/{evaluation_id}/labels/{label}")
def evaluation_label_examples(evaluation_id: Id, label: str, settings: SettingsDep,
                              limit: int = Query(5, ge=1, le=100,
                                                 description="At most this many questions")
                              ) -> list[LabelledQuestion]:
    """Its first questions with `label`: question, gold answers, the model's answer, its
    searches and its calls of every tool with their results."""
    return evaluations.labelled_questions(settings, evaluation_id, label, limit)


@router.post("/evaluations/{evaluation_id}/cancel")
def cancel_evaluation(evaluation_id: Id, actor: CurrentUser,
                      settings: SettingsDep) -> EvaluationView:
    """Stop a queued or running evaluation (409 once it has ended)."""
    return evaluations.cancel_evaluation(settings, actor, evaluation_id)
