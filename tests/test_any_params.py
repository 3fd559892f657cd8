"""Parameters typed `Any` per package (outside triton_emu, whose tl values are dynamic by
design): a parameter is typed by its class wherever the class sits in a lower layer (a
`Topology`, a `Graph`, a `CompileState`, a `MemoryStore`, a `CmdqProgram`), a value of JSON or
YAML not yet checked by `object`, an array or dtype by numpy.typing's names. At most
`TARGET` per package."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kernbench"
TARGET = 5
CEILING: dict[str, int] = {}  # every package is at the target


def _any_params(source: str) -> int:
    n = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            every = a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]
            n += sum(1 for p in every if p.annotation is not None
                     and ast.unparse(p.annotation) in ("Any", "typing.Any"))
    return n


def count() -> Counter[str]:
    c: Counter[str] = Counter()
    for f in SRC.rglob("*.py"):
        rel = f.relative_to(SRC).parts
        c[rel[0] if len(rel) > 1 else f.stem] += _any_params(f.read_text(encoding="utf-8"))
    return c


def test_any_parameters_per_package():
    over = {pkg: n for pkg, n in count().items()
            if pkg != "triton_emu" and n > CEILING.get(pkg, TARGET)}
    assert over == {}


def test_the_count_sees_every_kind_of_parameter():
    src = ("def f(a: Any, b: int, *c: Any, d: typing.Any = 1, **e: Any) -> Any: ...\n"
           "async def g(x: Any) -> None: ...\n")
    assert _any_params(src) == 5
