"""The data-movement ops: views (RESHAPE, IDENTITY), copies (TRANSPOSE, SLICE, SPLIT,
CONCAT, EXPAND, TILE, PAD, ...) and lookups (EMBEDDING, GATHER*, SCATTER*). Run whole on
the vector engine, each moves every element once: priced as a copy."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kernbench.cmdq.opcodes.ve import VeCopyTile, VeTransposeTile
from kernbench.ir.model import LayerIR, TensorIR
from kernbench.ir.ops import rules
from kernbench.ir.ops.base import (
    AttrView,
    IrOp,
    LayerCall,
    QuantState,
    Shape,
    ShapeMismatch,
    bcast,
    register,
)
from kernbench.ir.ops.defs import (
    INT,
    NUMBER,
    attr,
    operand,
    opt_operand,
    result,
    var_operand,
    var_result,
)

_X = (operand("x"),)
_Y = (result("y", like="x"),)
#: a lookup: any data, integer indices; the output has the data's element type
_LOOKUP = (operand("data"), operand("indices", INT))
_LOOKED_UP = (result("y", like="data"),)
_VIEW = attr("view", bool, False, "the output is the input's memory read another way (no "
             "copy)")


class DataMovement(IrOp):
    """An op that moves elements without arithmetic."""

    layer_cost: ClassVar[str | None] = "copy"
    operands, results, attributes = _X, _Y, ()


@register
class Identity(DataMovement):
    op_type = "IDENTITY"
    shape = "same"
    kernel = "identity"
    vector_opcode = VeCopyTile


@register
class Reshape(DataMovement):
    op_type = "RESHAPE"
    attributes = (attr("shape", list[int], help="the output shape"), _VIEW)
    kernel = "reshape"
    kernel_attrs = ("shape",)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        shape = cls.attrs(node).shape
        if int(np.prod(ins[0])) != int(np.prod(outs[0])) or shape != outs[0]:
            raise ShapeMismatch(f"{ins[0]} -> {outs[0]} (attribute shape {shape})")


@register
class Transpose(DataMovement):
    op_type = "TRANSPOSE"
    attributes = (attr("perm", list[int], help="output axis i is input axis perm[i]"), _VIEW)
    kernel = "transpose"
    kernel_attrs = ("perm",)
    vector_opcode = VeTransposeTile
    layer_cost = None  # the vector opcode's

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.permutation("perm", a.perm, rules.rank(ins[0]))

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        perm = cls.attrs(node).perm
        if sorted(perm) != list(range(len(ins[0]))) or [ins[0][p] for p in perm] != outs[0]:
            raise ShapeMismatch(f"{ins[0]} permuted by {perm} is not {outs[0]}")


@register
class Concat(DataMovement):
    op_type = "CONCAT"
    operands = (operand("x"), var_operand("more", like="x"))
    attributes = (attr("axis", int, help="the joined axis"),)
    kernel = "concat"
    kernel_attrs = ("axis",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        ax = cls.attrs(node).axis
        want = list(ins[0])
        want[ax] = sum(s[ax] for s in ins)
        if outs[0] != want or any(len(s) != len(want) for s in ins):
            raise ShapeMismatch(f"concat of {ins} on axis {ax} is not {outs[0]}")


@register
class Split(DataMovement):
    op_type = "SPLIT"
    results = (result("y", like="x"), var_result("more", like="x"))
    attributes = (attr("axis", int, help="the split axis"),
                  attr("sizes", list[int], help="each output's size along it"))
    kernel = "split"
    kernel_attrs = ("axis", "sizes")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))
        rules.length("sizes", a.sizes, len(outs), "one per output")
        rules.at_least("sizes", a.sizes, 0)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        a = cls.attrs(node)
        ax = a.axis
        if sum(a.sizes) != ins[0][ax] or [o[ax] for o in outs] != a.sizes:
            raise ShapeMismatch(f"split sizes {a.sizes} of {ins[0]} on axis {ax}")


@register
class Slice(DataMovement):
    op_type = "SLICE"
    attributes = (attr("starts", list[int], help="the first index per axis"),
                  attr("ends", list[int], help="the end index per axis (exclusive)"),
                  attr("steps", list[int], help="the step per axis"))
    kernel = "slice"
    kernel_attrs = ("starts", "ends", "steps")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """One start, end and step per leading axis; no step of 0."""
        if len(a.starts) > rules.rank(ins[0]):
            rules.fail("starts", f"has {len(a.starts)} entries for a rank-"
                       f"{rules.rank(ins[0])} input")
        rules.length("ends", a.ends, len(a.starts), "one per start")
        rules.length("steps", a.steps, len(a.starts), "one per start")
        if 0 in a.steps:
            rules.fail("steps", f"{a.steps} has a step of 0")


@register
class Expand(DataMovement):
    op_type = "EXPAND"
    attributes = (attr("shape", list[int], help="the output shape"),)
    kernel = "expand"
    kernel_attrs = ("shape",)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        if bcast(ins[0], outs[0]) != outs[0]:
            raise ShapeMismatch(f"{ins[0]} does not broadcast to {outs[0]}")


@register
class Embedding(DataMovement):
    op_type = "EMBEDDING"
    operands = (operand("ids", INT), operand("table", rank=2))
    results = (result("y", like="table"),)
    attributes = (attr("gather_rows", bool, False, "the table is read row by row where it "
                       "is (the compiler's row gather)"),)
    kernel = "embedding"

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        if len(ins[1]) != 2 or outs[0] != ins[0] + [ins[1][1]]:
            raise ShapeMismatch(f"ids {ins[0]} into table {ins[1]} -> {outs[0]}")


@register
class Gather(DataMovement):
    op_type = "GATHER"
    operands, results = _LOOKUP, _LOOKED_UP
    attributes = (attr("axis", int, help="the indexed axis"),)
    kernel = "gather"
    kernel_attrs = ("axis",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))


@register
class GatherElements(DataMovement):
    op_type = "GATHER_ELEMENTS"
    operands, results = _LOOKUP, _LOOKED_UP
    attributes = (attr("axis", int, help="the indexed axis"),)
    kernel = "gather_elements"
    kernel_attrs = ("axis",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))


@register
class GatherNd(DataMovement):
    op_type = "GATHER_ND"
    operands, results = _LOOKUP, _LOOKED_UP
    attributes = (attr("batch_dims", int, 0, "the leading batch axes"),)
    kernel = "gather_nd"
    kernel_attrs = ("batch_dims",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        r = min(rules.rank(ins[0]), rules.rank(ins[1]))
        if not 0 <= a.batch_dims < r:
            rules.fail("batch_dims", f"{a.batch_dims} is not below the smaller rank of data "
                       f"and indices ({r})")


@register
class Tile(DataMovement):
    op_type = "TILE"
    attributes = (attr("repeats", list[int], help="the copies per axis"),)
    kernel = "tile"
    kernel_attrs = ("repeats",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.length("repeats", a.repeats, rules.rank(ins[0]), "one per input axis")
        rules.at_least("repeats", a.repeats, 0)


@register
class Pad(DataMovement):
    op_type = "PAD"
    operands = (operand("x"), opt_operand("value", like="x", rank=(0, 1)))
    attributes = (
        attr("pads", list[int], help="every axis's begin then every axis's end"),
        attr("mode", str, help="what fills the border", values=("constant", "reflect", "edge",
                                                                 "wrap")),
        attr("value", float, help="constant mode's fill (unless the value input is given)"),
    )

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        r = rules.rank(ins[0])
        rules.length("pads", a.pads, 2 * r, f"a begin and an end per axis of a rank-{r} input")

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = cls.attrs(node)
        return LayerCall("pad", {"pads": a.pads, "mode": a.mode, "value_attr": a.value})


@register
class ScatterElements(DataMovement):
    op_type = "SCATTER_ELEMENTS"
    operands = (*_LOOKUP, operand("updates", like="data"))
    results = _LOOKED_UP
    attributes = (attr("axis", int, help="the indexed axis"),
                  attr("reduction", str, "none", "how an update meets the value there",
                       values=("none", "add", "mul", "max", "min")))
    kernel = "scatter_elements"
    kernel_attrs = ("axis", "reduction")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.axis_in("axis", a.axis, rules.rank(ins[0]))


@register
class ScatterNd(DataMovement):
    op_type = "SCATTER_ND"
    operands = (*_LOOKUP, operand("updates", like="data"))
    results = _LOOKED_UP
    attributes = (attr("reduction", str, "none", "how an update meets the value there",
                       values=("none", "add", "mul", "max", "min")),)
    kernel = "scatter_nd"
    kernel_attrs = ("reduction",)


@register
class Trilu(DataMovement):
    op_type = "TRILU"
    operands = (operand("x", rank=(2, None)), opt_operand("k", INT, rank=0))
    attributes = (attr("upper", bool, help="keep the upper triangle (else the lower)"),)
    kernel = "trilu"
    kernel_attrs = ("upper",)


@register
class OneHot(DataMovement):
    op_type = "ONE_HOT"
    operands = (operand("indices", NUMBER), operand("depth", NUMBER, rank=(0, 1)),
                operand("values", rank=1))
    results = (result("y", like="values"),)
    attributes = (attr("axis", int, help="the new axis"),)
    kernel = "one_hot"
    kernel_attrs = ("axis",)

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """`axis` names an axis of the output (one more than the indices have)."""
        rules.axis_in("axis", a.axis, rules.rank(ins[0]) + 1)


@register
class DepthToSpace(DataMovement):
    op_type = "DEPTH_TO_SPACE"
    operands = (operand("x", rank=4),)
    attributes = (attr("blocksize", int, help="the block edge"),
                  attr("mode", str, help="the channel order", values=("DCR", "CRD")))
    kernel = "depth_to_space"
    kernel_attrs = ("blocksize", "mode")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        rules.at_least("blocksize", a.blocksize, 1)
        if ins[0].shape[1] % a.blocksize ** 2:
            rules.fail("blocksize", f"{a.blocksize}: its square does not divide the channels "
                       f"({ins[0].shape[1]})")


@register
class SpaceToDepth(DataMovement):
    op_type = "SPACE_TO_DEPTH"
    operands = (operand("x", rank=4),)
    attributes = (attr("blocksize", int, help="the block edge"),
                  attr("mode", str, help="the channel order", values=("DCR", "CRD")))
    kernel = "space_to_depth"
    kernel_attrs = ("blocksize", "mode")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        for ax in (2, 3):
            rules.divides("blocksize", a.blocksize, ins[0].shape[ax], f"axis {ax}")
