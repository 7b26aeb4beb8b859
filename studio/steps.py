"""Steps as people read them, the same on every page, in the CLI and in the model card's plot.

The trainer counts steps from 0 (its loop index): that is what metric, event and rollout rows
and the API store. Everything shown counts from 1: step N is the N-th step, an N-step run
ends at step N, and its `current_step` (steps done) is the last step shown. A stage's line
is drawn between the last step of one stage and the first of the next.
"""

from __future__ import annotations


def shown_step(step: int) -> int:
    """The number a person sees for stored step `step`."""
    return step + 1


def stored_step(shown: int) -> int:
    """The stored step of the step a person calls `shown` (a filter typed on a page)."""
    return shown - 1


def stage_line_x(first_step: int) -> float:
    """Where the line before a stage goes on an axis of shown steps: halfway between the
    step before the stage and its first step (stored `first_step`)."""
    return shown_step(first_step) - 0.5

MARK_POINTS_BELOW = 30
"""A curve of fewer steps marks each point: a line through one point draws nothing."""
