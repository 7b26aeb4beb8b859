"""veRL's per-sample agent loop (`roll_out`) and the native batched loop drive one protocol:
for the same model turns they give the same response, token for token, mask for mask, with
search and a test-only tool registered beside it. No veRL import: `roll_out` needs none."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from transformers import AutoTokenizer

from studio.method.guidance import guided_count
from studio.method.protocol import Limits
from studio.method.rollouts import working_calls
from studio.method.tools import CalculatorTool, PythonTool, SearchTool
from studio.retrieval import MAX_RETRIEVE_QUERIES, build_index
from studio.run_config import parse_run_config
from studio.sandbox import Sandbox
from studio.services import corpora
from studio.services.auth import issue_token
from studio.services.corpora import MAX_QUERY_CHARS
from tests.support.actors import admin
from tests.support.reverse_tool import ReverseTool
from tests.support.scripted_rollouts import (
    CORPUS,
    EOS,
    RecordingSearch,
    prompt_ids,
    run_scripted,
    scripted_turns,
)
from tests.support.tiny_model import build_tiny_model
from worker.engines.native.rollout import RolloutConfig
from worker.engines.verl.protocol import AgentSpec, Retriever, roll_out

SCRIPTS = {
    "Reverse, search, answer?": ["<reverse> lamp </reverse>", "<search> Ida Varn </search>",
                                 "<answer> Serrick </answer>"],
    "Ramble first?": ["I am not sure yet", "<search> grey salt </search>",
                      "<answer> salt </answer>"],
    "Stop at eos?": ["just words" + EOS, "still words" + EOS, "more" + EOS],
    "Keep calling?": ["<reverse> a </reverse>", "<search> Serrick </search>",
                      "<reverse> b </reverse>"],
    "Answer at once?": ["<answer> now </answer>"],
}
LIMITS = {"max_turns": 2, "max_turn_tokens": 24, "max_response_tokens": 400,
          "max_obs_tokens": 60}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path_factory.mktemp("tiny"))))


@pytest.mark.parametrize("question", list(SCRIPTS))
def test_verl_and_native_rollouts_are_the_same(tokenizer, question):
    index = build_index(CORPUS)
    native_search, verl_search = RecordingSearch(index), RecordingSearch(index)
    native_reverse, verl_reverse = ReverseTool(), ReverseTool()
    [native] = run_scripted(tokenizer, {question: SCRIPTS[question]},
                            [SearchTool(native_search, 3), native_reverse],
                            RolloutConfig(**LIMITS))
    generate = scripted_turns(tokenizer, SCRIPTS[question])
    verl = asyncio.run(roll_out(prompt_ids(tokenizer, question), generate,
                                [SearchTool(verl_search, 3), verl_reverse], tokenizer,
                                Limits(**LIMITS), {tokenizer.eos_token_id}))

    assert verl.response_ids == native.response_ids
    assert verl.response_mask == native.response_mask
    assert (verl.stop_reason, verl.tool_calls) == (native.stop_reason, native.num_tool_calls)
    assert verl.model_turns == sum(s.source == "model" for s in native.segments)
    assert verl_search.calls == native_search.calls
    assert verl_reverse.calls == native_reverse.calls
    assert verl.response_logprobs == [-0.5 if m else 0.0 for m in verl.response_mask]
    assert len(generate.contexts) == verl.model_turns


TOOL_TURNS = {  # a tool, turns that call it (once failing), the results the environment inserts
    "python": (lambda: PythonTool(Sandbox().run_batch),
               ["<code>print(6*7)</code>", "<code>print(1/0)</code>", "<answer> 42 </answer>"],
               ["\n\n<output>42</output>\n\n",
                "\n\n<output>ZeroDivisionError: division by zero</output>\n\n"]),
    "calculator": (CalculatorTool,
                   ["<calc>6*7</calc>", "<calc>1/0</calc>", "<answer> 42 </answer>"],
                   ["\n\n<result>42</result>\n\n",
                    "\n\n<result>Error: division by zero</result>\n\n"]),
}


@pytest.mark.parametrize("name", list(TOOL_TURNS))
def test_a_tool_without_a_backend_runs_the_same_in_both_loops(tokenizer, name):
    """The agent loop runs one call at a time (in a thread), the native loop a round's calls
    in one batch: python in the sandbox, the calculator in process; the same results and
    mask, the failed call marked as such."""
    make, turns, results = TOOL_TURNS[name]
    tool = make()
    [native] = run_scripted(tokenizer, {"Six times seven?": turns}, [tool],
                            RolloutConfig(**LIMITS))
    verl = asyncio.run(roll_out(prompt_ids(tokenizer, "Six times seven?"),
                                scripted_turns(tokenizer, turns), [tool], tokenizer,
                                Limits(**LIMITS), {tokenizer.eos_token_id}))
    assert verl.response_ids == native.response_ids
    assert verl.response_mask == native.response_mask
    assert (verl.stop_reason, verl.tool_calls) == (native.stop_reason, native.num_tool_calls)
    env = [s for s in native.segments if s.source == "env"]
    assert [s.text for s in env] == results
    assert [(s.tool, s.failed) for s in env] == [(name, False), (name, True)]
    assert (verl.tool_calls, verl.working_calls) == (2, 1) == (2, working_calls(native))


def test_the_scripts_cover_every_move(tokenizer):
    """What the comparison above exercises: each stop reason the scripts reach, both tools,
    the correction and the observation cut to max_obs_tokens."""
    index = build_index(CORPUS)
    search, reverse = RecordingSearch(index), ReverseTool()
    rollouts = run_scripted(tokenizer, SCRIPTS, [SearchTool(search, 3), reverse],
                            RolloutConfig(**LIMITS))
    by_question = dict(zip(SCRIPTS, rollouts, strict=True))
    assert {q: r.stop_reason for q, r in by_question.items()} == {
        "Reverse, search, answer?": "answer", "Ramble first?": "answer", "Stop at eos?": "eos",
        "Keep calling?": "max_turns", "Answer at once?": "answer"}
    assert reverse.calls == [["lamp", "a"]]  # the last turn's call is not run
    ramble = by_question["Ramble first?"].segments[1].text
    assert "neither a tool call nor an answer" in ramble
    observation = by_question["Reverse, search, answer?"].segments[3]
    whole = tokenizer(search.expected("Ida Varn", 3), add_special_tokens=False)["input_ids"]
    assert len(observation.token_ids) <= LIMITS["max_obs_tokens"] < len(whole)
    assert observation.text.endswith("</information>\n\n")


def test_the_retriever_sends_many_queries_in_requests_the_studio_accepts(studio, studio_api):
    """/retrieve answers at most MAX_RETRIEVE_QUERIES queries a request (a 20,000-query body
    grew the web process by 2 GB); the veRL retriever splits a larger batch, in order."""
    settings, _ = studio
    [corpus] = [c for c in corpora.list_corpora(settings) if c["name"] == "demo"]
    url = f"{studio_api}/api/v1/corpora/{corpus['id']}/retrieve"
    token = issue_token(settings, admin(settings), "tests")["token"]
    queries = [f"lighthouse keeper {i}" for i in range(MAX_RETRIEVE_QUERIES + 3)]
    queries[-1] = "moss lamp"
    found = Retriever(url, token, 2)(queries)
    assert len(found) == len(queries) and all(len(passages) == 2 for passages in found)
    assert found[-1] == Retriever(url, token, 2)(["moss lamp"])[0]

    headers = {"Authorization": f"Bearer {token}"}
    too_many = httpx.post(url, json={"queries": queries, "topk": 2}, headers=headers)
    assert too_many.status_code == 422
    assert too_many.json()["detail"].startswith(
        f"queries: {len(queries)} in one request; at most {MAX_RETRIEVE_QUERIES}")
    too_long = httpx.post(url, json={"queries": ["moss " * 1000]}, headers=headers)
    assert too_long.status_code == 422
    assert too_long.json()["detail"] == ("queries[0]: 5000 characters; a query may have at most "
                                         f"{MAX_QUERY_CHARS}")


def agent_spec(**config) -> AgentSpec:
    run_config = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"}, **config})
    return AgentSpec(run_config=run_config, exemplars=[], retrieve_url=None, token_file="-")


@pytest.mark.parametrize("group", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("share", [0.1, 0.25, 0.5, 0.75, 0.9])
def test_a_mixed_group_guides_its_first_guided_count_sessions(group, share):
    """veRL's V1 trainer numbers a group's samples 0..n-1 (session_id): the first
    `guided_count(share, n)` of them are guided in a stage with exemplars, none in a stage
    without, and none in a `shown` run; all of a mixed run train without exemplars."""
    mixed = agent_spec(guidance={"mode": "mixed", "share": share}, grpo={"group_size": group})
    count = guided_count(share, group)
    assert [mixed.guided(2, session, group) for session in range(group)] == \
        [True] * count + [False] * (group - count)
    assert not any(mixed.guided(0, session, group) for session in range(group))
    assert mixed.trained_exemplars(2) == 0
    shown = agent_spec(grpo={"group_size": group})
    assert not any(shown.guided(2, session, group) for session in range(group))
    assert shown.trained_exemplars(2) == 2
