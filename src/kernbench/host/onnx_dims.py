"""Bind the symbolic input dims of an ONNX model to --batch / --seq-len / --kv-len.

Exporters name dynamic axes freely (`batch_size`, `sequence_length`, `past_sequence_length`,
or dynamo's `s0`, `s1`), so the roles come from where a dim sits, as Hugging Face exports
lay their inputs out:

| input | axis 0 | axis 1 | axis 2 |
| --- | --- | --- | --- |
| input_ids, position_ids, token_type_ids, inputs_embeds | batch | sequence | |
| past_key_values.* / past.* (key or value, [B, H, T, D]) | batch | | past sequence |
| attention_mask | batch | past + new sequence | |

A symbolic dim met nowhere above is bound by its name (`batch…` → batch, `past…` → past
sequence, `seq…` / `sequence…` → sequence); one that is still unknown is an error naming
the input and the axis. The bound model (inputs fixed, intermediate shapes re-inferred) is
written to `save_dir`; the notes say which input dims were bound to what.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernbench.errors import InputError
from kernbench.models.moe_routing import Routing, parse_routing

if TYPE_CHECKING:  # onnx is imported when a model is bound, not with this module
    import onnx

TOKEN_INPUTS = ("input_ids", "position_ids", "token_type_ids", "inputs_embeds")



@dataclass(frozen=True)
class ShapeOptions:
    """--batch / --seq-len / --kv-len as given (None = not given)."""

    batch: int | None = None
    seq_len: int | None = None
    kv_len: int | None = None
    routing: str | None = None       # --routing (MoE config.json models)
    routing_seed: int | None = None  # --routing-seed
    routing_same: bool = False       # --routing-same-layers

    def given(self) -> bool:
        return any(v is not None for v in (self.batch, self.seq_len, self.kv_len))

    def routing_spec(self) -> Routing:
        """The MoE routing distribution (uniform, seed 0 unless given); InputError when
        --routing / --routing-seed is malformed."""
        return parse_routing(self.routing or "uniform", self.routing_seed or 0,
                             same_layers=self.routing_same)

    def check(self) -> None:
        self.routing_spec()
        for name, v, lo in (("--batch", self.batch, 1), ("--seq-len", self.seq_len, 1),
                            ("--kv-len", self.kv_len, 0)):
            if v is not None and v < lo:
                raise InputError(f"must be >= {lo}, got {v}", field=name)

    def resolved(self) -> tuple[int, int, int]:
        """(batch, seq, kv) with the defaults: batch 1, kv 0, seq 16 (prefill) / 1 (decode)."""
        kv = self.kv_len or 0
        seq = self.seq_len if self.seq_len is not None else (1 if kv > 0 else 16)
        return self.batch or 1, seq, kv

def _role_of(name: str, axis: int, rank: int) -> str | None:
    n = name.lower()
    if n in TOKEN_INPUTS:
        return {0: "batch", 1: "seq"}.get(axis)
    if n.startswith(("past_key_values", "past.", "past_key", "past_value")) and rank == 4:
        return {0: "batch", 2: "kv"}.get(axis)
    if n == "attention_mask":
        return {0: "batch", 1: "total"}.get(axis)
    return None


def _role_by_param(param: str) -> str | None:
    p = param.lower()
    if "batch" in p:
        return "batch"
    if "past" in p:
        return "kv"
    if p.startswith(("seq", "sequence")):
        return "seq"
    return None


def bind_onnx_dims(path: Path, shapes: ShapeOptions, save_dir: Path) -> tuple[Path, list[str]]:
    """(path of the bound model, notes) for the dims `shapes` gives."""
    import onnx  # heavy: only when an ONNX model is bound

    file = str(path)
    try:
        model = onnx.load(file)
    except Exception as e:  # noqa: BLE001 - any protobuf / IO failure is bad input
        raise InputError(f"not a valid ONNX model ({str(e).splitlines()[0]})",
                         file=file) from None
    batch, seq, kv = shapes.resolved()
    values = {"batch": batch, "seq": seq, "kv": kv, "total": kv + seq}
    init = {t.name for t in model.graph.initializer}
    params: dict[str, int] = {}
    notes = []
    for vi in model.graph.input:
        if vi.name in init:
            continue
        dims = vi.type.tensor_type.shape.dim
        for axis, d in enumerate(dims):
            if d.HasField("dim_value"):
                continue
            role = _role_of(vi.name, axis, len(dims)) or _role_by_param(d.dim_param)
            if role is None:
                raise InputError(f"symbolic dim {d.dim_param or '?'!r} at axis {axis} has no "
                                 "known role (batch, sequence, past sequence)",
                                 file=file, where=f"input '{vi.name}'")
            v = values[role]
            if d.dim_param and params.setdefault(d.dim_param, v) != v:
                raise InputError(f"symbolic dim {d.dim_param!r} would be bound to both "
                                 f"{params[d.dim_param]} and {v}", file=file,
                                 where=f"input '{vi.name}'")
            notes.append(f"  {vi.name}[{axis}] {d.dim_param or '?'!r} = {v} ({role})")
            d.Clear()
            d.dim_value = v
    if not notes:
        raise InputError("--batch/--seq-len/--kv-len: the model's inputs have no symbolic "
                         "dims to bind (its shapes are fixed)", file=file)
    if kv > 0 and not any("(kv)" in n for n in notes):
        raise InputError("--kv-len: the model has no past_key_values inputs with a symbolic "
                         "past-sequence dim", file=file)
    _rebind_rest(model, params)
    save_dir.mkdir(parents=True, exist_ok=True)
    out = save_dir / f"{path.stem}_b{batch}_seq{seq}_kv{kv}.onnx"
    onnx.save(model, str(out))
    return out, [f"bound the symbolic input dims of {path.name}:"] + notes


def _rebind_rest(model: onnx.ModelProto, params: dict[str, int]) -> None:
    """Outputs and value_info: known params get their value, any other symbolic dim (e.g.
    an expression `s0 + s1`) is cleared so that shape inference recomputes it."""
    for vi in list(model.graph.output) + list(model.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                v = params.get(d.dim_param)
                d.Clear()
                if v is not None:
                    d.dim_value = v
