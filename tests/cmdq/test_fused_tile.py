"""VE_FUSED_TILE (ADR-0724) on its own: a chain computes exactly what its steps compute as
separate entries (numpy as the reference), costs the sum of their vector cycles with one
fetch and one store, and a malformed chain is refused in one line naming the step."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.validate import validate_document
from kernbench.components.builtin.pe_math import math_cycles
from kernbench.host.simulate import simulate_program
from kernbench.numerics.quant import quantize
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology

SMALL = load_topology("small")
LIMITS = limits_for(SMALL)
BANK = LIMITS.tcm_bank_bytes
SPACE = f"tcm:{SMALL.pes[0].id}"
N = 96

# bank 0: int32 accumulator; bank 1: scale and bias rows; bank 2: the result
DEQ = {"opcode": "VE_DEQUANTIZE_TILE", "length": N, "rows": 1, "qbits_activation": 32,
       "out_qbits": 32, "in_dtype": "int32", "in_bank": 0, "in_offset": 0,
       "out_bank": 0, "out_offset": 0, "scale_bank": 1, "scale_offset": 0,
       "bias_bank": 1, "bias_offset": 4 * N}
GELU = {"opcode": "VE_GELU_TILE", "length": N, "rows": 1, "qbits_activation": 32,
        "in_bank": 0, "in_offset": 0, "out_bank": 0, "out_offset": 0}
QUANT = {"opcode": "VE_QUANTIZE_TILE", "length": N, "rows": 1, "qbits_activation": 32,
         "out_qbits": 8, "scale": 0.02, "in_bank": 0, "in_offset": 0, "out_bank": 2,
         "out_offset": 0}


def _inputs() -> list[tuple[str, int, np.ndarray]]:
    r = np.random.default_rng(7)
    acc = r.integers(-20000, 20000, N).astype(np.int32)
    scale = (r.random(N) * 1e-4 + 1e-5).astype(np.float32)
    bias = r.standard_normal(N).astype(np.float32)
    return [(SPACE, 0, acc), (SPACE, BANK, np.stack([scale, bias]))]


def _run(entries: list[dict]) -> tuple[MemoryStore, dict]:
    doc = {"cmdq": [*entries, {"opcode": "END", "id": len(entries),
                               "deps_before": [len(entries) - 1]}]}
    assert validate_document(doc, LIMITS, "p.json") == []
    store = MemoryStore.for_topology(SMALL)
    for space, addr, arr in _inputs():
        store.write(space, addr, arr)
    init = store.snapshot()
    log = OpLogger()
    sim = simulate_program(parse_program(doc), SMALL, op_logger=log, data=TcmData())
    return DataExecutor(log, init).run(), sim.stats()


def _separate(steps: list[dict]) -> list[dict]:
    return [{**s, "id": i, "deps_before": [i - 1] if i else []} for i, s in enumerate(steps)]


def _fused(steps: list[dict]) -> dict:
    return {"opcode": "VE_FUSED_TILE", "id": 0, "steps": steps}


def test_chain_equals_its_steps_and_numpy():
    """dequantize (scale, bias) → GELU → quantize: bit-identical to the three entries,
    and to numpy's formulas."""
    steps = [DEQ, GELU, QUANT]
    fused, _ = _run([_fused(steps)])
    apart, _ = _run(_separate(steps))
    got = fused.read(SPACE, 2 * BANK, (N,), "int8")
    np.testing.assert_array_equal(got, apart.read(SPACE, 2 * BANK, (N,), "int8"))
    acc, sb = (a for _, _, a in _inputs())
    y = acc.astype(np.float32) * sb[0] + sb[1]
    from math import erf, sqrt
    g = np.array([v * 0.5 * (1 + erf(v / sqrt(2))) for v in y.astype(np.float64)], np.float32)
    np.testing.assert_array_equal(got, quantize(g, np.float32(0.02), 0, 8, True))


def test_chain_costs_its_steps_cycles_with_one_fetch_and_store():
    """pe_math busy = the sum of the steps' cycles; the command fetches the accumulator,
    scale and bias once and stores only the int8 result; fewer PE-side bytes and less
    time than the three entries."""
    steps = [DEQ, GELU, QUANT]
    _, st = _run([_fused(steps)])
    _, sep = _run(_separate(steps))
    spec = SMALL.config.cube.pe_template.pe_math
    cycles = sum(math_cycles(spec, op, N) for op in ("dequantize", "gelu", "quantize"))
    math = st["engines"]["sip0.cube0.pe0.pe_math"]
    assert math["busy_ns"] == pytest.approx(cycles / spec.clock_ghz)
    fs = st["engines"]["sip0.cube0.pe0.pe_fetch_store"]
    assert fs["bytes_fetched"] == 4 * N + 8 * N
    assert fs["bytes_stored"] == N
    sep_fs = sep["engines"]["sip0.cube0.pe0.pe_fetch_store"]
    assert sep_fs["bytes_fetched"] > fs["bytes_fetched"]
    assert st["total_ns"] < sep["total_ns"]


def _problems(entry: dict) -> list[str]:
    doc = {"cmdq": [entry, {"opcode": "END", "id": 1}]}
    return [str(p) for p in validate_document(doc, LIMITS, "p.json")]


@pytest.mark.parametrize("steps,field,reason", [
    ([DEQ, {**GELU, "in_offset": 512}], "steps[1].in_bank", "must read step 0's out"),
    ([DEQ, {**GELU, "length": N // 2}], "steps[1].in_bank", "reads 48 values"),
    ([DEQ, {"opcode": "TE_GEMM_TILE"}], "steps[1].opcode", "not a vector-engine tile"),
    ([DEQ, {**GELU, "ve_id": 0}], "steps[1].ve_id", "no ve_id of its own"),
    ([DEQ, {**GELU, "length": "x"}], "steps[1].length", "integer"),
    ([DEQ], "steps", "at least 2"),
    ([DEQ, {"opcode": "VE_ADD_TILE", "length": N, "rows": 1, "qbits_activation": 32,
            "in_bank": 0, "in_offset": 0, "out_bank": 0, "out_offset": 0, "in2_bank": 3,
            "in2_offset": 0, "in2_rows": 2}], "steps[1].in2_rows", "must be 1"),
])
def test_a_malformed_chain_is_one_line_naming_the_step(steps, field, reason):
    problems = _problems(_fused(steps))
    assert len(problems) == 1, problems
    assert f"field '{field}'" in problems[0] and reason in problems[0]
    assert "\n" not in problems[0]


def test_a_packed_intermediate_is_refused():
    q4 = {**QUANT, "out_qbits": 4, "out_bank": 0}
    back = {"opcode": "VE_DEQUANTIZE_TILE", "length": N, "rows": 1, "qbits_activation": 4,
            "out_qbits": 32, "scale": 0.5, "in_bank": 0, "in_offset": 0, "out_bank": 2,
            "out_offset": 0}
    problems = _problems(_fused([q4, back]))
    assert any("steps[0].out_qbits" in p and "at least 8 bits" in p for p in problems)
