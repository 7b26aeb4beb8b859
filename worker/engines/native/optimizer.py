"""The optimizer and learning-rate schedule of the native engine's GRPO update.

AdamW over the trainable parameters with a warmup-then-constant schedule
(:func:`make_optimizer`). A module of its own because the optimizer outlives
any one update: the trainer (and the benches and the speed calibration) builds
it once, :func:`worker.engines.native.grpo.update_step` only steps it.
"""

from __future__ import annotations

import torch

__all__ = ["make_optimizer"]


def make_optimizer(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float = 0.0,
    warmup_steps: int = 0,
    total_steps: int | None = None,
):
    """AdamW over the trainable parameters and a warmup-then-constant LR schedule.

    The learning rate is ``lr * min(1, (k + 1) / warmup_steps)`` for the
    ``k``-th optimizer step (0-based): it rises linearly over the first
    ``warmup_steps`` steps and stays at ``lr`` after; the first step already
    uses ``lr / warmup_steps`` (not 0, so no rollout batch is wasted).
    ``warmup_steps`` 0: constant from the start. ``total_steps`` (optional)
    only checks ``warmup_steps <= total_steps`` (e.g. warmup = 10% of it);
    there is no decay. Weight decay applies to matrices only (not to biases
    or norm weights). Call ``scheduler.step()`` after each ``optimizer.step()``
    (:func:`update_step` does).
    """
    if lr <= 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if total_steps is not None and warmup_steps > total_steps:
        raise ValueError(f"warmup_steps ({warmup_steps}) exceeds total_steps ({total_steps})")
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    optimizer = torch.optim.AdamW(groups, lr=lr)

    def factor(step: int) -> float:
        if warmup_steps <= 0:
            return 1.0
        return min(1.0, (step + 1) / warmup_steps)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return optimizer, scheduler
