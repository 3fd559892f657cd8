"""One module owns stats.json (report/stats.py): no other module of src/ writes a key into
a stats document, and docs/stats.md documents exactly its top-level keys.

A stats document is spotted by its variable's name (`stats`, `st`, `*.stats`), which is how
every flow names it, written at a string key; `host/serve/` writes a different document (docs/serving.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kernbench.report.stats import TOP_KEYS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kernbench"
OWNER = SRC / "report" / "stats.py"
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__"}


def _is_doc(node: ast.expr) -> bool:
    name = ast.unparse(node)
    return name in ("stats", "st") or name.endswith(".stats")


def writes(source: str) -> list[str]:
    """`stats[...] = ...`, `del stats[...]`, `stats.update(...)` and the like in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            if (isinstance(t, ast.Subscript) and _is_doc(t.value)
                    and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)):
                found.append(ast.unparse(t))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS and _is_doc(node.func.value)):
            found.append(ast.unparse(node.func))
    return found


def test_only_the_owner_writes_stats():
    bad = {}
    for f in sorted(SRC.rglob("*.py")):
        if f == OWNER or "serve" in f.relative_to(SRC).parts:
            continue
        w = writes(f.read_text(encoding="utf-8"))
        if w:
            bad[str(f.relative_to(SRC))] = w
    assert bad == {}


def test_the_check_sees_each_kind_of_write():
    src = ("stats['a'] = 1\nst['b'] += 1\nres.stats['c'] = 2\nstats.update(x)\n"
           "del stats['d']\nx = stats['e']\nother['f'] = 1\nst[..., 0] = 1\n")
    assert writes(src) == ["stats['a']", "st['b']", "res.stats['c']", "stats['d']",
                           "stats.update"]


def test_docs_list_every_top_level_key():
    text = (ROOT / "docs" / "stats.md").read_text(encoding="utf-8")
    table = text.split("| key | type | meaning |", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `([a-z_0-9]+)` \|", table, flags=re.M)
    assert sorted(documented) == sorted(TOP_KEYS)
