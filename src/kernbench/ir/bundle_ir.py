"""The compiled IR of a bundle folder: ir.json, its weights in ir_weights.npz, and those
that are initializers of the bundle's model copy, named in IR_WEIGHTS_IN_MODEL (the
compiler does not write the same bytes twice; docs/compiler.md, "The bundle")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernbench.errors import MAX_JSON_BYTES, InputError, read_input_text
from kernbench.ir.model import Graph, is_shape_only, is_shape_only_array, save_weights

__all__ = ["IR_WEIGHTS_IN_MODEL", "load_bundle_ir", "save_bundle_ir"]

#: {"model": the model file in the bundle, "initializers": {IR tensor id: an initializer's
#: name, or {"initializer": name, "axis": a, "start": i, "stop": j}: its elements i:j
#: along axis a}}
IR_WEIGHTS_IN_MODEL = "ir_weights_model.json"


def save_bundle_ir(graph: Graph, folder: Path, in_model: dict[str, Any] | None = None,
                   model: str = "model.onnx") -> None:
    """Write ir.json and ir_weights.npz into the bundle `folder` (as `Graph.save`), but
    for the weights `in_model` names (IR tensor id → where in `model`, a file of the
    bundle, `onnx_import.initializers.Source`): those are listed in IR_WEIGHTS_IN_MODEL. Without them a listing left from
    before is removed."""
    folder = Path(folder)
    (folder / "ir.json").write_text(graph.to_json())
    shape_only = is_shape_only(graph)  # stand-ins have no values to write
    save_weights({k: a for k, a in graph.weights.items()
                  if k not in (in_model or ()) and not (shape_only and is_shape_only_array(a))},
                 folder / "ir_weights.npz")
    listing = folder / IR_WEIGHTS_IN_MODEL
    if in_model:
        listing.write_text(json.dumps({"model": model, "initializers": dict(sorted(
            in_model.items()))}, indent=1, sort_keys=True), encoding="utf-8")
    elif listing.exists():
        listing.unlink()


def load_bundle_ir(folder: Path) -> Graph:
    """The IR graph of the bundle `folder` with every weight (not verified). A listing
    that is not what the compiler writes, or names what the model lacks, is an
    InputError."""
    folder = Path(folder)
    g = Graph.load(folder / "ir.json", folder / "ir_weights.npz")
    listing = folder / IR_WEIGHTS_IN_MODEL
    if not listing.is_file():
        return g
    f = str(listing)
    try:
        doc = json.loads(read_input_text(listing, MAX_JSON_BYTES))
    except ValueError as e:
        raise InputError(f"not valid JSON ({e})", file=f) from None
    model, names = (doc.get("model"), doc.get("initializers")) if isinstance(doc, dict) \
        else (None, None)
    if not isinstance(model, str) or Path(model).name != model \
            or not isinstance(names, dict) \
            or not all(isinstance(k, str) and _is_source(v) for k, v in names.items()):
        raise InputError("expected {\"model\": a file name in the bundle, \"initializers\": "
                         "{tensor id: initializer name, or {\"initializer\": name, \"axis\", "
                         "\"start\", \"stop\"}}}", file=f)
    for tid in names:
        t = g.tensors.get(tid)
        if t is None or not t.const:
            raise InputError("not a constant tensor of ir.json", file=f, where=f"tensor {tid}")
        if tid in g.weights:
            raise InputError("also in ir_weights.npz", file=f, where=f"tensor {tid}")
    from kernbench.ir.onnx_import.loader import read_initializers  # noqa: PLC0415 - onnx, lazily

    for tid, a in read_initializers(folder / model, names, listing=f).items():
        if list(a.shape) != list(g.tensors[tid].shape):
            raise InputError(f"the model's array has shape {list(a.shape)}, ir.json says "
                             f"{g.tensors[tid].shape}", file=f, where=f"tensor {tid}")
        g.weights[tid] = a
    return g


def _is_source(v: object) -> bool:
    """An initializer's name, or {"initializer": name, "axis", "start", "stop": ints}."""
    if isinstance(v, str):
        return True
    return isinstance(v, dict) and set(v) == {"initializer", "axis", "start", "stop"} \
        and isinstance(v["initializer"], str) \
        and all(type(v[k]) is int for k in ("axis", "start", "stop"))
