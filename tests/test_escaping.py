"""Text from users and models is shown as text: the escaping helpers checked through a real
CommonMark renderer (with GFM tables) and an HTML parser, and the views that use them (the
rollout card's header and token table, messages, toasts, plot names and hover text)."""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

import gradio as gr
import plotly.graph_objects as go
import pytest
from markdown_it import MarkdownIt

from frontend.charts import compare_figure, live_figure
from frontend.components import error_markdown, ok_markdown, toast_user_errors
from frontend.rollout_view import header_markdown, token_table
from studio.escaping import code_span, html_text, markdown_text
from studio.services.errors import InvalidInput
from tests.support.hostile_text import HOSTILE

MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
TEXTS = [
    HOSTILE, "# not a heading", "1. not a list", "2) nor this", "- nor this", "+ nor this", "> nor a quote", "===",
    "    not code", "`not code`", "<https://example.org>", "![no image](x.png)",
    "[no link](https://example.org) www.example.org https://example.org a@example.org",
    "a \\* b \\\\", "&amp; stays &amp;", "~~not struck~~", "_not em_ **not strong**",
    "line one\n--- not a rule", "tab\tinside", "ünïcødé ✓",
]


class Parsed(HTMLParser):
    """The tags and text of an HTML fragment."""

    def __init__(self, fragment: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.text, self.attrs = [], "", {}
        self.feed(fragment)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.update(attrs)

    def handle_data(self, data):
        self.text += data


@pytest.mark.parametrize("text", TEXTS)
def test_markdown_text_renders_to_exactly_the_text(text):
    rendered = Parsed(MARKDOWN.render(markdown_text(text)))
    assert rendered.tags == ["p"], rendered.tags
    assert rendered.text.strip() == re.sub(r"(?m)^[ \t]+", "", text)


@pytest.mark.parametrize("text", TEXTS)
def test_markdown_text_stays_in_its_table_cell(text):
    table = f"| a | b |\n|---|---|\n| {markdown_text(' '.join(text.split()))} | after |"
    cells = re.findall(r"<td>(.*?)</td>", MARKDOWN.render(table), re.S)
    assert [unescape(c) for c in cells] == [" ".join(text.split()), "after"]


@pytest.mark.parametrize("text", [HOSTILE, "`tick`", "a``b", "``", "C:\\models\\x"])
def test_code_span_is_one_code_element_with_the_text(text):
    rendered = Parsed(MARKDOWN.render(code_span(text)))
    assert rendered.tags == ["p", "code"] and rendered.text.strip() == text.strip()


@pytest.mark.parametrize("text", TEXTS)
def test_html_text_is_text_and_attribute_values(text):
    as_text = Parsed(f"<span>{html_text(text)}</span>")
    assert as_text.tags == ["span"] and as_text.text == text
    as_value = Parsed(f'<a title="{html_text(text)}" download=\'{html_text(text)}\'>x</a>')
    assert as_value.attrs == {"title": text, "download": text}


def test_plotly_decodes_every_entity_html_text_writes():
    """Plotly's label markup knows only some named entities (not &quot;)."""
    written = set(re.findall(r"&#?\w+;", html_text("<>&\"'")))
    assert written <= {"&lt;", "&gt;", "&amp;", "&#34;", "&#39;"}


def test_the_rollout_header_and_token_table_show_hostile_text_as_text():
    rollout = {"id": 1, "step": 0, "group": 0, "sample": 0, "stage": 0, "exemplars": 0,
               "question": HOSTILE, "golden_answers": [HOSTILE, "x"], "reward": 0.5,
               "advantage": 0.1, "breakdown": {"answer": HOSTILE, "penalties": {HOSTILE: 0.1}},
               "segments": [{"source": "model", "text": HOSTILE, "tokens": 3,
                             "parts": [{"kind": "text", "text": HOSTILE}]}]}
    header = Parsed(MARKDOWN.render(header_markdown(rollout)))
    assert set(header.tags) == {"p", "strong", "br"}
    assert f"Question: {HOSTILE}" in header.text and f"model's answer: {HOSTILE}" in header.text
    table = Parsed(MARKDOWN.render(token_table(rollout)))
    assert set(table.tags) == {"table", "thead", "tbody", "tr", "th", "td"}
    assert HOSTILE[:90] in table.text
    guided = Parsed(MARKDOWN.render(header_markdown(
        {**rollout, "hint_exemplars": [0], "hint_questions": [HOSTILE]})))  # an exemplar's
    assert set(guided.tags) == {"p", "strong", "br"}
    assert f"exemplar 1 ({' '.join(HOSTILE.split())[:60]}" in guided.text


def test_messages_and_toasts_show_hostile_text_as_text():
    for markdown in (error_markdown(f"name: '{HOSTILE}' exists; rename it"),
                     ok_markdown(f"Stored '{HOSTILE}'")):
        rendered = Parsed(MARKDOWN.render(markdown))
        assert set(rendered.tags) <= {"p", "strong", "ul", "li"} and HOSTILE in rendered.text

    @toast_user_errors
    def refuse():
        raise InvalidInput(f"name: '{HOSTILE}' exists")

    with pytest.raises(gr.Error) as toast:
        refuse()
    assert Parsed(toast.value.message).tags == []  # Gradio's toasts render HTML
    assert Parsed(toast.value.message).text == f"name: '{HOSTILE}' exists"


def test_run_names_and_warnings_reach_plotly_escaped():
    figure = compare_figure([HOSTILE, "#2 b"], [0, 1], {"kl": [[0, 1], [1, 0]]}, [("kl", "KL")])
    go.Figure(figure)
    assert [t["name"] for t in figure["data"]] == [html_text(HOSTILE), "#2 b"]
    assert all(HOSTILE not in t["hovertemplate"] for t in figure["data"])  # read by reference
    live = live_figure([{"step": 1, "stage": 0, "exemplars": 0, "reward_mean": 0.5}],
                       [{"step": 1, "kind": "warning", "message": HOSTILE, "data": {}}])
    (warning,) = [t for t in live["data"] if t["name"] == "warning"]
    assert warning["hovertext"] == [html_text(HOSTILE)]
