"""Rollout prompts: instruction, k exemplars, the question (method.md, "The prompt").

Two layouts:

* ``inline`` - the paper's: one user message holding the instruction, then
  (k > 0) a lead-in, the k exemplars as text and a "solve the actual problem"
  line, then the question.
* ``chat`` - the instruction as a system message and each exemplar as a prior
  user/assistant turn; the small default model follows this far better
  (method.md, "What the default CPU model does").

The optional assistant prefix (e.g. ``<think>``) is not a message: chat
templates treat a trailing assistant message differently, so
:func:`build_prompt` returns it beside the messages and the engine appends it
after the template's generation prompt.  The reward must then see
``prefix + generated`` (:meth:`Prompt.response_text`), or the pre-filled tag
would be missing from the scored response.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Literal

from .exemplars import Exemplar
from .tags import ANSWER, THINK
from .tools import DEFAULT_TOOL_NAMES, TOOLS

Layout = Literal["inline", "chat"]
LAYOUTS: tuple[str, ...] = ("inline", "chat")

DEFAULT_INSTRUCTION = (
    "Answer the question by reasoning and searching. Think step by step inside <think> and "
    "</think> "
    "whenever you get new information. When a fact is missing, search for it by writing a "
    "query inside "
    "<search> and </search>; the results come back between <information> and </information>. "
    "Search as many times as you need. When you are confident, give only the final answer, without "
    "explanation, inside <answer> and </answer>, for example <answer> Marie Curie </answer>."
)



def instruction_for(tools: Sequence[str]) -> str:
    """The default instruction for a run's tools (registered names, in the run's order):
    method.md's search wording for the default, search alone (`DEFAULT_INSTRUCTION`,
    unchanged), else one
    line per tool naming its tags and what it does (the tool's `description`)."""
    if tuple(tools) == DEFAULT_TOOL_NAMES:
        return DEFAULT_INSTRUCTION
    lines = []
    for name in tools:
        tool = TOOLS[name]
        call, result = tool.spec.call_tag, tool.spec.result_tag
        lines.append(f"- {name}: {tool.description}. Write its input inside <{call}> and "
                     f"</{call}>; the result comes back between <{result}> and </{result}>.")
    return (
        f"Answer the question by reasoning and using tools. Think step by step inside "
        f"<{THINK}> and </{THINK}> whenever you get new information. You can use these tools, "
        "as many times as you need:\n" + "\n".join(lines) + "\nWhen you are confident, give "
        f"only the final answer, without explanation, inside <{ANSWER}> and </{ANSWER}>, for "
        f"example <{ANSWER}> Marie Curie </{ANSWER}> or <{ANSWER}> 42 </{ANSWER}>."
    )


#: All a zero-shot evaluation may pre-fill of the reply: nothing, or the opening think tag
#: (method.md, "Evaluation protocol": nothing may steer the model towards the tool).
EVAL_PREFIXES: tuple[str, ...] = ("", "<think>")


LONGEST_QUESTIONS = 5  # the questions a prompt-length check renders whole


def check_eval_prefix(prefix: str | None) -> str:
    """The evaluation's assistant prefix ('' for None), or ValueError naming what is allowed."""
    prefix = prefix or ""
    if prefix not in EVAL_PREFIXES:
        raise ValueError(f"assistant_prefix: an evaluation pre-fills at most '<think>', not "
                         f"{prefix!r} (zero-shot is zero-shot: nothing may steer the model "
                         "towards a search)")
    return prefix


class PromptTemplateError(ValueError):
    """A template cannot be used; the message names the field."""


@dataclass(frozen=True)
class PromptTemplate:
    """The editable wording of a prompt (the studio's own default wording).

    ``exemplar_format`` may use ``{n}``, ``{question}`` and ``{solution}``;
    ``question_format`` uses ``{question}``.  Placeholders are replaced
    literally (no ``str.format``), so other braces are safe.
    """

    instruction: str = DEFAULT_INSTRUCTION
    exemplar_lead_in: str = (
        "Here are worked examples of the format. They are about other questions."
    )
    exemplar_format: str = (
        "===== Example {n} =====\nExample Problem: {question}\nExample Solution: {solution}"
    )
    solve_line: str = (
        "Now solve the actual problem below in the same format. Do not answer the example problems."
    )
    question_format: str = "Question: {question}"

    def __post_init__(self) -> None:
        for f in fields(self):
            if not isinstance(getattr(self, f.name), str):
                raise PromptTemplateError(f"{f.name}: must be a string")
        for name, needed in (
            ("exemplar_format", ("{question}", "{solution}")),
            ("question_format", ("{question}",)),
        ):
            missing = [p for p in needed if p not in getattr(self, name)]
            if missing:
                raise PromptTemplateError(f"{name}: must contain {' and '.join(missing)}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> PromptTemplate:
        """Build from a JSON object; missing fields keep the default wording."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PromptTemplateError(
                f"{unknown[0]}: unknown field; known fields are {', '.join(sorted(known))}"
            )
        return cls(**data)  # type: ignore[arg-type]


def _fill(template: str, **values: str) -> str:
    """Replace ``{name}`` placeholders in one pass: a value holding ``{solution}`` stays as is."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), template)


def normalize_question(question: str) -> str:
    """Strip the question and append ``?`` when it has none (method.md, "The prompt", item 4)."""
    q = str(question).strip()
    if not q:
        raise ValueError("the question is empty")
    return q if q.endswith("?") else q + "?"


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix all ``sequences`` share (the instruction and the
    exemplars of a step's prompts: the engine computes it once, the estimate counts it)."""
    first, *rest = sequences
    n = len(first)
    for other in rest:
        n = next((i for i in range(min(n, len(other))) if other[i] != first[i]),
                 min(n, len(other)))
    return n


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from parts such as (run seed, step, prompt index), in any process."""
    digest = hashlib.sha256("\x1f".join(repr(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _check_k(count: int, k: int) -> None:
    """k exemplars can be shown from a set of `count`, or a ValueError says why not."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    if k > count:
        raise ValueError(f"k = {k} exemplars asked for, but the set holds only {count}")


def select_exemplars(count: int, k: int, sample_seed: int | None = None) -> tuple[int, ...]:
    """Indices of the k exemplars to show: the first k (upstream) or a seeded sample of k.

    method.md, "The prompt": "Upstream takes the first k exemplars of the set;
    sampling k per prompt is a reasonable option".  The sample keeps its drawn order.
    """
    _check_k(count, k)
    if sample_seed is None:
        return tuple(range(k))
    return tuple(random.Random(sample_seed).sample(range(count), k))


_WORD = re.compile(r"[a-z]+|[^\w\s.,?!'\"]")


def _words(text: str) -> set[str]:
    """A question's words for likeness: its lower-case words and its symbols (+, -, ×, ÷,
    parentheses); numbers left out, as two questions never share theirs."""
    return set(_WORD.findall(text.lower()))


def similar_exemplars(question: str, exemplar_questions: Sequence[str], k: int) -> tuple[int, ...]:
    """Indices of the k exemplars whose questions are most like `question`, the most alike
    last (nearest the question in the prompt); ties keep the set's order.

    Likeness is the words the two questions share, each weighted by how rare it is among the
    exemplars' questions (log(1 + n / df)): words every exemplar has ("how", "many") count
    little, a shape's own words ("each", "more", "+", "(") much. Not in method.md: a studio
    option (`prompt.exemplar_selection: similar`) for sets written to cover several kinds of
    question, so that a hint shows the worked kind nearest the one asked.
    """
    _check_k(len(exemplar_questions), k)
    words = [_words(q) for q in exemplar_questions]
    df: dict[str, int] = {}
    for ws in words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    asked = _words(question)
    n = len(words)
    scores = [sum(math.log(1 + n / df[w]) for w in ws & asked) for ws in words]
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))[:k]
    return tuple(reversed(ranked))


@dataclass(frozen=True)
class Prompt:
    """Messages for the chat template, the prefix to pre-fill, and which exemplars were shown."""

    messages: list[dict[str, str]]
    assistant_prefix: str = ""
    exemplar_indices: tuple[int, ...] = ()

    def response_text(self, generated: str) -> str:
        """What the reward and the parser must see: the pre-filled prefix plus the generation."""
        return self.assistant_prefix + generated

    def text(self, tokenizer) -> str:
        """The exact text generation starts from: the tokenizer's chat template over the
        messages (plain blocks where it has none), then the assistant prefix."""
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(self.messages, tokenize=False,
                                                 add_generation_prompt=True)
        else:
            text = "".join(f"{m['content']}\n\n" for m in self.messages)
        return text + self.assistant_prefix

    def token_ids(self, tokenizer) -> list[int]:
        """What the model reads: `text` encoded, no special tokens added. Every prompt the
        studio feeds or counts (launch check, trainer, evaluation, veRL data and agent
        loop, the exemplar preview) is this."""
        return list(tokenizer(self.text(tokenizer), add_special_tokens=False)["input_ids"])


def build_prompt(
    question: str,
    exemplars: Sequence[Exemplar | Mapping[str, object]],
    k: int,
    template: PromptTemplate | None = None,
    layout: Layout = "inline",
    *,
    sample_seed: int | None = None,
    similar: bool = False,
    assistant_prefix: str | None = None,
) -> Prompt:
    """Build the rollout prompt (method.md, "The prompt"; layouts in the module docstring).
    The exemplars shown: the first k, a seeded sample of k (`sample_seed`), or the k most
    like the question (`similar`).

    Evaluation uses k = 0, which gives the same prompt in both layouts apart
    from where the instruction sits.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    template = template or PromptTemplate()
    indices = similar_exemplars(question, [Exemplar.coerce(e).question for e in exemplars], k) \
        if similar else select_exemplars(len(exemplars), k, sample_seed)
    shown = [Exemplar.coerce(exemplars[i]) for i in indices]
    asked = _fill(template.question_format, question=normalize_question(question))

    messages: list[dict[str, str]] = []
    if layout == "inline":
        parts = [template.instruction]
        if shown:
            blocks = [
                _fill(
                    template.exemplar_format,
                    n=str(n),
                    question=normalize_question(e.question),
                    solution=e.solution.strip(),
                )
                for n, e in enumerate(shown, 1)
            ]
            parts += [template.exemplar_lead_in, "\n\n".join(blocks), template.solve_line]
        parts.append(asked)
        messages.append(
            {"role": "user", "content": "\n\n".join(p.strip() for p in parts if p.strip())}
        )
    else:
        if template.instruction.strip():
            messages.append({"role": "system", "content": template.instruction.strip()})
        for e in shown:
            messages.append(
                {
                    "role": "user",
                    "content": _fill(
                        template.question_format, question=normalize_question(e.question)
                    ),
                }
            )
            messages.append({"role": "assistant", "content": e.solution.strip()})
        messages.append({"role": "user", "content": asked})
    return Prompt(messages, assistant_prefix or "", indices)


def longest_prompt_inputs(tokenizer, questions: Sequence[str], exemplars: Sequence[Exemplar],
                          sampled: bool, n: int = LONGEST_QUESTIONS
                          ) -> tuple[list[int], list[Exemplar]]:
    """Where a stage's longest prompt is: the indices of the `n` questions with the most
    tokens (the longest in characters are not always those), and the exemplars in the order
    whose first k are longest (the set's order when the first k are shown; most tokens first
    when any k may be sampled). Launch validation and the veRL data set measure these."""
    def tokens(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] \
            if texts else []

    lengths = tokens(list(questions))
    longest = sorted(range(len(questions)), key=lambda i: -lengths[i])[:n]
    shown = [Exemplar.coerce(e) for e in exemplars]
    if sampled:
        sizes = tokens([e.question + e.solution for e in shown])
        shown = [e for _, e in sorted(zip(sizes, shown, strict=True), key=lambda p: -p[0])]
    return longest, shown

