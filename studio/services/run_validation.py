"""Checks a run config passes before anything is queued, and what its prompts will cost.

Three layers, each naming the field: the schema (`studio.run_config`: types,
ranges, the curriculum's shape), the references (every name in `data` exists,
the corpus is indexed, the exemplar set is clean and large enough, the model's
tokenizer loads; the names resolved make the run's plan, `run_plans`), and a
token estimate per curriculum stage: instruction + k exemplars + the training
set's longest question, rendered exactly as the trainer renders it, against
`grpo.max_prompt_tokens`. A stage whose prompts would be cut is a warning, not an
error: the run can still be launched. So is a training set whose questions mostly do
not find their answer with their own text as the query (`data_doctor.training_warning`).
With the prompt lengths, the time per step of each stage on the run's queue
(`calibrations.time_estimate`), and a warning when the run would take more than a
few hours.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy import func
from sqlmodel import select
from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.jobs.lifecycle import CorpusStatus
from studio.method.curriculum import CurriculumError
from studio.method.exemplars import validate_exemplars
from studio.method.prompt import common_prefix_length, longest_prompt_inputs
from studio.method.tools import ToolBackends, named_specs, tools_for_run, using_words
from studio.run_config import RunConfig, RunConfigError, VerlSpec, parse_run_config
from studio.sandbox import SandboxUnavailable, studio_sandbox
from studio.services import calibrations, data_doctor, exemplar_sets
from studio.services.access import Actor
from studio.services.errors import InvalidInput, NotFound
from studio.services.records import by_name_or_404
from studio.services.run_plans import RunPlan, make_plan
from studio.services.tokenizers import checked_tokenizer
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Corpus, QAItem, QASet, Role

CANDIDATES = 100  # the longest questions by characters, of which the tokenizer picks the longest


class LaunchReport(TypedDict):
    """What the launch check estimates and warns of (`checked_config`)."""

    stages: list[dict]  # per stage: exemplars, steps, longest prompt in tokens, seconds
    warnings: list[str]
    time_estimate: dict  # state (ready | measuring | unavailable), message, ...


class RunCheck(LaunchReport):
    """What launching would store and estimate (`validate_run`)."""

    config: dict  # the run config as validated, every default filled in
    total_steps: int


def resolve_plan(settings: Settings, config: RunConfig) -> RunPlan:
    """The run's plan: every name in `data` resolved to the row it names now, which must
    exist (the corpus indexed, which only a run with search names; the exemplar set clean
    and large enough for the curriculum), and its tools must be able to run here (a tool
    that runs code needs the sandbox)."""
    problems = []
    with session_scope(settings.sqlalchemy_url) as session:
        def lookup(table, name: str, kind: str, field: str):
            try:
                return by_name_or_404(session, table, name, kind)
            except NotFound:
                problems.append(f"{field}: '{name}' does not exist; upload it first")
                return None

        corpus = (lookup(Corpus, config.data.corpus, "corpus", "data.corpus")
                  if config.data.corpus is not None else None)  # none without search
        if corpus and corpus.status != CorpusStatus.ready:
            problems.append(f"data.corpus: '{corpus.name}' is {corpus.status}; "
                            "launch when its index is ready")
        train = lookup(QASet, config.data.train, "QA set", "data.train")
        if train and train.num_rows == 0:
            problems.append(f"data.train: '{train.name}' holds no questions")
        eval_sets = [lookup(QASet, name, "QA set", f"data.eval[{i}]")
                     for i, name in enumerate(config.data.eval)]
    exemplar_set = None
    curriculum = config.curriculum.build()
    if not config.data.exemplars and curriculum.max_exemplars:
        problems.append(f"data.exemplars: the curriculum shows up to {curriculum.max_exemplars} "
                        "exemplars per prompt; name an exemplar set (or use stages of 0)")
    elif config.data.exemplars:
        try:
            found = exemplar_sets.find_exemplar_set(settings, config.data.exemplars)
        except NotFound:
            problems.append(f"data.exemplars: '{config.data.exemplars}' does not exist; "
                            "upload it first")
        else:
            exemplars = exemplar_sets.load_exemplars(settings, found["id"])
            exemplar_set = (found["id"], found["name"], exemplars)
            errors = [f for f in validate_exemplars(exemplars, tools=named_specs(config.tools))
                      if f.severity == "error"]
            if errors:  # checked with the run's tools: a python run's exemplars call <code>
                problems.append(f"data.exemplars: '{found['name']}' has {len(errors)} "
                                "errors; fix them on the exemplars page first")
            if exemplars:
                try:
                    curriculum.check(available_exemplars=len(exemplars))
                except CurriculumError as exc:
                    problems += [f"curriculum.{e}" for e in exc.errors]
    problems += _tool_problems(settings, config)
    if problems:
        raise InvalidInput("; ".join(problems))
    return make_plan(config, corpus, train, eval_sets, exemplar_set)


def _tool_problems(settings: Settings, config: RunConfig) -> list[str]:
    """Each of the run's tools is built here as the worker builds it: one that runs code
    needs the sandbox, which starts only where it can isolate the code and says why not."""
    backends = ToolBackends(lambda queries: [[] for _ in queries], config.grpo.top_k,
                            lambda: studio_sandbox(settings).run_batch)
    problems = []
    for name in config.tools:
        try:
            tools_for_run([name], backends)
        except SandboxUnavailable as exc:
            problems.append(f"tools: {name} cannot run on this machine: {exc}")
    return problems


def _longest_questions(settings: Settings, qa_set_id: int) -> list[str]:
    """The candidates: the longest questions in characters (the tokenizer then ranks them)."""
    with session_scope(settings.sqlalchemy_url) as session:
        return list(session.exec(
            select(QAItem.question).where(QAItem.qa_set_id == qa_set_id)
            .order_by(func.length(QAItem.question).desc()).limit(CANDIDATES)))


def prompt_estimate(settings: Settings, plan: RunPlan) -> list[dict]:
    """Per curriculum stage: its exemplar count, steps, longest prompt in tokens, and the
    tokens its prompts share (the instruction and the exemplars: the engine runs them once
    per step; with exemplars sampled per question only the part before them); the same two
    of the prompt without exemplars (`zero_shot_`: what a mixed-guidance run trains on)."""
    config = plan.config
    tokenizer = checked_tokenizer(settings, config.model)
    candidates = _longest_questions(settings, plan.train.id)
    longest, shown = longest_prompt_inputs(tokenizer, candidates, plan.exemplar_list(),
                                           config.prompt.exemplar_selection != "first")
    questions = [candidates[i] for i in longest]
    limit = config.grpo.max_prompt_tokens
    ids_for_k: dict[int, list[list[int]]] = {}
    shared_draw = (config.prompt.exemplar_selection == "first"
                   or config.prompt.exemplar_draw == "per-step")  # one exemplar block a step

    def prompts(k: int) -> list[list[int]]:
        if k not in ids_for_k:
            ids_for_k[k] = [config.build_prompt(q, shown, k, first=True).token_ids(tokenizer)
                            for q in questions]
        return ids_for_k[k]

    stages = []
    for number, stage in enumerate(config.curriculum.build().stages, 1):
        tokens = max(len(ids) for ids in prompts(stage.exemplars))
        alike = prompts(stage.exemplars if shared_draw else 0)
        stages.append({"stage": number, "exemplars": stage.exemplars, "steps": stage.steps,
                       "prompt_tokens": tokens, "max_prompt_tokens": limit,
                       "cut": tokens > limit, "shared_tokens": common_prefix_length(alike),
                       "zero_shot_prompt_tokens": max(len(ids) for ids in prompts(0)),
                       "zero_shot_shared_tokens": common_prefix_length(prompts(0))})
    return stages


def _warnings(config: RunConfig, stages: list[dict]) -> list[str]:
    warnings = []
    for stage in stages:
        if stage["cut"]:
            lead = "the first stage" if stage["stage"] == 1 else f"stage {stage['stage']}"
            warnings.append(
                f"grpo.max_prompt_tokens: {lead} ({stage['exemplars']} exemplars) builds prompts "
                f"of up to {stage['prompt_tokens']} tokens, more than {stage['max_prompt_tokens']}"
                "; they will be cut from the left (the instruction and the first exemplars go "
                "first): raise grpo.max_prompt_tokens or show fewer exemplars")
    warnings += [f"curriculum: {w}" for w in
                 config.curriculum.build().warnings(run_steps=config.total_steps,
                                                    using=using_words(config.tools))]
    return warnings


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


def studio_url_problem(settings: Settings, url: str | None) -> str | None:
    """Why a run may not send its owner's token to `url` (`verl.studio_url`), or None: the
    Ray workers call the studio there, so it must be this studio's own address or one an
    admin listed."""
    if url is None:
        return None
    allowed = settings.studio_urls
    if _origin(url) in {_origin(u) for u in allowed}:
        return None
    return (f"verl.studio_url: {url!r} is not this studio's address; the Ray workers send the "
            f"run owner's token there, so it must be one of {', '.join(allowed)} (an admin adds "
            "others with STUDIO_VERL_STUDIO_URLS), or leave it out to use the first")


def ray_address_problem(settings: Settings, address: str | None) -> str | None:
    """Why a run may not go to the Ray cluster at `address` (`verl.ray_address`), or None:
    the run, and its owner's token, go wherever it says, so only to a cluster an admin
    listed."""
    listed = settings.ray_addresses
    if address is None or address.strip() in listed:
        return None
    allowed = f"must be one of {', '.join(listed)}" if listed else "none is listed"
    return (f"verl.ray_address: {address!r} is not a Ray cluster an admin listed; the run and "
            f"its owner's token go there, so it {allowed} (STUDIO_VERL_RAY_ADDRESSES); leave "
            "it out to train on the worker's own GPUs, or ask an admin to list the cluster")


def verl_places_problem(settings: Settings, verl: VerlSpec) -> str | None:
    """Why a run may not call the places its `verl` settings name (the studio it searches
    through, the Ray cluster it runs on), or None: checked by the web app at launch and by
    the worker again, with its own settings, before it writes the owner's token."""
    return studio_url_problem(settings, verl.studio_url) or ray_address_problem(
        settings, verl.ray_address)


def checked_config(settings: Settings, config: dict | str, *,
                   queue_calibration_for: Actor | None = None
                   ) -> tuple[RunPlan, LaunchReport]:
    """The run's plan (the parsed config, its data resolved) and its report ({stages,
    warnings, time_estimate}); InvalidInput names each field. Each stage gets
    `seconds_per_step` once the queue's device is measured (None until then); that
    measurement is queued when missing as `queue_calibration_for`'s (None: not queued)."""
    try:
        parsed = parse_run_config(config)
    except RunConfigError as exc:
        raise InvalidInput(str(exc)) from None
    if problem := verl_places_problem(settings, parsed.verl):
        raise InvalidInput(problem)
    plan = resolve_plan(settings, parsed)
    stages = prompt_estimate(settings, plan)
    requester = queue_calibration_for
    timing = calibrations.time_estimate(settings, parsed, stages, start=requester is not None,
                                        owner_id=requester.id if requester else None)
    per_stage = timing.get("stages") or [{}] * len(stages)
    for stage, estimate in zip(stages, per_stage, strict=True):
        stage["seconds_per_step"] = estimate.get("seconds_per_step")
    reach = plan.corpus and data_doctor.training_warning(settings, plan.corpus.id,
                                                         plan.train.id, parsed.grpo.top_k)
    warnings = _warnings(parsed, stages) + ([reach] if reach else []) + timing["warnings"]
    return plan, {"stages": stages, "warnings": warnings,
                  "time_estimate": timing}


def validate_run(settings: Settings, actor: Actor, config: dict | str) -> RunCheck:
    """What launching would store, without storing or queueing anything but the measurement
    of the queue's device when the time estimate needs it (the Launch page); a viewer, who
    queues nothing, gets the estimate once someone else has had the device measured."""
    plan, report = checked_config(
        settings, config, queue_calibration_for=None if actor.role == Role.viewer else actor)
    return {"config": plan.config.model_dump(mode="json"),
            "total_steps": plan.config.total_steps, **report}
