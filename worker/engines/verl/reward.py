"""veRL's custom reward function: the studio's reward, `studio.method.reward.score`.

veRL loads it by `reward.custom_reward_function.path=pkg://worker.engines.verl.reward`
and calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=,
**reward_kwargs)` with the decoded response alone (information blocks
included). The pre-filled assistant prefix (e.g. `<think>`) is part of the
prompt there, so it is put back in front, as the native engine scores it.
veRL keeps the `score` as the reward and every other key as
`reward_extra_info` (`acc` also gives validation its `val-core/.../acc`).

DAPO's overlong penalty (`grpo.overlong_buffer`) is added here, the native engine's
`studio.method.reward.overlong_penalty`, rather than by veRL's DAPO reward manager:
the length is the response's token count, the tool's tokens included, which the agent
loop hands over as `extra_info["response_tokens"]` (veRL's reward loop merges each
rollout's `extra_fields` into its `extra_info`). The `score` is then the penalised
reward (what GRPO and `filter_groups` see) and `overlong_penalty` says how much.

`reward.call_bonus` is the native engine's too (`studio.method.reward.score`): the agent
loop counts the tool calls whose result came back without an error and hands the count
over as `extra_info["working_calls"]`; `call_bonus` then says what it added.

In a mixed-guidance run (`hint_slots` > 0: the most exemplars a stage shows) every
response also carries, from the agent loop's `guided` and `hint_exemplars`, `guided`
(1.0 when it was sampled with the exemplars as a hint) and `hint_exemplar_1` ..
`hint_exemplar_<hint_slots>` (the indices of the exemplars it saw, -1 past them): veRL
dumps every reward key beside the response, and the ingest files them as the native engine
does (`guided_share`, `zero_shot_*`, `guided_*`, the rollout's `hint_exemplars`). Numbers,
not a list, because veRL's validation averages every reward key.
"""

from __future__ import annotations

from collections.abc import Sequence

from studio.method.reward import PENALTY_NAMES, AnswerMatch, score
from studio.method.reward import overlong_penalty as length_penalty
from studio.method.tools import DEFAULT_TOOL_NAMES, named_specs


def golden_answers(ground_truth) -> list[str]:
    """The data set's `{"target": [...], "question": ...}`; a bare list or string also works."""
    if isinstance(ground_truth, dict):
        ground_truth = ground_truth.get("target", [])
    if isinstance(ground_truth, str):
        return [ground_truth]
    return [str(a) for a in ground_truth]


def compute_score(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None,
                  acc_weight: float = 0.8, format_weight: float = 0.2, overlong_buffer: int = 0,
                  overlong_penalty: float = 1.0, max_response_tokens: int = 0,
                  answer_match: AnswerMatch = "exact", tools: Sequence[str] = DEFAULT_TOOL_NAMES,
                  call_bonus: float = 0.0, hint_slots: int = 0, **_: object) -> dict:
    """`score`, `acc`, `format`, `em`, `subem`, `f1` and one `penalty_<name>` (0 or 1) each;
    with `call_bonus` also `call_bonus` (what it added, inside `score`), with
    `overlong_buffer` also `overlong_penalty`, already added to `score`. `tools`: the
    run's (their result blocks are the environment's, their calls count as tool calls)."""
    extra_info = extra_info or {}
    prefix = extra_info.get("assistant_prefix") or ""
    if call_bonus and "working_calls" not in extra_info:
        raise ValueError("call_bonus needs the count of tool calls that worked: the studio's "
                         "agent loop passes extra_info['working_calls']")
    result = score(prefix + solution_str, golden_answers(ground_truth),
                   acc_weight=acc_weight, format_weight=format_weight, answer_match=answer_match,
                   tools=named_specs(list(tools)), call_bonus=call_bonus,
                   working_calls=int(extra_info.get("working_calls", 0)))
    out = {"score": result.score, "acc": result.acc, "format": result.format, "em": result.em,
           "subem": result.subem, "f1": result.f1}
    out.update({f"penalty_{name}": float(name in result.penalties) for name in PENALTY_NAMES})
    if call_bonus:  # a key every response of the run has, as veRL's batches need
        out["call_bonus"] = float(result.call_bonus)
    if hint_slots:
        out.update(hint_fields(extra_info, hint_slots))
    if overlong_buffer:
        if "response_tokens" not in extra_info:
            raise ValueError("overlong_buffer needs the response's token count: the studio's "
                             "agent loop passes extra_info['response_tokens']")
        penalty = length_penalty(int(extra_info["response_tokens"]), max_response_tokens,
                                 overlong_buffer, overlong_penalty)
        out.update(score=result.score + penalty, overlong_penalty=penalty)
    return out


HINT_KEY = "hint_exemplar_"


def hint_fields(extra_info: dict, slots: int) -> dict[str, float]:
    """`guided` and `hint_exemplar_1..slots` of a mixed-guidance response (see above)."""
    shown = [int(i) for i in extra_info.get("hint_exemplars") or []][:slots]
    padded = shown + [-1] * (slots - len(shown))
    return {"guided": float(bool(extra_info.get("guided"))),
            **{f"{HINT_KEY}{n}": float(i) for n, i in enumerate(padded, 1)}}


def dumped_hint(line: dict) -> tuple[int, ...] | None:
    """The exemplars a dumped response was sampled with as a hint (`hint_fields`), None
    when it saw none or the run is not guided."""
    if not line.get("guided"):
        return None
    slots = sorted((int(k[len(HINT_KEY):]), v) for k, v in line.items()
                   if k.startswith(HINT_KEY))
    return tuple(int(v) for _, v in slots if v >= 0)
