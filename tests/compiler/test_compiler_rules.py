"""The compiler's own structure rules (DESIGN §8, issue 11): what it may import, where it
may import, and how big its files and functions may grow."""

from __future__ import annotations

import ast
from pathlib import Path

COMPILER = Path(__file__).resolve().parents[2] / "src" / "kernbench" / "compiler"
NEVER = ("kernbench.host", "kernbench.sim_engine", "kernbench.triton_emu")
#: optional heavy modules that may be imported inside a function (with a comment why)
HEAVY = ("onnx", "onnxruntime", "matplotlib", "ray")


def _files() -> list[Path]:
    files = sorted(COMPILER.rglob("*.py"))
    assert len(files) > 10
    return files


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return [a.name for a in node.names]


def test_compiler_never_imports_host_sim_engine_or_triton_emu():
    bad = []
    for f in _files():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bad += [f"{f.name}: {m}" for m in _imported(node)
                        if m.startswith(NEVER)]
    assert bad == []


def test_imports_inside_functions_are_only_heavy_optional_modules_with_a_reason():
    bad = []
    for f in _files():
        lines = f.read_text(encoding="utf-8").splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                heavy = all(m.split(".")[0] in HEAVY for m in _imported(node))
                said = "#" in lines[node.lineno - 1] or "#" in lines[node.lineno - 2]
                if not (heavy and said):
                    bad.append(f"{f.relative_to(COMPILER)}:{node.lineno} in {fn.name}")
    assert bad == []


def test_files_and_functions_fit_in_a_head():
    long = []
    for f in _files():
        text = f.read_text(encoding="utf-8")
        if len(text.splitlines()) > 500:
            long.append(f"{f.relative_to(COMPILER)}: {len(text.splitlines())} lines")
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = fn.end_lineno - fn.lineno + 1
                if n > 80:
                    long.append(f"{f.relative_to(COMPILER)}:{fn.lineno} {fn.name}: {n} lines")
    assert long == []


def test_the_lowering_is_split_by_job():
    names = {p.stem for p in (COMPILER / "lower").glob("*.py")}
    assert {"placement", "gemm", "rowwise", "attention", "kv_update"} <= names
    assert not (COMPILER / "lower.py").exists()
