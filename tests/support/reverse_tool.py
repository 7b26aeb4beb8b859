"""A trivial tool for the tests: adding a tool is this one registered class (the run
config accepts it, the worker builds it, the model card describes it).

The model writes ``<reverse> text </reverse>``; the environment answers with the text
reversed in ``<reversed>``. Both engines' protocol tests drive it beside search.
"""

from __future__ import annotations

from studio.method.tags import ToolSpec, result_block
from studio.method.tools import Tool, ToolCard, register_tool

REVERSE = ToolSpec("reverse", "reverse", "reversed")


@register_tool
class ReverseTool(Tool):
    spec = REVERSE
    description = "reverse a text: <reverse> text </reverse>"
    results = "reversed text"
    using = "reversing text"
    card = ToolCard("a text", "your application reverses it and appends\n", "with the text "
                    "reversed", "reverse the text", "reversing texts", "reversing texts, with "
                    "the tag protocol above", "reversals", "What is 'stressed' backwards?")

    def __init__(self):
        self.calls: list[list[str]] = []  # each execute's inputs

    def execute(self, inputs: list[str]) -> list[object]:
        self.calls.append(list(inputs))
        return [text[::-1] for text in inputs]

    def observation(self, result: object) -> str:
        return result_block(str(result), self.spec)
