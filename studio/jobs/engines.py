"""The training engines a run config's `backend` names, registered the way tools are.

An engine is a package under worker/engines/ whose entry module the worker spawns
(`python -m ENTRY RUN_ID --attempt N --parent-pid PID`, see worker/training_process.py),
plus one `Engine` registered here. The registration is all the studio knows of it: the
config schema accepts its name, the launch checks ask it what it cannot do with a config,
the worker asks it how many GPUs a config takes, the time estimate asks whether the
studio's cost model covers it, and the history asks which config section only it reads.
It lives in studio (not in worker/) so that the web app knows every engine without
importing one. The run config is passed in duck-typed: this module is imported by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RunConfig = Any
"""A `studio.run_config.RunConfig`, which imports this module (so not imported here)."""


@dataclass(frozen=True)
class Engine:
    name: str
    entry: str
    """The module the worker runs as the training process."""
    label: str
    """What it is, in a few words: the Launch page's choice."""
    queue: str = "cpu"
    """The queue a config on this engine gets when it names none."""
    settings: str | None = None
    """The config section only this engine reads (`verl`): on another engine its keys did
    nothing, and the run history says so."""
    timed: bool = False
    """Whether the studio's cost model (`studio.services.calibrations`) times its steps."""
    problems: Callable[[RunConfig], list[str]] = field(default=lambda config: [])
    """What the engine cannot do with a config, each naming its field and what to do."""
    gpus: Callable[[RunConfig], int] = field(default=lambda config: 1)
    """GPUs its process takes on the worker (a GPU worker hands it that many)."""


ENGINES: dict[str, Engine] = {}


def register_engine(engine: Engine) -> Engine:
    """The engine becomes a `backend` a run config may name."""
    if ENGINES.get(engine.name, engine) != engine:
        raise ValueError(f"engine '{engine.name}' is registered already")
    ENGINES[engine.name] = engine
    return engine


def engine_named(name: str) -> Engine:
    """The registered engine `name`; ValueError lists the known ones."""
    if name not in ENGINES:
        raise ValueError(f"backend: '{name}' is not one of {', '.join(ENGINES)}")
    return ENGINES[name]


def _verl_problems(config: RunConfig) -> list[str]:
    """veRL runs on GPU workers, follows the planned schedule, and splits batches evenly."""
    grpo, verl = config.grpo, config.verl
    problems = []
    if config.queue != "gpu":
        problems.append("queue: the verl backend trains on GPU workers; use queue: gpu")
    if config.curriculum.adaptive is not None:
        problems.append("curriculum.adaptive: the verl backend follows the planned schedule "
                        "(stages by step); remove adaptive or use backend: native")
    if grpo.reset_each_stage:
        problems.append("grpo.reset_each_stage: not available with the verl backend (one "
                        "veRL run keeps one optimizer and reference); use backend: native")
    gpus = verl.nnodes * verl.gpus_per_node
    rollouts = grpo.batch_size * grpo.group_size
    if rollouts % gpus:
        problems.append(f"grpo.batch_size: batch_size x group_size ({rollouts}) must be a "
                        f"multiple of the GPUs (verl.nnodes x verl.gpus_per_node = {gpus})")
    if gpus % verl.tensor_parallel:
        problems.append(f"verl.tensor_parallel: {verl.tensor_parallel} must divide the "
                        f"GPUs ({gpus})")
    if (grpo.mini_batch_size or 0) > grpo.batch_size:
        problems.append("grpo.mini_batch_size: must not exceed grpo.batch_size")
    paused = [n for n, r in config.sentinel.rules().items() if r.action == "pause"]
    if paused:
        problems.append(f"sentinel.{paused[0]}.action: the verl backend cannot pause at a "
                        "checkpoint yet; use warn or backend: native")
    if config.engine.dtype != "auto":
        problems.append(f"engine.dtype: the verl backend trains in veRL's own precision "
                        f"(bfloat16 on its GPUs), not '{config.engine.dtype}'; leave it auto "
                        "or use backend: native")
    if config.lora is not None and config.lora.dropout:
        problems.append("lora.dropout: veRL's LoRA has no dropout; use 0 or backend: native")
    bound = type(grpo).model_fields["dynamic_sampling_max_batches"].default
    if grpo.dynamic_sampling and grpo.dynamic_sampling_max_batches != bound:
        problems.append("grpo.dynamic_sampling_max_batches: the verl backend cannot bound "
                        "the sampling rounds (veRL's trainer resamples until the batch is "
                        f"full); leave it at {bound} or use backend: native")
    return problems + _verl_guidance_problems(config.guidance)


def _verl_guidance_problems(guidance) -> list[str]:
    """veRL's V1 trainer samples a group's answers at once (no second phase after scoring
    the first), and its policy losses see log-probs, advantages and the mask but no
    per-answer field that could mark a guided answer (docs/verl.md, "Guided ICRL")."""
    if guidance.mode != "mixed":
        return []
    problems = []
    if guidance.when != "always":
        problems.append(f"guidance.when: '{guidance.when}' needs the unguided answers scored "
                        "before the guided ones are sampled, which the verl backend cannot do "
                        "within a step; use always or backend: native")
    if guidance.shaping != "none":
        problems.append(f"guidance.shaping: '{guidance.shaping}' needs to know in the loss "
                        "which answers were guided, which veRL's policy losses are not told; "
                        "use none or backend: native")
    return problems


register_engine(Engine(
    "native", "worker.engines.native.main", "native: PyTorch on this studio's workers",
    timed=True))
register_engine(Engine(
    "verl", "worker.engines.verl.main", "veRL: a Ray cluster, for big models", queue="gpu",
    settings="verl", problems=_verl_problems,
    # a veRL run that drives a Ray cluster takes no GPU here: the cluster's are elsewhere
    gpus=lambda config: 0 if config.verl.ray_address else config.verl.gpus_per_node))
