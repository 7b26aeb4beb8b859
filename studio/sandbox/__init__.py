"""Sandboxed Python for the python tool: bubblewrap namespaces, a read-only allow-listed
filesystem, a private /tmp, no network, rlimits (docs/sandbox.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bwrap import Limits, SandboxUnavailable
from .runner import Execution, Sandbox

if TYPE_CHECKING:  # the sandbox itself needs nothing of the studio's settings
    from studio.settings import Settings


def studio_sandbox(settings: Settings, limits: Limits | None = None,
                   concurrency: int = 4) -> Sandbox:
    """The sandbox the studio's engines give the python tool: the data folder hidden."""
    return Sandbox(limits, hidden=(settings.resolved_data_dir,), concurrency=concurrency)


__all__ = ["Execution", "Limits", "Sandbox", "SandboxUnavailable", "studio_sandbox"]
