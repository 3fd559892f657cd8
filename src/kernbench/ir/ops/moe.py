"""MOE_ROUTE: the router's top-k expert indices → token rows grouped by expert.

Input: the top-k indices int [T, k]. Outputs (`numerics.moe.moe_route`), int64: the
token rows of every chosen expert, [c_e] each, then the stacked-output row of every
slot, [T] each. Attributes: `n_experts`, and `counts` — the rows of
every expert, which fix the row counts of the per-expert GEMMs the graph holds. It runs
whole on the vector engine, priced as a copy of its T·k indices (a counting sort is one
pass over them).
"""

from __future__ import annotations

from kernbench.ir.model import LayerIR, TensorIR
from kernbench.ir.ops import rules
from kernbench.ir.ops.base import AttrView, IrOp, Shape, ShapeMismatch, register
from kernbench.ir.ops.defs import INT, attr, one_of, operand, var_result


@register
class MoeRoute(IrOp):
    op_type = "MOE_ROUTE"
    kernel = "moe_route"
    kernel_attrs = ("n_experts", "counts")
    layer_cost = "copy"
    operands = (operand("indices", INT, rank=2),)
    results = (var_result("rows", one_of("int64"), rank=1),)
    attributes = (attr("n_experts", int, help="the experts"),
                  attr("counts", list[int], help="the token rows of every expert"))

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """One row count per expert, none negative."""
        rules.length("counts", a.counts, a.n_experts, "one per expert, n_experts")
        rules.at_least("counts", a.counts, 0)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        idx = ins[0]
        counts = cls.attrs(node).counts
        t, k = idx
        if sum(counts) != t * k:
            raise ShapeMismatch(f"counts sum to {sum(counts)}, the indices hold {t * k} pairs")
        want = [[c] for c in counts if c > 0] + [[t]] * k
        if outs != want:
            raise ShapeMismatch(f"outputs {outs} != {want}")
