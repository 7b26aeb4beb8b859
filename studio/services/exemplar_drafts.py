"""Exemplars drafted from the team's own data: the one step of ICRL a team without RL
expertise could not do alone (docs/data-doctor.md, "Exemplar drafts").

The studio picks questions the tool can answer and runs the tool for real, as the tool's
`drafted_from` says:
- passages (search): questions whose answer the corpus reaches (the data doctor's test: the
  answer is in the top k of a search for the question itself; else, for a question that
  keeps its supporting passages, of a second search for the last one's title);
- arithmetic (calculator and python): questions that say what to compute (a bare
  expression, or a QA row's `expression` field); python prints it in the sandbox. Other
  questions keep a marked gap for the user (`studio.method.drafting.GAP`).

Drafts are returned, not stored: each says it is a draft and carries the findings the
exemplar checks give it; the user edits them and saves them as a set.

A run's correct rollout can also be kept as an exemplar (`keep_rollout`), its segments
exactly as the model and the environment wrote them: a run of a larger model on a GPU can
seed the exemplars of a smaller one.
"""

from __future__ import annotations

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.ingest import QARow
from studio.method.arithmetic import calculate
from studio.method.drafting import (
    GAP,
    ToolStep,
    computation_draft,
    expression_of,
    search_draft,
)
from studio.method.exemplars import Exemplar
from studio.method.reachability import answer_rank, hop_titles
from studio.method.reward import normalize_answer, numeric_match
from studio.method.tools import (
    TOOLS,
    CodeExecutor,
    SearchBackend,
    Tool,
    ToolBackends,
    drafted_tools,
    named_specs,
)
from studio.sandbox import SandboxUnavailable, studio_sandbox
from studio.services import corpora, exemplar_sets, qa_sets, run_history
from studio.services.access import Actor, require_member
from studio.services.errors import InvalidInput, NotFound
from studio.settings import Settings

MAX_DRAFTS = 10
SCANNED = 200
"""Questions read at most to find drafts: the work a request makes stays small whatever
the set's size."""


class Draft(TypedDict):
    question: str
    solution: str
    answer: str
    draft: bool  # always True: written by the studio, to be read and edited before use
    findings: list[dict]  # {severity, message}, as a stored exemplar's


class Drafts(TypedDict):
    qa_set: str
    tool: str
    corpus: str | None  # search drafts only
    k: int
    scanned: int  # questions read to find them
    drafts: list[Draft]
    gaps: int  # drafts with a part left for the user to write


def _corpus_search(settings: Settings, tool: str, corpus: str | None, k: int) -> SearchBackend:
    if not corpus:
        raise InvalidInput(f"corpus: drafting {tool} exemplars needs the corpus they search; "
                           "name one")
    index = corpora.open_index(settings, corpora.find_corpus(settings, corpus)["id"])
    return lambda queries: index.titled_passages(queries, k)


def _sandbox(settings: Settings, tool: str) -> CodeExecutor:
    try:
        return studio_sandbox(settings).run_batch
    except SandboxUnavailable as exc:
        raise InvalidInput(f"tool: {tool} drafts run in the sandbox, which cannot start here: "
                           f"{exc}") from None


def _drafting_tool(settings: Settings, tool: str, corpus: str | None, k: int) -> Tool:
    """The tool as a draft runs it, for real: over the corpus's index where it reads one, in
    the studio's sandbox where it runs code (opened only by such a tool)."""
    search = _corpus_search(settings, tool, corpus, k) if TOOLS[tool].needs_corpus else None
    return TOOLS[tool].for_run(ToolBackends(search, k, lambda: _sandbox(settings, tool)))


def _search_draft(tool: Tool, row: QARow) -> Exemplar | None:
    """The row's trace when one search (the question) or two (then the title of its last
    supporting passage) reach the gold answer; None when they do not."""
    queries = [row.question] + hop_titles(row.meta)[-1:]
    steps, found = [], None
    for query in queries:
        (passages,) = tool.execute([query])
        steps.append(ToolStep(query, tool.observation(passages)))
        rank = answer_rank(passages, row.golden_answers)
        if rank:
            found = (passages[rank - 1][0], rank)
            break
    if found is None:
        return None
    return search_draft(row.question, row.golden_answers[0], tool.spec, steps, *found)


def _computation_draft(tool: Tool, row: QARow) -> Exemplar | None:
    """The row's trace with the tool's own output; None where the question does not say what
    to compute, or where the tool's output is not the gold answer (the expression read is
    not what the question meant). A tool runs only what the calculator reads as arithmetic,
    written as its `arithmetic_call`."""
    expression = expression_of(row.question, row.meta)
    if expression is None or calculate(expression).error:
        return None
    call = tool.arithmetic_call.format(expression=expression)
    (result,) = tool.execute([call])
    observation = tool.observation(result)
    if not numeric_match(observation, row.golden_answers):
        return None
    return computation_draft(row.question, row.golden_answers[0], tool.spec,
                             ToolStep(call, observation))


_DRAFTERS = {"passages": _search_draft, "arithmetic": _computation_draft}
"""A QA row's draft (or None) by the tool's `drafted_from`."""


def draft_exemplars(settings: Settings, actor: Actor, *, qa_set: str, tool: str,
                    corpus: str | None = None, count: int = 3, k: int = 3) -> Drafts:
    """Up to `count` drafts for `tool` from the QA set `qa_set` (the first questions the tool
    can serve, in an even sample of `SCANNED`), each with its findings; search needs the
    corpus and uses its top `k`."""
    require_member(actor, "draft exemplars")
    if tool not in drafted_tools():
        raise InvalidInput(f"tool: '{tool}' is not one of {', '.join(drafted_tools())}")
    if not 1 <= count <= MAX_DRAFTS:
        raise InvalidInput(f"count: must be between 1 and {MAX_DRAFTS}, got {count}")
    if not 1 <= k <= corpora.MAX_TOP_K:
        raise InvalidInput(f"k: must be between 1 and {corpora.MAX_TOP_K}, got {k}")
    rows = qa_sets.sample_rows(settings, qa_sets.find_qa_set(settings, qa_set)["id"],
                               SCANNED)[1]
    runner = _drafting_tool(settings, tool, corpus, k)
    drafted_from = runner.drafted_from
    drafts: list[Exemplar] = []
    unserved: list[QARow] = []
    for row in (row for row in rows if row.golden_answers):
        if len(drafts) == count:
            break
        found = _DRAFTERS[drafted_from](runner, row)
        if found is None:
            unserved.append(row)
        else:
            drafts.append(found)
    if drafted_from == "arithmetic":  # the user writes the call the question does not say
        drafts += [computation_draft(row.question, row.golden_answers[0], runner.spec, None)
                   for row in unserved[:count - len(drafts)]]
    items = [{**d.to_dict(), "draft": True, "findings": exemplar_sets.exemplar_findings(
        d, n, named_specs([tool]))} for n, d in enumerate(drafts, 1)]
    return {"qa_set": qa_set, "tool": tool, "corpus": corpus if runner.needs_corpus else None,
            "k": k, "scanned": len(rows), "drafts": items,
            "gaps": sum(GAP in item["solution"] for item in items)}


def keep_rollout(settings: Settings, actor: Actor, run_id: int, rollout_id: int,
                 exemplar_set: str) -> exemplar_sets.ExemplarSetView:
    """Rollout `rollout_id` of run `run_id` added to the exemplar set `exemplar_set` (made
    when there is none of that name): its question, and as the solution its segments joined
    exactly as stored (the pre-filled prompt part, the model's text, the tool results); the
    gold answer its final answer matched. Only a rollout the reward judged right is kept."""
    require_member(actor, "keep rollouts as exemplars")
    rollout = run_history.rollout_detail(settings, run_id, rollout_id)
    breakdown = rollout["breakdown"] or {}
    if not breakdown.get("acc"):
        raise InvalidInput(f"rollout {rollout_id}: its answer was not judged right (accuracy "
                           f"{breakdown.get('acc', 0)}); keep a correct rollout")
    said = normalize_answer(breakdown.get("answer") or "")
    gold = next((g for g in rollout["golden_answers"] or [] if normalize_answer(g) == said),
                None)
    item = {"question": rollout["question"],
            "solution": "".join(segment["text"] for segment in rollout["segments"]),
            "answer": gold}
    try:
        found = exemplar_sets.find_exemplar_set(settings, exemplar_set)
    except NotFound:
        return exemplar_sets.create_exemplar_set(settings, actor, exemplar_set, [item])
    return exemplar_sets.add_exemplar(settings, actor, found["id"], item)
