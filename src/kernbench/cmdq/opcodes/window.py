"""The 2-D sliding-window fields that TE_CONV_TILE, VE_DWCONV_TILE and VE_POOL_TILE share
: input size, kernel, strides, dilations and per-side zero padding.

Height and width have their own stride, dilation and padding; a field left null takes
the older single value (``stride``, ``dilation``, ``padding``), so a 1.1 TE_CONV_TILE
entry means what it meant. Output size per dimension (ONNX):
``floor((size + pad_lo + pad_hi - ((k - 1) * dilation + 1)) / stride) + 1``; with
``ceil_mode`` (pooling) the division rounds up, and a last window that would start in the
high padding is dropped.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from kernbench.cmdq.opcodes.base import NonNegInt, PosInt, Rules


def window_out(size: int, lo: int, hi: int, k: int, stride: int, dil: int,
               ceil_mode: bool = False) -> int:
    """Output positions of a window along one dimension (< 1: the window does not fit)."""
    total = size + lo + hi - ((k - 1) * dil + 1)
    if total < 0:
        return 0
    o = (math.ceil(total / stride) if ceil_mode else total // stride) + 1
    if ceil_mode and (o - 1) * stride >= size + lo:
        o -= 1
    return o


class Window2D(BaseModel):
    """A 2-D window over an input plane of h × w (mixin of the window opcodes)."""

    h: PosInt = Field(description="Input height (unpadded).")
    w: PosInt = Field(description="Input width (unpadded).")
    kh: PosInt = Field(description="Window (kernel) height.")
    kw: PosInt = Field(description="Window (kernel) width.")
    stride: PosInt = Field(1, description="Stride along h (and w unless stride_w).")
    stride_w: PosInt | None = Field(None, description="Stride along w.")
    dilation: PosInt = Field(1, description="Dilation along h (and w unless "
                                            "dilation_w).")
    dilation_w: PosInt | None = Field(None, description="Dilation along w.")
    padding: NonNegInt = Field(0, description="Zero padding on each side of h and w, for "
                                              "the sides given no pad_* value.")
    pad_top: NonNegInt | None = Field(None, description="Padding above row 0.")
    pad_left: NonNegInt | None = Field(None, description="Padding left of col 0.")
    pad_bottom: NonNegInt | None = Field(None, description="Padding below.")
    pad_right: NonNegInt | None = Field(None, description="Padding right.")
    pad_value: int | None = Field(
        None, description="Value of the padding: an integer activation's zero "
        "point (QLinearConv pads the real value 0); null: 0.")

    def strides(self) -> list[int]:
        """[stride along h, stride along w]."""
        return [self.stride, self.stride_w or self.stride]

    def dilations(self) -> list[int]:
        """[dilation along h, dilation along w]."""
        return [self.dilation, self.dilation_w or self.dilation]

    def pads(self) -> list[int]:
        """[top, left, bottom, right] (ONNX order: begins, then ends)."""
        p = self.padding
        return [p if v is None else v
                for v in (self.pad_top, self.pad_left, self.pad_bottom, self.pad_right)]

    @property
    def out_hw(self) -> tuple[int, int]:
        """(h_out, w_out), floor mode; a value below 1 means the window does not fit."""
        return self.out_dims(False)

    def out_dims(self, ceil_mode: bool) -> tuple[int, int]:
        """(h_out, w_out) in floor or ceil mode; below 1: the window does not fit."""
        t, lf, b, r = self.pads()
        (sh, sw), (dh, dw) = self.strides(), self.dilations()
        return (window_out(self.h, t, b, self.kh, sh, dh, ceil_mode),
                window_out(self.w, lf, r, self.kw, sw, dw, ceil_mode))

    def window_rules(self, v: Rules, ceil_mode: bool = False) -> bool:
        """The (dilated) window fits the padded input in both dimensions."""
        h_out, w_out = self.out_dims(ceil_mode)
        if h_out < 1:
            v.add("kh", f"window height {self.kh} (dilation {self.dilations()[0]}) does not "
                  f"fit the input height {self.h} with its padding")
        if w_out < 1:
            v.add("kw", f"window width {self.kw} (dilation {self.dilations()[1]}) does not "
                  f"fit the input width {self.w} with its padding")
        return h_out >= 1 and w_out >= 1

    def geometry(self) -> dict[str, Any]:
        """The data description's window params."""
        out: dict[str, Any] = {"strides": self.strides(), "pads": self.pads(),
                               "dilations": self.dilations()}
        if self.pad_value:
            out["pad_value"] = int(self.pad_value)
        return out
