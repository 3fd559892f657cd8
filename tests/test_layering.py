"""The layers of kernbench and the rules between them (docs/architecture.md, ADR-0005).

Every folder under src/kernbench is a layer. A layer imports only layers below it in ORDER,
and on top of that the rules the architecture states:
- numerics imports nothing of kernbench;
- the hardware (components, sim_engine) never imports ir, cmdq, compiler, host, triton_emu;
- cmdq (the ISA) never imports ir, compiler or host;
- compiler never imports host, sim_engine or triton_emu;
- report never imports ir or compiler;
- only cli (and tests and benchmarks, outside src) import host;
- no module imports a `_private` name from another package.
Imports under `if TYPE_CHECKING:` count too: a type is a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kernbench"
ORDER = ["errors", "numerics", "config", "topology", "common", "components", "sim_engine",
         "report", "cmdq", "ir", "compiler", "triton_emu", "tl", "models", "host", "cli"]
FORBIDDEN = {
    "numerics": set(ORDER) - {"numerics"},
    "components": {"ir", "cmdq", "compiler", "host", "triton_emu"},
    "sim_engine": {"ir", "cmdq", "compiler", "host", "triton_emu"},
    "cmdq": {"ir", "compiler", "host"},
    "compiler": {"host", "sim_engine", "triton_emu"},
    "report": {"ir", "compiler"},
}
HOST_USERS = {"cli", "host"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every `kernbench.*` import of a file."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernbench"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("kernbench")]
    return found


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0] if len(rel) > 1 else path.stem


def _dep(module: str, names: list[str]) -> list[str]:
    parts = module.split(".")
    if len(parts) > 1:
        return [parts[1]]
    return [n for n in names if n in ORDER]  # `from kernbench import tl`


def _violations() -> list[str]:
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        own, rel = _layer(f), f.relative_to(SRC)
        if own == "__init__":
            continue
        assert own in ORDER, f"{rel}: layer '{own}' is not in ORDER"
        for module, names in _imports(f):
            for dep in _dep(module, names):
                if dep == own:
                    continue
                if ORDER.index(dep) > ORDER.index(own):
                    bad.append(f"{rel}: imports {module} (a higher layer)")
                if dep in FORBIDDEN.get(own, ()):
                    bad.append(f"{rel}: imports {module} ({own} never imports {dep})")
                if dep == "host" and own not in HOST_USERS:
                    bad.append(f"{rel}: imports {module} (only cli imports host)")
                if module.split(".")[1:2] != [own]:
                    bad += [f"{rel}: imports private {module}.{n}" for n in names
                            if n.startswith("_") and not n.startswith("__")]
    return sorted(set(bad))


# Violations being removed by the restructure in progress; this list only shrinks, and is
# empty when the "one house" issue is done.
KNOWN: list[str] = [
    "components/base.py: imports kernbench.sim_engine.engine (a higher layer)",
    "host/flow.py: imports private kernbench.compiler.inputs._vocab",
]


def test_layers_follow_the_rules():
    assert _violations() == KNOWN


def test_the_rules_catch_a_violation(tmp_path, monkeypatch):
    fake = tmp_path / "kernbench"
    (fake / "numerics").mkdir(parents=True)
    (fake / "numerics" / "bad.py").write_text("from kernbench.ir.model import Graph\n"
                                              "from kernbench.cmdq.io import _show\n")
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    got = _violations()
    assert any("numerics never imports ir" in v for v in got)
    assert any("private kernbench.cmdq.io._show" in v for v in got)
