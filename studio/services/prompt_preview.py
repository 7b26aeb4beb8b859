"""What the model will read: prompts rendered through a tokenizer's chat template, with
their token counts, for k = 0..N exemplars (the curriculum's stages)."""

from __future__ import annotations

from collections.abc import Sequence

from typing_extensions import TypedDict  # pydantic reads it on Python 3.11 (typing's from 3.12)

from studio.method.exemplars import Exemplar
from studio.method.prompt import LAYOUTS, SEARCH_ONLY
from studio.method.tools import TOOLS, check_tool_names
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


def preview_prompts(settings: Settings, set_id: int, question: str, *,
                    ks: list[int] | None = None, layout: str = "inline",
                    model: str | None = None, assistant_prefix: str | None = None,
                    tools: Sequence[str] = SEARCH_ONLY) -> PromptPreview:
    """The prompt for each k in `ks` (default 0..N) of a stored set, with text and token count."""
    return preview_exemplars(settings, load_exemplars(settings, set_id), question, ks=ks,
                             layout=layout, model=model, assistant_prefix=assistant_prefix,
                             tools=tools)


def preview_exemplars(settings: Settings, exemplars: list[Exemplar | dict], question: str, *,
                      ks: list[int] | None = None, layout: str = "inline",
                      model: str | None = None, assistant_prefix: str | None = None,
                      tools: Sequence[str] = SEARCH_ONLY) -> PromptPreview:
    """As `preview_prompts`, for exemplars not (yet) stored: an edit in progress.

    Each exemplar is an `Exemplar` or a `{question, solution, answer?}` dict. The prompt is
    built as a run with these `tools` builds it (`PromptSpec.build`): the same instruction.
    """
    if not question.strip():
        raise InvalidInput("question: type the question the prompt should end with")
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
    model = model or settings.default_model
    tokenizer = cached_tokenizer(model, str(settings.resolved_data_dir))
    spec = PromptSpec(layout=layout, assistant_prefix=assistant_prefix)
    prompts = []
    for k in ks:
        prompt = spec.build(question, exemplars, k, tools=tools)
        prompts.append({"k": k, "messages": prompt.messages, "text": prompt.text(tokenizer),
                        "tokens": len(prompt.token_ids(tokenizer))})
    return {"model": model, "layout": layout, "tools": list(tools), "prompts": prompts}


def tools_written(exemplars: Sequence[Exemplar | dict]) -> list[str]:
    """The registered tools whose call tag the exemplars' solutions write (search when none
    does): what a preview of the set starts with."""
    solutions = [e.solution if isinstance(e, Exemplar) else str(e.get("solution") or "")
                 for e in exemplars]
    written = [name for name, tool in TOOLS.items()
               if any(f"<{tool.spec.call_tag}>" in text for text in solutions)]
    return written or list(SEARCH_ONLY)
