"""How many positions an ONNX decoder can embed, read from the graph itself.

A Hugging Face config.json names the context (`max_position_embeddings`, `n_positions`);
an ONNX file exported without one beside it still carries the limit in its weights: a
learned position embedding (GPT-2's `wpe`) or a precomputed RoPE cos / sin cache is a
constant table of one row per position, gathered by the positions. A position past its
last row has nothing to read (the data pass refuses the gather; onnxruntime reads out of
bounds or fails).

`position_rows` finds those tables: a Gather along axis 0 of a constant rank-2 table whose
indices are computed from the positions only, that is from the values of `position_ids`
or `attention_mask` (Optimum derives positions from the mask's cumulative sum) and from
tensor shapes (a dynamo export computes them as Range(past length, past + new) of Shape
outputs), never from the token ids or another input's values. The token embedding reads
`input_ids` and is left out. The input roles are Hugging Face's names, as `onnx_dims`
binds them.
"""

from __future__ import annotations

from pathlib import Path

from kernbench.errors import InputError

#: inputs whose values are positions, or from which an exporter computes them
POSITION_SOURCES = frozenset({"position_ids", "attention_mask", "cache_position"})
#: ops whose output does not depend on their input's values, only on its shape
_SHAPE_OPS = frozenset({"Shape", "Size"})
#: ops that pass a table through unchanged but for its element type
_SAME_ROWS = frozenset({"Cast", "Identity"})


def position_rows(model: Path) -> int | None:
    """Rows of the smallest position table of the ONNX model at `model` (see the module
    docstring), or None when it has none (positions computed without a table, as RoPE from
    its inverse frequencies, are not limited by the graph)."""
    import onnx

    try:
        m = onnx.load(str(model), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - onnx raises several types for a bad file
        raise InputError(f"cannot read the ONNX model: {e}", file=str(model)) from None
    g = m.graph
    rows: dict[str, int] = {t.name: int(t.dims[0]) for t in g.initializer if len(t.dims) == 2}
    producer: dict[str, onnx.NodeProto] = {}
    for n in g.node:
        for o in n.output:
            producer[o] = n
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and len(a.t.dims) == 2:
                    rows[n.output[0]] = int(a.t.dims[0])
    inputs = {i.name for i in g.input} - {t.name for t in g.initializer}
    found = []
    for n in g.node:
        if n.op_type != "Gather" or len(n.input) < 2 or _axis(n) != 0:
            continue
        table = _through(n.input[0], producer)
        if table in rows and _reads_positions(n.input[1], producer, inputs):
            found.append(rows[table])
    return min(found) if found else None


def _axis(n: object) -> int:
    for a in n.attribute:  # type: ignore[attr-defined]
        if a.name == "axis":
            return int(a.i)
    return 0


def _through(name: str, producer: dict) -> str:
    """The tensor `name` is a type cast or copy of (itself when it is not one)."""
    while name in producer and producer[name].op_type in _SAME_ROWS:
        name = producer[name].input[0]
    return name


def _reads_positions(indices: str, producer: dict, inputs: set[str]) -> bool:
    """Do the gather indices `indices` derive from the positions only (position inputs'
    values, tensor shapes), and from at least one of them?"""
    seen: set[str] = set()
    stack = [indices]
    positional = False
    while stack:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in inputs:
            if name not in POSITION_SOURCES:
                return False  # token ids or another input's values
            positional = True
            continue
        n = producer.get(name)
        if n is None:
            continue  # an initializer: a constant
        if n.op_type in _SHAPE_OPS:
            positional = True  # a length: the past or the new tokens
            continue
        if n.op_type in ("If", "Loop", "Scan"):
            return False  # a subgraph's values: not followed
        stack.extend(n.input)
    return positional
