"""The package layers import only downward (docs/architecture.md): no package imports a
layer that comes after it, so there are no import cycles between layers."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kernbench"
ORDER = ["errors", "config", "topology", "common", "components", "sim_engine", "report", "ir",
         "data", "cmdq", "compiler", "triton_emu", "models", "verify", "flow", "cli"]


def _imports(path: Path) -> set[str]:
    """kernbench layers a module imports at run time (not under `if TYPE_CHECKING:`)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernbench."):
            found.add(node.module.split(".")[1])
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("kernbench."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0] if len(rel) > 1 else path.stem


def test_layers_import_only_earlier_layers():
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        own = _layer(f)
        if own not in ORDER:
            continue
        for dep in _imports(f):
            if dep in ORDER and ORDER.index(dep) > ORDER.index(own):
                bad.append(f"{f.relative_to(SRC)} imports kernbench.{dep}")
    assert not bad, bad
