"""The reward, computed on the response alone (method.md, "The reward").

``score = clip(w_acc * acc + w_fmt * fmt, 0, 1)``.  acc is exact match of the
last model-written ``<answer>`` (plus the upstream multi-answer rule); fmt is
1 minus the penalties of :data:`PENALTY_TABLE`, clipped to [0, 1].  Unlike
upstream, the prompt is never scored, and nothing inside an ``<information>``
block counts as a tag or as the answer.

``answer_match="numeric"`` (opt-in, for questions whose answer is a number) swaps
exact match for numeric equivalence (:func:`numeric_match`); ``"exact"``, the
default, is method.md's rule unchanged.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from .tags import ANSWER, DEFAULT_TOOLS, THINK, ToolSpec, count_tags, final_answer, parse

_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace.

    method.md, "The reward": the normalisation acc, SubEM and F1 use (the
    usual SQuAD order: lowercase, punctuation, articles, whitespace).
    """
    text = str(text).lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(golden_answers: str | Iterable[str]) -> list[str]:
    """Normalised, non-empty gold answers (an empty gold can never be matched)."""
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    return [g for g in (normalize_answer(a) for a in golden_answers) if g]


def exact_match(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer (method.md, acc)."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return 1.0 if pred and pred in _golds(golden_answers) else 0.0


def substring_match(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    """SubEM: 1.0 if any normalised gold answer is a substring of the normalised prediction."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return 1.0 if any(g in pred for g in _golds(golden_answers)) else 0.0


def contains_answer(text: str, golden_answers: str | Iterable[str]) -> bool:
    """Whether a normalised gold answer appears in the normalised ``text`` as whole words.

    The data doctor's "reachable": a passage the model reads holds an answer that
    would score acc = 1 if copied (same normalisation as :func:`exact_match`);
    whole words, so the gold "1990" is not found in "1990s".
    """
    padded = f" {normalize_answer(text)} "
    return any(f" {g} " in padded for g in _golds(golden_answers))


def token_f1(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    """Token F1 on normalised whitespace tokens, best over gold answers (method.md, F1)."""
    if prediction is None:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    return max((_f1(pred_tokens, gold.split()) for gold in _golds(golden_answers)), default=0.0)


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def multi_answer_match(prediction: str | None, golden_answers: str | Iterable[str]) -> bool:
    """Upstream's extra acc rule: several gold answers and every one appears in the prediction.

    method.md, "The reward": "Upstream also counts a prediction as correct when
    there are several gold answers and all of them appear in it".  "Several"
    counts distinct normalised gold answers, so listing one answer twice in
    different case does not switch the rule on.
    """
    if prediction is None:
        return False
    golds = set(_golds(golden_answers))
    pred = normalize_answer(prediction)
    return len(golds) > 1 and all(g in pred for g in golds)


AnswerMatch = Literal["exact", "numeric"]
ANSWER_MATCHES: tuple[AnswerMatch, ...] = ("exact", "numeric")

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+]?)[$€£]?"
    r"(?P<digits>\d+/\d+(?![\d/])"  # a fraction 1/2
    r"|(?:\d{1,3}(?:,\d{3})+(?!\d|,\d)|\d+)(?:\.\d+)?"  # 1,200.50 or 1200.5 or 12
    r"|\.\d+)"  # .5
    r"(?P<exponent>[eE][-+]?\d+)?(?![\d.]\d)"
)
"""A number written in digits: sign, a currency sign after it (``-$12``), thousands commas
(groups of exactly three), decimals, a leading-dot decimal, a fraction of two integers, an
exponent."""


def numbers(text: str) -> list[Fraction]:
    """Every number written in digits in ``text``, exactly (``"1,200"`` -> 1200, ``".5"`` and
    ``"1/2"`` -> 1/2); a fraction over 0 is skipped."""
    found = []
    for m in _NUMBER.finditer(str(text)):
        spelled = m["sign"] + m["digits"].replace(",", "") + (m["exponent"] or "")
        try:
            found.append(Fraction(spelled))
        except ZeroDivisionError:
            continue
    return found


def the_number(text: str) -> Fraction | None:
    """The one number ``text`` holds (words around it ignored: ``"$12"``, ``"12 apples"``),
    or None when it holds none or several (``"12 or 13"``)."""
    found = numbers(text)
    return found[0] if len(found) == 1 else None


def _numeric_golds(golden_answers: str | Iterable[str]) -> tuple[list[Fraction], list[str]]:
    """Gold answers split into numbers and (normalised) texts that hold no single number."""
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    values, texts = [], []
    for gold in golden_answers:
        value = the_number(gold)
        if value is not None:
            values.append(value)
        elif normalize_answer(gold):
            texts.append(normalize_answer(gold))
    return values, texts


def numeric_match(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    """1.0 if the prediction holds exactly one number and it equals a gold answer's number,
    exactly as a fraction (``12`` = ``12.0`` = ``$12`` = ``12 apples``; ``1,200`` = ``1200``;
    ``0.5`` = ``.5`` = ``1/2``; ``12`` != ``120``, ``1.2``, ``12 or 13``); a gold answer that
    holds no single number is matched exactly, as :func:`exact_match` does."""
    if prediction is None:
        return 0.0
    values, texts = _numeric_golds(golden_answers)
    value = the_number(prediction)
    if value is not None and value in values:
        return 1.0
    return exact_match(prediction, texts) if texts else 0.0


def numeric_substring_match(prediction: str | None,
                            golden_answers: str | Iterable[str]) -> float:
    """SubEM in numeric mode: any number of the prediction equals a gold number (a text gold:
    :func:`substring_match`)."""
    if prediction is None:
        return 0.0
    values, texts = _numeric_golds(golden_answers)
    if set(numbers(prediction)) & set(values):
        return 1.0
    return substring_match(prediction, texts) if texts else 0.0


def _numeric_tokens(text: str) -> list[str]:
    """The numbers of ``text`` in one spelling each (``1,200.0`` -> ``1200``), then its other
    words normalised."""
    rest = _NUMBER.sub(" ", str(text))
    return [str(v) for v in numbers(text)] + normalize_answer(rest).split()


def numeric_token_f1(prediction: str | None, golden_answers: str | Iterable[str]) -> float:
    """F1 in numeric mode: :func:`token_f1` with each number one token, whatever its spelling."""
    if prediction is None:
        return 0.0
    golds = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
    return max((_f1(_numeric_tokens(prediction), _numeric_tokens(g)) for g in golds),
               default=0.0)


def accuracy(prediction: str | None, golden_answers: str | Iterable[str],
             answer_match: AnswerMatch = "exact") -> float:
    """acc: 1.0 on exact match or the multi-answer rule, else 0.0 (method.md, "The reward");
    with ``answer_match="numeric"``, :func:`numeric_match` alone (no multi-answer rule: a
    numeric question has one answer, and ``"12"`` would be found inside ``"120"``)."""
    if answer_match == "numeric":
        return numeric_match(prediction, golden_answers)
    if answer_match != "exact":
        raise ValueError(f"answer_match must be one of {ANSWER_MATCHES}, got {answer_match!r}")
    return 1.0 if exact_match(prediction, golden_answers) \
        or multi_answer_match(prediction, golden_answers) else 0.0


@dataclass(frozen=True)
class PenaltyRule:
    """One row of method.md's fmt penalty table, with a stable snake_case name for logs."""

    name: str
    value: float
    condition: str


PENALTY_TABLE: tuple[PenaltyRule, ...] = (
    PenaltyRule("missing_answer", 0.5, "no <answer> or no </answer>"),
    PenaltyRule("unbalanced_answer", 0.2, "unequal numbers of <answer> and </answer>"),
    PenaltyRule("missing_think", 0.15, "no <think> or no </think>"),
    PenaltyRule("unbalanced_think", 0.1, "unequal numbers of <think> and </think>"),
    PenaltyRule("no_search", 0.1, "no <search> ... </search> at all"),
    PenaltyRule("no_extractable_answer", 0.2, "no answer can be extracted"),
)
"""method.md, "The reward", fmt penalty table, in the table's order."""

PENALTY_NAMES: tuple[str, ...] = tuple(rule.name for rule in PENALTY_TABLE)


def format_penalties(response: str, tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> dict[str, float]:
    """The penalties of :data:`PENALTY_TABLE` that fire on ``response``, name -> value.

    method.md, "The reward", fmt penalty table.  Penalties accumulate.  Tag
    counts cover model-written text only.  ``no_search`` fires when there is
    no closed call of any of ``tools`` (the search tool by default);
    ``no_extractable_answer`` when :func:`final_answer` is None or blank.
    """
    a_open, a_close = count_tags(response, ANSWER, tools)
    t_open, t_close = count_tags(response, THINK, tools)
    call_tags = {t.call_tag for t in tools}
    has_call = any(s.kind in call_tags and s.closed for s in parse(response, tools))
    answer = final_answer(response, tools)
    fired = {
        "missing_answer": a_open == 0 or a_close == 0,
        "unbalanced_answer": a_open != a_close,
        "missing_think": t_open == 0 or t_close == 0,
        "unbalanced_think": t_open != t_close,
        "no_search": not has_call,
        "no_extractable_answer": answer is None or not answer.strip(),
    }
    return {rule.name: rule.value for rule in PENALTY_TABLE if fired[rule.name]}


@dataclass(frozen=True)
class RewardBreakdown:
    """Everything the reward computed for one response (method.md, "The reward").

    ``format`` is fmt; ``penalties`` maps each fired penalty's name to its value.
    """

    score: float
    acc: float
    format: float
    em: float
    subem: float
    f1: float
    answer: str | None
    penalties: dict[str, float] = field(default_factory=dict)
    call_bonus: float = 0.0  # what `reward.call_bonus` added (before the clip)

    def to_dict(self) -> dict[str, object]:
        bonus = {"call_bonus": self.call_bonus} if self.call_bonus else {}
        return {
            "score": self.score,
            "acc": self.acc,
            "format": self.format,
            "em": self.em,
            "subem": self.subem,
            "f1": self.f1,
            "answer": self.answer,
            "penalties": dict(self.penalties),
            **bonus,
        }


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, x))


def score(
    response: str,
    golden_answers: str | Iterable[str],
    *,
    acc_weight: float = 0.8,
    format_weight: float = 0.2,
    tools: Sequence[ToolSpec] = DEFAULT_TOOLS,
    answer_match: AnswerMatch = "exact",
    call_bonus: float = 0.0,
    working_calls: int = 0,
) -> RewardBreakdown:
    """Score one response: ``clip(acc_weight * acc + format_weight * fmt, 0, 1)``.

    method.md, "The reward (computed on the response only)".  Pass the response
    exactly as the model's turn reads, environment blocks included, and with any
    pre-filled assistant prefix (e.g. ``<think>``) put back in front; never the
    prompt.  acc = 1 on exact match or the multi-answer rule, else 0; with
    ``answer_match="numeric"`` acc = EM = :func:`numeric_match`, SubEM and F1 their
    numeric forms (:func:`numeric_substring_match`, :func:`numeric_token_f1`).

    ``call_bonus`` (the studio's option, off by default; run config ``reward.call_bonus``)
    is added inside the clip when ``working_calls`` (tool calls whose result came back
    without an error) is at least one; the run config keeps it below ``acc_weight -
    format_weight`` so that a right answer always beats a wrong one.
    """
    for name, w in (("acc_weight", acc_weight), ("format_weight", format_weight),
                    ("call_bonus", call_bonus)):
        if not isinstance(w, (int, float)) or not math.isfinite(w):
            raise ValueError(f"{name} must be a finite number, got {w!r}")
    golds = (
        [golden_answers] if isinstance(golden_answers, str) else [str(g) for g in golden_answers]
    )
    answer = final_answer(response, tools)
    penalties = format_penalties(response, tools)
    fmt = round(_clip01(1.0 - sum(penalties.values())), 12)
    acc = accuracy(answer, golds, answer_match)
    numeric = answer_match == "numeric"
    bonus = call_bonus if working_calls > 0 else 0.0
    return RewardBreakdown(
        score=round(_clip01(acc_weight * acc + format_weight * fmt + bonus), 12),
        acc=acc,
        format=fmt,
        em=acc if numeric else exact_match(answer, golds),
        subem=(numeric_substring_match if numeric else substring_match)(answer, golds),
        f1=(numeric_token_f1 if numeric else token_f1)(answer, golds),
        answer=answer,
        penalties=penalties,
        call_bonus=bonus,
    )


def overlong_penalty(length: int, max_length: int, buffer: int, penalty: float) -> float:
    """DAPO's soft overlong punishment, added to a response's reward (0 or negative).

    As veRL's DAPO reward manager: with ``expected = max_length - buffer``, the
    reward gains ``min(-(length - expected) / buffer * penalty, 0)``, so nothing up
    to ``expected`` tokens, then a linear fall to ``-penalty`` at ``max_length``.
    ``length`` is the whole response, the tool's tokens included, because the
    response budget (``grpo.max_response_tokens``) counts them too and veRL counts
    the response's attention mask, which covers them. ``buffer`` 0: off.
    """
    if buffer <= 0:
        return 0.0
    if buffer > max_length:
        raise ValueError(f"overlong buffer {buffer} exceeds the length limit {max_length}")
    return min(-(length - (max_length - buffer)) / buffer * penalty, 0.0)
