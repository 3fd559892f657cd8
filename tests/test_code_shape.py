"""Files that fit in a head (issue "One house"): no module under src/ over 500 lines, no
function over 80 lines, and every layer folder says in its `__init__.py` docstring what it
is. Data tables are not exempt: split them by family instead."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kernbench"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def _files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_file_over_500_lines():
    long = [f"{f.relative_to(SRC)}: {n}" for f in _files()
            if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES]
    assert long == []


def test_no_function_over_80_lines():
    long = []
    for f in _files():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{f.relative_to(SRC)}:{node.lineno} {node.name}: {n}")
    assert long == []


def test_every_layer_has_a_docstring():
    missing = []
    for d in sorted(p for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = d / "__init__.py"
        if d.name.endswith(".egg-info") or not any(d.glob("*.py")):
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) \
            if init.exists() else None
        if not doc or len(doc.split()) < 8:
            missing.append(d.name)
    assert missing == []


def test_test_modules_have_unique_basenames():
    # tests/ has no __init__.py files: pytest imports each test module by its basename, so
    # two of one name in different folders stop the whole suite at collection
    seen: dict[str, Path] = {}
    tests = Path(__file__).resolve().parent
    for p in sorted(tests.rglob("test_*.py")):
        assert p.name not in seen, f"{p.relative_to(tests)} and {seen[p.name].relative_to(tests)}"
        seen[p.name] = p
