"""Zero-shot evaluation of a base model and of a run's checkpoint, stored per QA set, with
each question's failure label."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from studio.ingest import QARow
from studio.method.evaluation import EvalConfig
from studio.method.prompt import PromptTemplate, build_prompt, instruction_for
from studio.method.tools import CalculatorTool, PythonTool, SearchTool
from studio.retrieval import build_index
from studio.sandbox import Sandbox
from studio.services import evaluations, runs
from studio.services.demo import load_demo_pack
from studio.services.errors import InvalidInput
from studio.storage.tables import RunState
from tests.support.actors import admin
from tests.support.scripted_rollouts import CORPUS, EOS, RecordingSearch, ScriptedLM
from tests.support.tiny_model import build_tiny_model
from tests.support.training import tiny_config
from worker.engines.native.evaluate import evaluate
from worker.engines.native.trainer import Trainer
from worker.evaluation import run_evaluation

# the tiny random model never stops by itself: keep its turns short
FAST = {"max_turn_tokens": 16, "max_turns": 2, "max_response_tokens": 64}


def test_evaluate_a_base_model_and_a_trained_run(settings, tmp_path):
    load_demo_pack(settings, admin(settings), index_now=True)
    model = build_tiny_model(tmp_path / "tiny")

    base = evaluations.create_evaluation(settings, admin(settings), qa_set="demo", corpus="demo",
                                         model=str(model), limit=4, protocol=FAST, start=False)
    done = run_evaluation(settings, base["id"])
    assert done["state"] == RunState.succeeded and done["error"] is None
    metrics = done["metrics"]
    assert metrics["questions"] == 4
    for key in ("em", "subem", "f1", "search_calls", "answer_rate", "valid_search_rate"):
        assert 0.0 <= metrics[key] <= (6 if key == "search_calls" else 1.0)
    assert done["params"]["done"] == done["params"]["total"] == 4
    records = (settings.resolved_data_dir / "evaluations" / f"{base['id']}.jsonl").read_text()
    records = [json.loads(line) for line in records.splitlines()]
    assert len(records) == 4
    # every question is labelled, and the split counts them all
    assert sum(metrics["labels"].values()) == 4
    assert metrics["labels"] == {label: sum(r["label"] == label for r in records)
                                 for label in metrics["labels"]}
    assert all(isinstance(r["searches"], list) for r in records)

    run = runs.create_run(settings, admin(settings), tiny_config(model, steps=1), start=False)
    with pytest.raises(InvalidInput, match="has no checkpoint yet"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", run_id=run["id"], start=False)
    Trainer(settings, run["id"]).run()
    trained = evaluations.create_evaluation(settings, admin(settings), qa_set="demo", run_id=run["id"], limit=2,
                                            protocol=FAST, start=False)
    assert trained["params"]["corpus"] == "demo"
    assert run_evaluation(settings, trained["id"])["metrics"]["questions"] == 2
    assert [e["id"] for e in evaluations.list_evaluations(settings, run_id=run["id"])] == [
        trained["id"]]


def test_a_try_of_an_exemplar_set_shows_k_of_its_exemplars_before_each_question(settings,
                                                                               tmp_path):
    """protocol.exemplars = k with an exemplar set (the Exemplars page's "try it"): the set's
    first k are pinned at creation and precede each question (its prompt grows by them),
    where k = 0 is the protocol's zero-shot prompt; bad combinations are refused."""
    load_demo_pack(settings, admin(settings), index_now=True)
    model = str(build_tiny_model(tmp_path / "tiny"))

    def prompt_tokens(**asked) -> list[int]:
        queued = evaluations.create_evaluation(settings, admin(settings), qa_set="demo",
                                               corpus="demo", model=model, limit=3,
                                               start=False, **asked)
        run_evaluation(settings, queued["id"])
        return [r["prompt_tokens"] for r in evaluations.evaluation_records(settings,
                                                                           queued["id"])]

    zero_shot = prompt_tokens(protocol=FAST)
    tried = prompt_tokens(protocol={**FAST, "exemplars": 2}, exemplar_set="demo")
    assert all(t > z + 200 for t, z in zip(tried, zero_shot, strict=True)), (tried, zero_shot)
    (pinned,) = [e for e in evaluations.list_evaluations(settings) if e["params"].get("exemplars")]
    assert pinned["params"]["exemplar_set"] == "demo" and len(pinned["params"]["exemplars"]) == 2

    refusals = [({"protocol": {"exemplars": 2}}, "exemplar_set: protocol.exemplars is 2"),
                ({"exemplar_set": "demo"}, "exemplar_set: set protocol.exemplars"),
                ({"protocol": {"exemplars": 4}, "exemplar_set": "demo"},
                 "protocol.exemplars: give 1 to 3"),
                ({"protocol": {"exemplars": "2"}, "exemplar_set": "demo"},
                 "protocol.exemplars: give 1 to 3")]
    for asked, said in refusals:
        with pytest.raises(InvalidInput, match=said):
            evaluations.create_evaluation(settings, admin(settings), qa_set="demo",
                                          corpus="demo", model=model, start=False, **asked)


def test_evaluation_input_errors(settings):
    load_demo_pack(settings, admin(settings), index_now=True)
    with pytest.raises(InvalidInput, match="give either model"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", corpus="demo", start=False)
    with pytest.raises(InvalidInput, match="corpus: name the corpus"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", model="x", start=False)
    with pytest.raises(InvalidInput, match="protocol: unknown key"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", model="x", corpus="demo",
                                      protocol={"temp": 1}, start=False)
    with pytest.raises(InvalidInput, match="protocol.answer_match: use one of exact, numeric"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="demo", model="x",
                                      corpus="demo", protocol={"answer_match": "fuzzy"},
                                      start=False)


# question -> (gold answers, the model's turns): one of each label, over the scripted corpus
# searched top-1 ("moss lamp" finds only "A moss lamp is ... invented by Ida Varn.")
SCRIPTS = {
    "Who invented the moss lamp?": (["Ida Varn"], [
        "<search>moss lamp</search>", "<answer>ida varn.</answer>"]),
    "What is Serrick's chief export?": (["grey salt"], [
        "<search>moss lamp</search>", "<think>I cannot tell</think>" + EOS]),
    "What is the capital of Serrick?": (["Oster"], ["<answer>Serrick Town</answer>"]),
    "How many towns has Serrick?": (["four"], [
        "<search>moss lamp</search>", "<answer>three</answer>"]),
    "Who made the first moss lamp?": (["Ida Varn"], [
        "<search>moss lamp</search>", "<answer>Serrick</answer>"]),
}


def test_an_evaluation_labels_each_question_and_splits_them(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny")))
    config = EvalConfig(top_k=1, max_turns=2, max_turn_tokens=24, assistant_prefix=None)

    def prompt(question: str) -> tuple[int, ...]:
        return tuple(build_prompt(question, [], 0, layout=config.layout).token_ids(tokenizer))

    model = ScriptedLM(tokenizer, {prompt(q): turns for q, (_, turns) in SCRIPTS.items()})
    rows = [QARow(str(i), q, golds) for i, (q, (golds, _)) in enumerate(SCRIPTS.items())]
    search = SearchTool(RecordingSearch(build_index(CORPUS)), config.top_k)
    progress = []
    result = evaluate(model, tokenizer, rows, [search], config,
                      on_progress=lambda *told: progress.append(told))
    # a question counts as answered when its rollout ends, not when its batch does: the
    # capital's answer comes in the first turn, the others' after a search
    assert progress[0] == (1, 5) and progress[-1] == (5, 5), progress

    labels = [r["label"] for r in result["records"]]
    assert labels == ["correct", "format_miss", "no_search", "retrieval_miss",
                      "reasoning_miss"]
    assert result["metrics"]["labels"] == dict.fromkeys(labels, 1)
    assert result["metrics"]["acc"] == 1 / 5  # the correct share is acc
    by_label = {r["label"]: r for r in result["records"]}
    assert by_label["no_search"]["searches"] == [] == by_label["no_search"]["calls"]
    assert by_label["retrieval_miss"]["searches"] == ["moss lamp"]
    assert by_label["retrieval_miss"]["calls"] == [
        {"tool": "search", "input": "moss lamp", "failed": False, "result": "Doc 1(Title: Moss "
         "lamp) A moss lamp is a lantern filled with glowing moss, invented by Ida Varn."}]
    assert by_label["reasoning_miss"]["prediction"] == "Serrick"
    assert by_label["format_miss"]["prediction"] is None


def test_an_evaluation_matches_answers_as_its_protocol_says(tmp_path):
    """answer_match numeric: "1,200.0 apples" is right for 1200, in EM, acc and the label."""
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny")))
    question, turns = "How many apples in 40 crates of 30?", ["<answer>1,200.0 apples</answer>"]
    rows = [QARow("1", question, ["1200"])]
    found = {}
    for match in ("exact", "numeric"):
        config = EvalConfig(top_k=1, max_turns=1, max_turn_tokens=24, assistant_prefix=None,
                            answer_match=match)
        prompt = tuple(build_prompt(question, [], 0, layout=config.layout).token_ids(tokenizer))
        result = evaluate(ScriptedLM(tokenizer, {prompt: turns}), tokenizer, rows,
                          [SearchTool(RecordingSearch(build_index(CORPUS)), config.top_k)], config)
        (record,) = result["records"]
        found[match] = (record["em"], record["acc"], record["label"], result["metrics"]["em"])
    assert found == {"exact": (0.0, 0.0, "no_search", 0.0), "numeric": (1.0, 1.0, "correct", 1.0)}
    with pytest.raises(ValueError, match="answer_match must be one of exact, numeric"):
        EvalConfig(answer_match="fuzzy")
CODE_SCRIPTS = {  # question: (gold, the model's turns)
    "What is 6 times 7?": (["42"], ["<code>print(6*7)</code>", "<answer>42</answer>"]),
    "What is 1 over 0?": (["none"], ["<code>print(1/0)</code>", "<code>print(1//1)</code>",
                                      "<answer>1</answer>"]),
    "Who made the moss lamp?": (["Ida Varn"], ["<search>moss lamp</search>",
                                               "<code>import nothing_here</code>",
                                               "<answer>Ida Varn</answer>"]),
    "What is 2 plus 2?": (["4"], ["<answer>4</answer>"]),
}


def scripted_evaluation(tmp_path, scripts: dict, tools: list) -> dict:
    """`evaluate` with `tools` (the config names them) on the questions of `scripts`, each
    answered with its scripted turns."""
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny")))
    config = EvalConfig(top_k=1, max_turns=3, max_turn_tokens=24, assistant_prefix=None,
                        tools=tuple(tool.spec.name for tool in tools))
    template = PromptTemplate(instruction_for(config.tools))

    def prompt(question: str) -> tuple[int, ...]:
        return tuple(build_prompt(question, [], 0, template, layout=config.layout)
                     .token_ids(tokenizer))

    model = ScriptedLM(tokenizer, {prompt(q): turns for q, (_, turns) in scripts.items()})
    rows = [QARow(str(i), q, golds) for i, (q, (golds, _)) in enumerate(scripts.items())]
    return evaluate(model, tokenizer, rows, tools, config)


def test_an_evaluation_counts_calls_per_tool_and_code_errors(tmp_path):
    """With python among the tools: each question's calls per tool and its failed programs
    (an exception's `<output>`), and over the set the calls per question of each tool and
    the tool errors in all (stored as `code_errors`)."""
    result = scripted_evaluation(tmp_path, CODE_SCRIPTS, [
        PythonTool(Sandbox().run_batch), SearchTool(RecordingSearch(build_index(CORPUS)), 1)])

    records = result["records"]
    assert [r["tool_calls"] for r in records] == [
        {"python": 1}, {"python": 2}, {"search": 1, "python": 1}, {}]
    assert [r["code_errors"] for r in records] == [0, 1, 1, 0]
    assert [r["search_calls"] for r in records] == [1, 2, 2, 0]  # every tool's, as before
    assert [r["acc"] for r in records] == [1.0, 0.0, 1.0, 1.0]
    assert records[3]["format"] < 1  # no call of either tool: the 'no search' penalty
    assert records[0]["format"] == records[2]["format"]  # a <code> call spares it as <search>
    metrics = result["metrics"]
    assert metrics["tool_calls"] == {"python": 1.0, "search": 0.25}
    assert metrics["code_errors"] == 2
    # two tools: the generic labels, each call's failure as the engine recorded it
    assert [r["label"] for r in records] == ["correct", "result_miss", "correct", "correct"]
    assert [[(c["tool"], c["failed"]) for c in r["calls"]] for r in records] == [
        [("python", False)], [("python", True), ("python", False)],
        [("search", False), ("python", True)], []]


def test_an_evaluation_counts_the_expressions_the_calculator_refused_as_tool_errors(tmp_path):
    """A calculator run's evaluation: an `Error: ...` result is a tool error, counted as a
    failed program is (the metrics' `code_errors`)."""
    scripts = {"What is 709 times 62?": (["43958"], ["<calc> 709 * 62 </calc>",
                                                     "<answer>43958</answer>"]),
               "What is x over 0?": (["none"], ["<calc>x/0</calc>", "<calc>1/0</calc>",
                                                "<answer>none</answer>"]),
               "What is 2 plus 2?": (["4"], ["<answer>4</answer>"])}
    result = scripted_evaluation(tmp_path, scripts, [CalculatorTool()])
    records = result["records"]
    assert [r["tool_calls"] for r in records] == [{"calculator": 1}, {"calculator": 2}, {}]
    assert [r["code_errors"] for r in records] == [0, 2, 0]
    assert [r["acc"] for r in records] == [1.0, 1.0, 1.0]
    assert records[0]["format"] > records[2]["format"]  # a <calc> call spares 'no search'
    assert result["metrics"]["tool_calls"] == {"calculator": 1.0}
    assert result["metrics"]["code_errors"] == 2


def test_a_calculator_evaluation_keeps_each_call_and_labels_in_the_calculator_s_words(
        tmp_path):
    """Each record keeps every calculator call with its result and whether it failed, and
    its label says where the answer went wrong: no call, every call refused, a wrong
    expression, a right result not copied; the split counts the calculator's labels."""
    gold = ["118"]  # 58 + 82 - 22
    scripts = {"Add 58 and 82, take 22?": (gold, ["<calc>58 + 82 - 22</calc>",
                                                  "<answer>118</answer>"]),
               "Plus 58 and 82 minus 22?": (gold, ["<answer>140</answer>"]),
               "Sum 58, 82 less 22?": (gold, ["<calc>58 plus 82</calc>", "<answer>140</answer>"]),
               "58 + 82 - 22 makes?": (gold, ["<calc>58 + 82</calc>", "<answer>140</answer>"]),
               "What is 58 + 82 - 22?": (gold, ["<calc>58 + 82 - 22</calc>",
                                                "<answer>22</answer>"])}
    result = scripted_evaluation(tmp_path, scripts, [CalculatorTool()])
    records = result["records"]
    assert [r["label"] for r in records] == ["correct", "no_call", "call_failed",
                                             "wrong_expression", "copied_wrong"]
    assert [r["calls"] for r in records] == [
        [{"tool": "calculator", "input": "58 + 82 - 22", "result": "118", "failed": False}],
        [],
        [{"tool": "calculator", "input": "58 plus 82", "result": "Error: not an arithmetic "
          "expression; write one such as 12 * (3 + 4)", "failed": True}],
        [{"tool": "calculator", "input": "58 + 82", "result": "140", "failed": False}],
        [{"tool": "calculator", "input": "58 + 82 - 22", "result": "118", "failed": False}]]
    assert all(r["searches"] == [] for r in records)
    assert result["metrics"]["labels"] == {
        "correct": 1, "format_miss": 0, "no_call": 1, "call_failed": 1, "wrong_expression": 1,
        "copied_wrong": 1}


def test_a_search_only_evaluation_reports_search_calls_and_no_code_errors(tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(str(build_tiny_model(tmp_path / "tiny")))
    config = EvalConfig(top_k=1, max_turns=2, max_turn_tokens=24, assistant_prefix=None)
    question = "Who made the first moss lamp?"
    ids = build_prompt(question, [], 0, layout=config.layout).token_ids(tokenizer)
    model = ScriptedLM(tokenizer, {tuple(ids): SCRIPTS[question][1]})
    search = SearchTool(RecordingSearch(build_index(CORPUS)), config.top_k)
    result = evaluate(model, tokenizer, [QARow("0", question, ["Ida Varn"])], [search], config)
    assert result["metrics"]["tool_calls"] == {"search": 1.0}
    assert "code_errors" not in result["metrics"]
