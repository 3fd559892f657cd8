"""The table of timing models, (kind, impl) → class, and the `@register` decorator.

Built-in models (components/builtin) register themselves here on import; the registry
(components/registry.py) loads them and third-party plugins and looks models up. Keeping
the table apart from the lookup lets builtin import it without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable

#: (kind, impl) → component class (or, for `ucie`, the link server class)
TIMING_MODELS: dict[tuple[str, str], type] = {}


def register(kind: str, impl: str) -> Callable[[type], type]:
    """Class decorator: record the class as timing model `impl` of component `kind`."""

    def deco(cls: type) -> type:
        TIMING_MODELS[(kind, impl)] = cls
        cls.KIND = kind
        cls.IMPL = impl
        return cls

    return deco
