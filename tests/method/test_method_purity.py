"""studio.method is pure: standard library only; no torch, database or network."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import studio.method

PACKAGE = Path(studio.method.__file__).parent


def test_only_standard_library_imports():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "__future__", (
                    f"{path.name} imports {name}"
                )


def test_import_pulls_in_nothing_heavy():
    code = (
        "import sys, studio.method; "
        "bad = [m for m in ('torch', 'numpy', 'sqlalchemy', 'sqlmodel', 'httpx', 'socket', "
        "'studio.storage.db') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent.parent,
    )
    assert out.stdout.strip() == "[]"


def test_public_names_exported():
    for name in studio.method.__all__:
        assert hasattr(studio.method, name), name
