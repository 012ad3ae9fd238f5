"""Shape rules the linters do not check: short functions outside the tests."""

from __future__ import annotations

import ast
from pathlib import Path

from infra.repo import REPO_ROOT

MAX_FUNCTION_LINES = 60
SOURCES = ("kafkalake", "kafkalake_dev", "lambdas", "spark_jobs", "infra", "bench", "app.py")


def long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [
        f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_outside_the_tests_is_over_60_lines() -> None:
    files = [p for s in SOURCES for p in ([REPO_ROOT / s] if s.endswith(".py") else (REPO_ROOT / s).rglob("*.py"))]
    assert len(files) > 40
    assert [f for path in files for f in long_functions(path)] == []


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    source = tmp_path / "long.py"
    source.write_text("def f() -> None:\n" + "    x = 1\n" * MAX_FUNCTION_LINES)
    assert long_functions(source) == ["long.py:1 f (61 lines)"]
