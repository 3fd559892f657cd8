"""The checks an op's `constraints` hook makes of its attributes against each other and
against its tensors' ranks (an axis within the rank, a permutation, window lengths that
agree, a group that divides the channels). Each raises `OpRuleError` with the field
`attributes.<name>` of the attribute it blames and a reason that says what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernbench.ir.model import TensorIR
from kernbench.ir.ops.base import AttrView, OpRuleError


def rank(t: TensorIR | None) -> int:
    """The rank of a node's tensor (a left-out optional one: 0)."""
    return len(t.shape) if t is not None else 0


def fail(name: str, reason: str) -> None:
    raise OpRuleError(f"{name} {reason}", field=f"attributes.{name}")


def axis_in(name: str, axis: int, r: int) -> None:
    """`axis` names one of `r` axes, counted from the end when negative."""
    if not -r <= axis < r:
        fail(name, f"{axis} is not an axis of a rank-{r} tensor (expected {-r} to {r - 1})")


def axes_in(name: str, axes: Sequence[int], r: int) -> None:
    """Each of `axes` names one of `r` axes, none twice."""
    for ax in axes:
        axis_in(name, ax, r)
    if len({ax % r for ax in axes}) != len(axes):
        fail(name, f"{list(axes)} names an axis twice")


def length(name: str, values: Sequence[object], n: int, why: str) -> None:
    """`values` has `n` entries (`why`: what fixes n)."""
    if len(values) != n:
        fail(name, f"has {len(values)} entries, expected {n} ({why})")


def at_least(name: str, values: Sequence[int] | int, lo: int) -> None:
    """Every value of `values` (or the one) is `lo` or more."""
    vals = [values] if isinstance(values, int) else list(values)
    if any(v < lo for v in vals):
        fail(name, f"{values} has a value below {lo}")


def permutation(name: str, perm: Sequence[int], r: int) -> None:
    """`perm` is a permutation of range(r)."""
    if sorted(perm) != list(range(r)):
        fail(name, f"{list(perm)} is not a permutation of 0..{r - 1} (the input's rank is {r})")


def divides(name: str, value: int, whole: int, what: str) -> None:
    """`value` (1 or more) divides `whole`."""
    if value < 1 or whole % value:
        fail(name, f"{value} does not divide {what} ({whole})")


def window(a: object, r: int, *, kernel: Sequence[int] | None) -> None:
    """A convolution's or pooling window's attributes agree with the input's `r` - 2
    spatial axes: one stride, dilation (and kernel size) per axis, a begin and an end pad
    per axis; strides, dilations and the kernel positive, pads not negative."""
    n = r - 2
    for name in ("strides", "dilations"):
        length(name, getattr(a, name), n, f"one per spatial axis of a rank-{r} input")
        at_least(name, getattr(a, name), 1)
    length("pads", a.pads, 2 * n, f"a begin and an end per spatial axis of a rank-{r} input")
    at_least("pads", a.pads, 0)
    if kernel is not None:
        length("kernel_shape", kernel, n, f"one per spatial axis of a rank-{r} input")
        at_least("kernel_shape", kernel, 1)


def axis_of_input(cls: type, a: AttrView, ins: list[TensorIR | None],
                  outs: list[TensorIR | None]) -> None:
    """The `constraints` of an op whose `axis` names an axis of its first input (an op
    class sets `constraints = classmethod(rules.axis_of_input)`)."""
    axis_in("axis", a.axis, rank(ins[0]))
