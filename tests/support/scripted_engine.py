"""A test-only training engine: adding an engine is this module and its one registration.

The worker spawns it as it spawns the shipped engines (`python -m tests.support.scripted_engine
RUN_ID --attempt N --parent-pid PID`); it reads the run's plan, says what it would train on,
and succeeds without training. It cannot train with LoRA, and says so at launch.
"""

from __future__ import annotations

import sys

from studio.jobs.engines import Engine, register_engine

SCRIPTED = register_engine(Engine(
    "scripted", "tests.support.scripted_engine", "scripted: reads the plan, trains nothing",
    problems=lambda config: ["lora: the scripted engine trains no adapters; remove lora"]
    if config.lora is not None else []))


def train(run_id: int) -> None:
    from studio.services.run_plans import load_plan
    from studio.settings import get_settings

    plan = load_plan(get_settings(), run_id)
    print(f"scripted engine: run {run_id} '{plan.config.name}' on '{plan.train.name}' "
          f"with {len(plan.exemplars)} exemplars, {plan.config.total_steps} steps", flush=True)


def main(argv: list[str]) -> int:
    from worker.parent_watch import run_attempt, start_training_process

    run_id, attempt = start_training_process(SCRIPTED.entry, argv)
    return run_attempt(run_id, attempt, lambda: train(run_id))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
