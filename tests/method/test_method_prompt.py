"""Prompt layouts, exemplar selection and templates (method.md, "The prompt")."""

from __future__ import annotations

import pytest

from studio.method.exemplars import Exemplar
from studio.method.prompt import (
    DEFAULT_INSTRUCTION,
    LAYOUTS,
    PromptTemplate,
    PromptTemplateError,
    build_prompt,
    derive_seed,
    instruction_for,
    longest_prompt_inputs,
    normalize_question,
    select_exemplars,
    similar_exemplars,
)
from studio.method.tools import SearchTool
from studio.run_config import parse_run_config

EXEMPLARS = [
    Exemplar(
        f"Question {i}",
        f"<think>t{i}</think><search>q{i}</search>\n<information>r{i}</information>\n<answer>A{i}</answer>",
    )
    for i in range(5)
]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Who is he", "Who is he?"),
        ("Who is he?", "Who is he?"),
        ("  x  ", "x?"),
        ("Is it?\n", "Is it?"),
    ],
)
def test_normalize_question(raw, expected):
    assert normalize_question(raw) == expected


def test_empty_question_rejected():
    with pytest.raises(ValueError):
        normalize_question("   ")


def test_inline_zero_shot_is_instruction_then_question():
    msgs = build_prompt("who directed jaws", EXEMPLARS, 0).messages
    assert msgs == [
        {"role": "user", "content": DEFAULT_INSTRUCTION + "\n\nQuestion: who directed jaws?"}
    ]


SEARCH_WORDING = (
    "Answer the question by reasoning and searching. Think step by step inside <think> and "
    "</think> whenever you get new information. When a fact is missing, search for it by "
    "writing a query inside <search> and </search>; the results come back between "
    "<information> and </information>. Search as many times as you need. When you are "
    "confident, give only the final answer, without explanation, inside <answer> and "
    "</answer>, for example <answer> Marie Curie </answer>."
)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_search_only_runs_prompt_is_byte_identical_to_the_search_wording(layout):
    """tools: [search] (the default) keeps method.md's search instruction, byte for byte."""
    config = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"},
                               "prompt": {"layout": layout}})
    assert instruction_for(["search"]) == DEFAULT_INSTRUCTION == SEARCH_WORDING
    before = build_prompt("who directed jaws", EXEMPLARS, 2, PromptTemplate(SEARCH_WORDING),
                          layout, assistant_prefix="<think>")
    assert config.build_prompt("who directed jaws", EXEMPLARS, 2) == before


def test_the_instruction_names_each_chosen_tool_its_tags_and_what_it_does():
    python = instruction_for(["python"])
    assert ("- python: runs a Python program in a sandbox and returns what it prints (or its "
            "error); print what you need. Write its input inside <code> and </code>; the "
            "result comes back between <output> and </output>.") in python
    assert "<search>" not in python and "<information>" not in python
    assert "<think> and </think>" in python and "inside <answer> and </answer>" in python
    both = instruction_for(["search", "python"])
    lines = [line for line in both.splitlines() if line.startswith("- ")]
    assert [line.split(":")[0] for line in lines] == ["- search", "- python"]
    assert "<search> and </search>; the result comes back between <information>" in lines[0]
    assert lines[0].startswith(f"- search: {SearchTool.description}.")
    assert instruction_for(["python", "search"]) != both  # the run's order is kept
    config = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"},
                               "tools": ["python"], "prompt": {"layout": "chat"}})
    assert config.build_prompt("What is 6 times 7", [], 0).messages[0]["content"] == python
    own = parse_run_config({"name": "x", "data": {"corpus": "c", "train": "t"},
                            "tools": ["python"], "prompt": {"instruction": "Mine."}})
    assert own.build_prompt("q", [], 0).messages[0]["content"] == "Mine."


def test_inline_with_exemplars_order_and_parts():
    t = PromptTemplate()
    (msg,) = build_prompt("who directed jaws", EXEMPLARS, 2).messages
    content = msg["content"]
    order = [
        content.index(DEFAULT_INSTRUCTION),
        content.index(t.exemplar_lead_in),
        content.index(
            "===== Example 1 =====\nExample Problem: Question 0?\nExample Solution: <think>t0"
        ),
        content.index("===== Example 2 =====\nExample Problem: Question 1?"),
        content.index(t.solve_line),
        content.index("Question: who directed jaws?"),
    ]
    assert order == sorted(order)
    assert "Question 2" not in content
    assert content.endswith("Question: who directed jaws?")


def test_chat_layout_turns():
    msgs = build_prompt("who directed jaws", EXEMPLARS, 2, layout="chat").messages
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0]["content"] == DEFAULT_INSTRUCTION
    assert msgs[1]["content"] == "Question: Question 0?"
    assert msgs[2]["content"] == EXEMPLARS[0].solution
    assert msgs[-1]["content"] == "Question: who directed jaws?"
    zero = build_prompt("q", EXEMPLARS, 0, layout="chat").messages
    assert [m["role"] for m in zero] == ["system", "user"]


def test_assistant_prefix_is_returned_beside_messages():
    p = build_prompt("q", EXEMPLARS, 1, layout="chat", assistant_prefix="<think>")
    assert p.messages[-1]["role"] == "user"
    assert p.assistant_prefix == "<think>"
    assert p.response_text("I should search.</think>") == "<think>I should search.</think>"
    assert build_prompt("q", EXEMPLARS, 1).assistant_prefix == ""


def test_first_k_and_seeded_sample():
    assert select_exemplars(5, 3) == (0, 1, 2)
    a = select_exemplars(5, 3, sample_seed=7)
    assert a == select_exemplars(5, 3, sample_seed=7)
    assert len(set(a)) == 3 and set(a) <= set(range(5))
    draws = {select_exemplars(5, 3, sample_seed=s) for s in range(30)}
    assert len(draws) > 5
    p = build_prompt("q", EXEMPLARS, 2, layout="chat", sample_seed=7)
    shown = [EXEMPLARS[i].solution for i in p.exemplar_indices]
    assert [m["content"] for m in p.messages if m["role"] == "assistant"] == shown


WORKED = [  # a set with one worked question of each kind
    "What is (318 + 947) × 26?",
    "A library had 4718 books, received 265 more and then lent out 143. How many books are "
    "in the library now?",
    "A baker has 5292 rolls and packs 36 rolls in each bag. How many bags does the baker fill?",
    "What is 5208 - 736 + 1490?",
]


@pytest.mark.parametrize(("question", "nearest"), [
    ("What is (626 + 189) × 53?", 0),
    ("Asha had 7477 stamps, bought 824 more and then gave away 780. How many stamps does Asha "
     "have now?", 1),
    ("Bram has 6510 eggs and puts exactly 15 in each carton. How many cartons does Bram fill?", 2),
    ("What is 3471 + 5755 - 110?", 3),
])
def test_similar_shows_the_worked_question_of_the_same_kind_nearest_the_question(
        question, nearest):
    assert similar_exemplars(question, WORKED, 1) == (nearest,)
    three = similar_exemplars(question, WORKED, 3)
    assert three[-1] == nearest and len(set(three)) == 3, "the most alike last"
    exemplars = [Exemplar(q, f"<think>w{i}</think><answer>{i}</answer>")
                 for i, q in enumerate(WORKED)]
    prompt = build_prompt(question, exemplars, 2, layout="chat", similar=True)
    assert prompt.exemplar_indices == similar_exemplars(question, WORKED, 2)
    assert prompt.messages[-2]["content"] == exemplars[nearest].solution, \
        "the nearest worked answer right before the question"


def test_similar_words_shared_by_every_exemplar_count_for_little():
    """'how many' is in most questions; the shape's own word ('each') decides."""
    assert similar_exemplars("How many in each box?", WORKED, 1) == (2,)
    assert similar_exemplars("Nothing alike", WORKED, 2) == (1, 0), "ties: the set's order"
    with pytest.raises(ValueError, match="holds only 4"):
        similar_exemplars("q", WORKED, 5)


def test_derive_seed_is_stable():
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3)
    assert derive_seed(1, 2, 3) != derive_seed(1, 2, 4)
    assert derive_seed("run", 0) == 869314155771529780  # pinned: same in every process
    assert 0 <= derive_seed("x") < 2**63


@pytest.mark.parametrize("k", [-1, 6, 1.5, True])
def test_bad_k(k):
    with pytest.raises(ValueError):
        build_prompt("q", EXEMPLARS, k)


def test_bad_layout():
    with pytest.raises(ValueError, match="layout"):
        build_prompt("q", EXEMPLARS, 0, layout="html")


def test_custom_template_and_literal_placeholders():
    t = PromptTemplate(
        instruction="Use tags. {not a placeholder}",
        exemplar_lead_in="",
        exemplar_format="Q{n}: {question}\nA{n}: {solution}",
        solve_line="Your turn.",
        question_format="Now: {question}",
    )
    ex = [Exemplar("has {solution} inside", "<answer>x</answer>")]
    (msg,) = build_prompt("q", ex, 1, template=t).messages
    assert msg["content"] == (
        "Use tags. {not a placeholder}\n\n"
        "Q1: has {solution} inside?\nA1: <answer>x</answer>\n\nYour turn.\n\nNow: q?"
    )


def test_mappings_accepted_as_exemplars():
    msgs = build_prompt("q", [{"question": "Q0", "solution": "S0"}], 1, layout="chat").messages
    assert msgs[2] == {"role": "assistant", "content": "S0"}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"exemplar_format": "{question} only"}, "exemplar_format"),
        ({"question_format": "no placeholder"}, "question_format"),
        ({"instruction": 3}, "instruction"),
    ],
)
def test_template_validation(kwargs, field):
    with pytest.raises(PromptTemplateError, match=field):
        PromptTemplate(**kwargs)


def test_template_round_trip():
    t = PromptTemplate(instruction="custom")
    assert PromptTemplate.from_dict(t.to_dict()) == t
    assert PromptTemplate.from_dict({}) == PromptTemplate()
    with pytest.raises(PromptTemplateError, match="unknown field"):
        PromptTemplate.from_dict({"instructions": "typo"})


def test_common_prefix_length_is_the_longest_shared_start():
    from studio.method.prompt import common_prefix_length

    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert common_prefix_length([[7, 8], [7, 8, 9]]) == 2
    assert common_prefix_length([[1, 2], [3]]) == 0
    assert common_prefix_length([[4, 5, 6]]) == 3


class WordTokenizer:
    """One id per whitespace-separated word; a chat template when `template` is set."""

    def __init__(self, template: bool):
        self.chat_template = "yes" if template else None

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"[{m['role']}] {m['content']} " for m in messages) + "[assistant] "

    def __call__(self, texts, add_special_tokens=False):
        assert add_special_tokens is False
        if isinstance(texts, str):
            return {"input_ids": [len(w) for w in texts.split()]}
        return {"input_ids": [[len(w) for w in t.split()] for t in texts]}


def test_the_prompt_text_and_ids_the_model_reads():
    prompt = build_prompt("Who?", EXEMPLARS, 1, layout="chat", assistant_prefix="<think>")
    chat = WordTokenizer(template=True)
    assert prompt.text(chat).startswith("[system] ")
    assert prompt.text(chat).endswith("[assistant] <think>")
    assert prompt.token_ids(chat) == [len(w) for w in prompt.text(chat).split()]
    plain = WordTokenizer(template=False)  # no template: the messages as blocks
    assert prompt.text(plain) == "".join(f"{m['content']}\n\n" for m in prompt.messages) \
        + "<think>"


def test_the_longest_prompt_inputs_rank_by_tokens_not_characters():
    tok = WordTokenizer(template=False)
    questions = ["a b c d e f", "abcdefghijklmnopqrstuvwxyz", "a b", "a b c"]
    longest, shown = longest_prompt_inputs(tok, questions, EXEMPLARS[:2], sampled=False, n=2)
    assert longest == [0, 3]  # 6 and 3 words; the longest in characters has one
    assert shown == EXEMPLARS[:2]  # the first k are shown: the set's order
    wordy = Exemplar("q", "one two three four five six seven eight")
    _, shown = longest_prompt_inputs(tok, questions, [EXEMPLARS[0], wordy], sampled=True)
    assert shown == [wordy, EXEMPLARS[0]]  # any k may be sampled: most tokens first
