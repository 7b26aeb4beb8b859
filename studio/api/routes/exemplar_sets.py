"""Exemplar sets: upload, create or draft from data, edit single exemplars, preview the
prompts, try them on questions before launch."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Path, UploadFile
from pydantic import BaseModel, Field, SkipValidation

from studio.api.deps import CurrentUser, DigitsOnly, Id, JsonBodyRoute, SettingsDep
from studio.api.request_gate import UPLOAD_BOUND, bounded_body
from studio.method.evaluation import MAX_TRIED_EXEMPLARS
from studio.method.prompt import Layout
from studio.method.tools import DEFAULT_TOOL_NAMES, drafted_tools
from studio.services import corpora, exemplar_drafts, exemplar_sets, exemplar_trials
from studio.services.exemplar_sets import ExemplarSetSummary, ExemplarSetView
from studio.services.prompt_preview import PromptPreview, preview_prompts

router = APIRouter(prefix="/exemplar-sets", tags=["exemplar-sets"], route_class=JsonBodyRoute)
Number = Annotated[int, DigitsOnly,
                   Path(ge=1, le=10_000, description="The exemplar's number, from 1")]
MAX_PREVIEW_K = 64
"""The most exemplars a prompt preview shows (each k is one prompt rendered)."""
MAX_PREVIEW_TOOLS = 16
"""A bound on the request's tool list (the service refuses unknown or repeated names)."""


class ExemplarIn(BaseModel):
    question: str | None = None
    solution: str | None = None
    answer: str | None = None


class ExemplarSetIn(BaseModel):
    name: str
    # documented as ExemplarIn items, checked by the service: it bounds their number first
    # (validating 200,000 items here took 3.5 s before the bound was seen)
    exemplars: SkipValidation[list[ExemplarIn]] = []


@router.post("", status_code=201)
def create(body: ExemplarSetIn, actor: CurrentUser, settings: SettingsDep) -> ExemplarSetView:
    return exemplar_sets.create_exemplar_set(settings, actor, body.name, body.exemplars)


class DraftIn(BaseModel):
    qa_set: str = Field(max_length=128, description="The QA set whose questions are drafted")
    tool: str = Field(max_length=32, description=" | ".join(drafted_tools()))
    corpus: str | None = Field(None, max_length=128, description="What search drafts search")
    count: int = Field(3, ge=1, le=exemplar_drafts.MAX_DRAFTS)
    k: int = Field(3, ge=1, le=corpora.MAX_TOP_K, description="Passages a search returns")


@router.post("/draft")
def draft(body: DraftIn, actor: CurrentUser, settings: SettingsDep) -> exemplar_drafts.Drafts:
    """Exemplar drafts from a QA set, with the tool's real results inside (nothing stored:
    edit them, then save them as a set)."""
    return exemplar_drafts.draft_exemplars(settings, actor, **body.model_dump())


@router.post("/upload", status_code=201)
@bounded_body(UPLOAD_BOUND)
def upload(file: UploadFile = File(...), name: str = Form(...), *, actor: CurrentUser,
           settings: SettingsDep) -> ExemplarSetView:
    """JSONL `{question, solution, answer?}` or the text block format `===== Example N =====`."""
    return exemplar_sets.upload_exemplar_set(settings, actor, file.file, file.filename, name)


@router.get("")
def list_all(settings: SettingsDep) -> list[ExemplarSetSummary]:
    return exemplar_sets.list_exemplar_sets(settings)


@router.get("/{set_id}")
def get(set_id: Id, settings: SettingsDep) -> ExemplarSetView:
    """The set with each exemplar's findings (errors block training, warnings do not)."""
    return exemplar_sets.get_exemplar_set(settings, set_id)


@router.delete("/{set_id}", status_code=204)
def delete(set_id: Id, actor: CurrentUser, settings: SettingsDep) -> None:
    exemplar_sets.delete_exemplar_set(settings, actor, set_id)


@router.post("/{set_id}/exemplars", status_code=201)
def add(set_id: Id, body: ExemplarIn, actor: CurrentUser, settings: SettingsDep) -> ExemplarSetView:
    return exemplar_sets.add_exemplar(settings, actor, set_id, body.model_dump())


@router.put("/{set_id}/exemplars/{number}")
def update(set_id: Id, number: Number, body: ExemplarIn, actor: CurrentUser,
           settings: SettingsDep) -> ExemplarSetView:
    """Edit exemplar `number` (from 1); fields left out keep their value."""
    return exemplar_sets.update_exemplar(settings, actor, set_id, number,
                                         body.model_dump(exclude_unset=True))


@router.delete("/{set_id}/exemplars/{number}")
def remove(set_id: Id, number: Number, actor: CurrentUser, settings: SettingsDep
           ) -> ExemplarSetView:
    return exemplar_sets.delete_exemplar(settings, actor, set_id, number)


class PreviewRequest(BaseModel):
    question: str
    ks: list[Annotated[int, Field(ge=0, le=MAX_PREVIEW_K)]] | None = Field(
        default=None, max_length=MAX_PREVIEW_K + 1)
    layout: str = "inline"
    model: str | None = None
    assistant_prefix: str | None = None
    tools: list[str] = Field(default_factory=lambda: list(DEFAULT_TOOL_NAMES),
                             max_length=MAX_PREVIEW_TOOLS,
                             description="The run's tools: the instruction names each one")


@router.post("/{set_id}/preview")
def preview(set_id: Id, body: PreviewRequest, settings: SettingsDep) -> PromptPreview:
    """The prompt for k = 0..N exemplars, rendered for a model, with token counts."""
    return preview_prompts(settings, set_id, body.question, ks=body.ks, layout=body.layout,
                           model=body.model, assistant_prefix=body.assistant_prefix,
                           tools=body.tools)


class TryRequest(BaseModel):
    qa_set: str = Field(max_length=128, description="The QA set the questions come from: its "
                        "held-out split when it has one, else itself")
    corpus: str | None = Field(None, max_length=128,
                               description="What search searches (with a tool that reads one)")
    model: str | None = Field(None, max_length=1024,
                              description="The model that answers (default: the studio's)")
    k: int | None = Field(None, ge=1, le=MAX_TRIED_EXEMPLARS, description=(
        "Exemplars before each question (default: the set's, at most "
        f"{exemplar_trials.FIRST_STAGE_EXEMPLARS})"))
    questions: int = Field(exemplar_trials.TRIED_QUESTIONS, ge=1,
                           le=exemplar_trials.MAX_TRIED_QUESTIONS,
                           description="How many questions, none of them an exemplar's own")
    layout: Layout | None = Field(None, description="The prompt's layout (default: chat)")
    tools: list[str] | None = Field(None, max_length=MAX_PREVIEW_TOOLS, description=(
        "The tools the model may call (default: those the set's solutions call)"))


@router.post("/{set_id}/try", status_code=201)
def try_set(set_id: Id, body: TryRequest, actor: CurrentUser, settings: SettingsDep
            ) -> exemplar_trials.ExemplarTry:
    """Queue a try of the set (as the Exemplars page's "Try these exemplars"): the model
    answers a few questions that are no exemplar's own with k exemplars before each; the
    answer lists them and how long it may take; `GET /evaluations/{id}` follows it."""
    return exemplar_trials.try_exemplar_set(settings, actor, set_id, **body.model_dump())
