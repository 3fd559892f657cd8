"""The NPU IR data model (spec `npu-ir-spec.md` §3-§7, §12).

`Graph` is the whole IR document: the layer DAG (`nodes`, `inputs`, `outputs`,
`metadata`), the TensorTable (`tensors`), the QConfig used to annotate it, and the
version fields of §12. Constant data (weights, scales, zero points, small constants)
lives in `Graph.weights`, a side dict keyed by tensor id that is never inlined in
`ir.json`; it is written next to it as `weights.npz` (see `save` / `load`).

JSON output is deterministic: keys sorted, node order = topological order of the graph,
tensor table sorted by id. `from_json(to_json(g))` reproduces the same text.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernbench.errors import MAX_MODEL_BYTES, InputError, check_input_file, read_input_text
from kernbench.numerics.npz import write_npz

IR_VERSION = "1.0"
SPEC_VERSION = "1.0"

#: Legal values of a qbits field: integer bit widths, float "no quantization" modes, or
#: None (fp32, unquantized). Spec §7.1: "int4/8/16/fp16 등 확장 가능".
INT_QBITS = (2, 4, 8, 16)
FLOAT_QBITS = ("fp16", "bf16")
#: block-float weight formats (numerics.block_float): a weight's qbits only
BFP_QBITS = ("bfp8_b", "bfp4_b")
QBits = Literal[2, 4, 8, 16, "fp16", "bf16", "bfp8_b", "bfp4_b"] | None

DTYPES = (
    "fp32", "fp16", "bf16", "fp64",
    "int2", "int4", "int8", "int16", "int32", "int64",
    "uint2", "uint4", "uint8", "uint16", "uint32", "uint64",
    "bool",
)  # fmt: skip
Role = Literal["activation", "weight", "kv", "intermediate"]

MAX_IR_JSON_BYTES = 256 * 1024 * 1024
#: numpy dtype of a shape-only stand-in by IR dtype (the rest are float32)
_STAND_IN_DTYPE = {"int64": np.int64, "int32": np.int32, "int8": np.int8, "bool": np.bool_}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class _Open(BaseModel):
    # IR spec §12: the IR grows fields with new opcodes, backward-compatibly. A field this
    # version does not know is kept (model_extra) and written back unchanged.
    model_config = ConfigDict(extra="allow", validate_assignment=False)


class QuantParams(_Open):
    """How an integer tensor maps to real numbers: real = (q - zero_point) * scale.

    `scale` / `zero_point` name constant tensors (in `Graph.weights`). `axis` is the
    per-channel axis (None = per-tensor); `block_size` > 0 means blocked along `axis`
    (ONNX opset 21 blocked quantization, e.g. int4 weights with one scale per 32 rows).
    Unknown keys are kept and written back, as in every IR object (spec §12).
    """

    scale: str
    zero_point: str | None = None
    axis: int | None = None
    block_size: int = 0
    dtype: Literal["int2", "int4", "int8", "int16", "uint2", "uint4", "uint8", "uint16"]


class TensorIR(_Open):
    """One TensorTable entry (spec §6.1). Unknown fields are kept (spec §12)."""

    id: str
    shape: list[int]
    dtype: str
    qbits: QBits = None
    role: Role = "intermediate"
    layout: str | None = None
    producer: str | None = None
    consumers: list[str] = Field(default_factory=list)
    #: True when the data is a constant held in `Graph.weights` (ONNX initializer).
    const: bool = False
    #: Present when the stored data is integer-quantized (imported QDQ / QOperator).
    quant: QuantParams | None = None


class LayerIR(_Open):
    """One node of the layer graph (spec §5.1). Unknown fields are kept (spec §12);
    `metadata` is free-form (`layer_name`, `subgraph`, `onnx_nodes`, ...)."""

    id: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any] = Field(default_factory=dict)
    shape: dict[str, int] = Field(default_factory=dict)
    qbits_weight: QBits = None
    qbits_activation: QBits = None
    qbits_kv: QBits = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Graph(_Strict):
    """The IR document: layer DAG + TensorTable + QConfig + version fields."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    ir_version: str = IR_VERSION
    spec_version: str = SPEC_VERSION
    created_by: str = "kernbench.ir"
    # Left None by default so that the same model gives byte-identical ir.json.
    created_at: str | None = None
    nodes: list[LayerIR] = Field(default_factory=list)
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tensors: dict[str, TensorIR] = Field(default_factory=dict)
    qconfig: dict[str, Any] | None = None
    #: `graph.edges` (spec §3: tensor references between layers), kept as given; the
    #: compiler derives the edges from the nodes' inputs / outputs.
    edges: list[Any] | None = None
    #: Unknown top-level and `graph` fields, kept and written back (spec §12).
    extensions: dict[str, Any] = Field(default_factory=dict)
    weights: dict[str, np.ndarray] = Field(default_factory=dict, exclude=True)

    # ---------------------------------------------------------------- helpers
    def node(self, node_id: str) -> LayerIR:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(node_id)

    def op_types(self) -> list[str]:
        """Op types in node order (handy in tests)."""
        return [n.op_type for n in self.nodes]

    def rebuild_links(self) -> None:
        """Recompute every tensor's producer and consumers from the node list."""
        for t in self.tensors.values():
            t.producer = None
            t.consumers = []
        for n in self.nodes:
            for tid in n.inputs:
                if tid and tid in self.tensors and n.id not in self.tensors[tid].consumers:
                    self.tensors[tid].consumers.append(n.id)
            for tid in n.outputs:
                if tid in self.tensors:
                    self.tensors[tid].producer = n.id

    # ---------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        graph_ext = self.extensions.get("graph", {})
        top_ext = {k: v for k, v in self.extensions.items() if k != "graph"}
        d = self._core_dict()
        d["graph"].update(graph_ext)
        if self.edges is not None:
            d["graph"]["edges"] = self.edges
        return {**top_ext, **d}

    def _core_dict(self) -> dict[str, Any]:
        return {
            "ir_version": self.ir_version,
            "spec_version": self.spec_version,
            "created_by": self.created_by,
            "created_at": self.created_at,
            "graph": {
                "nodes": [n.model_dump(mode="json") for n in self.nodes],
                "inputs": list(self.inputs),
                "outputs": list(self.outputs),
                "metadata": self.metadata,
            },
            "tensors": {
                k: self.tensors[k].model_dump(mode="json", exclude_none=False)
                for k in sorted(self.tensors)
            },
            "qconfig": self.qconfig,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=1, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, d: object, *, file: str | None = None) -> Graph:
        if not isinstance(d, dict):
            raise InputError("top level must be a JSON object", file=file)
        allowed = {"ir_version", "spec_version", "created_by", "created_at", "graph",
                   "tensors", "qconfig"}  # fmt: skip
        if "graph" not in d or not isinstance(d["graph"], dict):
            raise InputError("missing 'graph' object", file=file, field="graph")
        g = d["graph"]
        known_g = {"nodes", "inputs", "outputs", "metadata", "edges"}
        ext: dict[str, Any] = {k: v for k, v in d.items() if k not in allowed}
        if any(k not in known_g for k in g):
            ext["graph"] = {k: v for k, v in g.items() if k not in known_g}
        d = {k: v for k, v in d.items() if k in allowed}
        g = {k: v for k, v in g.items() if k in known_g}
        payload = {k: v for k, v in d.items() if k != "graph"}
        payload.update(g)
        payload["extensions"] = ext
        if str(payload.get("ir_version", IR_VERSION)).split(".")[0] != IR_VERSION.split(".")[0]:
            raise InputError(
                f"ir_version {payload.get('ir_version')!r} not supported (expected {IR_VERSION})",
                file=file,
                field="ir_version",
            )
        try:
            return cls.model_validate(payload)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            where = _describe_loc(payload, err["loc"])
            raise InputError(err["msg"], file=file, where=where, field=loc) from None

    @classmethod
    def from_json(cls, text: str, *, file: str | None = None) -> Graph:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"not valid JSON ({e.msg} at line {e.lineno})", file=file) from None
        return cls.from_dict(d, file=file)

    # ---------------------------------------------------------------- files
    def save(self, path: str | Path, weights_path: str | Path | None = None) -> Path:
        """Write ir.json and the weights (default: `weights.npz` beside it)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())
        wpath = Path(weights_path) if weights_path else path.with_name("weights.npz")
        weights = self.weights
        if is_shape_only(self):  # stand-ins have no values to write
            weights = {k: a for k, a in weights.items() if not is_shape_only_array(a)}
        save_weights(weights, wpath)
        return wpath

    @classmethod
    def load(cls, path: str | Path, weights_path: str | Path | None = None) -> Graph:
        """Read ir.json; read weights from `weights_path` (or `weights.npz` beside it if
        that exists)."""
        path = Path(path)
        g = cls.from_json(read_input_text(path, MAX_IR_JSON_BYTES), file=str(path))
        wpath = Path(weights_path) if weights_path else path.with_name("weights.npz")
        if weights_path or wpath.exists():
            g.weights = load_weights(wpath)
        if is_shape_only(g):  # constants without values get their stand-ins back
            for tid, t in sorted(g.tensors.items()):
                if t.const and tid not in g.weights:
                    g.weights[tid] = shape_only_array(t.shape, _STAND_IN_DTYPE.get(t.dtype,
                                                                                   np.float32))
        return g


def shape_only_array(shape: list[int] | tuple[int, ...],
                     dtype: npt.DTypeLike = np.float32) -> np.ndarray:
    """The stand-in for a constant of a shape-only model (Graph.metadata["shape_only"]): a
    read-only zero-stride view of one zero, so it has the shape and dtype the compiler
    asks for and occupies no memory. Arithmetic on it would materialize it: code that
    meets one on a shape-only graph keeps it symbolic (see `is_shape_only_array`)."""
    return np.broadcast_to(np.zeros((), dtype), tuple(int(d) for d in shape))


def is_shape_only_array(a: object) -> bool:
    """True for an array made by `shape_only_array` with more than one element."""
    return isinstance(a, np.ndarray) and a.ndim > 0 and a.size > 1 and not any(a.strides)


def is_shape_only(graph: Graph) -> bool:
    """A graph built from shapes alone (no weight values): timing only, no data pass."""
    return bool(graph.metadata.get("shape_only"))


def _describe_loc(payload: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    """'node 12 (gemm_12)' / 'tensor x' for a pydantic error location."""
    if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
        try:
            nid = payload["nodes"][loc[1]].get("id")
        except Exception:
            nid = None
        return f"node {loc[1]}" + (f" ({nid})" if nid else "")
    if len(loc) >= 2 and loc[0] == "tensors":
        return f"tensor {loc[1]}"
    return None


def save_weights(weights: dict[str, np.ndarray], path: str | Path) -> None:
    """Write the weights dict as an npz (no pickle). Non-native dtypes (bf16, int4) are
    stored widened: bf16 as float32, int4/uint4 as int8/uint8."""
    write_npz(path, {_npz_key(k): _npz_safe(weights[k]) for k in sorted(weights)})


def _npz_key(k: str) -> str:
    return k.replace("/", "\u2215")


def load_weights(path: str | Path) -> dict[str, np.ndarray]:
    """Read an .npz of arrays (no pickle; a regular file of bounded size)."""
    path = Path(path)
    check_input_file(path, MAX_MODEL_BYTES)
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k.replace("\u2215", "/"): z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"cannot read weights ({e})", file=str(path)) from None


def _npz_safe(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    name = a.dtype.name
    if name == "bfloat16":
        return a.astype(np.float32)
    if name in ("int4", "int2"):
        return a.astype(np.int8)
    if name in ("uint4", "uint2"):
        return a.astype(np.uint8)
    return a if a.flags.c_contiguous else a.copy(order="C")
