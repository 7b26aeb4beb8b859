"""A run's tools as objects the engines drive, built from the names in its config.

`search` answers from the backend the engine has (the run's BM25 index natively, the
studio's /retrieve in veRL's workers); `python` runs each round's programs in the
studio's sandbox (`studio.sandbox`, the data folder hidden), which refuses to start
where it cannot isolate them. Each registered tool builds itself from these
(`studio.method.tools.Tool.for_run`).
"""

from __future__ import annotations

from collections.abc import Sequence

from studio.method.tools import SearchBackend, Tool, ToolBackends, tools_for_run
from studio.sandbox import studio_sandbox
from studio.settings import Settings


def build_tools(names: Sequence[str], settings: Settings, search: SearchBackend | None,
                top_k: int) -> list[Tool]:
    """One tool per name: search over `search` (its `top_k` passages; None for a run that
    does not search, which names no corpus), code in this studio's sandbox."""
    return tools_for_run(names, ToolBackends(search, top_k,
                                             lambda: studio_sandbox(settings).run_batch))
