"""Adding a tool is one registered class (`studio.method.tools`): the test-only reverse tool
is a name the run config accepts, the launch checks build, the worker builds and the model
card describes, with nothing else changed (the viewer colours every tool registered when it
is imported: `frontend.rollout_view.CALL_COLOURS`)."""

from __future__ import annotations

import pytest

from studio.method.tools import CalculatorTool, drafted_tools
from studio.run_config import RunConfigError, parse_run_config
from studio.services import evaluations, exemplar_drafts, model_card
from studio.services.demo import load_calc_pack
from studio.services.errors import InvalidInput
from tests.support.actors import admin
from tests.support.lookup_tool import registered_lookup
from tests.support.reverse_tool import ReverseTool
from tests.support.synthetic_runs import finished_run
from tests.support.tiny_model import build_tiny_model
from worker.tools import build_tools


def test_a_registered_tool_is_launched_built_and_described(settings, tmp_path):
    config = {"name": "reversing", "model": str(build_tiny_model(tmp_path / "tiny")),
              "tools": ["calculator", "reverse"], "reward": {"answer_match": "numeric"},
              "data": {"train": "calc", "exemplars": "calc"}}
    assert parse_run_config(config).tools == ["calculator", "reverse"]
    assert [type(t) for t in build_tools(config["tools"], settings, None, 3)] == [
        CalculatorTool, ReverseTool]

    load_calc_pack(settings, admin(settings))
    card = model_card.build_model_card(settings, finished_run(settings, config, steps=2))
    usage = card.markdown.split("## How to use", 1)[1].split("## Training data", 1)[0]
    assert "writes a text inside `<reverse>...</reverse>` and stops; your application " \
           "reverses it" in usage
    assert '# on </reverse>: reverse the text, append "\\n\\n<reversed>' in usage
    assert card.metadata["tags"][-3:] == ["calculator", "reverse", "icrl-studio"]
    assert "unsupported by the calculator results and reversed text it read" in card.markdown


def test_what_the_studio_asks_of_a_tool_its_registration_answers(settings, monkeypatch):
    """A tool that reads the corpus, has a verb of its own and is drafted from passages, as
    search is, under another name: each place that asks is answered by its registration."""
    registered_lookup(monkeypatch)
    with pytest.raises(RunConfigError, match="data.corpus: the lookup tool searches a corpus"):
        parse_run_config({"name": "x", "tools": ["lookup"], "data": {"train": "t"}})
    assert parse_run_config({"name": "x", "tools": ["reverse"], "data": {"train": "t"}})

    assert drafted_tools() == ("search", "python", "calculator", "lookup"), "not reverse"
    load_calc_pack(settings, admin(settings))
    with pytest.raises(InvalidInput, match="corpus: drafting lookup exemplars needs the corpus"):
        exemplar_drafts.draft_exemplars(settings, admin(settings), qa_set="calc", tool="lookup")
    with pytest.raises(InvalidInput, match="corpus: name the corpus the model searches"):
        evaluations.create_evaluation(settings, admin(settings), qa_set="calc", model="m",
                                      protocol={"tools": ["lookup"]}, start=False)

    zero = {"em": 0.0, "subem": 0.0, "f1": 0.0, "answer_rate": 0.0, "tool_calls": {"lookup": 0}}
    assert evaluations.zero_score_reason(zero).endswith(
        "tags and never looked up: it does not follow the tag protocol zero-shot")
    assert evaluations.zero_score_reason({**zero, "answer_rate": 0.5}).startswith(
        "the model answered 50% of the questions without looking things up")
