"""Component registry: (kind, impl) → class.

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

import kernbench.components.builtin  # noqa: F401  (registers the built-in models)
from kernbench.components.catalog import TIMING_MODELS, register
from kernbench.errors import InputError

__all__ = ["ENTRY_POINT_GROUP", "lookup", "register", "registered"]

ENTRY_POINT_GROUP = "kernbench.components"

_REGISTRY = TIMING_MODELS
_loaded_plugins = False


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
    """The class of timing model `impl` for `kind` (plugins loaded on a miss); InputError
    naming `where` and the known impls when there is none."""
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
    """Every (kind, impl) known, built-in and plugin."""
    _load_plugins()
    return sorted(_REGISTRY)
