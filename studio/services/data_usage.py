"""Where each stored data set is used: the runs that trained on it (their plans pin it, by id:
a set uploaded again under the same name is another set) and the ready-made runs that name
it. The Data page shows it under *Use it*, so a user sees what a corpus, QA set or exemplar
set feeds before changing or deleting it."""

from __future__ import annotations

from sqlmodel import select

from studio.services import corpora, exemplar_sets, presets, qa_sets
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Run

KINDS = {"corpus": ("corpus",), "QA set": ("train", "eval"), "exemplar set": ("exemplars",)}
"""Each kind of data set and the keys of a run's `data` that name one."""
PLAN_KEYS = {"exemplars": "exemplar_set"}
"""A plan pins under the config's key but the exemplars (studio.services.run_plans.RunPlan)."""


def _named(data: dict, keys: tuple[str, ...]) -> list:
    """What a run's `data` (names) or plan (pinned refs) holds under `keys`, as one list."""
    found = []
    for key in keys:
        value = data.get(key)
        found += value if isinstance(value, list) else [value] if value else []
    return found


def data_usage(settings: Settings) -> list[dict]:
    """One row per stored data set: `kind`, `id`, `name`, `runs` (id, name and state of each
    run whose plan pins it, newest first) and `presets` (the ready-made runs naming it)."""
    with session_scope(settings.sqlalchemy_url) as session:
        runs = session.exec(select(Run.id, Run.name, Run.state, Run.plan)
                            .where(Run.plan.is_not(None)).order_by(Run.id.desc())).all()
    stored = {"corpus": corpora.list_corpora(settings), "QA set": qa_sets.list_qa_sets(settings),
              "exemplar set": exemplar_sets.list_exemplar_sets(settings)}
    rows = []
    for kind, keys in KINDS.items():
        plan_keys = tuple(PLAN_KEYS.get(key, key) for key in keys)
        for item in stored[kind]:
            rows.append({
                "kind": kind, "id": item["id"], "name": item["name"],
                "runs": [{"id": run_id, "name": name, "state": getattr(state, "value", state)}
                         for run_id, name, state, plan in runs
                         if item["id"] in {ref["id"] for ref in _named(plan, plan_keys)}],
                "presets": [preset for preset, config in presets.RUN_PRESETS.items()
                            if item["name"] in _named(config["data"], keys)]})
    return rows
