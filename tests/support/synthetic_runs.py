"""Runs written straight into the database, for UI tests and measurements that need many
steps or a long rollout without training them (the trainer's tests cover real writing)."""

from __future__ import annotations

import math

from studio.method.tags import parse
from studio.services import runs
from studio.services.access import Actor
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Rollout, Run, RunEvent, RunMetric, RunState, utcnow
from tests.support.actors import admin
from tests.support.tiny_model import build_tokenizer

PENALTIES = ("missing_answer", "missing_think", "no_search")


def finished_run(settings: Settings, config: dict, steps: int, stages=(3, 2, 0),
                 owner: Actor | None = None) -> int:
    """A succeeded run of `steps` metric rows (smooth made-up curves), its stage changes and one
    warning, stored in one transaction, the owner's (default: the admin's); returns its id."""
    grpo = {**config.get("grpo", {}), "steps": steps}
    run_id = runs.create_run(settings, owner or admin(settings), {**config, "grpo": grpo},
                             start=False)["id"]
    per_stage = -(-steps // len(stages))
    with session_scope(settings.sqlalchemy_url) as session:
        for step in range(steps):
            stage = step // per_stage
            progress = step / max(steps - 1, 1)
            reward = 0.2 + 0.6 * progress + 0.05 * math.sin(step / 7)
            values = {"reward_mean": reward, "reward_std": 0.1, "reward_min": 0.0,
                      "reward_max": 1.0, "acc": reward * 0.8, "format": 0.5 + 0.5 * progress,
                      "kl": 0.002 * progress, "response_length": 180 + 40 * math.cos(step / 20),
                      "search_calls": 1.5 - 0.5 * progress, "masked_fraction": 0.4,
                      "stage": stage, "exemplars": stages[stage]}
            values.update({f"penalty_{name}": 0.5 * (1 - progress) for name in PENALTIES})
            session.add(RunMetric(run_id=run_id, step=step, stage=stage,
                                  exemplars=stages[stage], values=values))
        for stage, count in enumerate(stages):
            session.add(RunEvent(run_id=run_id, step=stage * per_stage, kind="stage_change",
                                 message=f"stage {stage + 1}: {count} exemplars",
                                 data={"stage": stage, "to": count}))
        session.add(RunEvent(run_id=run_id, step=min(per_stage + 3, steps - 1), kind="warning",
                             message="search calls per rollout fell after the last stage change",
                             data={}))
        run = session.get(Run, run_id)
        run.state, run.current_step = RunState.succeeded, steps
        run.started_at = run.finished_at = utcnow()
        session.add(run)
    return run_id


def long_rollout_segments(min_tokens: int = 2000) -> list[dict]:
    """Think / search / information / answer turns until the response holds `min_tokens`
    tokens (counted with the tiny model's tokenizer), in the trainer's stored form."""
    tokenizer = build_tokenizer()

    def segment(source: str, text: str) -> dict:
        """The environment's text is one information part; the prompt's prefix counts no
        response token (as the trainer stores them)."""
        parts = [{"kind": "information", "text": text}] if source == "env" \
            else [{"kind": p.kind, "text": p.text} for p in parse(text)]
        tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        return {"source": source, "text": text, "parts": parts,
                "tokens": 0 if source == "prompt" else tokens}

    segments, total, turn = [segment("prompt", "<think>")], 0, 0
    while total < min_tokens:
        turn += 1
        model = (f"I need the harbour town of island {turn}.</think>\n"
                 f"<search>harbour town island {turn}</search>" if turn > 1 else
                 f"First find the island.</think>\n<search>island {turn}</search>")
        env = "\n\n<information>" + "".join(
            f"Doc {d}(Title: Island {turn}.{d}) The island {turn}.{d} has a harbour town "
            f"where ferries stop twice a day and fishermen sell their catch.\n"
            for d in (1, 2, 3)) + "</information>\n\n"
        for piece in (segment("model", model), segment("env", env)):
            segments.append(piece)
            total += piece["tokens"]
        segments.append(segment("model", "<think>"))
        total += segments[-1]["tokens"]
    segments.append(segment("model", "Found it.</think>\n<answer>Port Ondrell</answer>"))
    return segments


def add_rollout(settings: Settings, run_id: int, step: int, segments: list[dict],
                reward: float = 1.0, question: str = "Where do the ferries stop?",
                answer: str = "Port Ondrell", token_arrays: bytes | None = None) -> int:
    """A rollout row as the trainer stores it; `answer` is the gold and the model's answer;
    `token_arrays` its packed per-token figures (`studio.method.token_arrays`)."""
    with session_scope(settings.sqlalchemy_url) as session:
        row = Rollout(run_id=run_id, step=step, group_index=0, sample_index=0, stage=0,
                      exemplars=3, question=question,
                      golden_answers=[answer], segments=segments, reward=reward,
                      breakdown={"score": reward, "acc": 1.0, "format": 1.0, "em": 1.0,
                                 "subem": 1.0, "f1": 1.0, "answer": answer,
                                 "penalties": {}},
                      advantage=0.5, token_arrays=token_arrays)
        session.add(row)
        session.flush()
        return row.id
