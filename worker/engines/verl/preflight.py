"""What a machine needs before a veRL run starts, checked in seconds with light imports.

A local Ray on a machine without GPUs does not fail: it waits for resources
that never come. So the launcher's process checks first, before it imports
transformers or veRL, and the run fails with a message that says what to do.
"""

from __future__ import annotations

import importlib.util

from studio.run_config import RunConfig


class LaunchError(RuntimeError):
    """The run cannot start here or veRL failed; the message says why and what to do."""


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def preflight(config: RunConfig, hostname: str) -> None:
    """Raise LaunchError unless this worker can start the run (GPUs, nodes, veRL)."""
    v = config.verl
    if not v.ray_address:
        if v.nnodes > 1:
            raise LaunchError(f"verl.nnodes: {v.nnodes} nodes need a Ray cluster; start one "
                              "(docs/verl.md) and set verl.ray_address to its head")
        gpus = visible_gpus()
        if gpus == 0:
            raise LaunchError(
                f"the verl backend trains on NVIDIA GPUs and this worker ({hostname}) sees "
                "none: run it on a GPU worker (`studio worker --queues gpu` on a GPU node, or "
                "docker/compose.yaml's worker-gpu), or set verl.ray_address to a Ray cluster "
                "with GPUs")
        if gpus < v.gpus_per_node:
            raise LaunchError(f"verl.gpus_per_node: the run asks for {v.gpus_per_node} GPUs and "
                              f"this worker ({hostname}) sees {gpus}; lower it to {gpus} or run "
                              "on a larger node")
    if importlib.util.find_spec("verl") is None:
        raise LaunchError("the verl backend needs veRL and vLLM on this worker: install the "
                          "studio with `pip install '.[gpu]'` (docker/Dockerfile.gpu has them)")
