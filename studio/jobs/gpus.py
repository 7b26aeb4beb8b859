"""The GPUs a worker may use: one training job per GPU.

`CUDA_VISIBLE_DEVICES` when it is set (the usual way to give a node's GPUs to
its processes), else every GPU `nvidia-smi` lists; no torch import, so the
CLI stays quick.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def visible_gpus() -> list[str]:
    """Device ids as CUDA_VISIBLE_DEVICES spells them ("0", "1", or GPU UUIDs)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
