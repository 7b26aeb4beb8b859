"""What a run wrote, read back: metric series, its event log, rollouts page by page, one
rollout's segments, several runs side by side, and the run's config as YAML.

Pages answer `{"items", "total", "next_cursor"}`: `total` counts every row the filters
match; pass `next_cursor` back as `cursor` for the next page (`None` on the last one).
Rollout pages also take an `offset` (a page number times the limit) for tables that jump
to page N; the cursor costs the same on every page, the offset grows with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict, with_config
from sqlalchemy import func, tuple_
from sqlmodel import Session, select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.jobs.engines import ENGINES
from studio.method.exemplars import Exemplar
from studio.method.token_arrays import TokenArrays, token_view
from studio.run_config import RunConfigError, parse_run_config
from studio.services.errors import InvalidInput, NotFound
from studio.services.records import get_or_404, parse_sql_int
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Rollout, Run, RunEvent, RunMetric

MAX_METRIC_PAGE = 10_000
MAX_ROLLOUT_PAGE = 500
MAX_COMPARED_RUNS = 20

# A rollout without its segments: what a list, a table row or the live stream shows.
ROLLOUT_SUMMARY_COLUMNS = (
    Rollout.id, Rollout.step, Rollout.group_index, Rollout.sample_index, Rollout.stage,
    Rollout.exemplars, Rollout.hint_exemplars, Rollout.question, Rollout.golden_answers,
    Rollout.reward, Rollout.breakdown, Rollout.advantage, Rollout.created_at,
)


@with_config(ConfigDict(extra="allow"))  # every metric the step recorded, by its name
class MetricRow(TypedDict):
    """One step's metrics, flat: these four and each named value (reward_mean, acc, ...)."""

    id: int
    step: int
    stage: int
    exemplars: int


class MetricPage(TypedDict):
    items: list[MetricRow]
    total: int
    next_cursor: str | None  # None on the last page


class EventView(TypedDict):
    id: int
    step: int
    kind: str  # stage_change | warning | info
    message: str
    data: dict | None


class RolloutSummary(TypedDict):
    """A rollout without its segments: what a list, a table row or the live stream shows."""

    id: int
    step: int
    group: int
    sample: int
    stage: int
    exemplars: int  # in the prompt it was sampled with
    # a guided rollout (guidance.mode: mixed): the exemplars it saw as a hint, by their index
    # in the run's exemplar set; it trained on the prompt without them. None: not guided
    hint_exemplars: list[int] | None
    question: str
    golden_answers: list | None
    reward: float
    breakdown: dict | None  # the reward's parts (acc, format, answer, ...)
    advantage: float


class RolloutDetail(RolloutSummary):
    """A rollout with its segments, each marked `trained` (false for what the loss ignores),
    and the token counts per source (prompt, model, env)."""

    segments: list[dict]  # {source, kind, text, tokens, trained}
    tokens: dict[str, int]
    hint_questions: list[str] | None  # the question of each of `hint_exemplars`, as the run's
    # plan snapshot has it (None: not guided, or a run stored before plans)


class RolloutPage(TypedDict):
    items: list[RolloutSummary]  # RolloutDetail with `segments` (and `token_view`)
    total: int
    next_cursor: str | None  # None on the last page


class RolloutTokens(TypedDict):
    """One rollout's per-token figures (`studio.method.token_arrays.token_view`), parallel
    arrays with one entry per response token."""

    id: int
    recorded: bool  # false (arrays empty) where the engine kept none
    tokens: int
    bytes: int  # the packed size
    text: list[str]
    segment: list[int]  # index into the rollout's segments
    mask: list[int]  # 1: sampled by the model and trained on; 0: inserted by the environment
    logprob: list[float | None]  # None where masked
    entropy: list[float | None]  # None where masked
    advantage: list[float]


class ComparedRun(TypedDict):
    id: int
    name: str
    state: str
    current_step: int
    total_steps: int


class RunComparison(TypedDict):
    """Several runs' metric series on one step axis, their configs and how these differ."""

    runs: list[ComparedRun]
    steps: list[int]
    metrics: list[str]
    series: dict[str, list[list]]  # metric -> per run, its value at each step (None: none)
    configs: list[dict | None]  # each run's config, every default filled in
    unused: list[list[str]]  # per run, the config keys its own settings make unused
    differences: list[str]  # dotted keys whose (used) values differ


def metric_view(row) -> MetricRow:
    """One step's metrics, flat: `step`, `stage`, `exemplars` and every named value."""
    return {"id": row.id, "step": row.step, "stage": row.stage, "exemplars": row.exemplars,
            **(row.values or {})}


def event_view(row) -> EventView:
    return {"id": row.id, "step": row.step, "kind": row.kind, "message": row.message,
            "data": row.data}


def rollout_summary(row) -> RolloutSummary:
    return {"id": row.id, "step": row.step, "group": row.group_index,
            "sample": row.sample_index, "stage": row.stage, "exemplars": row.exemplars,
            "hint_exemplars": row.hint_exemplars, "question": row.question,
            "golden_answers": row.golden_answers, "reward": row.reward,
            "breakdown": row.breakdown, "advantage": row.advantage}


def _check_limit(limit: int, most: int) -> None:
    if not 1 <= limit <= most:
        raise InvalidInput(f"limit: give 1 to {most} (got {limit})")


def _check_run(session: Session, run_id: int) -> Run:
    return get_or_404(session, Run, run_id, "run")


def _found_or_404(session: Session, run_id: int, found: int) -> None:
    """Nothing found: is there no such run (404) or nothing yet? One query saved otherwise."""
    if not found:
        _check_run(session, run_id)


# --- metrics ------------------------------------------------------------------------------


def _metric_query(run_id: int, from_step: int | None, to_step: int | None):
    query = select(RunMetric).where(RunMetric.run_id == run_id)
    if from_step is not None:
        query = query.where(RunMetric.step >= from_step)
    if to_step is not None:
        query = query.where(RunMetric.step <= to_step)
    return query


def run_metrics(settings: Settings, run_id: int, since_step: int = 0,
                until_step: int | None = None) -> list[MetricRow]:
    """The whole series from `since_step` (to `until_step`), in step order: what a chart draws."""
    with session_scope(settings.sqlalchemy_url) as session:
        rows = [metric_view(r) for r in session.exec(
            _metric_query(run_id, since_step, until_step).order_by(RunMetric.step))]
        _found_or_404(session, run_id, len(rows))
        return rows


def metrics_written_after(settings: Settings, run_id: int, after_id: int = 0,
                          limit: int = 1000) -> list[MetricRow]:
    """Metric rows in the order they were written (by id): what a follower reads. A step
    run again after a resume comes back with a new id and its step number."""
    with session_scope(settings.sqlalchemy_url) as session:
        rows = session.exec(select(RunMetric).where(RunMetric.run_id == run_id,
                                                    RunMetric.id > after_id)
                            .order_by(RunMetric.id).limit(limit))
        return [metric_view(r) for r in rows]


def metric_page(settings: Settings, run_id: int, *, from_step: int | None = None,
                to_step: int | None = None, limit: int = 1000,
                cursor: str | None = None) -> MetricPage:
    """Metric rows by step range, in step order; the cursor is the next step to read."""
    _check_limit(limit, MAX_METRIC_PAGE)
    start = _int_cursor(cursor)
    with session_scope(settings.sqlalchemy_url) as session:
        query = _metric_query(run_id, from_step, to_step)
        total = session.exec(select(func.count()).select_from(query.subquery())).one()
        _found_or_404(session, run_id, total)
        if start is not None:
            query = query.where(RunMetric.step >= start)
        rows = list(session.exec(query.order_by(RunMetric.step).limit(limit + 1)))
    more = len(rows) > limit
    return {"items": [metric_view(r) for r in rows[:limit]], "total": total,
            "next_cursor": str(rows[limit].step) if more else None}


_NOT_A_CURSOR = "a cursor of this list; pass the next_cursor of the previous page"


def _int_cursor(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    return parse_sql_int(cursor, "cursor", _NOT_A_CURSOR)


# --- events -------------------------------------------------------------------------------


def run_events(settings: Settings, run_id: int, kind: str | None = None
               ) -> list[EventView]:
    """The event log (stage changes, warnings, notes) in step order: what the curves mark."""
    with session_scope(settings.sqlalchemy_url) as session:
        query = select(RunEvent).where(RunEvent.run_id == run_id)
        if kind:
            query = query.where(RunEvent.kind == kind)
        events = [event_view(e) for e in session.exec(query.order_by(RunEvent.step, RunEvent.id))]
        _found_or_404(session, run_id, len(events))
        return events


# --- rollouts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutFilter:
    """Which rollouts a page holds; every bound is inclusive and None means any."""

    step_min: int | None = None
    step_max: int | None = None
    stage: int | None = None
    exemplars: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None

    def apply(self, query):
        for column, low, high in ((Rollout.step, self.step_min, self.step_max),
                                  (Rollout.reward, self.reward_min, self.reward_max)):
            if low is not None:
                query = query.where(column >= low)
            if high is not None:
                query = query.where(column <= high)
        for column, value in ((Rollout.stage, self.stage), (Rollout.exemplars, self.exemplars)):
            if value is not None:
                query = query.where(column == value)
        return query


def _rollout_cursor(cursor: str | None) -> tuple[int, int] | None:
    """`step.id` of the last row of the previous page (pages go newest first)."""
    if not cursor:
        return None
    step, _, row_id = cursor.partition(".")
    return (parse_sql_int(step, "cursor", _NOT_A_CURSOR),
            parse_sql_int(row_id, "cursor", _NOT_A_CURSOR))


def rollout_page(settings: Settings, run_id: int, filters: RolloutFilter = RolloutFilter(), *,
                 limit: int = 50, offset: int = 0, cursor: str | None = None,
                 segments: bool = False, tokens: bool = False) -> RolloutPage:
    """Rollouts newest first (step, then id, descending), filtered; summaries unless
    `segments`; with `tokens` too, each segmented rollout's per-token figures
    (`token_view`)."""
    _check_limit(limit, MAX_ROLLOUT_PAGE)
    if offset < 0:
        raise InvalidInput(f"offset: give 0 or more (got {offset})")
    after = _rollout_cursor(cursor)
    columns = (*ROLLOUT_SUMMARY_COLUMNS, Rollout.segments) if segments \
        else ROLLOUT_SUMMARY_COLUMNS
    if segments and tokens:
        columns = (*columns, Rollout.token_arrays)
    with session_scope(settings.sqlalchemy_url) as session:
        where = filters.apply(select(Rollout.id).where(Rollout.run_id == run_id))
        total = session.execute(select(func.count()).select_from(where.subquery())).scalar_one()
        _found_or_404(session, run_id, total)
        # the page's ids first (the indexes cover it), then only those rows
        if after is not None:
            where = where.where(tuple_(Rollout.step, Rollout.id) < after)
        elif offset:
            where = where.offset(offset)
        ids = session.execute(where.order_by(Rollout.step.desc(), Rollout.id.desc())
                              .limit(limit + 1)).scalars().all()
        found = {r.id: r for r in session.execute(
            select(*columns).where(Rollout.id.in_(ids[:limit])))} if ids else {}
        page = [found[i] for i in ids[:limit] if i in found]
        shown = _exemplar_questions(session, run_id) if segments and any(
            r.hint_exemplars for r in page) else []
    items = [_with_segments(rollout_summary(r), r.segments, shown) if segments
             else rollout_summary(r) for r in page]
    if segments and tokens:
        items = [{**item, "token_view": _token_view(r)} for item, r in zip(items, page,
                                                                          strict=True)]
    more = len(ids) > limit
    return {"items": items, "total": total,
            "next_cursor": f"{page[-1].step}.{page[-1].id}" if more and page else None}


def run_rollouts(settings: Settings, run_id: int, step: int | None = None,
                 limit: int = 50) -> list[RolloutDetail]:
    """The newest rollouts (of one step) with their segments, for callers that want them all."""
    return rollout_page(settings, run_id, RolloutFilter(step_min=step, step_max=step),
                        limit=limit, segments=True)["items"]


def _with_segments(summary: RolloutSummary, segments: list | None,
                   exemplar_questions: list[str]) -> RolloutDetail:
    """Each segment marked `trained` (model tokens) or not (prompt, environment), with token
    sums, and a guided rollout's hint exemplars' questions (from `exemplar_questions`, the
    run's snapshot).

    The environment's segments are what the loss ignores; their token counts are the
    loss mask's, so a viewer can highlight exactly the masked spans.
    """
    marked = [{**s, "trained": s.get("source") == "model"} for s in segments or []]
    tokens = {"prompt": 0, "model": 0, "env": 0}
    for s in marked:
        source = s.get("source", "env")
        tokens[source] = tokens.get(source, 0) + int(s.get("tokens") or 0)
    hint = summary["hint_exemplars"]
    known = hint and exemplar_questions and all(i < len(exemplar_questions) for i in hint)
    return {**summary, "segments": marked, "tokens": tokens,
            "hint_questions": [exemplar_questions[i] for i in hint] if known else None}


def _exemplar_questions(session: Session, run_id: int) -> list[str]:
    """The questions of the exemplars the run's plan snapshots, in the set's order (the
    indices of `hint_exemplars`); empty for a run stored before plans."""
    plan = session.execute(select(Run.plan).where(Run.id == run_id)).scalar_one_or_none()
    return [Exemplar.coerce(e).question for e in (plan or {}).get("exemplars", [])]


def _token_view(row) -> dict:
    arrays = TokenArrays.unpack(row.token_arrays) if row.token_arrays else None
    return token_view(row.segments or [], arrays)


def _rollout_row(session: Session, run_id: int, rollout_id: int) -> Rollout:
    row = session.get(Rollout, rollout_id)
    if row is None or row.run_id != run_id:
        _check_run(session, run_id)
        raise NotFound(f"rollout {rollout_id} of run {run_id} does not exist")
    return row


def rollout_detail(settings: Settings, run_id: int, rollout_id: int) -> RolloutDetail:
    with session_scope(settings.sqlalchemy_url) as session:
        row = _rollout_row(session, run_id, rollout_id)
        shown = _exemplar_questions(session, run_id) if row.hint_exemplars else []
        return _with_segments(rollout_summary(row), row.segments, shown)


def rollout_tokens(settings: Settings, run_id: int, rollout_id: int) -> RolloutTokens:
    """One rollout's per-token figures (`studio.method.token_arrays.token_view`): per
    response token its text, loss mask, log-prob, entropy and advantage."""
    with session_scope(settings.sqlalchemy_url) as session:
        row = _rollout_row(session, run_id, rollout_id)
        return {"id": row.id, **_token_view(row)}


# --- comparison ---------------------------------------------------------------------------


def parse_ids(text: str, field: str = "ids") -> list[int]:
    """`1,2,3` -> [1, 2, 3], each once, in the order given."""
    ids: list[int] = []
    for part in (text or "").split(","):
        run_id = parse_sql_int(part, field, "a run id; give ids like 1,2,3")
        if run_id not in ids:
            ids.append(run_id)
    return ids


def _flatten(config: dict | None, prefix: str = "") -> dict:
    flat = {}
    for key, value in (config or {}).items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def unused_keys(config: dict | None) -> set[str]:
    """Dotted keys of a config that its own settings override, so their values did nothing:
    the curriculum's preset and steps per stage beside explicit stages (its stages without
    them), every setting of an engine's own section (`verl.`) on another backend, and a GRPO
    option's companion while the option is off (the sampling bound without dynamic
    sampling, the overlong penalty without its buffer, the KL estimator and place without a
    KL coefficient, the guidance's options in a `shown` run, luffy's gamma without
    luffy and the exemplars' draw when none is sampled)."""
    flat = _flatten(config)
    curriculum = (config or {}).get("curriculum") or {}
    unused = ({"curriculum.preset", "curriculum.steps_per_stage"} if curriculum.get("stages")
              else {"curriculum.stages"})
    backend = (config or {}).get("backend", "native")
    unused |= {key for key in flat for engine in ENGINES.values() if engine.settings
               and engine.name != backend and key.startswith(f"{engine.settings}.")}
    if not flat.get("grpo.dynamic_sampling"):
        unused.add("grpo.dynamic_sampling_max_batches")
    if not flat.get("grpo.overlong_buffer"):
        unused.add("grpo.overlong_penalty")
    if flat.get("grpo.kl_coef") == 0:
        unused |= {"grpo.kl_estimator", "grpo.kl_in"}
    shown = flat.get("guidance.mode", "shown") == "shown"
    if shown:
        unused |= {"guidance.share", "guidance.shaping", "guidance.when"}
    if shown or flat.get("guidance.shaping") != "luffy":
        unused.add("guidance.gamma")
    if flat.get("prompt.exemplar_selection", "first") != "sample":
        unused.add("prompt.exemplar_draw")
    return unused & set(flat)


def _used(config: dict | None) -> dict:
    unused = unused_keys(config)
    return {k: v for k, v in _flatten(config).items() if k not in unused}


def config_differences(configs: list[dict | None]) -> list[str]:
    """Dotted keys (`grpo.lr`) whose value differs between the configs, or is missing (or
    unused: `unused_keys`) in some."""
    flat = [_used(c) for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    missing = object()
    return [k for k in keys if len({repr(f.get(k, missing)) for f in flat}) > 1]


def with_defaults(config: dict | None) -> dict | None:
    """A stored config with every key the schema has now (a key added since the run was
    launched takes its default, which is what the run ran with); as stored if it no longer
    parses."""
    try:
        return parse_run_config(config).model_dump(mode="json")
    except RunConfigError:
        return config


def compare_runs(settings: Settings, run_ids: list[int],
                 metrics: list[str] | None = None) -> RunComparison:
    """Metric series of several runs aligned on one step axis (None where a run has no value),
    with their configs, the keys each config's own settings make unused, and the keys in
    which the configs differ (among those used)."""
    if not 1 <= len(run_ids) <= MAX_COMPARED_RUNS:
        raise InvalidInput(f"ids: give 1 to {MAX_COMPARED_RUNS} run ids (got {len(run_ids)})")
    with session_scope(settings.sqlalchemy_url) as session:
        runs = [_check_run(session, run_id) for run_id in run_ids]
        rows = session.exec(select(RunMetric).where(RunMetric.run_id.in_(run_ids)))
        by_run: dict[int, dict[int, dict]] = {run_id: {} for run_id in run_ids}
        for row in rows:
            by_run[row.run_id][row.step] = metric_view(row)
    recorded = sorted({k for steps in by_run.values() for m in steps.values() for k in m}
                      - {"id", "step"})
    names = metrics or recorded
    unknown = [n for n in names if n not in recorded]
    if unknown:
        raise InvalidInput(f"metrics: {', '.join(unknown)} not recorded by runs "
                           f"{', '.join(map(str, run_ids))}; recorded: {', '.join(recorded)}")
    steps = sorted({s for by_step in by_run.values() for s in by_step})
    series = {name: [[by_run[r.id].get(s, {}).get(name) for s in steps] for r in runs]
              for name in names}
    configs = [with_defaults(r.config) for r in runs]
    return {
        "runs": [{"id": r.id, "name": r.name, "state": r.state, "current_step": r.current_step,
                  "total_steps": r.total_steps} for r in runs],
        "steps": steps, "metrics": names, "series": series,
        "configs": configs,
        "unused": [sorted(unused_keys(c)) for c in configs],
        "differences": config_differences(configs),
    }


# --- the config file ----------------------------------------------------------------------


def run_config_yaml(settings: Settings, run_id: int) -> tuple[str, str]:
    """(file name, YAML text) of the run's config: `studio run launch` takes it as it is."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = _check_run(session, run_id)
        name, config = run.name, run.config
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.") or "run"
    return f"run-{run_id}-{safe}.yaml", parse_run_config(config).to_yaml()
