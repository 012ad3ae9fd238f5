"""Shape rules the linters do not check: short functions outside the tests, and a file past 400 lines says why in its
docstring."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from infra.repo import REPO_ROOT

MAX_FUNCTION_LINES = 60
SOURCES = ("kafkalake", "kafkalake_dev", "lambdas", "spark_jobs", "infra", "bench", "app.py")
MAX_FILE_LINES = 400
SAYS_WHY = re.compile(r"past\s+~?400\s+lines", re.IGNORECASE)
"""How a longer file's docstring begins its reason ("Past 400 lines: ...", "past ~400 lines because ...")."""


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


def unexplained_length(path: Path) -> str | None:
    """The file and its length when it is past ``MAX_FILE_LINES`` and its docstring does not say why."""
    text = path.read_text()
    lines = text.count("\n")
    if lines <= MAX_FILE_LINES or SAYS_WHY.search(ast.get_docstring(ast.parse(text, str(path))) or ""):
        return None
    return f"{path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path.name} ({lines} lines)"


def test_every_file_past_400_lines_says_why_in_its_docstring() -> None:
    files = [
        p
        for s in (*SOURCES, "tests")
        for p in ([REPO_ROOT / s] if s.endswith(".py") else (REPO_ROOT / s).rglob("*.py"))
        if "__pycache__" not in p.parts
    ]
    assert len(files) > 100
    assert [f for path in files if (f := unexplained_length(path))] == []


def test_the_length_check_sees_a_long_file_without_its_reason(tmp_path: Path) -> None:
    line = "x = 1\n"
    (tmp_path / "long.py").write_text('"""A module."""\n' + line * MAX_FILE_LINES)
    (tmp_path / "said.py").write_text(
        '"""A module.\n\nPast 400 lines: one table of rules."""\n' + line * MAX_FILE_LINES
    )
    (tmp_path / "short.py").write_text('"""A module."""\n' + line * (MAX_FILE_LINES - 1))
    assert unexplained_length(tmp_path / "long.py") == f"long.py ({MAX_FILE_LINES + 1} lines)"
    assert unexplained_length(tmp_path / "said.py") is None
    assert unexplained_length(tmp_path / "short.py") is None
