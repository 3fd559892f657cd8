"""What the expert-layer and MLA builders use of `llm_graph`'s graph builder (a Protocol,
so that they need not import it: `llm_graph` imports them)."""

from __future__ import annotations

from typing import Any, Protocol

from kernbench.ir.model import Graph
from kernbench.models.hf_config import LlmArch


class Shape(Protocol):
    batch: int
    seq_len: int
    kv_len: int


class GraphBuilder(Protocol):
    """`llm_graph._Builder`: the architecture, the step's shape, the graph being built and
    the node helpers (ids prefixed by the caller; fp32 activations unless retyped)."""

    a: LlmArch
    s: Shape
    g: Graph

    def act(self, tid: str, shape: list[int], dtype: str = ..., role: str = ...) -> str: ...

    def const(self, tid: str, shape: list[int], dtype: str = ...) -> str: ...

    def op(self, nid: str, op_type: str, ins: list[str], outs: list[tuple[str, list[int]]],
           attrs: dict[str, Any] | None = ..., shape: dict[str, int] | None = ...
           ) -> list[str]: ...

    def one(self, nid: str, op_type: str, ins: list[str], shp: list[int],
            attrs: dict[str, Any] | None = ..., shape: dict[str, int] | None = ...) -> str: ...

    def norm(self, nid: str, x: str, wname: str, width: int | None = ...) -> str: ...

    def gemm(self, nid: str, x: str, wname: str, n_out: int, bias: bool) -> str: ...

    def heads(self, nid: str, x: str, h: int, qk_norm: str | None) -> str: ...

    def rope(self, nid: str, x: str) -> str: ...
