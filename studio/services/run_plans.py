"""A run's plan: its config with every data name pinned, resolved once when the run is made.

A config names its data (`data.corpus: docs`); names can be deleted and used again
by another upload. The plan pins each name to the row it meant at launch (id and
content hash) and snapshots the exemplars (an exemplar set can be edited), so every
attempt of the run, and every process of an attempt, trains and evaluates on exactly
what the run started with. Processes load the plan (`load_plan`); none parses the
config or looks data up by name again. Deleting a corpus or QA set that a run's plan
pins retires it instead (hidden, its name free, its files kept) until the last run
that pins it is deleted.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict
from sqlmodel import Session, select

from studio.method.curriculum import Curriculum
from studio.method.exemplars import Exemplar
from studio.run_config import RunConfig
from studio.services.errors import Conflict, NotFound
from studio.services.records import get_or_404
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Corpus, QASet, Run


class DataRef(BaseModel):
    """One stored data set as the run pinned it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: int
    name: str
    content_hash: str


class RunPlan(BaseModel):
    """What a run trains on and how; stored on the run (`runs.plan`)."""

    model_config = ConfigDict(extra="forbid")
    config: RunConfig
    corpus: DataRef | None  # None: the run does not search
    train: DataRef
    eval: list[DataRef] = []
    exemplar_set: DataRef | None = None  # its content hash is the snapshot's
    exemplars: list[dict] = []  # Exemplar.to_dict() of each, in the set's order

    @property
    def curriculum(self) -> Curriculum:
        return self.config.curriculum.build()

    def exemplar_list(self) -> list[Exemplar]:
        return [Exemplar.coerce(e) for e in self.exemplars]


class PlannedDataGone(Conflict):
    """Data a run's plan pins is no longer stored (the run cannot train or evaluate on it)."""


def exemplars_hash(exemplars: list[Exemplar]) -> str:
    text = json.dumps([e.to_dict() for e in exemplars], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def data_ref(row: Corpus | QASet) -> DataRef:
    return DataRef(id=row.id, name=row.name, content_hash=row.content_hash)


def make_plan(config: RunConfig, corpus: Corpus | None, train: QASet, eval_sets: list[QASet],
              exemplar_set: tuple[int, str, list[Exemplar]] | None) -> RunPlan:
    """The plan of `config` for the rows its names resolved to at launch (run_validation);
    `exemplar_set` is (id, name, its exemplars now)."""
    exemplars = exemplar_set[2] if exemplar_set else []
    return RunPlan(
        config=config, corpus=data_ref(corpus) if corpus else None, train=data_ref(train),
        eval=[data_ref(q) for q in eval_sets],
        exemplar_set=DataRef(id=exemplar_set[0], name=exemplar_set[1],
                             content_hash=exemplars_hash(exemplars)) if exemplar_set else None,
        exemplars=[e.to_dict() for e in exemplars])


def pinned_row(session: Session, table: type[Corpus] | type[QASet], ref: DataRef):
    """The row `ref` pinned, retired or not; None when it is no longer stored as it was."""
    row = session.get(table, ref.id)
    return row if row is not None and row.content_hash == ref.content_hash else None


def _check_pinned(session: Session, run_id: int, plan: RunPlan) -> None:
    pins = [(Corpus, "data.corpus", "corpus", plan.corpus)] if plan.corpus else []
    pins.append((QASet, "data.train", "QA set", plan.train))
    pins += [(QASet, f"data.eval[{i}]", "QA set", ref) for i, ref in enumerate(plan.eval)]
    for table, field, kind, ref in pins:
        if pinned_row(session, table, ref) is None:
            raise PlannedDataGone(
                f"{field}: the {kind} '{ref.name}' (#{ref.id}) that run {run_id} started with "
                "is no longer stored, so the run cannot continue on the same data; launch a "
                "new run (a data set uploaded again under the same name is a new one)")


def _stored_plan(session: Session, run_id: int) -> RunPlan:
    run = get_or_404(session, Run, run_id, "run")
    if run.plan is None:
        raise NotFound(f"run {run_id} has no plan (it was stored before plans and its data "
                       "could not be resolved then); launch its config as a new run")
    return RunPlan.model_validate(run.plan)


def stored_plan(settings: Settings, run_id: int) -> RunPlan:
    """The run's plan as stored, to describe the run (its data may be gone since)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return _stored_plan(session, run_id)


def load_plan(settings: Settings, run_id: int) -> RunPlan:
    """The run's plan, to train or evaluate on: the data it pins is checked to be stored as
    it was (PlannedDataGone otherwise)."""
    with session_scope(settings.sqlalchemy_url) as session:
        plan = _stored_plan(session, run_id)
        _check_pinned(session, run_id, plan)
        return plan


def pinned_ids(session: Session, table: type[Corpus] | type[QASet]) -> set[int]:
    """Ids of the rows of `corpora` or `qa_sets` that some run's plan pins."""
    found = set()
    for stored in session.exec(select(Run.plan).where(Run.plan.is_not(None))):
        refs = ([stored["corpus"]] if stored["corpus"] else []) if table is Corpus \
            else [stored["train"], *stored["eval"]]
        found.update(ref["id"] for ref in refs)
    return found
