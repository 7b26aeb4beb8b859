"""What the model will read: prompts rendered through a tokenizer's chat template, with
their token counts, for k = 0..N exemplars (the curriculum's stages).

A preview renders at most `MAX_PREVIEW_CHARS` of exemplar text over all its prompts: the
prompt for k holds the first k exemplars, so rendering every k of a large set is quadratic
in its size (three exemplars of 5 MB took 43 s and 1.8 GB); the prompts past the bound are
listed in `not_shown`, not rendered.
"""

from __future__ import annotations

from collections.abc import Sequence

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.method.exemplars import Exemplar
from studio.method.prompt import LAYOUTS
from studio.method.tools import DEFAULT_TOOL_NAMES, TOOLS, check_tool_names
from studio.run_config import PromptSpec
from studio.services.errors import InvalidInput
from studio.services.exemplar_sets import load_exemplars
from studio.services.tokenizers import cached_tokenizer
from studio.settings import Settings


class PromptShown(TypedDict):
    k: int  # exemplars shown
    messages: list[dict]  # the chat messages ({role, content})
    text: str  # as the model's chat template renders them
    tokens: int


class PromptPreview(TypedDict):
    model: str  # the tokenizer's model
    layout: str
    tools: list[str]
    prompts: list[PromptShown]
    not_shown: list[int]  # the k asked whose prompts would pass MAX_PREVIEW_CHARS


MAX_PREVIEW_CHARS = 500_000
"""Characters of question and exemplars one preview renders, over all its prompts (the 3, 2
and 0 exemplars of a curriculum at the longest exemplar, 20,000 characters, take 120,000):
about a second of tokenizing, whatever the set holds."""


def _exemplar_chars(exemplar: Exemplar | dict) -> int:
    """The characters of an exemplar that a prompt shows (its question and solution)."""
    if isinstance(exemplar, Exemplar):
        return len(exemplar.question) + len(exemplar.solution)
    return len(str(exemplar.get("question") or "")) + len(str(exemplar.get("solution") or ""))


def _within_budget(exemplars: Sequence[Exemplar | dict], question: str, ks: list[int]
                   ) -> tuple[list[int], list[int]]:
    """The ks whose prompts fit in MAX_PREVIEW_CHARS together, in the order asked, and those
    that do not."""
    shown_chars = [0]
    for exemplar in exemplars[:max(ks, default=0)]:
        shown_chars.append(shown_chars[-1] + _exemplar_chars(exemplar))
    rendered, left_out, spent = [], [], 0
    for k in ks:
        cost = len(question) + shown_chars[k]
        if spent + cost > MAX_PREVIEW_CHARS:
            left_out.append(k)
        else:
            rendered.append(k)
            spent += cost
    return rendered, left_out


def preview_prompts(settings: Settings, set_id: int, question: str, *,
                    ks: list[int] | None = None, layout: str = "inline",
                    model: str | None = None, assistant_prefix: str | None = None,
                    tools: Sequence[str] = DEFAULT_TOOL_NAMES) -> PromptPreview:
    """The prompt for each k in `ks` (default 0..N) of a stored set, with text and token count."""
    return preview_exemplars(settings, load_exemplars(settings, set_id), question, ks=ks,
                             layout=layout, model=model, assistant_prefix=assistant_prefix,
                             tools=tools)


def preview_exemplars(settings: Settings, exemplars: list[Exemplar | dict], question: str, *,
                      ks: list[int] | None = None, layout: str = "inline",
                      model: str | None = None, assistant_prefix: str | None = None,
                      tools: Sequence[str] = DEFAULT_TOOL_NAMES) -> PromptPreview:
    """As `preview_prompts`, for exemplars not (yet) stored: an edit in progress.

    Each exemplar is an `Exemplar` or a `{question, solution, answer?}` dict. The prompt is
    built as a run with these `tools` builds it (`PromptSpec.build`): the same instruction.
    """
    if not question.strip():
        raise InvalidInput("question: type the question the prompt should end with")
    if len(question) > settings.max_question_chars:
        raise InvalidInput(f"question: {len(question)} characters; a question holds at most "
                           f"{settings.max_question_chars} (setting STUDIO_MAX_QUESTION_CHARS)")
    if layout not in LAYOUTS:
        raise InvalidInput(f"layout: '{layout}' is not one of {', '.join(LAYOUTS)}")
    try:
        tools = check_tool_names(tools)
    except ValueError as exc:
        raise InvalidInput(f"tools: {exc}") from None
    ks = list(range(len(exemplars) + 1)) if ks is None else ks
    bad = [k for k in ks if not 0 <= k <= len(exemplars)]
    if bad:
        raise InvalidInput(f"ks: {bad} outside 0..{len(exemplars)} (the set has "
                           f"{len(exemplars)} exemplars)")
    ks, not_shown = _within_budget(exemplars, question, ks)
    model = model or settings.default_model
    tokenizer = cached_tokenizer(model, str(settings.resolved_data_dir))
    spec = PromptSpec(layout=layout, assistant_prefix=assistant_prefix)
    prompts = []
    for k in ks:
        prompt = spec.build(question, exemplars, k, tools=tools)
        prompts.append({"k": k, "messages": prompt.messages, "text": prompt.text(tokenizer),
                        "tokens": len(prompt.token_ids(tokenizer))})
    return {"model": model, "layout": layout, "tools": list(tools), "prompts": prompts,
            "not_shown": not_shown}


def tools_written(exemplars: Sequence[Exemplar | dict]) -> list[str]:
    """The registered tools whose call tag the exemplars' solutions write (search when none
    does): what a preview of the set starts with."""
    solutions = [e.solution if isinstance(e, Exemplar) else str(e.get("solution") or "")
                 for e in exemplars]
    written = [name for name, tool in TOOLS.items()
               if any(f"<{tool.spec.call_tag}>" in text for text in solutions)]
    return written or list(DEFAULT_TOOL_NAMES)
