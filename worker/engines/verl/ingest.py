"""veRL's file logger and rollout dumps -> the studio's metrics, events and rollouts rows.

veRL writes, per training step N (from 1), one line `{"step": N, "data": {...}}`
to the file logger (`VERL_FILE_LOGGER_PATH`) at the end of the step, and the
step's rollouts to `<rollout_data_dir>/N.jsonl` (one line per response:
`input`, `output`, `gts`, `score`, `step`, `uid` = `<prompt uid>_<sample>_<k>`),
the latter from a background thread. Step N becomes the studio's step N - 1,
written in one transaction the way the native engine writes its steps:

* metrics: the method's figures (reward, acc, format, EM/SubEM/F1, penalty
  rates, search calls, masked fraction, ...) computed from the dumped
  responses by `studio.method.rollouts.rollout_metrics` (the native engine's), then veRL's
  training figures under the native names of `METRIC_NAMES`; validation
  figures `val-core/<set>/<var>/mean@n` become `val_<set>_<var>`;
* rollouts: `engine.log_groups_per_step` groups, their segments rebuilt from
  the tag protocol (an `<information>` block with the blank lines around it
  is the environment's; the rest is the model's), token counts by the run's
  tokenizer, the reward breakdown by `studio.method.reward.score`, the
  advantage by `studio.method.grpo.group_advantages` (veRL's GRPO rule);
* metrics also: `zero_spread_groups`, the share of groups whose rewards are all equal
  (`studio.method.grpo.zero_spread_share`), as native; in a mixed-guidance run
  `guided_share`, `zero_shot_*` and `guided_*` (`studio.method.rollouts.guidance_metrics`),
  from the `guided` and `hint_exemplar_*` keys the reward function dumps beside each
  response, which also give each rollout row its `hint_exemplars`;
* events: stage changes, the premature-termination warning and the collapse sentinel's
  warnings, as native (its `pause` is native only: the run config refuses it here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlmodel import select

from studio.method import tags
from studio.method.curriculum import Curriculum, PrematureWatch, premature_message
from studio.method.grpo import group_advantages, zero_spread_share
from studio.method.reward import score
from studio.method.rollouts import (
    Rollout,
    Segment,
    guidance_metrics,
    rollout_metrics,
    rollout_segments,
)
from studio.method.sentinel import Sentinel, alarm_message
from studio.method.tools import named_specs, using_words
from studio.run_config import RunConfig
from studio.services.run_recorder import RunRecorder
from studio.settings import Settings
from studio.storage.db import session_scope
from studio.storage.tables import Rollout as RolloutRow
from studio.storage.tables import RunEvent, RunMetric
from worker.engines.verl.config import RunFiles
from worker.engines.verl.reward import dumped_hint, golden_answers

METRIC_NAMES = {
    "critic/score/mean": "reward_mean",
    "critic/score/max": "reward_max",
    "critic/score/min": "reward_min",
    "critic/advantages/mean": "advantage_mean",
    "response_length/mean": "response_length",
    "actor/pg_loss": "pg_loss",
    "actor/kl_loss": "kl",
    "actor/entropy": "entropy",
    "actor/pg_clipfrac": "clip_frac",
    "actor/ppo_kl": "approx_kl",
    "actor/grad_norm": "grad_norm",
    "actor/lr": "lr",
    "timing_s/gen": "time_rollout",
    "timing_s/ref": "time_reference",
    "timing_s/update_actor": "time_update",
    "timing_s/step": "time_step",
}
"""veRL's metric name -> the native engine's (docs/engine.md, "What a step writes")."""

_VALIDATION = re.compile(r"val-core/(?P<source>.+)/(?P<var>[^/]+)/mean@\d+$")
_BLANK = "\n\n"


def map_metrics(data: dict) -> dict[str, float]:
    """veRL's step metrics under the native names (unmapped names are left out)."""
    out = {}
    for name, value in data.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if name in METRIC_NAMES:
            out[METRIC_NAMES[name]] = float(value)
        elif match := _VALIDATION.match(name):
            out[f"val_{match['source']}_{match['var']}"] = float(value)
    return out


def protocol_segments(text: str, tokenizer,
                      tools: Sequence[tags.ToolSpec] = tags.DEFAULT_TOOLS) -> list[Segment]:
    """A decoded response split into model and environment segments by the tag protocol
    of the run's `tools`.

    A result block (`<information>`, `<output>`) is the environment's together with the
    blank lines the environment writes around it (`tags.result_block`);
    token ids are the tokenizer's encoding of each segment's text.
    """
    spans: list[tuple[str, str]] = []
    for seg in tags.parse(text, tools):
        if seg.source == "environment":
            before = spans[-1][1] if spans and spans[-1][0] == "model" else ""
            lead = _BLANK if before.endswith(_BLANK) else ""
            if lead:
                spans[-1] = ("model", before[: -len(lead)])
            spans.append(("env", lead + seg.text))
        elif spans and spans[-1][0] == "env" and not spans[-1][1].endswith(_BLANK) \
                and seg.text.startswith(_BLANK):
            spans[-1] = ("env", spans[-1][1] + _BLANK)
            spans.append(("model", seg.text[len(_BLANK):]))
        elif spans and spans[-1][0] == "model":
            spans[-1] = ("model", spans[-1][1] + seg.text)
        else:
            spans.append(("model", seg.text))
    return [Segment(source, list(tokenizer(t, add_special_tokens=False)["input_ids"]), t)
            for source, t in spans if t]


def rebuild_rollout(output: str, tokenizer,
                    tools: Sequence[tags.ToolSpec] = tags.DEFAULT_TOOLS) -> Rollout:
    """A `Rollout` from a dumped response (tool calls: env blocks other than corrections)."""
    segments = protocol_segments(output, tokenizer, tools)
    corrective = tags.corrective_message(tools[0])
    calls = sum(1 for s in segments if s.source == "env" and s.text != corrective)
    stop = "answer" if tags.final_answer(output, tools) is not None else "length"
    return Rollout(prompt_ids=[], segments=segments, stop_reason=stop, num_tool_calls=calls)


@dataclass(frozen=True)
class DumpedResponse:
    group: str
    sample: int
    question: str
    golden_answers: list[str]
    output: str
    score: float
    hint: tuple[int, ...] | None = None  # the exemplars it was sampled with (mixed guidance)
    call_worked: bool = False  # the reward's `call_bonus` key was paid (`reward.call_bonus`)

    @classmethod
    def from_line(cls, line: dict) -> DumpedResponse:
        uid, sample, _ = (str(line["uid"]).rsplit("_", 2) + ["0", "0"])[:3]
        truth = line.get("gts") or {}
        return cls(group=uid, sample=int(sample) if sample.isdigit() else 0,
                   question=str(truth.get("question", "")) if isinstance(truth, dict) else "",
                   golden_answers=golden_answers(truth), output=str(line["output"]),
                   score=float(line["score"]), hint=dumped_hint(line),
                   call_worked=float(line.get("call_bonus") or 0) > 0)


def read_dump(path: Path) -> list[DumpedResponse] | None:
    """A dump's complete lines (None when the file is not there yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    lines = text.split("\n")[:-1]  # a last line without its newline is still being written
    return [DumpedResponse.from_line(json.loads(line)) for line in lines if line.strip()]


@dataclass
class StepLog:
    """The file logger's complete lines, read incrementally."""

    path: Path
    offset: int = 0
    steps: dict[int, dict] = field(default_factory=dict)

    def read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        end = chunk.rfind(b"\n") + 1
        for line in chunk[:end].splitlines():
            if line.strip():
                record = json.loads(line)
                self.steps[int(record["step"])] = record["data"]
        self.offset += end


class Ingestor:
    """Files each finished veRL step of one `main_ppo` process into the studio's tables.

    `metrics_log` is that process's file logger path; with `attempt`, every
    write first checks the run is still running as that attempt (RunStopped).
    """

    def __init__(self, settings: Settings, run_id: int, config: RunConfig, files: RunFiles,
                 tokenizer, metrics_log: Path, attempt: int | None = None):
        self.settings, self.run_id, self.config, self.files = settings, run_id, config, files
        self.tools = named_specs(config.tools)
        self.tokenizer, self.attempt = tokenizer, attempt
        self.recorder = RunRecorder(settings, run_id, attempt)
        self.log = StepLog(metrics_log)
        self.curriculum: Curriculum = config.curriculum.build()
        self.expected = config.grpo.batch_size * config.grpo.group_size
        self.prefix = config.prompt.assistant_prefix or ""
        self.watch = PrematureWatch(config.engine.premature_drop)
        self.using = using_words(config.tools)  # the warnings name the run's tools
        self.sentinel = Sentinel(config.sentinel.rules(),
                                 config.grpo.limits().max_response_tokens)
        self.next_step = self._replay_stored_steps()

    def _replay_stored_steps(self) -> int:
        """The watches' history from the steps already stored (a resumed run); the next
        step."""
        with session_scope(self.settings.sqlalchemy_url) as session:
            rows = session.exec(select(RunMetric).where(RunMetric.run_id == self.run_id)
                                .order_by(RunMetric.step)).all()
            history = [(r.values or {}, r.step) for r in rows]
        for values, step in history:
            if step > 0 and step in self.curriculum.boundaries():
                self.watch.stage_changed()
            self.watch.observe(values.get("search_calls") or 0.0)
            self.sentinel.observe(values)
        return history[-1][1] + 1 if history else 0

    def poll(self, finished: bool = False) -> int:
        """Ingest every step that is complete; `finished`: the process has exited. Returns count."""
        self.log.read()
        written = 0
        while (self.next_step + 1) in self.log.steps:
            verl_step = self.next_step + 1
            dump = read_dump(self.files.rollouts / f"{verl_step}.jsonl")
            complete = dump is not None and len(dump) >= self.expected
            if not (complete or finished or (verl_step + 1) in self.log.steps):
                break
            self._write(self.next_step, self.log.steps[verl_step], dump or [])
            self.next_step += 1
            written += 1
        return written

    def _events(self, step: int, metrics: dict) -> list[RunEvent]:
        events = []
        stage = self.curriculum.stage_at(step)
        if step == 0 or step in self.curriculum.boundaries():
            before = self.curriculum.stages[stage - 1].exemplars if stage else None
            after = self.curriculum.stages[stage].exemplars
            message = (f"stage {stage + 1}: {before} -> {after} exemplars" if stage
                       else f"stage 1: {after} exemplars")
            events.append(RunEvent(run_id=self.run_id, step=step, kind="stage_change",
                                   message=message,
                                   data={"stage": stage, "from": before, "to": after}))
            if stage:
                self.watch.stage_changed()
        warning = self.watch.observe(metrics.get("search_calls", 0.0))
        if warning:
            events.append(RunEvent(run_id=self.run_id, step=step, kind="warning", data=warning,
                                   message=premature_message(warning, self.using)))
        events += [RunEvent(run_id=self.run_id, step=step, kind="warning", data=alarm.to_dict(),
                            message=alarm_message(alarm, self.using))
                   for alarm in self.sentinel.observe(metrics)]
        return events

    def _write(self, step: int, data: dict, dump: list[DumpedResponse]) -> None:
        rollouts = [rebuild_rollout(r.output, self.tokenizer, self.tools) for r in dump]
        rewards = [score(self.prefix + r.output, r.golden_answers,
                         acc_weight=self.config.reward.acc_weight,
                         format_weight=self.config.reward.format_weight,
                         answer_match=self.config.reward.answer_match, tools=self.tools,
                         call_bonus=self.config.reward.call_bonus,
                         working_calls=int(r.call_worked))
                   for r in dump]
        metrics = rollout_metrics(rollouts, rewards) if dump else {}
        if dump:
            metrics["zero_spread_groups"] = zero_spread_share([r.score for r in rewards],
                                                              [r.group for r in dump])
        if dump and self.config.guidance.mode == "mixed":
            metrics.update(guidance_metrics(rollouts, rewards, [r.hint is not None for r in dump]))
        metrics.update(map_metrics(data))
        k = self.curriculum.exemplars_at(step)
        metrics.update({"stage": self.curriculum.stage_at(step), "exemplars": k})
        events = self._events(step, metrics)
        self.recorder.write_step(step, metrics,
                                 self._rollout_rows(step, k, dump, rollouts, rewards), events)

    def _rollout_rows(self, step, k, dump, rollouts, rewards) -> list[RolloutRow]:
        # veRL's own reward (the overlong penalty included, any KL in the reward not), with
        # the run's GRPO rule
        advantages = group_advantages([r.score for r in dump], [r.group for r in dump],
                                      norm_by_std=self.config.grpo.norm_adv_by_std)
        groups = list(dict.fromkeys(r.group for r in dump))
        kept = set(groups[: self.config.engine.log_groups_per_step])
        return [RolloutRow(
            run_id=self.run_id, step=step, group_index=groups.index(r.group),
            sample_index=r.sample, stage=self.curriculum.stage_at(step), exemplars=k,
            question=r.question, golden_answers=r.golden_answers,
            hint_exemplars=None if r.hint is None else list(r.hint),
            segments=rollout_segments(rollout, self.prefix, self.tools), reward=reward.score,
            breakdown=reward.to_dict(), advantage=float(advantage))
            for r, rollout, reward, advantage in zip(dump, rollouts, rewards, advantages,
                                                     strict=True)
            if r.group in kept]

