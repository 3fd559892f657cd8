"""The data-movement ops: views (RESHAPE, IDENTITY), copies (TRANSPOSE, SLICE, SPLIT,
CONCAT, EXPAND, TILE, PAD, ...) and lookups (EMBEDDING, GATHER*, SCATTER*). Run whole on
the vector engine, each moves every element once: priced as a copy."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from kernbench.cmdq.opcodes.ve import VeCopyTile, VeTransposeTile
from kernbench.ir.model import LayerIR
from kernbench.ir.ops.base import IrOp, LayerCall, QuantState, Shape, ShapeMismatch, bcast, register


class DataMovement(IrOp):
    """An op that moves elements without arithmetic."""

    layer_cost: ClassVar[str | None] = "copy"


@register
class Identity(DataMovement):
    op_type = "IDENTITY"
    shape = "same"
    kernel = "identity"
    vector_opcode = VeCopyTile


@register
class Reshape(DataMovement):
    op_type = "RESHAPE"
    kernel = "reshape"
    kernel_attrs = ("shape",)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        a = node.attributes
        if int(np.prod(ins[0])) != int(np.prod(outs[0])) or a.get("shape") != outs[0]:
            raise ShapeMismatch(f"{ins[0]} -> {outs[0]} (attribute shape {a.get('shape')})")


@register
class Transpose(DataMovement):
    op_type = "TRANSPOSE"
    kernel = "transpose"
    kernel_attrs = ("perm",)
    vector_opcode = VeTransposeTile
    layer_cost = None  # the vector opcode's

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        perm = node.attributes.get("perm", [])
        if sorted(perm) != list(range(len(ins[0]))) or [ins[0][p] for p in perm] != outs[0]:
            raise ShapeMismatch(f"{ins[0]} permuted by {perm} is not {outs[0]}")


@register
class Concat(DataMovement):
    op_type = "CONCAT"
    kernel = "concat"
    kernel_attrs = ("axis",)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        ax = node.attributes.get("axis", 0)
        want = list(ins[0])
        want[ax] = sum(s[ax] for s in ins)
        if outs[0] != want or any(len(s) != len(want) for s in ins):
            raise ShapeMismatch(f"concat of {ins} on axis {ax} is not {outs[0]}")


@register
class Split(DataMovement):
    op_type = "SPLIT"
    kernel = "split"
    kernel_attrs = ("axis", "sizes")

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        a = node.attributes
        ax = a.get("axis", 0)
        if sum(a.get("sizes", [])) != ins[0][ax] or [o[ax] for o in outs] != a.get("sizes"):
            raise ShapeMismatch(f"split sizes {a.get('sizes')} of {ins[0]} on axis {ax}")


@register
class Slice(DataMovement):
    op_type = "SLICE"
    kernel = "slice"
    kernel_attrs = ("starts", "ends", "steps")


@register
class Expand(DataMovement):
    op_type = "EXPAND"
    kernel = "expand"
    kernel_attrs = ("shape",)

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        if bcast(ins[0], outs[0]) != outs[0]:
            raise ShapeMismatch(f"{ins[0]} does not broadcast to {outs[0]}")


@register
class Embedding(DataMovement):
    op_type = "EMBEDDING"
    kernel = "embedding"

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        if len(ins[1]) != 2 or outs[0] != ins[0] + [ins[1][1]]:
            raise ShapeMismatch(f"ids {ins[0]} into table {ins[1]} -> {outs[0]}")


@register
class Gather(DataMovement):
    op_type = "GATHER"
    kernel = "gather"
    kernel_attrs = ("axis",)


@register
class GatherElements(DataMovement):
    op_type = "GATHER_ELEMENTS"
    kernel = "gather_elements"
    kernel_attrs = ("axis",)


@register
class GatherNd(DataMovement):
    op_type = "GATHER_ND"
    kernel = "gather_nd"
    kernel_defaults: ClassVar[dict[str, Any]] = {"batch_dims": 0}


@register
class Tile(DataMovement):
    op_type = "TILE"
    kernel = "tile"
    kernel_attrs = ("repeats",)


@register
class Pad(DataMovement):
    op_type = "PAD"

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        a = node.attributes
        return LayerCall("pad", {"pads": a["pads"], "mode": a["mode"], "value_attr": a["value"]})


@register
class ScatterElements(DataMovement):
    op_type = "SCATTER_ELEMENTS"
    kernel = "scatter_elements"
    kernel_attrs = ("axis",)
    kernel_defaults: ClassVar[dict[str, Any]] = {"reduction": "none"}


@register
class ScatterNd(DataMovement):
    op_type = "SCATTER_ND"
    kernel = "scatter_nd"
    kernel_defaults: ClassVar[dict[str, Any]] = {"reduction": "none"}


@register
class Trilu(DataMovement):
    op_type = "TRILU"
    kernel = "trilu"
    kernel_attrs = ("upper",)


@register
class OneHot(DataMovement):
    op_type = "ONE_HOT"
    kernel = "one_hot"
    kernel_attrs = ("axis",)


@register
class DepthToSpace(DataMovement):
    op_type = "DEPTH_TO_SPACE"
    kernel = "depth_to_space"
    kernel_attrs = ("blocksize", "mode")


@register
class SpaceToDepth(DataMovement):
    op_type = "SPACE_TO_DEPTH"
    kernel = "space_to_depth"
    kernel_attrs = ("blocksize", "mode")
