"""One class per IR op type: what the verifier, the reference interpreter and the compiler
know about it, in one place.

An op class sets class-level facts and overrides what differs:
* ``op_type``       the IR `op_type` it is (the registry key);
* ``operands`` / ``results`` / ``attributes``  what a node of it carries (`defs`: names,
  arities, element types and ranks of its inputs and outputs, and which share an element
  type; each attribute's type, allowed values, default or required, help line). Every
  registered op declares all three (a family may declare them for its members;
  ``node_signature`` when they depend on an attribute). The verifier refuses a node that
  breaks them (`check_node`, `check_types`);
  ``attrs(node)`` is the node's attributes as a frozen dataclass (``Attrs``), defaults
  applied;
* ``constraints``   the attributes checked against each other and the tensors' ranks
  (`rules`: an axis within the rank, a permutation, window lengths that agree, ...);
* ``check_shapes``  the verifier's shape rule (``shape = "same"`` / ``"broadcast"`` for the
  common ones), raising `ShapeMismatch` with the reason;
* ``prepare``       the interpreter's kernel: the node → a `LayerCall` (a
  `kernbench.numerics.layers` kernel and its plain params); ``kernel`` / ``kernel_attrs``
  (declared attribute names) build it for an op whose params are its attributes;
* ``vector_opcode`` the vector opcode class (cmdq) its tiles become, if one;
  ``row_wise``: the row-wise lowering (`compiler.lower.rowwise`) tiles it with that opcode;
* ``layer_cost``    the pe_math cost-table entry that prices it when it runs whole on the
  vector engine: the vector opcode's ``cost_op`` unless the class names one; an op that
  runs on the vector engine and has no cost is refused when its class is defined (never
  priced as a copy by default); ``vector = False`` for a tensor-engine op;
* ``epilogue``      whether a GEMM's epilogue computes it (a fused step).

`register` adds a class to `OPS`; `op_class(op_type)` finds one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from kernbench.cmdq.opcodes.base import Opcode
from kernbench.config.schema import DEFAULT_MATH_OP_CYCLES
from kernbench.ir.model import Graph, LayerIR, QBits, TensorIR
from kernbench.ir.ops.defs import (
    Attr,
    Operand,
    attr_problem,
    attrs_class,
    bind,
    count_problem,
    type_problem,
)

Shape = list[int] | None


@dataclass(frozen=True)
class LayerCall:
    """A numerics layer kernel (`kernel`) and its plain keyword params."""

    kernel: str
    params: dict[str, Any] = field(default_factory=dict)


class AttrView(Protocol):
    """An op's typed attributes: the frozen dataclass `IrOp.Attrs` its declarations make
    (one class per op), each declared attribute an attribute of it, defaults applied."""

    def __getattr__(self, name: str) -> Any: ...


class OpRuleError(ValueError):
    """A node breaks its op's rule: the verifier reports `field` and the reason."""

    field = "attributes"

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        if field is not None:
            self.field = field


class QuantState(Protocol):
    """What an op's interpreter kernel reads of the interpreter (`interpreter.Interpreter`
    is one): the graph, whether it quantizes, and each node's bits and static scales."""

    g: Graph
    quantize: bool
    per_channel: bool

    def qa(self, node: LayerIR) -> QBits: ...

    def qw(self, node: LayerIR) -> QBits: ...

    def qkv(self, node: LayerIR) -> QBits: ...

    def static_act(self, tid: str, bits: QBits) -> dict[str, Any] | None: ...

    def weight_quant(self, tid: str) -> dict[str, Any] | None: ...


class ShapeMismatch(OpRuleError):
    """An op's shape rule does not hold."""

    field = "shape"


def bcast(*shapes: list[int]) -> list[int] | None:
    """The numpy broadcast of `shapes`, None when they do not broadcast."""
    try:
        return list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        return None


def check_same(ins: list[Shape], outs: list[Shape]) -> None:
    """The output has the first input's shape."""
    if outs[0] != ins[0]:
        raise ShapeMismatch(f"output {outs[0]} != input {ins[0]}")


def check_broadcast(ins: list[Shape], outs: list[Shape]) -> None:
    """The inputs broadcast to the output."""
    want = bcast(*ins)
    if want is None or outs[0] != want:
        raise ShapeMismatch(f"inputs {ins} broadcast to {want}, output is {outs[0]}")


class IrOp:
    """An IR op type (see the module docstring). Classes are not instantiated: every fact
    is a class attribute or a classmethod of the node."""

    op_type: ClassVar[str]
    #: "same": the output has the first input's shape; "broadcast": the inputs broadcast
    #: to the output; None: `check_shapes` says (nothing by default)
    shape: ClassVar[str | None] = None
    operands: ClassVar[tuple[Operand, ...]]
    results: ClassVar[tuple[Operand, ...]]
    attributes: ClassVar[tuple[Attr, ...]]
    #: the declared attributes by name, and their frozen dataclass (set per op class)
    attr_defs: ClassVar[dict[str, Attr]]
    Attrs: ClassVar[type]
    kernel: ClassVar[str | None] = None
    kernel_attrs: ClassVar[tuple[str, ...]] = ()
    vector_opcode: ClassVar[type[Opcode] | None] = None
    row_wise: ClassVar[bool] = False
    #: runs whole on the vector engine when not tiled (False: on the tensor engine)
    vector: ClassVar[bool] = True
    layer_cost: ClassVar[str | None] = None
    epilogue: ClassVar[bool] = False

    def __init_subclass__(cls, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if "op_type" not in cls.__dict__:
            return  # an abstract family (no op of its own)
        if "cost_of" not in cls.__dict__:  # else priced per node (ELEMENTWISE: by kind)
            if cls.layer_cost is None and cls.vector_opcode is not None:
                cls.layer_cost = cls.vector_opcode.cost_op
            if cls.vector and cls.layer_cost not in DEFAULT_MATH_OP_CYCLES:
                    raise TypeError(f"IR op {cls.op_type}: no pe_math cost ({cls.layer_cost!r}): "
                                "name its `layer_cost` or its `vector_opcode`")
        if cls.row_wise and cls.vector_opcode is None:
            raise TypeError(f"IR op {cls.op_type}: row-wise without a vector opcode")
        declared = getattr(cls, "attributes", ())
        cls.attr_defs = {a.name: a for a in declared}
        if len(cls.attr_defs) != len(declared):
            raise TypeError(f"IR op {cls.op_type}: an attribute is declared twice")
        if any(k not in cls.attr_defs for k in cls.kernel_attrs):
            raise TypeError(f"IR op {cls.op_type}: a kernel attribute is not declared")
        cls.Attrs = attrs_class(cls.__name__, declared)

    @classmethod
    def attrs(cls, node: LayerIR) -> Any:
        """`node`'s declared attributes as `cls.Attrs` (frozen), each default applied to
        an attribute the node leaves out; a missing required one is an `OpRuleError`."""
        a = node.attributes
        try:
            return cls.Attrs(**{k: a[k] for k in cls.attr_defs if k in a})
        except TypeError:
            missing = [k for k, d in cls.attr_defs.items() if d.required and k not in a]
            raise OpRuleError(f"{cls.op_type} node {node.id}: required attribute(s) "
                              f"{', '.join(missing)} missing") from None

    @classmethod
    def node_attr_defs(cls, node: LayerIR) -> dict[str, Attr]:
        """The attributes `node` may carry (`attr_defs`; an op whose attributes depend on
        another attribute says so here)."""
        return cls.attr_defs

    @classmethod
    def node_signature(cls, node: LayerIR) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
        """The operands and results `node` is held to (`operands`, `results`; an op whose
        signature depends on an attribute says so here)."""
        return cls.operands, cls.results

    @classmethod
    def check_node(cls, node: LayerIR) -> None:
        """Raise `OpRuleError` (its `field`: `inputs`, `outputs` or
        `attributes.<name>`) when `node` breaks the op's declarations."""
        operands, results = cls.node_signature(node)
        for ids, decls, what in ((node.inputs, operands, "inputs"),
                                 (node.outputs, results, "outputs")):
            why = count_problem(decls, ids, what)
            if why is not None:
                raise OpRuleError(f"{cls.op_type} {why}", field=what)
        bad = attr_problem(cls.node_attr_defs(node), node.attributes)
        if bad is not None:
            raise OpRuleError(bad[1], field=f"attributes.{bad[0]}")

    @classmethod
    def check_types(cls, node: LayerIR, tensors: dict[str, TensorIR]) -> None:
        """Raise `OpRuleError` (field `inputs.<name>` or `outputs.<name>`) when a tensor of
        `node` (its counts already checked) has an element type or rank its declaration
        does not allow, or not the element type of the operand it is declared `like`."""
        operands, results = cls.node_signature(node)
        ins, outs = bind(operands, node.inputs), bind(results, node.outputs)
        tids = [t for _, t in ins + outs]
        bad = type_problem(ins + outs, {t: _stands_for(tensors, t) for t in tids},
                           {t: len(tensors[t].shape) for t in tids})
        if bad is not None:
            k, why = bad
            (d, tid), what = (ins + outs)[k], "inputs" if k < len(ins) else "outputs"
            raise OpRuleError(f"{cls.op_type} {what[:-1]} {d.name} (tensor {tid!r}): {why}",
                              field=f"{what}.{d.name}")

    @classmethod
    def constraints(cls, a: AttrView, ins: list[TensorIR | None],
                    outs: list[TensorIR | None]) -> None:
        """Raise `OpRuleError` (field `attributes.<name>`) when the node's attributes `a`
        (its `Attrs`) disagree with each other or with its tensors `ins` / `outs` (None:
        a left-out optional one; counts, element types and ranks already checked), e.g.
        an axis outside the rank. Nothing by default; `rules` has the common checks."""

    @classmethod
    def cost_of(cls, node: LayerIR) -> str:
        """The pe_math entry that prices `node` run whole on the vector engine."""
        assert cls.layer_cost is not None, cls.op_type
        return cls.layer_cost

    @classmethod
    def check_shapes(cls, node: LayerIR, ins: list[Shape], outs: list[Shape]) -> None:
        """Raise `ShapeMismatch` when `node`'s shapes break the op's rule (`OpRuleError`
        when an attribute does)."""
        if cls.shape == "same":
            check_same(ins, outs)
        elif cls.shape == "broadcast":
            check_broadcast(ins, outs)

    @classmethod
    def prepare(cls, it: QuantState | None, node: LayerIR) -> LayerCall:
        """The interpreter's call for `node` (`it`: the Interpreter's quantization state,
        None for ops that need none)."""
        assert cls.kernel is not None, cls.op_type
        a = cls.attrs(node)
        return LayerCall(cls.kernel, {k: getattr(a, k) for k in cls.kernel_attrs})


def _stands_for(tensors: dict[str, TensorIR], tid: str) -> tuple[str, ...]:
    """The element types tensor `tid` stands for: its stored one, and for an imported
    quantized constant (real = (q - zero_point) * scale) also its scale's, the type of the
    reals its integers encode."""
    t = tensors[tid]
    scale = tensors.get(t.quant.scale) if t.const and t.quant is not None else None
    return (t.dtype,) if scale is None else (t.dtype, scale.dtype)


OPS: dict[str, type[IrOp]] = {}


def register(cls: type[IrOp]) -> type[IrOp]:
    """Add `cls` to `OPS` (a class decorator); an op type is registered once, and only
    when it declares its operands, results and attributes."""
    for what in ("operands", "results", "attributes"):
        if not hasattr(cls, what):
            raise TypeError(f"IR op {cls.op_type}: declares no {what}")
    names = {d.name for d in cls.operands + cls.results}
    for d in cls.operands + cls.results:
        if d.like is not None and d.like not in names:
            raise TypeError(f"IR op {cls.op_type}: {d.name} is like {d.like!r}, which it "
                            "does not declare")
    if cls.op_type in OPS:
        raise TypeError(f"IR op {cls.op_type} registered twice")
    OPS[cls.op_type] = cls
    return cls


def op_class(op_type: str) -> type[IrOp] | None:
    return OPS.get(op_type)


def node_attrs(node: LayerIR) -> Any:
    """`node`'s attributes typed by its op class (`IrOp.attrs`), defaults applied."""
    return OPS[node.op_type].attrs(node)


def ops_where(pred: Callable[[type[IrOp]], bool]) -> tuple[str, ...]:
    """The op types whose class satisfies `pred`, sorted."""
    return tuple(sorted(k for k, c in OPS.items() if pred(c)))
