"""The window opcodes of ADR-0703 on their own: VE_POOL_TILE costs one lane operation per
window tap per output (closed form), and computes ONNX pooling on its TCM data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.validate import validate_program
from kernbench.host.simulate import simulate_program
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology
from kernbench.topology.build import build_topology

SMALL = load_topology("small")
LIMITS = limits_for(SMALL)
C, OUT = 8, 6  # channels, output height = width


def _pool(k: int, mode: str = "max") -> dict:
    """A pool tile whose output is OUT × OUT for a k × k window (stride 1, no padding)."""
    return {"opcode": "VE_POOL_TILE", "id": 0, "in_bank": 0, "in_offset": 0, "out_bank": 1,
            "out_offset": 0, "c": C, "h": OUT + k - 1, "w": OUT + k - 1, "kh": k, "kw": k,
            "mode": mode, "qbits_activation": 32}


def _duration(entry: dict, op: str, cycles: float) -> float:
    prog = parse_program({"cmdq": [entry, {"opcode": "END", "id": 1}]}, file="pool.json")
    assert validate_program(prog, LIMITS, "pool.json") == []
    cfg = SMALL.config.model_copy(deep=True)
    cfg.cube.pe_template.pe_math.op_cycles[op] = cycles
    row = simulate_program(prog, build_topology(cfg)).stats()["entries"]["0"]
    assert row["engine"] == "sip0.cube0.pe0.pe_math"
    return row["end_ns"] - row["start_ns"]


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("mode,op", [("max", "max"), ("avg", "add")])
def test_pool_cycles_grow_with_the_window(k, mode, op):
    """Raising the cost of the pool's lane op by Δ lengthens the tile by exactly
    ceil(c·h_out·w_out·kh·kw / lanes) · Δ / clock: the window size is counted."""
    pm = SMALL.config.cube.pe_template.pe_math
    e = _pool(k, mode)
    got = _duration(e, op, 3.0) - _duration(e, op, 1.0)
    want = math.ceil(C * OUT * OUT * k * k / pm.lanes) * 2.0 / pm.clock_ghz
    assert got == pytest.approx(want, abs=1e-6)


def test_pool_tile_computes_onnx_pooling():
    """avg, 3×3, stride 2, asymmetric padding, ceil_mode, count_include_pad: the data pass
    matches a direct loop over the windows."""
    h, w = 7, 6
    e = {**_pool(3, "avg"), "h": h, "w": w, "stride": 2, "pad_top": 1, "pad_left": 0,
         "pad_bottom": 1, "pad_right": 1, "ceil_mode": True, "count_include_pad": True}
    prog = parse_program({"cmdq": [e, {"opcode": "END", "id": 1}]}, file="pool.json")
    ho, wo = prog.cmdq[0].out_dims(True)
    x = np.random.default_rng(0).standard_normal((C, h, w)).astype(np.float32)
    store = MemoryStore.for_topology(SMALL)
    space = f"tcm:{SMALL.pes[0].id}"
    store.write(space, 0, x)
    init = store.snapshot()
    log = OpLogger()
    simulate_program(prog, SMALL, op_logger=log, data=TcmData())
    got = DataExecutor(log, init).run().read(space, LIMITS.tcm_bank_bytes, (C, ho, wo),
                                               "float32")
    xp = np.pad(x, [(0, 0), (1, 1 + 2), (0, 1 + 2)])  # explicit pads + ceil-mode overhang
    for i in range(ho):
        for j in range(wo):
            r0, c0 = 2 * i, 2 * j
            # count_include_pad counts the explicit pads, never the ceil-mode overhang
            rows = min(r0 + 3, 1 + h + 1) - r0
            cols = min(c0 + 3, w + 1) - c0
            ref = xp[:, r0:r0 + 3, c0:c0 + 3].sum(axis=(1, 2)) / (rows * cols)
            np.testing.assert_allclose(got[:, i, j], ref, rtol=1e-6, atol=1e-6)
