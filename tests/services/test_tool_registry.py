"""Adding a tool is one registered class (`studio.method.tools`): the test-only reverse tool
is a name the run config accepts, the launch checks build, the worker builds and the model
card describes, with nothing else changed (the viewer colours every tool registered when it
is imported: `frontend.rollout_view.CALL_COLOURS`)."""

from __future__ import annotations

from studio.method.tools import CalculatorTool
from studio.run_config import parse_run_config
from studio.services import model_card
from studio.services.demo import load_calc_pack
from tests.support.actors import admin
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
