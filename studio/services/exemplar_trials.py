"""Trying an exemplar set before launch: the model answers a few questions with k of the
set's exemplars before each, as a run's first steps show them (an evaluation on the worker:
`evaluations.create_evaluation` with `protocol.exemplars` = k).

The questions are none of the set's own: a set drafted from a QA set holds some of its
questions, and a model answers those by copying the exemplar that precedes them (3 of the
first 5 questions of a drafted set's QA set were its exemplars'). They come from the QA set's
held-out split when it has one (`qa_sets.held_out_split`), else from the QA set itself, each
one's text differing from every exemplar's question. A try asks at most
`MAX_TRIED_QUESTIONS`, found in at most `MAX_SCANNED_ROWS` rows, under the evaluation
protocol (its budgets and temperature) but for the exemplars shown.

Its time is estimated before it starts from the model's measured speed on the queue
(`calibrations.measured_speed`, the worst case of the protocol's budgets:
`estimates.answering_seconds`), else from the last try of the same model.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlmodel import select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.jobs.lifecycle import RunState
from studio.method.evaluation import MAX_TRIED_EXEMPLARS, EvalConfig
from studio.method.tools import check_tool_names, corpus_tools
from studio.services import calibrations, evaluations, exemplar_sets, qa_sets
from studio.services.access import Actor, require_member
from studio.services.errors import InvalidInput, NotFound
from studio.services.estimates import answering_seconds, duration_words, worst_case_response
from studio.services.evaluations import EvaluationView
from studio.services.prompt_preview import preview_exemplars, tools_written
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Evaluation

TRIED_QUESTIONS = 5
MAX_TRIED_QUESTIONS = 10
"""The most questions one try asks (it runs on the training queue, ahead of later runs)."""
MAX_SCANNED_ROWS = 1000
"""The most rows of a QA set read to find questions that are no exemplar's."""
FIRST_STAGE_EXEMPLARS = 3
"""Exemplars a try shows unless told: the first stage of the 3 → 2 → 0 curriculum."""
QUEUE = "cpu"


class TriedQuestion(TypedDict):
    row: int  # its row in the try's QA set, from 1
    question: str
    golden_answers: list[str] | None


class TryEstimate(TypedDict):
    """How long the try may take, before it starts."""

    seconds: float | None  # at most about this long (the last try's time: about); None: unknown
    message: str  # in words, with where the figure comes from


class ExemplarTry(TypedDict):
    """A try as queued: the evaluation that runs it and the questions it asks."""

    evaluation: EvaluationView  # GET /evaluations/{id} follows it; its records, the answers
    exemplar_set: str
    k: int  # exemplars before each question
    asked_for: str  # the QA set named in the request
    qa_set: str  # the QA set the questions come from: asked_for's held-out split, or itself
    held_out: bool  # qa_set is asked_for's held-out split
    questions: list[TriedQuestion]
    left_out: int  # questions passed over for being an exemplar's own
    estimate: TryEstimate


class TriedAnswer(TypedDict):
    question: str
    golden_answers: list[str] | None
    called: bool | None  # did it call a tool (None until the try has finished)
    answer: str | None
    right: bool | None


class TryOutcome(TypedDict):
    """A try as it stands: its progress while it runs, each answer once it has finished."""

    state: str  # queued | running | succeeded | failed | cancelled
    done: int  # questions answered so far
    total: int
    seconds: float | None  # since a worker took it (to its end once over); None before
    waiting: str | None  # queued: the queue it waits in and what it waits behind
    error: str | None
    answers: list[TriedAnswer]  # each question, in the order asked


def shown_by_default(size: int) -> int:
    """The k a try shows unless told: the set's exemplars, at most `FIRST_STAGE_EXEMPLARS`."""
    return min(size, FIRST_STAGE_EXEMPLARS)


def _check_k(k: object, name: str, size: int) -> int:
    most = min(size, MAX_TRIED_EXEMPLARS)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= most:
        raise InvalidInput(f"k: give 1 to {most} exemplars to show (the set '{name}' holds "
                           f"{size}), got {k!r}")
    return k


def try_exemplar_set(settings: Settings, actor: Actor, set_id: int, *, qa_set: str,
                     corpus: str | None = None, model: str | None = None,
                     k: int | None = None, questions: int = TRIED_QUESTIONS,
                     layout: str | None = None, tools: list[str] | None = None
                     ) -> ExemplarTry:
    """Queue a try of exemplar set `set_id` (any set of the team; a member's action): `k`
    (default `shown_by_default`) of its exemplars before each of `questions` questions that
    are no exemplar's own, from `qa_set`'s held-out split or `qa_set`, answered by `model`
    (default the studio's) with `tools` (default those the set's solutions call), searching
    `corpus` where a tool reads one."""
    require_member(actor, "try exemplar sets")
    if isinstance(questions, bool) or not isinstance(questions, int) or \
            not 1 <= questions <= MAX_TRIED_QUESTIONS:
        raise InvalidInput(f"questions: ask 1 to {MAX_TRIED_QUESTIONS} questions, got "
                           f"{questions!r}")
    found = exemplar_sets.get_exemplar_set(settings, set_id)
    if not found["size"]:
        raise InvalidInput(f"exemplar set '{found['name']}' holds no exemplar yet: write one "
                           "on the Exemplars page first")
    k = _check_k(shown_by_default(found["size"]) if k is None else k, found["name"],
                 found["size"])
    try:
        tools = list(check_tool_names(tools_written(found["exemplars"]) if tools is None
                                      else tools))
    except ValueError as exc:
        raise InvalidInput(f"tools: {exc}") from None
    try:
        asked = qa_sets.find_qa_set(settings, qa_set)
    except NotFound as exc:
        raise NotFound(f"qa_set: {exc}") from None
    source = qa_sets.held_out_split(settings, asked["id"]) or asked
    rows, left_out = qa_sets.questions_other_than(
        settings, source["id"], [e["question"] for e in found["exemplars"]], questions,
        MAX_SCANNED_ROWS)
    if not rows:
        raise InvalidInput(f"qa_set: every question read of '{source['name']}' is an exemplar's "
                           "own; choose a QA set with other questions")
    model = model or settings.default_model
    protocol = {"exemplars": k, "tools": tools, **({"layout": layout} if layout else {})}
    tried = [{"row": row["row"], "question": row["question"],
              "golden_answers": row["golden_answers"]} for row in rows]
    estimate = _estimate(settings, found["exemplars"][:k], tried, model, protocol)
    queued = evaluations.create_evaluation(
        settings, actor, qa_set=source["name"], corpus=corpus if corpus_tools(tools) else None,
        model=model, exemplar_set=found["name"], protocol=protocol,
        rows=[row["row"] - 1 for row in rows], queue=QUEUE)
    return {"evaluation": queued, "exemplar_set": found["name"], "k": k,
            "asked_for": asked["name"], "qa_set": source["name"],
            "held_out": source["id"] != asked["id"], "questions": tried, "left_out": left_out,
            "estimate": estimate}


def _estimate(settings: Settings, shown: list[dict], tried: list[TriedQuestion], model: str,
              protocol: dict) -> TryEstimate:
    """At most how long the questions take at the model's measured speed on the queue, else
    how long its last try took, else why there is no estimate."""
    speed = calibrations.measured_speed(settings, model, QUEUE)
    if speed is None:
        return _last_try(settings, model)
    config = EvalConfig(**protocol)
    longest = max((row["question"] for row in tried), key=len)
    prompt = preview_exemplars(settings, shown, longest, ks=[len(shown)], layout=config.layout,
                               model=model, assistant_prefix=config.assistant_prefix,
                               tools=config.tools)["prompts"][0]["tokens"]
    seconds = answering_seconds(speed["figures"], config.limits(), len(tried), prompt,
                                config.batch_size)
    model_tokens, _ = worst_case_response(config.limits())
    device = (speed["device"] or {}).get("name", "its device")
    return {"seconds": seconds, "message": (
        f"at most about {duration_words(seconds)} for {len(tried)} questions, if every answer "
        f"used its whole budget ({model_tokens:,} tokens from the model), at the speed "
        f"measured on queue {QUEUE} ({device}), plus loading the model")}


def _last_try(settings: Settings, model: str) -> TryEstimate:
    """How long the model's last finished try took, from when a worker took it."""
    with session_scope(settings.sqlalchemy_url) as session:
        for done in session.exec(select(Evaluation).where(
                Evaluation.model_ref == model, Evaluation.state == RunState.succeeded)
                .order_by(Evaluation.id.desc()).limit(20)):
            params = done.params or {}
            if "rows" in params and params.get("started_at") and done.finished_at:
                took = _seconds_between(params["started_at"], done.finished_at.isoformat())
                return {"seconds": took, "message": (
                    f"about {duration_words(took)}: the last try of this model on queue "
                    f"{QUEUE} took that for {params['total']} questions (its speed there "
                    f"was not measured: `studio calibrate --model {model}` measures it)")}
    return {"seconds": None, "message": (
        f"no time estimate yet: this model's speed on queue {QUEUE} was not measured "
        f"(`studio calibrate --model {model}`, or the Launch page's check, measures it); "
        "this try's time will say")}


def _seconds_between(start: str, end: str | None) -> float:
    """Seconds from one ISO 8601 time to another (None: now); a time without its zone is
    UTC (the database may give it back so)."""
    def utc(moment: str) -> datetime:
        parsed = datetime.fromisoformat(moment)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)

    return ((utc(end) if end else datetime.now(timezone.utc)) - utc(start)).total_seconds()


def try_outcome(settings: Settings, evaluation_id: int) -> TryOutcome:
    """The try's progress (questions answered, time since a worker took it) and, once it
    has finished, each question's answer."""
    found = evaluations.get_evaluation(settings, evaluation_id)
    params = found["params"] or {}
    over = found["state"] not in (RunState.queued, RunState.running)
    seconds = _seconds_between(params["started_at"], found["finished_at"]) \
        if params.get("started_at") else None
    answers: list[TriedAnswer] = []
    if found["state"] == RunState.succeeded:
        answers = [{"question": r["question"], "golden_answers": r["golden_answers"],
                    "called": bool(r["search_calls"]), "answer": r["prediction"],
                    "right": bool(r["acc"])}
                   for r in evaluations.evaluation_records(settings, evaluation_id,
                                                           MAX_TRIED_QUESTIONS)]
    return {"state": found["state"], "done": params.get("done", 0),
            "total": params.get("total", 0), "seconds": seconds,
            "waiting": found["waiting"], "error": found["error"] if over else None,
            "answers": answers}
