"""Zero-shot evaluations of a base model or a run's checkpoint on a QA set.

An evaluation is a job like a training run: queued, claimed by a worker whose task spawns
it in a process of its own (one GPU of the worker's on queue gpu), running, then
succeeded, failed or cancelled. A cancel is a state: the worker sees it within a second
and stops the process; what the process writes after that is ignored.
"""

from __future__ import annotations

import json
from datetime import timedelta

from sqlmodel import select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.jobs import lifecycle
from studio.jobs.lifecycle import ACTIVE_STATES, CorpusStatus, JobTable, RunState
from studio.jobs.queue import TRAINING_QUEUES, enqueue
from studio.method import failures
from studio.method.evaluation import MAX_TRIED_EXEMPLARS, PROTOCOL_KEYS
from studio.method.prompt import EVAL_PREFIXES, check_eval_prefix
from studio.method.reward import ANSWER_MATCHES
from studio.method.tags import SEARCH_TOOL
from studio.method.tools import (
    DEFAULT_TOOL_NAMES,
    TOOLS,
    FailureLabel,
    check_tool_names,
    corpus_tools,
    named_specs,
    sole_verb,
)
from studio.run_config import RunConfig, RunConfigError, parse_protocol
from studio.services import exemplar_sets, runs
from studio.services.access import Actor, require_member
from studio.services.errors import Conflict, InvalidInput, NotFound
from studio.services.evaluation_files import evaluation_records_path
from studio.services.lanes import add_waits
from studio.services.records import (
    by_name_or_404,
    get_or_404,
    get_owned,
    inserted_id,
    usernames,
)
from studio.services.run_plans import DataRef, PlannedDataGone, RunPlan, load_plan, pinned_row
from studio.services.tokenizers import checked_tokenizer
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Corpus, Evaluation, QASet, Run, utcnow

EVAL_TASK = "worker.evaluate"
EVALUATION_JOBS = JobTable("evaluation", Evaluation, heartbeat="heartbeat_at")
"""An evaluation's life cycle (`studio.jobs.lifecycle`); when a worker took it is in its
params (`started_at`)."""
QUEUED_AT_END_WITHIN = timedelta(minutes=2)
"""How soon after a run's success its worker queues the evaluations its plan asks for (it
sees the training process exit, which can take a while to free a large model)."""


def run_protocol(config: RunConfig) -> dict:
    """The zero-shot protocol for a run's end-of-training evaluation: the run's own token
    budgets, layout, instruction and answer matching; k = 0 and temperature 0.1 as always, and
    a pre-filled reply of at most `<think>` whatever the run pre-filled in training."""
    grpo, prompt = config.grpo, config.prompt
    think = EVAL_PREFIXES[-1]
    prefix = think if (prompt.assistant_prefix or "").lstrip().startswith(think) else None
    return {"max_turn_tokens": grpo.max_turn_tokens, "max_turns": grpo.max_turns,
            "max_response_tokens": grpo.max_response_tokens,
            "max_obs_tokens": grpo.max_obs_tokens, "top_k": grpo.top_k,
            "layout": prompt.layout, "assistant_prefix": prefix,
            "instruction": prompt.instruction, "seed": config.seed,
            "answer_match": config.reward.answer_match}


def with_run_tools(protocol: dict | None, run_config: dict) -> dict | None:
    """An evaluation of a run's models calls the run's tools unless the protocol names
    others; a search-only run's protocol stays as given (search is the default)."""
    tools = run_config.get("tools", list(DEFAULT_TOOL_NAMES))
    if tools == list(DEFAULT_TOOL_NAMES) or "tools" in (protocol or {}):
        return protocol
    return {**(protocol or {}), "tools": tools}


class EvaluationView(TypedDict):
    """An evaluation as the API and the pages show it (times in ISO 8601, UTC)."""

    id: int
    owner: str | None  # who queued it (the run's owner for an end-of-run evaluation)
    run_id: int | None  # the run whose checkpoint is evaluated; None for a model
    model: str  # the model reference, or the checkpoint's folder relative to the data folder
    qa_set_id: int
    state: str  # queued | running | succeeded | failed | cancelled
    params: dict | None  # corpus, limit, protocol overrides, queue, progress (done, total),
    # started_at (when a worker took it), a try's `rows` (positions asked, from 0)
    metrics: dict | None  # em, subem, f1, acc, format, search_calls, answer_rate,
    # tool_calls (per tool, per question), code_errors (the tool errors, with python or
    # the calculator), ...
    error: str | None
    created_at: str
    finished_at: str | None
    waiting: str | None  # queued: the queue it waits in and what it waits behind


class OwnPair(TypedDict):
    """The requester's own base and trained evaluations on a QA set, beside the run owner's."""

    requested_by: str  # the requester's username
    base: EvaluationView | None
    trained: EvaluationView | None


class BaseVsTrained(TypedDict):
    """Per QA set, the run owner's base and trained evaluations (`base_vs_trained` says which);
    each one's `owner` says who queued it."""

    qa_set: str
    base: EvaluationView | None
    trained: EvaluationView | None
    yours: OwnPair | None  # the requester's own pair, when it is not the one shown above


def _view(evaluation: Evaluation, owners: dict[int, str]) -> EvaluationView:
    return {"id": evaluation.id, "owner": owners.get(evaluation.owner_id),
            "run_id": evaluation.run_id, "model": evaluation.model_ref,
            "qa_set_id": evaluation.qa_set_id, "state": evaluation.state,
            "params": evaluation.params, "metrics": evaluation.metrics,
            "error": evaluation.error, "created_at": evaluation.created_at.isoformat(),
            "finished_at": evaluation.finished_at.isoformat() if evaluation.finished_at
            else None, "waiting": None}


def _with_waits(settings: Settings, views: list[EvaluationView]) -> list[EvaluationView]:
    return add_waits(settings, views, "evaluation", "waiting",
                     lambda view: (view["params"] or {}).get("queue", "cpu"))


def _data_row(session, table, wanted: str | DataRef, kind: str, field: str):
    """A data set by name (resolved now) or as a run's plan pinned it (kept as it was)."""
    if isinstance(wanted, str):
        try:
            return by_name_or_404(session, table, wanted, kind)
        except NotFound as exc:
            raise NotFound(f"{field}: {exc}") from None
    row = pinned_row(session, table, wanted)
    if row is None:
        raise PlannedDataGone(f"{field}: the {kind} '{wanted.name}' (#{wanted.id}) the run "
                              "trained with is no longer stored")
    return row


def create_evaluation(settings: Settings, actor: Actor, *, qa_set: str | DataRef,
                      corpus: str | DataRef | None = None, model: str | None = None,
                      run_id: int | None = None, limit: int | None = None,
                      protocol: dict | None = None, queue: str = "cpu",
                      exemplar_set: str | None = None, rows: list[int] | None = None,
                      start: bool = True) -> EvaluationView:
    """Evaluate `model` (or run `run_id`'s latest checkpoint: any run of the team) on a QA
    set, searching `corpus` (default: the corpus of the run's plan). Data is named (resolved
    now) or a `DataRef` of a run's plan. `protocol` overrides method.md's evaluation protocol
    (temperature 0.1, 512 tokens per turn, 6 tool calls, top-3) key by key; its `exemplars`
    (k, 0 in the protocol) shows the first k exemplars of `exemplar_set` before each question,
    pinned now (a "try it" of a set before launch, `exemplar_trials`, which asks the set's
    questions at `rows`: positions from 0, in place of the first `limit`). A model whose
    tokenizer does not load is refused (422, naming `model`) before anything is stored, as a
    run's model is."""
    require_member(actor, "evaluate models")
    shown = _shown_exemplars(settings, exemplar_set, (protocol or {}).get("exemplars", 0))
    return _queue_evaluation(settings, actor.id, qa_set=qa_set, corpus=corpus, model=model,
                             run_id=run_id, limit=limit, protocol=protocol, queue=queue,
                             start=start, exemplars=shown, rows=rows)


def _shown_exemplars(settings: Settings, exemplar_set: str | None, k: object) -> dict:
    """The exemplars an evaluation shows (its params' `exemplars` and `exemplar_set`), checked:
    a set to take k from, k of them there, none with an error."""
    if not k:
        if exemplar_set:
            raise InvalidInput("exemplar_set: set protocol.exemplars (how many to show) too")
        return {}
    if not exemplar_set:
        raise InvalidInput(f"exemplar_set: protocol.exemplars is {k}; name the set they come "
                           "from")
    found = exemplar_sets.find_exemplar_set(settings, exemplar_set)
    most = min(found["size"], MAX_TRIED_EXEMPLARS)
    if not isinstance(k, int) or not 0 < k <= most:
        raise InvalidInput(f"protocol.exemplars: give 1 to {most} (the set '{found['name']}' "
                           f"holds {found['size']}), got {k!r}")
    if found["errors"]:
        raise InvalidInput(f"exemplar_set: '{found['name']}' has {found['errors']} errors; fix "
                           "them on the Exemplars page first")
    return {"exemplar_set": found["name"], "exemplars": [
        {key: e[key] for key in ("question", "solution", "answer")}
        for e in found["exemplars"][:k]]}


def _queue_evaluation(settings: Settings, owner_id: int | None, *, qa_set: str | DataRef,
                      corpus: str | DataRef | None, model: str | None, run_id: int | None,
                      limit: int | None, protocol: dict | None, queue: str,
                      start: bool, exemplars: dict | None = None,
                      rows: list[int] | None = None) -> EvaluationView:
    if (model is None) == (run_id is None):
        raise InvalidInput("give either model (a model to evaluate) or run_id (a trained run)")
    if queue not in TRAINING_QUEUES:
        raise InvalidInput(f"queue: '{queue}' is not one of {', '.join(TRAINING_QUEUES)}")
    if limit is not None and limit < 1:
        raise InvalidInput("limit: must be at least 1 question")
    unknown = sorted(set(protocol or {}) - set(PROTOCOL_KEYS))
    if unknown:
        raise InvalidInput(f"protocol: unknown key(s) {', '.join(unknown)}; use "
                           f"{', '.join(PROTOCOL_KEYS)}")
    try:
        check_eval_prefix((protocol or {}).get("assistant_prefix"))
    except ValueError as exc:
        raise InvalidInput(f"protocol.{exc}") from None
    if (protocol or {}).get("answer_match", "exact") not in ANSWER_MATCHES:
        raise InvalidInput(f"protocol.answer_match: use one of {', '.join(ANSWER_MATCHES)}")
    try:
        check_tool_names((protocol or {}).get("tools", DEFAULT_TOOL_NAMES))
    except ValueError as exc:
        raise InvalidInput(f"protocol.tools: {exc}") from None
    try:
        protocol = parse_protocol(protocol or {})
    except RunConfigError as exc:
        raise InvalidInput(str(exc)) from None
    if run_id is not None:
        with session_scope(settings.sqlalchemy_url) as session:
            run = get_or_404(session, Run, run_id, "run")
            if not run.checkpoint_dir:
                raise InvalidInput(f"run_id: run {run_id} has no checkpoint yet")
            model = run.checkpoint_dir
            protocol = with_run_tools(protocol, run.config)
        corpus = corpus or load_plan(settings, run_id).corpus
    if corpus is None and corpus_tools((protocol or {}).get("tools", DEFAULT_TOOL_NAMES)):
        raise InvalidInput("corpus: name the corpus the model searches")
    if run_id is None:  # a run's checkpoint is the studio's own; a named model is checked
        checked_tokenizer(settings, model)
    with session_scope(settings.sqlalchemy_url) as session:
        qa = _data_row(session, QASet, qa_set, "QA set", "qa_set")
        found = _data_row(session, Corpus, corpus, "corpus", "corpus") if corpus else None
        if found and found.status != CorpusStatus.ready:
            raise InvalidInput(f"corpus: '{found.name}' is {found.status}; wait until it is "
                               "ready")
        if rows is not None and not all(0 <= row < qa.num_rows for row in rows):
            raise InvalidInput(f"rows: positions from 0 to {qa.num_rows - 1} of '{qa.name}'")
        total = len(rows) if rows is not None else min(limit or qa.num_rows, qa.num_rows)
        evaluation_id = inserted_id(session, Evaluation(
            run_id=run_id, model_ref=model, qa_set_id=qa.id, owner_id=owner_id,
            params={"corpus": found and found.name, "corpus_id": found and found.id,
                    "limit": limit, "protocol": protocol or {}, "done": 0, "total": total,
                    "queue": queue, **(exemplars or {}),
                    **({"rows": rows} if rows is not None else {})}))
    if start:
        enqueue(settings, EVAL_TASK, evaluation_id, queue=queue)
    return get_evaluation(settings, evaluation_id)


def get_evaluation(settings: Settings, evaluation_id: int) -> EvaluationView:
    with session_scope(settings.sqlalchemy_url) as session:
        view = _view(get_or_404(session, Evaluation, evaluation_id, "evaluation"),
                     usernames(session))
    return _with_waits(settings, [view])[0]


def list_evaluations(settings: Settings, run_id: int | None = None) -> list[EvaluationView]:
    with session_scope(settings.sqlalchemy_url) as session:
        query = select(Evaluation).order_by(Evaluation.id.desc())
        if run_id is not None:
            query = query.where(Evaluation.run_id == run_id)
        owners = usernames(session)
        views = [_view(e, owners) for e in session.exec(query)]
    return _with_waits(settings, views)


def claim_evaluation(settings: Settings, evaluation_id: int) -> EvaluationView | None:
    """Worker-side: a queued evaluation becomes running; None when it is not queued (cancelled
    before it started, or a redelivered message for one taken already)."""
    with session_scope(settings.sqlalchemy_url) as session:
        evaluation = get_or_404(session, Evaluation, evaluation_id, "evaluation")
        # when the wait in the queue ended: how long the evaluation itself takes
        started = {**(evaluation.params or {}), "started_at": utcnow().isoformat()}
        if not lifecycle.claim(session, EVALUATION_JOBS, evaluation_id, params=started):
            return None
    return get_evaluation(settings, evaluation_id)


def is_running(settings: Settings, evaluation_id: int) -> bool:
    """The task's heartbeat: False once the evaluation is cancelled (or deleted)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return lifecycle.beat(session, EVALUATION_JOBS, evaluation_id)


def cancel_evaluation(settings: Settings, actor: Actor, evaluation_id: int) -> EvaluationView:
    """Mark a queued or running evaluation cancelled; its worker stops the process."""
    with session_scope(settings.sqlalchemy_url) as session:
        evaluation = get_owned(session, Evaluation, evaluation_id, "evaluation", actor,
                               "cancel")
        if not lifecycle.cancel(session, EVALUATION_JOBS, evaluation_id):
            raise Conflict(f"evaluation {evaluation_id} is already "
                           f"{RunState(evaluation.state).value}")
    return get_evaluation(settings, evaluation_id)


def update_evaluation(settings: Settings, evaluation_id: int, *, state: RunState | None = None,
                      progress: tuple[int, int] | None = None, metrics: dict | None = None,
                      error: str | None = None) -> None:
    """Worker-side: state, progress (done, total), final metrics or the failure's reason.
    Nothing changes once the evaluation has ended (a cancel is final)."""
    with session_scope(settings.sqlalchemy_url) as session:
        evaluation = get_or_404(session, Evaluation, evaluation_id, "evaluation")
        values = {key: value for key, value in (("metrics", metrics), ("error", error))
                  if value is not None}
        if progress is not None:
            values["params"] = {**(evaluation.params or {}), "done": progress[0],
                                "total": progress[1]}
        if state is not None:
            lifecycle.move(session, EVALUATION_JOBS, evaluation_id, state,
                           leaving=ACTIVE_STATES, **values)
        elif values:
            lifecycle.beat(session, EVALUATION_JOBS, evaluation_id, **values)


def evaluate_base_and_trained(settings: Settings, actor: Actor, run_id: int,
                              qa_set_names: list[str | DataRef], *,
                              base_model: str | None = None,
                              corpus: str | DataRef | None = None,
                              limit: int | None = None, protocol: dict | None = None,
                              queue: str = "cpu", start: bool = True) -> list[EvaluationView]:
    """Queue, per QA set, the zero-shot evaluation of the run's base model and of its latest
    checkpoint under the same protocol (and the same corpus: the one of the run's plan unless
    named). Every name is checked before anything is queued."""
    require_member(actor, "evaluate models")
    return _base_and_trained(settings, actor.id, run_id, qa_set_names, base_model=base_model,
                             corpus=corpus, limit=limit, protocol=protocol, queue=queue,
                             start=start)


def _base_and_trained(settings: Settings, owner_id: int | None, run_id: int,
                      qa_set_names: list[str | DataRef], *, base_model: str | None,
                      corpus: str | DataRef | None, limit: int | None, protocol: dict | None,
                      queue: str, start: bool = True) -> list[EvaluationView]:
    if not qa_set_names:
        raise InvalidInput("qa_sets: choose at least one QA set to evaluate on")
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_or_404(session, Run, run_id, "run")
        if not run.checkpoint_dir:
            raise InvalidInput(f"run_id: run {run_id} has no checkpoint yet; evaluate it after "
                               "its first checkpoint")
        base_model = base_model or run.config["model"]
        protocol = with_run_tools(protocol, run.config)
        for wanted in qa_set_names:
            _data_row(session, QASet, wanted, "QA set", "qa_sets")
    checked_tokenizer(settings, base_model, "base_model")
    shared = {"corpus": corpus or load_plan(settings, run_id).corpus, "limit": limit,
              "protocol": protocol, "queue": queue, "start": start}
    created = []
    for wanted in qa_set_names:
        created.append(_queue_evaluation(settings, owner_id, qa_set=wanted, model=base_model,
                                         run_id=None, **shared))
        created.append(_queue_evaluation(settings, owner_id, qa_set=wanted, model=None,
                                         run_id=run_id, **shared))
    return created


def evaluate_finished_run(settings: Settings, run_id: int) -> list[EvaluationView]:
    """A succeeded run with `engine.evaluate_at_end`: queue base against trained on each of the
    evaluation sets its plan pins, under `run_protocol`, and say so in the run's events.
    Nothing otherwise. The evaluations are the run owner's (the worker asks, not a user)."""
    run = runs.get_run(settings, run_id)
    with session_scope(settings.sqlalchemy_url) as session:
        owner_id = get_or_404(session, Run, run_id, "run").owner_id
    plan = load_plan(settings, run_id)
    if run["state"] != RunState.succeeded.value or not plan.config.engine.evaluate_at_end \
            or not plan.eval:
        return []
    created = _base_and_trained(settings, owner_id, run_id, plan.eval, base_model=None,
                                corpus=plan.corpus, limit=None,
                                protocol=run_protocol(plan.config), queue=run["queue"])
    runs.record_event(settings, run_id, "info",
                      f"queued the zero-shot evaluation of the base model and the trained "
                      f"model on {', '.join(ref.name for ref in plan.eval)}",
                      step=run["current_step"], data={"evaluations": [e["id"] for e in created]})
    return created


def evaluations_to_come(settings: Settings, run_id: int) -> bool:
    """Whether the run will still queue base against trained by itself: its plan asks for
    them at the end (`evaluate_finished_run`) and it is queued or training, or it succeeded
    less than `QUEUED_AT_END_WITHIN` ago and none is queued yet. A page showing the run's
    evaluations keeps following it meanwhile: they appear only once the worker has seen the
    training process exit, seconds after the run says it succeeded."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_or_404(session, Run, run_id, "run")
        if run.plan is None:
            return False
        plan = RunPlan.model_validate(run.plan)
        if not (plan.config.engine.evaluate_at_end and plan.eval):
            return False
        if run.state in ACTIVE_STATES:
            return True
        return (run.state == RunState.succeeded and run.finished_at is not None
                and utcnow() - run.finished_at < QUEUED_AT_END_WITHIN
                and session.exec(select(Evaluation.id).where(Evaluation.run_id == run_id)
                                 .limit(1)).first() is None)


def base_vs_trained(settings: Settings, run_id: int, base_model: str | None = None,
                    requester: Actor | None = None) -> list[BaseVsTrained]:
    """Per QA set, an evaluation of the run's checkpoint beside one of its base model (the
    run's `model` unless named): `{qa_set, base, trained, yours}`, any may be None.

    Each side is the first of its evaluations by: not cancelled (a cancelled one never hides
    figures that exist), the run owner's or the studio's (owner None) before another
    member's (a member's newer pair never hides the owner's, so every member reads the same
    figures for a run), newest (a new pair shows as it runs: its owner follows it and may
    cancel it, and the pair a run queues at its end shows at once). `yours`: a `requester`
    other than the run's owner sees, labelled, its own newest pair (not cancelled, else
    cancelled) where it differs from the one shown."""
    with session_scope(settings.sqlalchemy_url) as session:
        run = get_or_404(session, Run, run_id, "run")
        base_model = base_model or run.config["model"]
        newest_first = select(Evaluation).order_by(Evaluation.id.desc())
        owners = usernames(session)
        trained = [_view(e, owners) for e in session.exec(
            newest_first.where(Evaluation.run_id == run_id))]
        base = [_view(e, owners) for e in session.exec(newest_first.where(
            Evaluation.run_id.is_(None), Evaluation.model_ref == base_model))]
        names = {q.id: q.name for q in session.exec(select(QASet))}
        run_owner = owners.get(run.owner_id)
    _with_waits(settings, trained + base)
    mine = requester.username if requester and requester.username != run_owner else None

    def first(views: list[EvaluationView], qa_set_id: int,
              owned_by: str | None = None) -> EvaluationView | None:
        of_set = [e for e in views if e["qa_set_id"] == qa_set_id
                  and owned_by in (None, e["owner"])]  # newest first; min keeps the first
        return min(of_set, default=None,
                   key=lambda e: (e["state"] == RunState.cancelled.value,
                                  e["owner"] not in (None, run_owner)))

    rows: list[BaseVsTrained] = []
    for qa_set_id in dict.fromkeys(e["qa_set_id"] for e in trained + base):
        shown = (first(base, qa_set_id), first(trained, qa_set_id))
        own = (first(base, qa_set_id, mine), first(trained, qa_set_id, mine)) if mine \
            else (None, None)
        rows.append({"qa_set": names.get(qa_set_id, f"#{qa_set_id}"), "base": shown[0],
                     "trained": shown[1],
                     "yours": {"requested_by": mine, "base": own[0], "trained": own[1]}
                     if any(own) and own != shown else None})
    return rows


def latest_evaluated_run(settings: Settings) -> int | None:
    """The run whose checkpoint was evaluated last (what the Evaluate page shows first)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return session.exec(select(Evaluation.run_id).where(Evaluation.run_id.is_not(None))
                            .order_by(Evaluation.id.desc()).limit(1)).first()


class LabelShare(TypedDict):
    """How many of an evaluation's questions got one failure label (`studio.method.failures`)."""

    label: str  # a key of the evaluation's tools' labels: correct, format_miss, no_search, ...
    title: str  # the label as a page names it
    meaning: str  # the label in plain words
    count: int
    share: float  # of the evaluation's questions, 0 to 1


class LabelledQuestion(TypedDict):
    """One evaluated question with its label, as the evaluation recorded it."""

    id: str
    question: str
    golden_answers: list[str]
    prediction: str | None  # the model's last answer; None when it gave none
    searches: list[str]  # its search queries, in order
    calls: list[dict]  # each call of any tool: tool, input, result (None: none kept), failed
    label: str


def evaluation_labels(evaluation: EvaluationView) -> tuple[FailureLabel, ...]:
    """The failure labels an evaluation gives, those of its tools in the order they are
    checked (`failures.label_set`); one labelled before the labels followed the tools has
    search's."""
    tools = ((evaluation["params"] or {}).get("protocol") or {}).get("tools", DEFAULT_TOOL_NAMES)
    labels = failures.label_set(named_specs(tools))
    stored = ((evaluation["metrics"] or {}).get("labels") or {})
    return labels if set(stored) <= {label.key for label in labels} else failures.label_set()


def label_shares(evaluation: EvaluationView | None) -> list[LabelShare]:
    """The split of an evaluation's questions by failure label, every label of its tools in
    precedence order; empty while it has not finished (and for one evaluated before labels
    were kept)."""
    counts = ((evaluation or {}).get("metrics") or {}).get("labels")
    if not counts:
        return []
    total = sum(counts.values()) or 1
    return [{"label": label.key, "title": label.title, "meaning": label.meaning,
             "count": counts.get(label.key, 0), "share": counts.get(label.key, 0) / total}
            for label in evaluation_labels(evaluation)]


def label_split(settings: Settings, evaluation_id: int) -> list[LabelShare]:
    """`label_shares` of one evaluation (404 when there is none)."""
    return label_shares(get_evaluation(settings, evaluation_id))


def evaluation_records(settings: Settings, evaluation_id: int, limit: int = 50) -> list[dict]:
    """The first `limit` per-question records of a finished evaluation (prediction, scores,
    tool calls), as stored; none before it has finished."""
    get_evaluation(settings, evaluation_id)
    path = evaluation_records_path(settings, evaluation_id)
    if not path.exists():
        return []
    with path.open() as lines:
        return [json.loads(line) for line, _ in zip(lines, range(limit), strict=False)]


def labelled_questions(settings: Settings, evaluation_id: int, label: str,
                       limit: int = 5) -> list[LabelledQuestion]:
    """The first `limit` questions of an evaluation with `label` (one of its tools'), in the
    QA set's order: question, gold answers, the model's answer, its searches and its calls
    (as stored, unescaped; a record from before calls were kept lists its searches, without
    their results)."""
    keys = [known.key for known in evaluation_labels(get_evaluation(settings, evaluation_id))]
    if label not in keys:
        raise InvalidInput(f"label: '{label}' is not a failure label; use one of "
                           f"{', '.join(keys)}")
    path = evaluation_records_path(settings, evaluation_id)
    if limit < 1 or not path.exists():
        return []
    found: list[LabelledQuestion] = []
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("label") == label:
                searches = [{"tool": SEARCH_TOOL.name, "input": query, "result": None,
                             "failed": False} for query in record["searches"]]
                found.append({**{key: record[key] for key in LabelledQuestion.__annotations__
                                 if key != "calls"}, "calls": record.get("calls", searches)})
                if len(found) == limit:
                    break
    return found


def zero_score_reason(metrics: dict | None) -> str | None:
    """Why EM, SubEM and F1 are all 0, from how the model answered and called its tools (the
    metrics' answer_rate, search_calls, valid_search_rate; the tools named after
    `tool_calls`' keys: searching for a search-only evaluation, else calling the python or
    calculator tool); None unless they are all 0."""
    metrics = metrics or {}
    if any(metrics.get(key, 1) for key in ("em", "subem", "f1")) or "answer_rate" not in metrics:
        return None
    answered, calls = metrics["answer_rate"], metrics.get("search_calls", 0)
    called = metrics.get("valid_search_rate", 0)
    tools = list(metrics.get("tool_calls") or DEFAULT_TOOL_NAMES)
    verb = sole_verb(tools)
    if verb:
        did, never, per, without = (verb.past, f"never {verb.past}", verb.plural,
                                    f"without {TOOLS[tools[0]].using}")
    else:
        named = f"the {' or '.join(tools)} tool"
        did, never, per, without = (f"called {named}", f"never called {named}", "calls",
                                    f"without calling {named}")
    if not answered and not calls:
        return (f"the model never wrote an answer between <answer> tags and {never}: "
                "it does not follow the tag protocol zero-shot")
    if not answered:
        return (f"the model {did} ({calls:.1f} {per} per question) but never wrote an "
                "answer between <answer> tags")
    if not calls:
        return (f"the model answered {answered:.0%} of the questions {without}, and no "
                "answer matched a gold answer")
    return (f"the model answered {answered:.0%} of the questions and {did} on {called:.0%} "
            "of them, but no answer matched a gold answer")


class Cancelled(TypedDict):
    cancelled: int  # evaluations stopped


def cancel_base_vs_trained(settings: Settings, actor: Actor, run_id: int,
                           base_model: str | None = None) -> int:
    """Cancel the queued or running evaluations `base_vs_trained` shows the actor (its own
    pair beside the owner's included); how many. Each must be the actor's (or the actor an
    admin): none is cancelled otherwise."""
    active = list(dict.fromkeys(
        e["id"] for pair in base_vs_trained(settings, run_id, base_model, actor)
        for side in ("base", "trained") for e in (pair[side], (pair["yours"] or {}).get(side))
        if e and e["state"] in ACTIVE_STATES))
    with session_scope(settings.sqlalchemy_url) as session:
        for evaluation_id in active:
            get_owned(session, Evaluation, evaluation_id, "evaluation", actor, "cancel")
    for evaluation_id in active:
        cancel_evaluation(settings, actor, evaluation_id)
    return len(active)
