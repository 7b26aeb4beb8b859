"""Exemplar curricula: how many exemplars each training step shows (method.md, "The curriculum").

A curriculum is a list of stages, each an exemplar count and a length in
steps; steps count from 0 and the last stage holds after the schedule ends.
The studio runs the whole curriculum in one training run.

Adaptive mode (optional): a stage ends once a metric, averaged over its last
``window`` steps, crosses a threshold, but never before ``min_steps`` nor after
``max_steps`` steps in the stage; the stages' own ``steps`` are then only the
plan shown before training.

Soft mode (optional, off by default; the studio's own, not the paper's): every step also
shows some of its questions no exemplar at all (each question with a seeded draw, its G
samples alike), with a probability that rises linearly from ``soft.start`` at the first
step to 1 when the last stage (0 exemplars) begins. The other questions show the stage's
count. Zero-shot groups are in training from the start,
so a zero-shot success can be rewarded while the exemplars still carry the others, instead
of only after they are gone.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

PRESETS: dict[str, tuple[int, ...]] = {
    "3-2-0": (3, 2, 0),
    "3-0": (3, 0),
    "3-2-1-0": (3, 2, 1, 0),
    "0": (0,),
}
"""method.md, "The curriculum": 3 -> 2 -> 0 worked best; "0" is exemplar-free (Search-R1-like)."""

PRESET_NOTES: dict[str, str] = {
    "3-2-0": "the paper's best schedule: one exemplar removed, then the rest",
    "3-0": "every exemplar removed at once, which did worse than 3 -> 2 -> 0 in the paper",
    "3-2-1-0": "one exemplar removed at a time, \"clearly worse\" than 3 -> 2 -> 0 in the paper",
    "0": "the exemplar-free baseline (as Search-R1), to compare ICRL against: with no exemplar "
         "a small model may never write a search, so its reward can stay at 0 (the cold start)",
}
"""What each preset is, in the paper's terms (method.md, "The curriculum" and "Baseline")."""

ADAPTIVE_METRICS: tuple[str, ...] = ("format", "valid_search_rate", "search_calls", "acc",
                                     "reward_mean")
"""Per-step metrics (batch means) an adaptive rule may watch, named as the engine logs them."""

RENAMED_METRICS = {"score": "reward_mean"}
"""Names a stored rule may still use -> the metric's name now (one name per figure)."""

Direction = Literal["at_least", "at_most"]


class CurriculumError(ValueError):
    """An invalid curriculum; ``errors`` lists each problem as ``field.path: what is wrong``."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Stage:
    """``exemplars`` shown in every prompt for ``steps`` training steps."""

    exemplars: int
    steps: int


@dataclass(frozen=True)
class AdaptiveRule:
    """Advance when the mean of ``metric`` over the stage's last ``window`` steps
    is ``at_least`` (or ``at_most``) ``threshold``, within [min_steps, max_steps] per stage."""

    metric: str = "format"
    threshold: float = 0.9
    window: int = 10
    min_steps: int = 20
    max_steps: int = 200
    direction: Direction = "at_least"

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric", RENAMED_METRICS.get(self.metric, self.metric))

    @property
    def shortest_stage(self) -> int:
        """The fewest steps a stage can last: ``min_steps``, and a full ``window`` to average."""
        return max(self.min_steps, self.window)

    def errors(self, path: str = "adaptive") -> list[str]:
        errs: list[str] = []
        if self.metric not in ADAPTIVE_METRICS:
            errs.append(
                f"{path}.metric: unknown metric {self.metric!r}; use one of "
                f"{', '.join(ADAPTIVE_METRICS)}"
            )
        if not _is_num(self.threshold):
            errs.append(f"{path}.threshold: must be a finite number")
        if self.direction not in ("at_least", "at_most"):
            errs.append(f"{path}.direction: must be 'at_least' or 'at_most'")
        for name in ("window", "min_steps", "max_steps"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                errs.append(f"{path}.{name}: must be an integer > 0, got {value!r}")
        if not errs:
            if self.max_steps < self.min_steps:
                errs.append(f"{path}.max_steps: must be >= min_steps ({self.min_steps})")
            if self.window > self.max_steps:
                errs.append(
                    f"{path}.window: must be <= max_steps ({self.max_steps}), or the metric "
                    "can never decide"
                )
        return errs


def should_advance(rule: AdaptiveRule, values_in_stage: Sequence[float]) -> bool:
    """Whether the stage ends after these metric values (one per finished step of the stage).

    Implements the adaptive rule of this module's docstring: forced at
    ``max_steps``, never before ``min_steps`` or a full ``window``.
    """
    n = len(values_in_stage)
    if n >= rule.max_steps:
        return True
    if n < rule.shortest_stage:
        return False
    mean = math.fsum(values_in_stage[-rule.window :]) / rule.window
    return mean >= rule.threshold if rule.direction == "at_least" else mean <= rule.threshold


@dataclass(frozen=True)
class SoftMix:
    """Soft mode (module docstring): at step 0 a question is shown no exemplar with
    probability ``start``; it rises linearly to 1 at the first step of the last stage."""

    start: float = 0.25

    def errors(self, path: str = "soft") -> list[str]:
        if not _is_num(self.start) or not 0 <= self.start <= 1:
            return [f"{path}.start: must be a number from 0 to 1, got {self.start!r}"]
        return []


@dataclass(frozen=True)
class Curriculum:
    """Stages of exemplar counts (method.md, "The curriculum"); invalid ones cannot be built."""

    stages: tuple[Stage, ...]
    adaptive: AdaptiveRule | None = None
    soft: SoftMix | None = None
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        errs = self._structure_errors()
        if errs:
            raise CurriculumError(errs)
        starts, at = [], 0
        for s in self.stages:
            starts.append(at)
            at += s.steps
        object.__setattr__(self, "_starts", tuple(starts))

    def _structure_errors(self) -> list[str]:
        errs: list[str] = []
        if not self.stages:
            errs.append("stages: needs at least one stage")
        for i, s in enumerate(self.stages):
            if not isinstance(s, Stage):
                errs.append(f"stages[{i}]: must be a Stage")
                continue
            if not _is_int(s.exemplars) or s.exemplars < 0:
                errs.append(f"stages[{i}].exemplars: must be an integer >= 0, got {s.exemplars!r}")
            if not _is_int(s.steps) or s.steps <= 0:
                errs.append(f"stages[{i}].steps: must be an integer > 0, got {s.steps!r}")
        if self.adaptive is not None:
            if isinstance(self.adaptive, AdaptiveRule):
                errs.extend(self.adaptive.errors())
            else:
                errs.append("adaptive: must be an AdaptiveRule or null")
        if self.soft is not None:
            errs.extend(self._soft_errors())
        return errs

    def _soft_errors(self) -> list[str]:
        if not isinstance(self.soft, SoftMix):
            return ["soft: must be a SoftMix or null"]
        errs = self.soft.errors()
        if self.adaptive is not None:
            errs.append("soft: the soft mix follows the planned stages, so it cannot be combined "
                        "with an adaptive rule; remove one of them")
        valid = [s for s in self.stages if isinstance(s, Stage)]
        if valid and (len(valid) < 2 or valid[-1].exemplars != 0):
            errs.append("soft: needs at least two stages, the last with 0 exemplars (every "
                        "question is zero-shot once the last stage begins)")
        return errs

    # -- construction
    @classmethod
    def from_counts(
        cls, counts: Sequence[int], steps_per_stage: int = 100, adaptive: AdaptiveRule | None = None
    ) -> Curriculum:
        return cls(tuple(Stage(c, steps_per_stage) for c in counts), adaptive)

    @classmethod
    def preset(
        cls, name: str, steps_per_stage: int = 100, adaptive: AdaptiveRule | None = None
    ) -> Curriculum:
        """A named preset of :data:`PRESETS`, each stage ``steps_per_stage`` steps long."""
        if name not in PRESETS:
            raise CurriculumError(
                [f"preset: unknown preset {name!r}; use one of {', '.join(PRESETS)}"]
            )
        return cls.from_counts(PRESETS[name], steps_per_stage, adaptive)

    @classmethod
    def parse(cls, spec: str, steps_per_stage: int = 100) -> Curriculum:
        """Any dash-separated schedule such as ``"4-2-0"``."""
        try:
            counts = [int(part) for part in spec.strip().split("-")]
        except ValueError:
            raise CurriculumError(
                [f"spec: {spec!r} must be exemplar counts joined by '-', e.g. 3-2-0"]
            ) from None
        return cls.from_counts(counts, steps_per_stage)

    # -- the fixed schedule
    @property
    def spec(self) -> str:
        return "-".join(str(s.exemplars) for s in self.stages)

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    @property
    def max_exemplars(self) -> int:
        """How many exemplars the set must hold."""
        return max(s.exemplars for s in self.stages)

    def about(self) -> str | None:
        """What this schedule is when it is a preset's (any schedule without exemplars is the
        exemplar-free baseline); None for other schedules."""
        return PRESET_NOTES["0"] if self.max_exemplars == 0 else PRESET_NOTES.get(self.spec)

    def boundaries(self) -> list[int]:
        """The step at which each stage starts (the first is 0)."""
        return list(self._starts)

    def stage_at(self, step: int) -> int:
        """Index of the stage holding step ``step`` (from 0); the last stage holds after the end.

        In adaptive mode this is the planned schedule; use :class:`AdaptiveController` in training.
        """
        if not _is_int(step) or step < 0:
            raise ValueError(f"step must be an integer >= 0, got {step!r}")
        index = 0
        for i, start in enumerate(self._starts):
            if step >= start:
                index = i
        return index

    def exemplars_at(self, step: int) -> int:
        """Exemplars to show at step ``step`` (from 0) on the planned schedule."""
        return self.stages[self.stage_at(step)].exemplars

    def zero_shot_share(self, step: int) -> float:
        """The probability that a question of step `step` is shown no exemplar in soft mode
        (0 without it; stages that show none show none anyway)."""
        if self.soft is None:
            return 0.0
        ramp = self._starts[-1]
        return min(1.0, self.soft.start + (1 - self.soft.start) * step / ramp)

    def question_exemplars(self, step: int, exemplars: int, seed: int) -> int:
        """The exemplars one question of a step is shown, all its G samples alike: the stage's
        `exemplars`, or in soft mode 0 with probability `zero_shot_share(step)` (one draw
        seeded with `seed`, which the engine derives from the run's seed, the step and the
        question)."""
        if self.soft is None or exemplars == 0:
            return exemplars
        return 0 if random.Random(seed).random() < self.zero_shot_share(step) else exemplars

    # -- checks
    def validate(self, available_exemplars: int | None = None) -> list[str]:
        """Problems as ``field.path: message``; empty when usable with a set of that size."""
        errs = self._structure_errors()
        if available_exemplars is not None:
            for i, s in enumerate(self.stages):
                if s.exemplars > available_exemplars:
                    errs.append(
                        f"stages[{i}].exemplars: {s.exemplars} exemplars, but the set holds "
                        f"only {available_exemplars}"
                    )
        return errs

    def check(self, available_exemplars: int | None = None) -> None:
        """Raise :class:`CurriculumError` when :meth:`validate` finds anything."""
        errs = self.validate(available_exemplars)
        if errs:
            raise CurriculumError(errs)

    def warnings(self, min_stage_steps: int = 50, max_drop: int = 2,
                 run_steps: int | None = None, using: str = "calling its tool") -> list[str]:
        """Plain-words risks from the paper's findings (method.md, "The curriculum"); not errors.

        Flags a drop of more than ``max_drop`` exemplars at once (3 -> 2 -> 0,
        with drops of 1 and 2, worked best; 3 -> 0 was worse), a stage with
        exemplars shorter than ``min_stage_steps`` (fixed mode), more than two
        removals (3 -> 2 -> 1 -> 0 was "clearly worse"), and a last stage that
        still shows exemplars although evaluation is zero-shot. In adaptive mode,
        instead of short stages: planned stages the rule cannot follow, and stages a
        run of ``run_steps`` (default: the plan's length) can never reach. ``using`` names
        the run's tools in use ("searching": `tools.using_words`).
        """
        out: list[str] = self._adaptive_warnings(run_steps or self.total_steps)
        for i in range(len(self.stages) - 1):
            a, b = self.stages[i].exemplars, self.stages[i + 1].exemplars
            if a - b > max_drop:
                out.append(
                    f"Stage {i + 1} -> {i + 2} drops from {a} to {b} exemplars at once; "
                    "in the paper 3 -> 0 did worse than 3 -> 2 -> 0. "
                    "Consider an intermediate stage."
                )
        if self.adaptive is None:
            for i, s in enumerate(self.stages[:-1]):
                if s.exemplars > 0 and s.steps < min_stage_steps:
                    out.append(
                        f"Stage {i + 1} lasts only {s.steps} steps. In the paper, removing "
                        f"exemplars too fast made the model stop {using} and answer at once "
                        "(premature termination)."
                    )
        removals = sum(
            1
            for i in range(len(self.stages) - 1)
            if self.stages[i + 1].exemplars < self.stages[i].exemplars
        )
        if removals > 2:
            out.append(
                f"The schedule removes exemplars {removals} times; 3 -> 2 -> 1 -> 0 was "
                "clearly worse than "
                "3 -> 2 -> 0 in the paper."
            )
        if self.stages[-1].exemplars > 0:
            out.append(
                f"The last stage still shows {self.stages[-1].exemplars} exemplars, but "
                "evaluation is zero-shot; "
                "end with a 0-exemplar stage so the model learns to search without them."
            )
        return out

    def _adaptive_warnings(self, run_steps: int) -> list[str]:
        """Where the adaptive rule and the planned stages disagree (every stage but the last
        ends after ``shortest_stage`` to ``max_steps`` of its steps)."""
        rule = self.adaptive
        if rule is None:
            return []
        shortest, longest = rule.shortest_stage, rule.max_steps
        out = []
        unfit = [f"stage {i + 1}: {s.steps} step{'s' * (s.steps != 1)}"
                 for i, s in enumerate(self.stages[:-1])
                 if not shortest <= s.steps <= longest]
        if unfit:
            out.append(f"The adaptive rule ends a stage after {shortest} to {longest} steps, so "
                       f"the run cannot follow the plan ({'; '.join(unfit)}).")
        last = len(self.stages) - 1
        reached = min(last, (run_steps - 1) // shortest)
        if reached < last:
            out.append(
                f"In {run_steps} steps the run never reaches stage {last + 1} "
                f"({self.stages[last].exemplars} exemplars): each adaptive stage lasts at least "
                f"{shortest} steps, so it gets no further than stage {reached + 1} "
                f"({self.stages[reached].exemplars} exemplars). Plan at least "
                f"{last * shortest + 1} steps, or lower the rule's minimum (\"not before\" and "
                "\"averaged over\")."
            )
        return out

    # -- JSON
    def to_dict(self) -> dict[str, object]:
        adaptive = None
        if self.adaptive is not None:
            r = self.adaptive
            adaptive = {
                "metric": r.metric,
                "threshold": r.threshold,
                "window": r.window,
                "min_steps": r.min_steps,
                "max_steps": r.max_steps,
                "direction": r.direction,
            }
        out: dict[str, object] = {
            "stages": [{"exemplars": s.exemplars, "steps": s.steps} for s in self.stages],
            "adaptive": adaptive,
        }
        if self.soft is not None:
            out["soft"] = {"start": self.soft.start}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Curriculum:
        """Inverse of :meth:`to_dict`; every problem is reported with its field path."""
        if not isinstance(data, Mapping):
            raise CurriculumError(["curriculum: must be a JSON object with 'stages'"])
        errs: list[str] = []
        unknown = sorted(set(data) - {"stages", "adaptive", "soft"})
        errs += [f"{k}: unknown field" for k in unknown]
        raw_stages = data.get("stages")
        stages: list[Stage] = []
        if not isinstance(raw_stages, list):
            errs.append("stages: must be a list of {exemplars, steps}")
        else:
            for i, st in enumerate(raw_stages):
                if not isinstance(st, Mapping):
                    errs.append(f"stages[{i}]: must be an object with 'exemplars' and 'steps'")
                    continue
                missing = [k for k in ("exemplars", "steps") if k not in st]
                errs += [f"stages[{i}].{k}: missing" for k in missing]
                errs += [
                    f"stages[{i}].{k}: unknown field"
                    for k in sorted(set(st) - {"exemplars", "steps"})
                ]
                if not missing:
                    stages.append(Stage(st["exemplars"], st["steps"]))  # type: ignore[arg-type]
        adaptive = None
        raw_adaptive = data.get("adaptive")
        if raw_adaptive is not None:
            if not isinstance(raw_adaptive, Mapping):
                errs.append("adaptive: must be an object or null")
            else:
                allowed = {"metric", "threshold", "window", "min_steps", "max_steps", "direction"}
                bad = sorted(set(raw_adaptive) - allowed)
                errs += [f"adaptive.{k}: unknown field" for k in bad]
                if not bad:
                    adaptive = AdaptiveRule(**raw_adaptive)  # type: ignore[arg-type]
        soft = None
        raw_soft = data.get("soft")
        if raw_soft is not None:
            if not isinstance(raw_soft, Mapping):
                errs.append("soft: must be an object such as {\"start\": 0.25}, or null")
            else:
                errs += [f"soft.{k}: unknown field" for k in sorted(set(raw_soft) - {"start"})]
                soft = SoftMix(**{k: v for k, v in raw_soft.items() if k == "start"})
        if errs:
            raise CurriculumError(errs)
        return cls(tuple(stages), adaptive, soft)


class AdaptiveController:
    """Tracks the stage during training, for fixed and adaptive curricula alike.

    Read :attr:`exemplars` before a step; call :meth:`observe` after it with
    the step's metric value (required in adaptive mode, ignored otherwise).
    State is a pure function of the observed values, so a resumed run rebuilds
    it with :meth:`replay`.
    """

    def __init__(self, curriculum: Curriculum):
        self.curriculum = curriculum
        self.step = 0  # the next step to run
        self.stage = 0
        self.stage_starts: list[int] = [0]
        self.values_in_stage: list[float] = []

    @property
    def exemplars(self) -> int:
        return self.curriculum.stages[self.stage].exemplars

    def observe(self, value: float | None = None) -> bool:
        """Record a finished step; True when the next step starts a new stage."""
        rule = self.curriculum.adaptive
        self.step += 1
        if rule is None:
            new = self.curriculum.stage_at(self.step)
        else:
            if not _is_num(value):
                raise ValueError(
                    f"adaptive curriculum needs a finite {rule.metric!r} value per step, got "
                    f"{value!r}"
                )
            self.values_in_stage.append(float(value))  # type: ignore[arg-type]
            last = self.stage == len(self.curriculum.stages) - 1
            new = (
                self.stage + 1
                if not last and should_advance(rule, self.values_in_stage)
                else self.stage
            )
        if new != self.stage:
            self.stage = new
            self.stage_starts.append(self.step)
            self.values_in_stage = []
            return True
        return False

    @classmethod
    def replay(cls, curriculum: Curriculum, values: Sequence[float | None]) -> AdaptiveController:
        """A controller that has observed ``values`` (one per finished step), as after a resume."""
        ctl = cls(curriculum)
        for v in values:
            ctl.observe(v)
        return ctl


#: Steps compared before and after a stage change by PrematureWatch.
PREMATURE_WINDOW = 5


@dataclass
class PrematureWatch:
    """Warns when tool calls per rollout fall sharply after a stage change (method.md)."""

    drop: float
    history: list[float] = field(default_factory=list)
    change_at: int | None = None
    before: float | None = None

    def stage_changed(self) -> None:
        self.change_at = len(self.history)
        recent = self.history[-PREMATURE_WINDOW:]
        self.before = statistics.fmean(recent) if recent else None

    def observe(self, search_calls: float) -> dict | None:
        self.history.append(search_calls)
        if self.change_at is None or len(self.history) - self.change_at != PREMATURE_WINDOW:
            return None
        after = statistics.fmean(self.history[self.change_at:])
        before, self.change_at = self.before, None
        if before and after < before * (1 - self.drop):
            return {"before": round(before, 3), "after": round(after, 3),
                    "drop": round(1 - after / before, 3)}
        return None


def premature_message(warning: dict, using: str = "calling its tools") -> str:
    """The words of PrematureWatch's warning, for the run's events (`using`: the run's tools
    in use, `tools.using_words`)."""
    return (f"tool calls per rollout fell from {warning['before']} to {warning['after']} "
            f"({warning['drop']:.0%}) after the last stage change: the model may be answering "
            f"without {using} (premature termination); consider a gentler curriculum")
