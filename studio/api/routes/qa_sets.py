"""QA sets: upload, preview, purpose, seeded split."""

from __future__ import annotations

from fastapi import APIRouter, File, Form, Query, UploadFile
from pydantic import BaseModel, Field

from studio.api.deps import MAX_SQL_INT, CurrentUser, Id, JsonBodyRoute, Offset, SettingsDep
from studio.api.request_gate import UPLOAD_BOUND, bounded_body
from studio.services import qa_sets
from studio.services.qa_sets import QARowsPage, QASetView, SplitSets

router = APIRouter(prefix="/qa-sets", tags=["qa-sets"], route_class=JsonBodyRoute)


@router.post("", status_code=201)
@bounded_body(UPLOAD_BOUND)
def upload(file: UploadFile = File(...), name: str = Form(...), purpose: str = Form("train"),
           format: str | None = Form(None, description="flashrag-jsonl, hotpotqa-json, "
                                     "musique-json or csv; default: detected"),
           *, actor: CurrentUser, settings: SettingsDep) -> QASetView:
    """Store a QA file; the answer reports the row count, duplicates and empty answers."""
    return qa_sets.create_qa_set(settings, actor, file.file, file.filename, name, purpose=purpose,
                                 fmt=format)


@router.get("")
def list_all(settings: SettingsDep) -> list[QASetView]:
    return qa_sets.list_qa_sets(settings)


@router.get("/{qa_set_id}")
def get(qa_set_id: Id, settings: SettingsDep) -> QASetView:
    return qa_sets.get_qa_set(settings, qa_set_id)


@router.get("/{qa_set_id}/rows")
def rows(qa_set_id: Id, settings: SettingsDep, offset: Offset = 0,
         limit: int = Query(20, ge=1, le=qa_sets.MAX_ROWS_PAGE)) -> QARowsPage:
    return qa_sets.qa_rows(settings, qa_set_id, offset, limit)


class PurposeUpdate(BaseModel):
    purpose: str


@router.patch("/{qa_set_id}")
def set_purpose(qa_set_id: Id, body: PurposeUpdate, actor: CurrentUser,
                settings: SettingsDep) -> QASetView:
    return qa_sets.set_purpose(settings, actor, qa_set_id, body.purpose)


class SplitRequest(BaseModel):
    eval_fraction: float = Field(0.2, gt=0, lt=1)
    seed: int = Field(0, ge=0, le=MAX_SQL_INT)
    train_name: str | None = None
    eval_name: str | None = None


@router.post("/{qa_set_id}/split", status_code=201)
def split(qa_set_id: Id, body: SplitRequest, actor: CurrentUser,
          settings: SettingsDep) -> SplitSets:
    """Two new sets, `train` and `eval`, from a seeded shuffle of this one."""
    return qa_sets.split_qa_set(settings, actor, qa_set_id, **body.model_dump())


@router.delete("/{qa_set_id}", status_code=204)
def delete(qa_set_id: Id, actor: CurrentUser, settings: SettingsDep) -> None:
    qa_sets.delete_qa_set(settings, actor, qa_set_id)
