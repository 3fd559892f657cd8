"""QConfig: the quantization policy (W / A / KV bit widths) and how it annotates the IR.

YAML form (yaml.safe_load, pydantic-validated, unknown keys rejected)::

    default:            # W8 A8 KV8 when omitted
      weight: 8         # 4 | 8 | 16 | fp16 | bf16 | fp32 | bfp8_b | bfp4_b (2 is refused)
      activation: 8
      kv: 8             # used by attention blocks (ATTENTION, KV_UPDATE)
    weight_granularity: per_channel   # or per_tensor
    overrides:          # first match wins, glob on metadata.layer_name (or the node id)
      - match: "*layers.0.*"
        weight: 4
      - match: "*attn*"
        kv: 4

`fp32` means "not quantized" (qbits null); `fp16` / `bf16` mean float computation in
that precision; `bfp8_b` / `bfp4_b` (weights only) store the weight as Tenstorrent's
block floats (`numerics.block_float`) and compute in float. Bits imported from a quantized (QDQ / QOperator) model win over the
default; only an override that names the field changes them.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from kernbench.config.keys import known_keys
from kernbench.errors import MAX_TEXT_BYTES, InputError, did_you_mean, read_input_text
from kernbench.ir.model import Graph, LayerIR

BitsSpec = Literal[4, 8, 16, "fp16", "bf16", "fp32", "bfp8_b", "bfp4_b"]
#: The block-float spellings a QConfig accepts, by the format they name.
BFP_ALIASES = {"bfp8_b": "bfp8_b", "bfp8": "bfp8_b", "bfloat8_b": "bfp8_b",
               "bfp4_b": "bfp4_b", "bfp4": "bfp4_b", "bfloat4_b": "bfp4_b"}
#: Why a block-float activation or KV width is refused at load: one line, exit 2.
BFP_WEIGHTS_ONLY = ("block floats (bfp8_b, bfp4_b) are weight formats here: the compiler "
                    "stores weights in them; activations and the KV cache take bf16, fp16, "
                    "fp32 or an integer width")
#: Why a 2-bit width is refused at load: one line, exit 2.
TWO_BIT_REFUSED = ("2-bit quantization is not supported: symmetric 2-bit values are "
                   "ternary (-1, 0, 1 times a per-channel scale), too coarse to verify "
                   "against the float model, and the compiler has no 2-bit tiles "
                   "(use 4, 8 or 16)")

#: Layers whose inputs enter the integer (TE) engine: integer activation bits apply.
TE_OPS = frozenset({"GEMM", "QKV_PROJ", "CONV", "ATTENTION", "MATMUL"})
#: Layers that own a weight tensor that the hardware quantizes.
WEIGHT_OPS = frozenset({"GEMM", "QKV_PROJ", "CONV"})
#: Attention-block layers that carry qbits_kv.
KV_OPS = frozenset({"ATTENTION", "KV_UPDATE"})
#: Pure data-movement / index layers: never carry activation bits.
NO_ACT_OPS = frozenset(
    {"RESHAPE", "TRANSPOSE", "SLICE", "SPLIT", "CONCAT", "EXPAND", "GATHER",
     "GATHER_ELEMENTS", "EMBEDDING", "KV_UPDATE", "QUANTIZE", "DEQUANTIZE",
     "DYNAMIC_QUANTIZE", "QDQ", "MATMUL_INTEGER", "QLINEAR_MATMUL", "CAST",
     "QLINEAR_CONV", "CONV_INTEGER"}
)  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BitsDefault(_Strict):
    weight: BitsSpec = 8
    activation: BitsSpec = 8
    kv: BitsSpec = 8

    @field_validator("weight", "activation", "kv", mode="before")
    @classmethod
    def _coerce(cls, v: object, info: ValidationInfo) -> Any:
        return _coerce_bits(v, info.field_name)


class Override(_Strict):
    match: str = Field(min_length=1)
    weight: BitsSpec | None = None
    activation: BitsSpec | None = None
    kv: BitsSpec | None = None

    @field_validator("weight", "activation", "kv", mode="before")
    @classmethod
    def _coerce(cls, v: object, info: ValidationInfo) -> Any:
        return None if v is None else _coerce_bits(v, info.field_name)


class QConfig(_Strict):
    """Quantization policy (spec §7)."""

    version: Literal[1] = 1
    default: BitsDefault = Field(default_factory=BitsDefault)
    weight_granularity: Literal["per_channel", "per_tensor"] = "per_channel"
    overrides: list[Override] = Field(default_factory=list)
    #: the name of the file it was read from (`load_qconfig`), not part of the policy
    _file: str | None = PrivateAttr(default=None)

    @property
    def file_name(self) -> str | None:
        """The name of the QConfig file this was read from (None: built in code)."""
        return self._file

    @classmethod
    def fp32(cls) -> QConfig:
        return cls(default=BitsDefault(weight="fp32", activation="fp32", kv="fp32"))

    @classmethod
    def float_mode(cls, mode: str) -> QConfig:
        return cls(default=BitsDefault(weight=mode, activation=mode, kv=mode))


def _coerce_bits(v: object, field: str | None = None) -> Any:
    if isinstance(v, str):
        s = v.strip().lower()
        if s.isdigit():
            v = int(s)
        elif s in ("int8", "int4", "int2", "int16"):
            v = int(s[3:])
        elif s in ("w8", "a8"):
            v = 8
        elif s in BFP_ALIASES:
            if field != "weight":
                raise ValueError(BFP_WEIGHTS_ONLY)
            return BFP_ALIASES[s]
        else:
            return s
    if v == 2 and not isinstance(v, bool):
        raise ValueError(TWO_BIT_REFUSED)
    return v


def to_qbits(spec: BitsSpec | None) -> Any:
    """QConfig bits value -> IR qbits value (fp32 -> None)."""
    return None if spec in (None, "fp32") else spec


def load_qconfig(path: str | Path) -> QConfig:
    """Read a QConfig YAML (bounded, UTF-8, a regular file: docs/errors.md)."""
    path = Path(path)
    text = read_input_text(path, MAX_TEXT_BYTES)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"not valid YAML ({str(e).splitlines()[0]})", file=str(path)) from None
    qc = parse_qconfig(data, file=str(path))
    qc._file = path.name
    return qc


def parse_qconfig(data: object, *, file: str | None = None) -> QConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("a qconfig must be a mapping", file=file)
    try:
        return QConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + did_you_mean(err["loc"][-1], known_keys(QConfig, err["loc"]))
        elif err["type"] == "value_error":
            msg = str(err["ctx"]["error"])
        return_err = InputError(msg, file=file, field=loc)
        raise return_err from None


def layer_names(node: LayerIR) -> list[str]:
    """The names an override's `match` glob is tried against, in order: the IR layer id
    (what `kernbench import` and the report show, e.g. `gemm_23`), the module path the
    exporter recorded (`metadata.layer_name`, e.g. `transformer.h.0.attn.c_attn/addmm`),
    and the ONNX node names the layer was fused from (`metadata.onnx_nodes`)."""
    names = [node.id, str(node.metadata.get("layer_name") or "")]
    names += [str(x) for x in node.metadata.get("onnx_nodes", []) or []]
    return [n for n in names if n]


def _match(ov: Override, node: LayerIR) -> bool:
    return any(fnmatch.fnmatchcase(n, ov.match) for n in layer_names(node))


def unmatched_overrides(graph: Graph, qc: QConfig) -> list[str]:
    """The `match` globs of `qc.overrides` that match no layer of `graph` (a typo that
    would otherwise silently quantize nothing)."""
    return [ov.match for ov in qc.overrides
            if not any(_match(ov, n) for n in graph.nodes)]


def apply_qconfig(graph: Graph, qc: QConfig | None, *, imported_default_float: bool = False) -> None:
    """Annotate every layer's qbits_* and the tensors they touch (spec §7).

    `imported_default_float`: the model was already quantized (QDQ / QOperator), so the
    fields it did not set stay float unless the user passed a qconfig.
    Layers whose node metadata has `imported_qbits_*` keep those values unless an
    override names the field.
    """
    user = qc is not None
    qc = qc or QConfig()
    d = qc.default
    for node in graph.nodes:
        op = node.op_type
        imported = node.metadata.get("imported_qbits", {})
        base_w = to_qbits(d.weight)
        base_a = to_qbits(d.activation)
        base_kv = to_qbits(d.kv)
        if imported_default_float and not user:
            base_w = base_a = base_kv = None
        w = imported.get("weight", base_w)
        a = imported.get("activation", base_a)
        kv = imported.get("kv", base_kv)
        for ov in qc.overrides:
            if _match(ov, node):
                if ov.weight is not None:
                    w = to_qbits(ov.weight)
                if ov.activation is not None:
                    a = to_qbits(ov.activation)
                if ov.kv is not None:
                    kv = to_qbits(ov.kv)
                break
        node.qbits_weight = w if op in WEIGHT_OPS or "weight" in imported else None
        if op in NO_ACT_OPS:
            node.qbits_activation = None
        elif isinstance(a, int) and op not in TE_OPS and "activation" not in imported:
            # VE layers compute in float on dequantized inputs.
            node.qbits_activation = None
        else:
            node.qbits_activation = a
        node.qbits_kv = kv if op in KV_OPS else None
    graph.qconfig = qc.model_dump(mode="json")
    # where the widths came from, for the run's `precision` (a file equal to the defaults
    # is still the user's choice)
    if user and qc.file_name:
        graph.metadata["qconfig_file"] = qc.file_name
    else:
        graph.metadata.pop("qconfig_file", None)
    annotate_tensors(graph)


def annotate_tensors(graph: Graph) -> None:
    """TensorIR.qbits from the layers: weights get their consumer's qbits_weight, kv
    tensors qbits_kv, activations entering a TE layer its qbits_activation."""
    for t in graph.tensors.values():
        t.qbits = None
    for node in graph.nodes:
        for i, tid in enumerate(node.inputs):
            t = graph.tensors.get(tid) if tid else None
            if t is None:
                continue
            if t.role == "weight" and node.qbits_weight is not None and i >= 1:
                if node.op_type in WEIGHT_OPS and _is_weight_slot(node, i):
                    t.qbits = node.qbits_weight
            elif t.role == "kv" and node.qbits_kv is not None:
                t.qbits = node.qbits_kv
            elif t.role in ("activation", "intermediate") and t.qbits is None:
                t.qbits = node.qbits_activation
        for tid in node.outputs:
            t = graph.tensors.get(tid)
            if t is not None and t.role == "kv" and node.qbits_kv is not None:
                t.qbits = node.qbits_kv


def _is_weight_slot(node: LayerIR, i: int) -> bool:
    if node.op_type == "GEMM" or node.op_type == "CONV":
        return i == 1
    if node.op_type == "QKV_PROJ":
        return i in (1, 2, 3)
    return False
