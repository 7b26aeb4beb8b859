"""What the model will read: prompts rendered through a tokenizer's chat template, with
their token counts, for k = 0..N exemplars (the curriculum's stages)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from studio.base_models import ModelNotAvailable, load_tokenizer
from studio.method.exemplars import Exemplar
from studio.method.prompt import LAYOUTS, PromptTemplate, build_prompt
from studio.run_config import PromptSpec
from studio.services.errors import InvalidInput, UserError
from studio.services.exemplar_sets import load_exemplars
from studio.settings import Settings


class ModelUnavailable(UserError):
    status_code = 409


@lru_cache(maxsize=4)
def cached_tokenizer(ref: str, data_dir: str):
    """One tokenizer per model per process (the bundled model converts once, ~30 s)."""
    try:
        return load_tokenizer(ref, Path(data_dir))
    except ModelNotAvailable as exc:
        raise ModelUnavailable(f"model: {exc}") from None


def render_prompt(tokenizer, messages: list[dict], assistant_prefix: str | None = None) -> str:
    """The exact prompt text generation starts from: chat template, then the assistant prefix."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
    else:
        text = "".join(f"{m['content']}\n\n" for m in messages)
    return text + (assistant_prefix or "")


def count_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def run_prompt_ids(tokenizer, spec: PromptSpec, question: str, exemplars: list[Exemplar],
                   k: int, sample_seed: int | None = None) -> list[int]:
    """The token ids a training rollout starts from, as a run's `prompt` section builds them.

    The trainer and the launch-time length estimate both call this, so the
    estimate counts exactly what the rollouts will read.
    """
    template = PromptTemplate(instruction=spec.instruction) if spec.instruction else None
    prompt = build_prompt(question, exemplars, k, template, spec.layout,
                          sample_seed=sample_seed, assistant_prefix=spec.assistant_prefix)
    text = render_prompt(tokenizer, prompt.messages, spec.assistant_prefix)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def preview_prompts(settings: Settings, set_id: int, question: str, *,
                    ks: list[int] | None = None, layout: str = "inline",
                    model: str | None = None, assistant_prefix: str | None = None) -> dict:
    """The prompt for each k in `ks` (default 0..N) of a stored set, with text and token count."""
    return preview_exemplars(settings, load_exemplars(settings, set_id), question, ks=ks,
                             layout=layout, model=model, assistant_prefix=assistant_prefix)


def preview_exemplars(settings: Settings, exemplars: list[Exemplar | dict], question: str, *,
                      ks: list[int] | None = None, layout: str = "inline",
                      model: str | None = None, assistant_prefix: str | None = None) -> dict:
    """As `preview_prompts`, for exemplars not (yet) stored: an edit in progress.

    Each exemplar is an `Exemplar` or a `{question, solution, answer?}` dict.
    """
    if not question.strip():
        raise InvalidInput("question: type the question the prompt should end with")
    if layout not in LAYOUTS:
        raise InvalidInput(f"layout: '{layout}' is not one of {', '.join(LAYOUTS)}")
    ks = list(range(len(exemplars) + 1)) if ks is None else ks
    bad = [k for k in ks if not 0 <= k <= len(exemplars)]
    if bad:
        raise InvalidInput(f"ks: {bad} outside 0..{len(exemplars)} (the set has "
                           f"{len(exemplars)} exemplars)")
    model = model or settings.default_model
    tokenizer = cached_tokenizer(model, str(settings.resolved_data_dir))
    prompts = []
    for k in ks:
        prompt = build_prompt(question, exemplars, k, layout=layout,
                              assistant_prefix=assistant_prefix)
        text = render_prompt(tokenizer, prompt.messages, assistant_prefix)
        prompts.append({"k": k, "messages": prompt.messages, "text": text,
                        "tokens": count_tokens(tokenizer, text)})
    return {"model": model, "layout": layout, "prompts": prompts}
