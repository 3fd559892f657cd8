"""Check a whole bundle against a topology (its own topology.yaml by default).

`check_bundle` returns every problem found (one InputError line each, naming the file,
the entry and the field) instead of stopping at the first: cmdq.json (the CMDQ
validator), ir.json (the IR verifier), memory.json (fields, sizes, 256-byte alignment,
HBM capacity, overlaps, views inside their storage) and weights.npz (every weight of the
memory map present, of the right size, and nothing else). `simulate --verify` runs the
same checks before deploying anything, so a tampered bundle is exit 2, never a crash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kernbench.cmdq.hw import limits_for
from kernbench.cmdq.validate import validate_file
from kernbench.compiler.hbm import ITEMSIZE, PACKED_BYTES, nbytes_of
from kernbench.errors import MAX_JSON_BYTES, InputError, KernbenchError, read_input_text
from kernbench.ir import validate_ir_file, verify
from kernbench.ir.bundle_ir import load_bundle_ir
from kernbench.ir.model import Graph, load_weights
from kernbench.topology.model import Topology

FILES = ("cmdq.json", "memory.json", "weights.npz", "ir.json")
ALIGN = 256  # the compiler's HBM allocation granule (compiler/memory_plan.py)


def check_bundle(path: Path, topology: Topology, max_errors: int = 50, *,
                 cmdq: bool = True, ir: Graph | None = None) -> list[InputError]:
    """Every problem of the bundle folder `path` on `topology` (empty: the bundle is
    consistent and fits). `cmdq=False` skips cmdq.json (the caller validates it anyway);
    `ir`: the bundle's IR as `ir.bundle_ir.load_bundle_ir` read it (not read again)."""

    path = Path(path)
    missing = [n for n in FILES if not (path / n).is_file()]
    if missing:
        return [InputError(f"not a bundle: {', '.join(missing)} missing", file=str(path))]
    problems: list[InputError] = []
    if cmdq:
        problems += validate_file(path / "cmdq.json", limits_for(topology),
                                  max_errors=max_errors)
    try:
        if ir is not None or (path / "ir_weights.npz").is_file():  # the IR's own constants
            verify(ir if ir is not None else load_bundle_ir(path), file=str(path / "ir.json"))
        else:  # weights.npz is the device's
            validate_ir_file(path / "ir.json")
    except KernbenchError as e:
        problems.append(e if isinstance(e, InputError) else InputError(str(e)))
    mem_file = str(path / "memory.json")
    try:
        memory = json.loads(read_input_text(path / "memory.json", MAX_JSON_BYTES))
    except InputError as e:
        return problems + [e]
    except ValueError as e:
        return problems + [InputError(f"not valid JSON ({e})", file=mem_file)]
    if not isinstance(memory, dict) or not isinstance(memory.get("tensors"), dict) \
            or not isinstance(memory.get("views"), dict):
        return problems + [InputError("expected objects 'tensors' and 'views'", file=mem_file)]
    problems += check_memory(memory, topology.hbm_bytes, mem_file)
    if not any(p.file == mem_file for p in problems):
        problems += check_weights(memory, path / "weights.npz", mem_file)
    return problems[:max_errors]


def _itemsize(dtype: str) -> float | None:

    return ITEMSIZE.get(dtype)


def check_memory(memory: dict[str, Any], hbm_bytes: int, file: str) -> list[InputError]:
    """memory.json's tensors and views: well formed, aligned, inside HBM, no overlap."""

    bad: list[InputError] = []
    spans: list[tuple[int, int, str]] = []
    for key, a in sorted(memory["tensors"].items()):
        where = f"tensor '{key}'"
        if not isinstance(a, dict):
            bad.append(InputError("expected an object", file=file, where=where))
            continue
        shape, dtype, nb = a.get("shape"), a.get("dtype"), a.get("nbytes")
        addrs = a.get("replicas") or [a.get("address")]
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            bad.append(InputError("must be a list of sizes >= 0", file=file, where=where,
                                  field="shape"))
            continue
        if _itemsize(str(dtype)) is None:
            bad.append(InputError(f"unknown dtype {dtype!r}", file=file, where=where,
                                  field="dtype"))
            continue
        if not isinstance(nb, int) or nb != nbytes_of(shape, dtype):
            bad.append(InputError(f"{nb!r} does not match shape {shape} of {dtype} "
                                  f"({nbytes_of(shape, dtype)} bytes)", file=file, where=where,
                                  field="nbytes"))
            continue
        runs = [(addr, nb) for addr in addrs]
        if a.get("parts") is not None:  # rows spread over the cubes
            runs = _parts(a["parts"], nb, file, where, bad)
        for i, (addr, nb) in enumerate(runs):
            fld = ("address" if len(addrs) == 1 else f"replicas[{i}]") if "parts" not in a \
                else f"parts[{i}]"
            if not isinstance(addr, int) or addr < 0:
                bad.append(InputError(f"{addr!r} is not an address", file=file, where=where,
                                      field=fld))
            elif addr % ALIGN:
                bad.append(InputError(f"{addr:#x} is not {ALIGN}-byte aligned", file=file,
                                      where=where, field=fld))
            elif addr + nb > hbm_bytes:
                bad.append(InputError(f"{addr:#x} + {nb} bytes is beyond the {hbm_bytes:#x}-"
                                      "byte HBM (compiled for a larger NPU?)", file=file,
                                      where=where, field=fld))
            else:
                spans.append((addr, addr + nb, key))
    spans.sort()
    for (_s0, e0, k0), (s1, _e1, k1) in zip(spans, spans[1:], strict=False):
        if s1 < e0 and k0 != k1:
            bad.append(InputError(f"overlaps tensor '{k0}' at {s1:#x}", file=file,
                                  where=f"tensor '{k1}'", field="address"))
    return bad + _check_views(memory, file)


def _parts(parts: Any, nb: int, file: str, where: str,
           bad: list[InputError]) -> list[tuple[int, int]]:
    """(address, bytes) of a spread tensor's parts: [offset, bytes, address] that tile the
    tensor's bytes in order."""
    ok = isinstance(parts, list) and all(
        isinstance(p, list) and len(p) == 3 and all(isinstance(x, int) for x in p)
        for p in parts)
    if ok:
        ends = [0] + [o + n for o, n, _ in parts]
        ok = all(p[0] == e for p, e in zip(parts, ends, strict=False)) and ends[-1] == nb
    if not ok:
        bad.append(InputError("must be [offset, bytes, address] runs covering the tensor in "
                              "order", file=file, where=where, field="parts"))
        return []
    return [(addr, n) for _, n, addr in parts]


def _check_views(memory: dict[str, Any], file: str) -> list[InputError]:
    bad: list[InputError] = []
    tensors = memory["tensors"]
    for tid, v in sorted(memory["views"].items()):
        where = f"view '{tid}'"
        st = tensors.get(v.get("storage")) if isinstance(v, dict) else None
        if not isinstance(st, dict):
            bad.append(InputError("storage is not a tensor of the memory map", file=file,
                                  where=where, field="storage"))
            continue
        shape, strides, addr = v.get("shape"), v.get("strides"), v.get("address")
        size = _itemsize(str(v.get("dtype")))
        ok = (isinstance(shape, list) and isinstance(strides, list) and len(shape) ==
              len(strides) and all(isinstance(x, int) and x >= 0 for x in shape + strides)
              and isinstance(addr, int) and size is not None)
        if not ok:
            bad.append(InputError("needs address, shape, strides (ints) and a known dtype",
                                  file=file, where=where))
            continue
        span = (sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 1
                if all(shape) else 0)
        lo, hi = st.get("address", 0), st.get("address", 0) + st.get("nbytes", 0)
        if addr < lo or addr + int(np.ceil(span * size)) > hi:
            bad.append(InputError(f"[{addr:#x}, +{int(np.ceil(span * size))} B) leaves its "
                                  f"storage '{v['storage']}' [{lo:#x}, {hi:#x})", file=file,
                                  where=where, field="address"))
    return bad


def check_weights(memory: dict[str, Any], wpath: Path, mem_file: str) -> list[InputError]:
    """Every 'weight' tensor of the memory map is in weights.npz with the right size."""

    try:
        weights = load_weights(wpath)
    except InputError as e:
        return [e]
    bad: list[InputError] = []
    tensors = memory["tensors"]
    for key, a in sorted(tensors.items()):
        if a.get("role") != "weight":
            continue
        w = weights.get(key)
        if w is None:
            bad.append(InputError("missing from weights.npz", file=mem_file,
                                  where=f"tensor '{key}'"))
            continue
        got = w.nbytes if a["dtype"] in PACKED_BYTES else int(np.ceil(w.size * _itemsize(a["dtype"])))
        if got != a["nbytes"]:
            bad.append(InputError(f"weights.npz holds {got} bytes ({list(w.shape)} "
                                  f"{w.dtype}), the memory map {a['nbytes']}", file=mem_file,
                                  where=f"tensor '{key}'", field="nbytes"))
    for key in sorted(set(weights) - set(tensors)):
        bad.append(InputError("is not a tensor of memory.json", file=str(wpath),
                              where=f"array '{key}'"))
    return bad
