"""A rollout as both engines hand it over, and what the method reads from a batch of them.

The native engine builds these while it generates; the veRL ingest rebuilds them from
veRL's dumps. Either way the metrics, the stored segments and the loss mask come from
the same definitions here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .reward import PENALTY_NAMES, RewardBreakdown
from .tags import ANSWER, DEFAULT_TOOLS, THINK, ToolSpec, answers, parse, tool_calls
from .tools import all_specs


@dataclass
class Segment:
    """A stretch of the response written by one side; an environment segment says which
    tool's result it is (None: the corrective message) and whether that run failed."""

    source: str  # "model" | "env"
    token_ids: list[int]
    text: str  # model: decode(token_ids); env: the exact text that was encoded
    tool: str | None = None
    failed: bool = False


@dataclass
class Rollout:
    """One response: its segments in order, why it stopped, and how many tool calls ran.

    ``stop_reason`` (`studio.method.protocol.STOP_REASONS`):

    * ``"answer"``: the model closed an answer (``</answer>``);
    * ``"eos"``: the model ended its last allowed turn with EOS;
    * ``"length"``: the response budget (``max_response_tokens``) ran out, or
      the last allowed turn hit ``max_turn_tokens``;
    * ``"max_turns"``: the model called a tool again in its last allowed
      turn (the call was not executed).
    """

    prompt_ids: list[int]
    segments: list[Segment]  # the response only, in order
    stop_reason: str
    num_tool_calls: int

    @property
    def response_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def response_mask(self) -> list[int]:
        """1 for each token the model sampled, 0 for each token the environment inserted."""
        return [int(s.source == "model") for s in self.segments for _ in s.token_ids]

    @property
    def response_text(self) -> str:
        return "".join(s.text for s in self.segments)


def _mean(values: list[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def tool_use(answers: list[str | None], tool_calls: list[int]) -> dict[str, float]:
    """How responses used the tool and ended, the figures training steps and evaluations
    share: `search_calls` (per response), `valid_search_rate` (share with at least one
    executed call), `answer_rate` (share with a closed, non-empty answer)."""
    return {"search_calls": _mean(tool_calls),
            "valid_search_rate": _mean([1.0 if n > 0 else 0.0 for n in tool_calls]),
            "answer_rate": _mean([1.0 if a else 0.0 for a in answers])}


def answer_metrics(records: list[dict]) -> dict[str, float]:
    """What an evaluation reports over its records (a whole set or a part of one): mean EM,
    SubEM, F1, accuracy and format, the tool use (`tool_use`) and the question count."""
    metrics = {key: _mean([r[key] for r in records])
               for key in ("em", "subem", "f1", "acc", "format")}
    return {**metrics, **tool_use([r["prediction"] for r in records],
                                  [r["search_calls"] for r in records]),
            "questions": len(records)}


def rollout_metrics(rollouts: list[Rollout], rewards: list[RewardBreakdown]) -> dict[str, float]:
    """The method's per-step figures: reward, its parts, each penalty's rate, tool use."""
    scores = [r.score for r in rewards]
    searched = [r.num_tool_calls for r in rollouts]
    model_tokens = [sum(r.response_mask) for r in rollouts]
    response_tokens = [len(r.response_ids) for r in rollouts]
    metrics = {
        "reward_mean": _mean(scores), "reward_std": statistics.pstdev(scores) if scores else 0.0,
        "reward_min": min(scores, default=0.0), "reward_max": max(scores, default=0.0),
        "acc": _mean([r.acc for r in rewards]), "format": _mean([r.format for r in rewards]),
        "em": _mean([r.em for r in rewards]), "subem": _mean([r.subem for r in rewards]),
        "f1": _mean([r.f1 for r in rewards]),
        **tool_use([r.answer for r in rewards], searched),
        "response_length": _mean(response_tokens),
        "model_tokens": _mean(model_tokens),
        "masked_fraction": 1.0 - sum(model_tokens) / max(sum(response_tokens), 1),
    }
    for name in PENALTY_NAMES:
        metrics[f"penalty_{name}"] = _mean([1.0 if name in r.penalties else 0.0 for r in rewards])
    return metrics


PART_FIGURES = ("acc", "reward_mean", "valid_search_rate", "answer_rate")
"""The figures a step logs of a part of its rollouts apart (`zero_shot_acc`, `guided_acc`, ...)."""


def part_metrics(prefix: str, rollouts: list[Rollout],
                 rewards: list[RewardBreakdown]) -> dict[str, float]:
    """`PART_FIGURES` of some of a step's rollouts, named `<prefix>_<figure>`; empty for none."""
    if not rollouts:
        return {}
    figures = rollout_metrics(rollouts, rewards)
    return {f"{prefix}_{key}": figures[key] for key in PART_FIGURES}


def guidance_metrics(rollouts: list[Rollout], rewards: list[RewardBreakdown],
                     hinted: Sequence[bool]) -> dict[str, float]:
    """A mixed-guidance step's figures (both engines): the share of rollouts sampled with
    the exemplars as a hint, and the unhinted (`zero_shot_*`) and hinted (`guided_*`)
    rollouts' figures apart: the habit forming without the exemplars before they go."""
    out = {"guided_share": _mean([1.0 if h else 0.0 for h in hinted])}
    for prefix, wanted in (("zero_shot", False), ("guided", True)):
        picked = [i for i, h in enumerate(hinted) if bool(h) == wanted]
        out.update(part_metrics(prefix, [rollouts[i] for i in picked],
                                [rewards[i] for i in picked]))
    return out

def tool_counts(rollout: Rollout) -> tuple[dict[str, int], int]:
    """Per tool the calls that ran, and how many of those failed (tool errors)."""
    calls: dict[str, int] = {}
    failed = 0
    for seg in rollout.segments:
        if seg.tool is not None:
            calls[seg.tool] = calls.get(seg.tool, 0) + 1
            failed += seg.failed
    return calls, failed


def working_calls(rollout: Rollout) -> int:
    """Tool calls whose result came back without an error (what `reward.call_bonus` needs)."""
    calls, failed = tool_counts(rollout)
    return sum(calls.values()) - failed


def rollout_segments(rollout: Rollout, prefix: str,
                     tools: Sequence[ToolSpec] = DEFAULT_TOOLS) -> list[dict]:
    """The stored form: per source segment its exact token count, and the tag parts to style
    (the run's `tools` parsed; an environment segment is one part, its tool's result tag, or
    the first tool's for the corrective message)."""
    result_tag = {t.name: t.result_tag for t in tools}
    segments = []
    if prefix:
        segments.append({"source": "prompt", "text": prefix, "tokens": 0,
                         "parts": [{"kind": p.kind, "text": p.text}
                                   for p in parse(prefix, tools)]})
    for seg in rollout.segments:
        kind_parts = [{"kind": p.kind, "text": p.text} for p in parse(seg.text, tools)] \
            if seg.source == "model" else \
            [{"kind": result_tag.get(seg.tool, tools[0].result_tag), "text": seg.text}]
        segments.append({"source": seg.source, "text": seg.text, "tokens": len(seg.token_ids),
                         "parts": kind_parts})
    return segments


def stored_tools(segments: list[dict]) -> tuple[ToolSpec, ...]:
    """The tools of the run a stored rollout comes from, as far as its tag parts show them
    (`rollout_segments` parsed them with the run's tools): every registered tool whose call or
    result tag is among them, else search."""
    kinds = {part["kind"] for segment in segments for part in segment.get("parts") or []}
    return tuple(spec for spec in all_specs()
                 if {spec.call_tag, spec.result_tag} & kinds) or DEFAULT_TOOLS


def reward_turns(segments: list[dict]) -> list[dict]:
    """The stored rollout turn by turn, for the reward's breakdown per turn: per model turn
    (a model segment, read on from the assistant prefix for the first) its `tokens`,
    whether it thought (`think`), its closed tool `calls` (``(tool, input)`` pairs, of the
    run's tools: `stored_tools`), how many environment tokens came back after it
    (`returned`), its closed `answers` and whether it holds the answer the reward scored
    (`scored`: the last closed answer of the response)."""
    tools = stored_tools(segments)
    turns, prefix = [], ""
    for segment in segments:
        source, text = segment.get("source"), segment.get("text") or ""
        if source == "prompt":
            prefix = text
        elif source == "model":
            whole = prefix + text
            kinds = {part.kind for part in parse(whole, tools) if part.end > len(prefix)}
            turns.append({"turn": len(turns) + 1, "tokens": int(segment.get("tokens") or 0),
                          "think": THINK in kinds,
                          "calls": [(call.tool, call.query) for call in tool_calls(whole, tools)],
                          "answers": answers(whole, tools) if ANSWER in kinds else [],
                          "returned": 0, "scored": False})
            prefix = ""
        elif turns:
            turns[-1]["returned"] += int(segment.get("tokens") or 0)
    answered = [t for t in turns if t["answers"]]
    if answered:
        answered[-1]["scored"] = True
    return turns