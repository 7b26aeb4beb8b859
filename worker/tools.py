"""A run's tools as objects the engines drive, built from the names in its config.

`search` answers from the backend the engine has (the run's BM25 index natively, the
studio's /retrieve in veRL's workers); `python` runs each round's programs in the
studio's sandbox (`studio.sandbox`, the data folder hidden), which refuses to start
where it cannot isolate them. The order is the config's: the first tool is the one the
corrective message names.
"""

from __future__ import annotations

from collections.abc import Sequence

from studio.method.tools import CalculatorTool, PythonTool, SearchBackend, SearchTool, Tool
from studio.sandbox import studio_sandbox
from studio.settings import Settings


def build_tools(names: Sequence[str], settings: Settings, search: SearchBackend | None,
                top_k: int) -> list[Tool]:
    """One tool per name: search over `search` (its `top_k` passages; None for a run that
    does not search, which names no corpus), python in a sandbox, the calculator in this
    process (it is pure)."""
    if "search" in names and search is None:
        raise ValueError("the search tool needs a corpus to search (data.corpus)")
    makers = {"search": lambda: SearchTool(search, top_k),
              "python": lambda: PythonTool(studio_sandbox(settings).run_batch),
              "calculator": CalculatorTool}
    unknown = [name for name in names if name not in makers]
    if unknown:
        raise ValueError(f"unknown tool '{unknown[0]}'; known tools: {', '.join(makers)}")
    return [makers[name]() for name in names]
