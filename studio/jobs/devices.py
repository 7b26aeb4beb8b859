"""The device a worker's training processes use on each of its queues, named and keyed.

On queue gpu a training process gets one GPU of its own when the worker sees one
(`studio.jobs.gpus`), else it runs on the CPU, as on queue cpu. The key names what a calibration's
figures depend on (the device's model, a CPU's core count, the PyTorch version), so that a
calibration is measured again when the hardware changes. No torch import: the heartbeat
computes it when a worker starts.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

from studio.jobs.gpus import visible_gpus


def cpu_name() -> str:
    """'AMD EPYC 7B13, 2 cores': the processor's model and the cores this process may use."""
    model = platform.processor() or platform.machine() or "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} cores"


def gpu_name(device: str) -> str | None:
    """The model of GPU `device` (an index or UUID) as nvidia-smi names it; None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader",
                              "-i", device], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0].strip() if out.strip() else None


def torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "none"


def queue_device(queue: str) -> dict:
    """{kind: cuda | cpu, name, torch, key} of the device a training process of `queue` uses."""
    gpus = visible_gpus() if queue == "gpu" else []
    name = gpu_name(gpus[0]) if gpus else None
    kind = "cuda" if name else "cpu"
    name = name or cpu_name()
    version = torch_version()
    return {"kind": kind, "name": name, "torch": version,
            "key": f"{kind}: {name}; torch {version}"}
