"""Where the native engine's matmuls run in bfloat16 while its weights stay float32.

A run with `engine.dtype: bfloat16-autocast` keeps float32 weights, AdamW state, log-softmax
and loss, and runs the model's matmuls in bfloat16 (`torch.autocast`). On a CPU with
AVX512-BF16 or AMX-BF16 those matmuls are cheaper (docs/engine.md, "A faster CPU step");
float32 weights keep small updates (lr 1e-6) from rounding away, which bfloat16 weights
would. The trainer turns it on for its whole process with `bf16_compute()`; rollouts and
scoring then each take one autocast region (`rollout_mode`, `scoring_autocast`), so the
weights are cast once per region, and the optimizer never runs inside one (autocast's cache
of cast weights would go stale).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar

import torch

from studio.run_config import BF16_AUTOCAST


def weights_dtype(setting: str) -> str:
    """The weights' dtype of an explicit `engine.dtype` (not auto): float32 under
    bfloat16-autocast, else the setting itself."""
    return "float32" if setting == BF16_AUTOCAST else setting


_BF16_ON_CPU: ContextVar[bool] = ContextVar("bf16_on_cpu", default=False)


@contextmanager
def bf16_compute(enabled: bool = True) -> Iterator[None]:
    """Within it, CPU rollouts and scoring run their matmuls in bfloat16."""
    token = _BF16_ON_CPU.set(enabled)
    try:
        yield
    finally:
        _BF16_ON_CPU.reset(token)


def _cpu_autocast(device: torch.device) -> AbstractContextManager | None:
    if device.type == "cpu" and _BF16_ON_CPU.get():
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    return None


@contextmanager
def rollout_mode(device: torch.device) -> Iterator[None]:
    """A rollout's forwards: without gradients, and under `bf16_compute` on a CPU in one
    bfloat16 autocast region. That region runs under `no_grad`, not `inference_mode`:
    autocast keeps its cast weights only outside inference mode, and recasting them at
    every decoding forward cost more than the bfloat16 matmuls saved. CUDA rollouts run in
    the weights' own dtype, as they always have."""
    autocast = _cpu_autocast(device)
    if autocast is None:
        with torch.inference_mode():
            yield
        return
    with torch.no_grad(), autocast:
        yield


def scoring_autocast(device: torch.device) -> AbstractContextManager:
    """bfloat16 autocast for the log-prob passes: on CUDA where supported, on CPU under
    `bf16_compute`."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return _cpu_autocast(device) or nullcontext()


def store_frozen_projections_in_bf16(model: torch.nn.Module) -> int:
    """Store a LoRA base's frozen projection weights, and a frozen LM head, in bfloat16;
    returns how many.

    Autocast caches its bfloat16 copy only of weights that train, so a frozen base would be
    cast again at every decoding forward (a rollout ran 1.1x slower for it). The matmuls see
    the same bfloat16 values either way. A head tied to the input embeddings gets a copy of
    its own, so the embeddings stay float32, as do the adapters and norms; only the
    adapters are saved."""
    frozen = [module for name, module in model.named_modules()
              if name.endswith("base_layer") and isinstance(module, torch.nn.Linear)
              and not module.weight.requires_grad]
    for module in frozen:
        module.to(torch.bfloat16)
    head = model.get_output_embeddings()
    if isinstance(head, torch.nn.Linear) and not head.weight.requires_grad:
        head.weight = torch.nn.Parameter(head.weight.detach().to(torch.bfloat16),
                                         requires_grad=False)
        frozen.append(head)
    return len(frozen)


def cpu_bf16_support() -> str:
    """What this CPU offers for bfloat16 matmuls, in words (for the bench and the docs)."""
    flags: list[str] = []
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh
                          if line.startswith("flags")), [])
    except OSError:
        pass
    offered = [name for flag, name in (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"),
                                       ("avx512_fp16", "AVX512-FP16"), ("avx_vnni", "AVX-VNNI"))
               if flag in flags]
    return ", ".join(offered) or "no bfloat16 instructions"
