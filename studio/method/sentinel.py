"""The collapse sentinel: leading signs that a training run is breaking down (docs/engine.md,
"The collapse sentinel").

The reward of a small model moves slowly and late; these signals move first. Each
signal watches one per-step metric (named as both engines record it) over a window of
steps and fires when the metric *changes* for the worse: a fall from the run's own
earlier level, a crossing of a level it was on the healthy side of, or a one-step spike
above its recent median. A run that starts on the wrong side (a tiny model that never
finishes an answer) is a set-up problem, not a collapse, and does not fire. A signal
fires once per episode: it fires again only after its metric has recovered. The
sentinel is a pure fold over the metrics, so a resumed run rebuilds it with
:meth:`Sentinel.replay` from the watched values it stored.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Action = Literal["off", "warn", "pause"]
ACTIONS: tuple[str, ...] = ("off", "warn", "pause")
Kind = Literal["fall", "rise_to", "fall_to", "spike"]
MAX_WINDOW = 1000


@dataclass(frozen=True)
class Signal:
    """One leading sign: its title, the metric it reads, how it fires (``kind``), its
    defaults, and what it means and what to do, in plain words."""

    title: str
    metric: str
    kind: Kind
    window: int
    threshold: float
    meaning: str
    advice: str
    floor: float = 0.0  # fall: the earlier level must reach it; spike: so must the spike

    def means(self, using: str = "calling its tools") -> str:
        """What it means, naming the run's tools in use where it speaks of them (`using`:
        `tools.using_words`)."""
        return self.meaning.replace("{using}", using)


SIGNALS: dict[str, Signal] = {
    "format_falling": Signal(
        "Format score falling", "format", "fall", 5, 0.5, floor=0.05,
        meaning="the format score (tags used correctly) fell far below its earlier high: "
        "the model is forgetting how to write its reply",
        advice="lower the learning rate, or make the curriculum gentler if it followed a "
        "stage change"),
    "search_stopped": Signal(
        "Tool use stopped", "search_calls", "fall", 5, 0.9, floor=0.25,
        meaning="calls of its tools per rollout fell to almost none after the model had been "
        "using them: it has stopped {using} (premature termination)",
        advice="make the curriculum gentler (longer stages, one exemplar removed at a time) "
        "or lower the learning rate"),
    "entropy_collapse": Signal(
        "Entropy collapsing", "entropy", "fall", 5, 0.8,
        meaning="the entropy of the model's token choices fell far below its earlier "
        "high: it writes nearly the same thing every time and no longer explores",
        advice="lower the learning rate, or raise the sampling temperature"),
    "length_at_limit": Signal(
        "Answers cut at the length limit", "response_length", "rise_to", 5, 0.95,
        meaning="responses run to the response token limit on average: most are cut off "
        "before they finish",
        advice="lower the learning rate; raise grpo.max_response_tokens only if good "
        "answers need the room"),
    "length_empty": Signal(
        "Answers running to nothing", "response_length", "fall_to", 5, 4.0,
        meaning="responses fell to a few tokens on average: the model has almost stopped "
        "writing",
        advice="lower the learning rate"),
    "no_learning_signal": Signal(
        "No learning signal", "zero_spread_groups", "rise_to", 5, 0.9,
        meaning="most question groups got the same reward for every answer: GRPO "
        "learns only from differences within a group, so those steps teach nothing",
        advice="raise the sampling temperature, sample more answers per question, or train "
        "on easier questions"),
    "kl_spike": Signal(
        "KL spike", "kl", "spike", 10, 10.0, floor=0.001,
        meaning="the distance from the starting model (KL) jumped far above its recent "
        "level: one update moved the model far",
        advice="lower the learning rate, or raise grpo.kl_coef"),
    "grad_norm_spike": Signal(
        "Gradient-norm spike", "grad_norm", "spike", 10, 10.0,
        meaning="the gradient norm jumped far above its recent level: an unstable update",
        advice="lower the learning rate, or lower grpo.max_grad_norm"),
}
"""Every signal, by the name the run config's `sentinel` section uses."""

WATCHED_METRICS: tuple[str, ...] = tuple(dict.fromkeys(s.metric for s in SIGNALS.values()))


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Rule:
    """A signal as a run uses it: ``action`` when it fires (``off``: not watched)."""

    action: Action = "warn"
    window: int = 5
    threshold: float = 0.5

    @classmethod
    def default(cls, signal: str) -> Rule:
        s = SIGNALS[signal]
        return cls("warn", s.window, s.threshold)

    def errors(self, signal: str) -> list[str]:
        """Problems as ``field: message``, with the bounds of this signal's kind."""
        errs = []
        if self.action not in ACTIONS:
            errs.append(f"action: must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if not isinstance(self.window, int) or isinstance(self.window, bool) \
                or not 1 <= self.window <= MAX_WINDOW:
            errs.append(f"window: must be a whole number of steps from 1 to {MAX_WINDOW}, "
                        f"got {self.window!r}")
        t, kind = self.threshold, SIGNALS[signal].kind
        if not _is_num(t):
            errs.append(f"threshold: must be a finite number, got {t!r}")
        elif kind == "fall" and not 0 < t < 1:
            errs.append(f"threshold: the share of the earlier high lost, between 0 and 1 "
                        f"(e.g. 0.5 for half), got {t}")
        elif kind == "rise_to" and not 0 < t <= 1:
            errs.append(f"threshold: a share, above 0 and at most 1, got {t}")
        elif kind == "fall_to" and t < 0:
            errs.append(f"threshold: a token count, 0 or more, got {t}")
        elif kind == "spike" and not 1 < t <= 1e6:
            errs.append(f"threshold: how many times the median a spike is, above 1 "
                        f"(e.g. 10), got {t}")
        return errs


def default_rules() -> dict[str, Rule]:
    return {name: Rule.default(name) for name in SIGNALS}


@dataclass(frozen=True)
class Alarm:
    """A signal that fired at a step: ``value`` now against ``reference`` (its earlier
    high, the level crossed, or the median it spiked above)."""

    signal: str
    action: Action
    value: float
    reference: float
    window: int

    def to_dict(self) -> dict:
        return {"signal": self.signal, "metric": SIGNALS[self.signal].metric,
                "action": self.action, "value": round(self.value, 4),
                "reference": round(self.reference, 4), "window": self.window}


def alarm_message(alarm: Alarm | Mapping, using: str = "calling its tools") -> str:
    """The plain words of an alarm (an :class:`Alarm` or its dict), for the run's events
    (`using`: the run's tools in use, `tools.using_words`)."""
    a = alarm.to_dict() if isinstance(alarm, Alarm) else alarm
    s = SIGNALS[a["signal"]]
    value, ref, w = a["value"], a["reference"], a["window"]
    shown = (lambda x: f"{x:.0%}") if s.kind == "rise_to" else (lambda x: f"{x:.3g}")
    over = f"over the last {w} steps"
    what = {
        "fall": f"{s.metric} averaged {shown(value)} {over}, down from {shown(ref)}",
        "rise_to": f"{s.metric} averaged {shown(value)} {over} (alarm at {shown(ref)})",
        "fall_to": f"{s.metric} averaged {shown(value)} {over} (alarm at {shown(ref)})",
        "spike": f"{s.metric} was {shown(value)}, against a median of {shown(ref)} over the "
                 f"previous {w} steps",
    }[s.kind]
    then = (" The run is paused at a checkpoint; Resume continues it from there."
            if a["action"] == "pause" else "")
    return f"{a['signal']}: {what}. That is: {s.means(using)}. Try: {s.advice}.{then}"


@dataclass
class _Track:
    """One signal's recent values, and what its earlier windows said."""

    values: list[float] = field(default_factory=list)
    high: float | None = None  # fall: the highest earlier window mean
    was_fine: bool = False  # rise_to / fall_to: an earlier window was on the healthy side
    firing: bool = False


class Sentinel:
    """Call :meth:`observe` with each finished step's metrics; it returns the alarms that
    fired at that step. ``response_limit`` is the run's response token limit, which
    `length_at_limit` measures against."""

    def __init__(self, rules: Mapping[str, Rule], response_limit: int):
        self.rules = {n: r for n, r in rules.items() if r.action != "off"}
        self.response_limit = response_limit
        self.tracks = {n: _Track() for n in self.rules}
        self.history: list[dict[str, float]] = []  # the watched metrics, one dict per step

    @classmethod
    def replay(cls, rules: Mapping[str, Rule], response_limit: int,
               history: Sequence[Mapping[str, float]]) -> Sentinel:
        """A sentinel that has observed ``history`` (from :attr:`history`), as after a
        resume: a signal that fired before it still counts as fired."""
        sentinel = cls(rules, response_limit)
        for metrics in history:
            sentinel.observe(metrics)
        return sentinel

    def observe(self, metrics: Mapping[str, object]) -> list[Alarm]:
        watched = {m: float(metrics[m]) for m in WATCHED_METRICS  # type: ignore[arg-type]
                   if _is_num(metrics.get(m))}
        self.history.append(watched)
        alarms = []
        for name, rule in self.rules.items():
            signal = SIGNALS[name]
            if signal.metric not in watched:
                continue
            value = watched[signal.metric]
            if name == "length_at_limit":
                value /= self.response_limit
            found = self._check(self.tracks[name], signal, rule, value)
            track = self.tracks[name]
            if found is None:
                track.firing = False
            elif not track.firing:
                track.firing = True
                alarms.append(Alarm(name, rule.action, found[0], found[1], rule.window))
        return alarms

    @staticmethod
    def _check(track: _Track, signal: Signal, rule: Rule,
               value: float) -> tuple[float, float] | None:
        """(value, reference) when the signal's condition holds after this value."""
        w, t = rule.window, rule.threshold
        track.values.append(value)
        if signal.kind == "spike":
            del track.values[:-(w + 1)]
            if len(track.values) <= w:
                return None
            median = statistics.median(track.values[:-1])
            if median > 0 and value >= t * median and value >= signal.floor:
                return value, median
            return None
        del track.values[:-2 * w]
        if len(track.values) < w:
            return None
        recent = statistics.fmean(track.values[-w:])
        if len(track.values) == 2 * w:
            earlier = statistics.fmean(track.values[:w])
            if signal.kind == "fall":
                track.high = earlier if track.high is None else max(track.high, earlier)
            else:
                track.was_fine |= earlier < t if signal.kind == "rise_to" else earlier > t
        if signal.kind == "fall":
            high = track.high
            if high is not None and high > 0 and high >= signal.floor \
                    and recent <= (1 - t) * high:
                return recent, high
            return None
        crossed = recent >= t if signal.kind == "rise_to" else recent <= t
        return (recent, t) if track.was_fine and crossed else None
