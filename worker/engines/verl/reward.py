"""veRL's custom reward function: the studio's reward, `studio.method.reward.score`.

veRL loads it by `reward.custom_reward_function.path=pkg://worker.engines.verl.reward`
and calls `compute_score(data_source=, solution_str=, ground_truth=, extra_info=,
**reward_kwargs)` with the decoded response alone (information blocks
included). The pre-filled assistant prefix (e.g. `<think>`) is part of the
prompt there, so it is put back in front, as the native engine scores it.
veRL keeps the `score` as the reward and every other key as
`reward_extra_info` (`acc` also gives validation its `val-core/.../acc`).
"""

from __future__ import annotations

from studio.method.reward import PENALTY_NAMES, score


def golden_answers(ground_truth) -> list[str]:
    """The data set's `{"target": [...], "question": ...}`; a bare list or string also works."""
    if isinstance(ground_truth, dict):
        ground_truth = ground_truth.get("target", [])
    if isinstance(ground_truth, str):
        return [ground_truth]
    return [str(a) for a in ground_truth]


def compute_score(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None,
                  acc_weight: float = 0.8, format_weight: float = 0.2, **_: object) -> dict:
    """`score`, `acc`, `format`, `em`, `subem`, `f1` and one `penalty_<name>` (0 or 1) each."""
    prefix = (extra_info or {}).get("assistant_prefix") or ""
    result = score(prefix + solution_str, golden_answers(ground_truth),
                   acc_weight=acc_weight, format_weight=format_weight)
    out = {"score": result.score, "acc": result.acc, "format": result.format, "em": result.em,
           "subem": result.subem, "f1": result.f1}
    out.update({f"penalty_{name}": float(name in result.penalties) for name in PENALTY_NAMES})
    return out
