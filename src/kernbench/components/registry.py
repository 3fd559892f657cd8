"""Component registry: (kind, impl) → class (ADR-0015 in the specs' numbering).

Built-in timing models register themselves with `@register("pe_gemm", "pe_gemm_v1")`.
Third-party packages add models through the entry-point group `kernbench.components`,
one entry per model, named "<kind>.<impl>" and pointing at the class:

    [project.entry-points."kernbench.components"]
    "pe_gemm.my_gemm" = "my_pkg.gemm:MyGemm"

Then `impl: my_gemm` in a topology YAML (or `--set cube.pe_template.pe_gemm.impl=my_gemm`)
swaps the timing model and nothing else.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from kernbench.errors import InputError

ENTRY_POINT_GROUP = "kernbench.components"

_REGISTRY: dict[tuple[str, str], type] = {}
_loaded_plugins = False


def register(kind: str, impl: str):  # noqa: ANN201 - decorator
    def deco(cls: type) -> type:
        _REGISTRY[(kind, impl)] = cls
        cls.KIND = kind
        cls.IMPL = impl
        return cls

    return deco


def _load_builtins() -> None:
    import kernbench.components.builtin  # noqa: F401  (registers on import)


def _load_plugins() -> None:
    global _loaded_plugins
    if _loaded_plugins:
        return
    _loaded_plugins = True
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        kind, _, impl = ep.name.partition(".")
        if not impl:
            continue
        _REGISTRY.setdefault((kind, impl), ep.load())


def lookup(kind: str, impl: str, where: str = "") -> Any:
    _load_builtins()
    cls = _REGISTRY.get((kind, impl))
    if cls is None:
        _load_plugins()
        cls = _REGISTRY.get((kind, impl))
    if cls is None:
        known = sorted(i for k, i in _REGISTRY if k == kind)
        raise InputError(
            f"no timing model '{impl}' for kind '{kind}' (known: {', '.join(known) or 'none'})",
            where=where or None, field="impl",
        )
    return cls


def registered() -> list[tuple[str, str]]:
    _load_builtins()
    _load_plugins()
    return sorted(_REGISTRY)
