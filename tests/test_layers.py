"""The code's layers import downwards only: the web layers (studio.api, frontend) call the
services, the worker runs jobs the services queue, and nothing below imports the layers
above it (docs/run-flow.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function (`from a import b` is
    both `a` and `a.b`: b may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize(("folder", "above"), [
    ("worker", ("studio.api", "frontend")),
    ("studio/services", ("studio.api", "frontend", "worker")),
])  # studio/method imports the standard library alone (tests/method/test_method_purity.py)
def test_a_layer_imports_nothing_above_it(folder, above):
    wrong = {f"{path.relative_to(ROOT)} imports {name}"
             for path in (ROOT / folder).rglob("*.py") for name in _imports(path)
             if any(name == top or name.startswith(top + ".") for top in above)}
    assert not wrong, sorted(wrong)


def test_no_module_of_the_studio_imports_itself_back():
    """No import cycle in studio/, not even through an import hidden in a function: two
    modules that need each other are one job split in two, or a third module's job."""
    modules = {_module(path): path for path in (ROOT / "studio").rglob("*.py")}
    needs = {name: {dep for dep in _imports(path) if dep in modules and dep != name}
             for name, path in modules.items()}

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for dep in needs[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    cycles = sorted(name for name in modules if name in reaches(name))
    assert not cycles, f"in an import cycle: {cycles}"
