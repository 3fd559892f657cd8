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
ORDER = ["native", "errors", "numerics", "config", "topology", "common", "components", "sim_engine",
         "report", "cmdq", "ir", "compiler", "triton_emu", "tl", "models", "host", "cli",
         "__main__"]  # `python -m kernbench`: the console script's entry point
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


# ---------------------------------------------------------------------------- module cycles
def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(root: Path) -> dict[str, set[str]]:
    """module → the kernbench modules it imports: at module level, inside a function or
    under `if TYPE_CHECKING:` (a type is a dependency: a circle closed by a type-only
    import is still a circle). `from a.b import c` points at module a.b.c when there is
    one, else at a.b."""
    files = {_module_name(f, root): f for f in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for mod, f in files.items():
        deps: set[str] = set()
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Import):
                deps |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                deps |= {f"{n.module}.{a.name}" if f"{n.module}.{a.name}" in files else n.module
                         for a in n.names}
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative so
    deep graphs do not hit the recursion limit), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def test_no_import_circle_between_modules():
    """No two modules of src/ reach each other, counting every import (run time, inside a
    function, and type-only)."""
    assert _cycles(_module_graph(SRC)) == []


def test_the_cycle_check_catches_a_circle(tmp_path):
    pkg = tmp_path / "kernbench" / "p"
    pkg.mkdir(parents=True)
    (tmp_path / "kernbench" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from kernbench.p.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from kernbench.p import c\n")
    (pkg / "c.py").write_text("import kernbench.p.a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from kernbench.p import e\n")
    (pkg / "e.py").write_text("from kernbench.p.d import x\n")
    assert _cycles(_module_graph(tmp_path / "kernbench")) == [
        ["kernbench.p.a", "kernbench.p.b", "kernbench.p.c"], ["kernbench.p.d", "kernbench.p.e"]]


# ------------------------------------------------------------------ layers inside lower/
LOWER = "kernbench.compiler.lower."
#: compiler/lower/ by layer: plain helpers and value types (0), the lowering plan's type
#: (1), the builder (2) and the block helpers on it (3), the tile emitters (4), the per-op
#: lowerings, which the tiling pass dispatches to and which only call emitters (5), the
#: plan pass (6) and the tiling pass (7), which reads the plan. A module imports lower
#: layers only; emitters may import emitters (no circle), per-op lowerings never import
#: each other, and the plan pass imports none of them (it asks the emitters' deciders). The package's __init__ imports nothing, so a value type is imported
#: without the passes.
LOWER_LAYERS = {
    0: {"", "values", "placement", "engines", "window", "gemm_balance", "fuse_vector"},
    1: {"plan"},
    2: {"context"},
    3: {"blocks"},
    4: {"te_weights", "weight_home", "activation", "xquant", "attention_tiles", "epilogue", "kv_rows",
        "gemm_outputs", "gemm_splitk", "gemm_cubes", "gemm_parts", "row_spec", "gemm_rowreduce", "gemm", "attention_kv",
        "attention_parts", "attention", "clamp", "conv_tiles", "qlinear",
        "attention_float_tiles", "attention_float_kv", "dynq_plan", "qdq_layout", "conv_plan",
        "ew_tiling", "gather_tiling", "lone_plan", "attention_tiling", "bmm_tiling",
        "copy_tiling", "pool_tiling", "qlinear_tiling", "rope_tiling", "whole_plan",
        "pe_draws"},
    5: {"layer_op", "copy", "elementwise", "gather", "pool", "rope", "kv_update", "qdq", "dynq",
        "qlinear_bmm", "qlinear_conv", "quant_rows", "attention_float", "gemm_layer", "conv",
        "bmm", "rowwise"},
    6: {"plan_pass"},
    7: {"tile_pass"},
}
EMITTERS, PER_OP, PLAN_PASS = 4, 5, 6


def test_lower_is_layered():
    graph = _module_graph(SRC)
    layer = {f"{LOWER}{m}".rstrip("."): k for k, ms in LOWER_LAYERS.items() for m in ms}
    mods = {m for m in graph if m == LOWER.rstrip(".") or m.startswith(LOWER)}
    assert mods == set(layer), "every module of compiler/lower/ has a layer"
    bad = [f"{m} (layer {layer[m]}) imports {d} (layer {layer[d]})"
           for m in sorted(mods) for d in sorted(graph[m] & mods)
           if layer[d] > layer[m] or (layer[d] == layer[m] and layer[m] != EMITTERS)
           or (layer[m] == PLAN_PASS and layer[d] == PER_OP)]
    assert bad == []


def test_the_per_op_lowerings_are_what_the_tiling_pass_dispatches_to():
    """Every lowering in the tiling pass's table lives in a per-op module (or is the tiling
    pass's own dispatch between two of them), and every per-op module but the whole-layer
    fallback provides one: an emitter lowers no op on its own."""
    from kernbench.compiler.lower.tile_pass import LOWERINGS

    homes = {f.__module__.removeprefix(LOWER) for f in LOWERINGS.values()}
    assert homes - {"tile_pass"} == LOWER_LAYERS[PER_OP] - {"layer_op"}


def test_only_the_tiling_pass_runs_the_vector_chain_fusion():
    """`fuse_vector` merges the tile ops one IR node made (their buffers, PEs, vector
    engines and rows decide it, ADR-1000): the tiling pass runs it after each node, and
    neither the plan pass nor a lowering imports it."""
    graph = _module_graph(SRC)
    users = {m for m, deps in graph.items() if f"{LOWER}fuse_vector" in deps}
    assert users == {f"{LOWER}tile_pass"}


#: what `Lowering` (the builder) holds: the compile it builds for, the TCM and engine
#: geometry, the TileGraph and its cursors, the plan it reads, and each lowering module's
#: own state (`_local`)
BUILDER_STATE = {"state", "g", "topo", "plan", "lowering_plan", "gemm_spec", "math_op_cycles",
                 "bank", "tcm_bytes", "n_pes", "dma_bytes_per_cycle", "ucie_bytes_per_cycle",
                 "pe_macs_per_cycle", "tg", "_next_buf", "pes", "stream", "engines",
                 "_local"}


def _self_attributes(cls: ast.ClassDef) -> set[str]:
    return {t.attr for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            and t.value.id == "self"}


def test_the_builder_carries_no_cross_op_handshake():
    """A decision one op's lowering makes for another is the lowering plan's (ADR-0920,
    ADR-1000), not an attribute of the builder: `Lowering` holds exactly its builder state."""
    tree = ast.parse((SRC / "compiler" / "lower" / "context.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Lowering"]
    assert _self_attributes(cls) == BUILDER_STATE


def test_a_lowering_modules_local_state_is_its_own():
    """`Lowering.local(Kind)` is asked only by the module defining `Kind`: what one module
    remembers across layers is no handshake with another."""
    bad, asked = [], 0
    for f in sorted((SRC / "compiler" / "lower").glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        own = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr == "local" and n.args:
                asked += 1
                kind = n.args[0]
                if not (isinstance(kind, ast.Name) and kind.id in own):
                    bad.append(f"{f.name}: local({ast.unparse(kind)})")
    assert asked >= 2 and bad == []


def _users(name: str) -> set[str]:
    """The modules of compiler/lower/ that use function `name` of another module: import
    it, or call it through its module (`module.name`)."""
    out = set()
    for f in sorted((SRC / "compiler" / "lower").glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
            continue  # its own module
        if any(name in names for _, names in _imports(f)) or any(
                isinstance(n, ast.Attribute) and n.attr == name for n in ast.walk(tree)):
            out.add(f.stem)
    return out


#: the cross-op decisions the plan pass makes: (a function deciding one, the modules using
#: it: the plan pass, or the plan-side module of the emitter layer that asks it)
PLANNED_DECISIONS = [
    ("fusable_clamp", {"conv_plan"}),    # which ReLU / Clip a conv's epilogue applies
    ("planned_clamp", {"plan_pass"}),
    ("norm_after", set()),               # which norm a one-row GEMM adds up and runs
    ("planned_norm", {"plan_pass"}),
    ("one_tile_cube", set()),            # which layers run as one tile, on which PE
    ("planned_lone", {"plan_pass"}),
    ("runs_whole", set()),               # which layers run whole, which storage is pinned
    ("planned_whole", {"plan_pass"}),
    ("layer_draws", set()),              # the PEs a layer draws, so where each starts
    ("planned_first_pe", {"plan_pass"}),
]


def test_the_tiles_only_carry_out_the_planned_decisions():
    """A decision the lowering plan records is asked by the plan pass only: no tile
    emitter, per-op lowering or the tiling pass imports its decider (ADR-1160), they read
    the plan's answer."""
    assert [(name, _users(name)) for name, _ in PLANNED_DECISIONS] == PLANNED_DECISIONS
