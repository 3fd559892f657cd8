"""Bring a model of any opset from 1 (7 and later tested) to the newest the installed onnx knows into the range
the importer's op handlers are written for (MIN_OPSET..MAX_OPSET).

- Older models (opset 7–16) go through onnx's version converter up to UPGRADE_TARGET, which
  rewrites the old signatures (Split / Squeeze / Unsqueeze / Reduce* with attributes instead
  of inputs, Upsample → Resize, Clip with attributes, ...).
- Newer models (opset > MAX_OPSET): when no node's operator changed after MAX_OPSET, the
  model means exactly the same at MAX_OPSET and is relabelled; otherwise it is converted
  down with the version converter.
- When the converter has no adapter (it lacks some for the newest opsets and for rare ops),
  the model is imported as it is: the op handlers accept both signatures of the ops whose
  inputs moved (Split, Squeeze, Reduce*, ...), and a node they cannot read fails with one
  line naming it. `convert_or_explain` gives the converter's own one-line reason.
The source opset is kept so the IR can record it (`metadata.source_opset`).
"""

from __future__ import annotations

import re

import onnx
from onnx import defs, version_converter

from kernbench.errors import InputError

MIN_OPSET = 17
MAX_OPSET = 23
OLDEST_OPSET = 1  # the converter reads every opset; the issue asks for 7 on
UPGRADE_TARGET = 18  # the opset the bundled exporters write; old signatures all rewritten
_DEFAULT_DOMAINS = ("", "ai.onnx")


def default_opset(model: onnx.ModelProto) -> int | None:
    for imp in model.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            return int(imp.version)
    return None


def normalize_opset(model: onnx.ModelProto, *, file: str | None = None) -> onnx.ModelProto:
    """`model` expressed in an opset between MIN_OPSET and MAX_OPSET (see module doc)."""
    opset = default_opset(model)
    if opset is None:
        raise InputError("model imports no default ('ai.onnx') opset", file=file,
                         field="opset_import")
    newest = defs.onnx_opset_version()
    if not OLDEST_OPSET <= opset <= newest:
        raise InputError(f"opset {opset} not supported (supported: {OLDEST_OPSET} to {newest}, "
                         "the newest the installed onnx knows)", file=file, field="opset_import")
    if MIN_OPSET <= opset <= MAX_OPSET:
        return model
    if opset > MAX_OPSET and not _changed_after(model, opset, MAX_OPSET):
        return _relabel(model, MAX_OPSET)
    target = UPGRADE_TARGET if opset < MIN_OPSET else MAX_OPSET
    try:
        return convert_or_explain(model, opset, target, file)
    except InputError:
        return model  # no adapter: the op handlers read the original signatures


def target_opset(model: onnx.ModelProto) -> int | None:
    """The opset the model is imported at (None when it has no default opset)."""
    opset = default_opset(model)
    if opset is None or MIN_OPSET <= opset <= MAX_OPSET:
        return opset
    return UPGRADE_TARGET if opset < MIN_OPSET else MAX_OPSET


def _changed_after(model: onnx.ModelProto, opset: int, limit: int) -> list[onnx.NodeProto]:
    """Default-domain nodes whose operator definition at `opset` is newer than `limit`."""
    out = []
    for n in _all_nodes(model.graph):
        if n.domain not in _DEFAULT_DOMAINS:
            continue
        try:
            since = defs.get_schema(n.op_type, opset, "").since_version
        except defs.SchemaError:
            continue  # an unknown op: the importer names it
        if since > limit:
            out.append(n)
    return out


def _all_nodes(graph: onnx.GraphProto):  # noqa: ANN202 - a generator of NodeProto
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(a.g)
            for g in a.graphs:
                yield from _all_nodes(g)


def _relabel(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for imp in m.opset_import:
        if imp.domain in _DEFAULT_DOMAINS:
            imp.version = version
    return m


def convert_or_explain(model: onnx.ModelProto, opset: int, target: int,
                       file: str | None) -> onnx.ModelProto:  # fmt: skip
    """onnx's version converter, or an InputError naming the node it has no adapter for."""
    try:
        return version_converter.convert_version(model, target)
    except Exception as e:  # the converter raises bare RuntimeError/ConvertError with C++ text
        text = " ".join(str(e).split())
        op = re.search(r"Version \$?\d+ for (\w+)", text)
        node = next((n for n in _all_nodes(model.graph) if op and n.op_type == op.group(1)),
                    None)
        where = f"node '{node.name or node.output[0]}' ({node.op_type})" if node else None
        reason = (f"no converter from opset {opset} to {target} for {op.group(1)}" if op
                  else f"cannot convert from opset {opset} to {target}: {text[:200]}")
        raise InputError(reason, file=file, where=where) from None
