"""VE_FUSED_TILE (ADR-0724) on its own: a chain computes exactly what its steps compute as
separate entries (numpy as the reference), costs the sum of their vector cycles with one
fetch and one store, and a malformed chain is refused in one line naming the step."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.validate import validate_document
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


def _run(entries: list[dict], inputs=None) -> tuple[MemoryStore, dict]:  # noqa: ANN001
    """The entries then END, simulated on `small` with `inputs` (default `_inputs`) in
    TCM: (memory after the data pass, stats)."""
    doc = {"cmdq": [*entries, {"opcode": "END", "id": len(entries),
                               "deps_before": [len(entries) - 1]}]}
    assert validate_document(doc, LIMITS, "p.json") == []
    store = MemoryStore.for_topology(SMALL)
    for space, addr, arr in (inputs or _inputs)():
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
    """pe_math busy = what the three entries cost apart (the sum of the steps' cycles,
    each with its pipeline fill); the command fetches the accumulator, scale and bias
    once and stores only the int8 result; fewer PE-side bytes and less time than the
    three entries."""
    steps = [DEQ, GELU, QUANT]
    _, st = _run([_fused(steps)])
    _, sep = _run(_separate(steps))
    math = st["engines"]["sip0.cube0.pe0.pe_math"]
    assert math["busy_ns"] == pytest.approx(sep["engines"]["sip0.cube0.pe0.pe_math"]["busy_ns"])
    spec = SMALL.config.cube.pe_template.pe_math
    assert math["busy_ns"] > 3 * spec.pipeline_latency_cycles / spec.clock_ghz
    fs = st["engines"]["sip0.cube0.pe0.pe_fetch_store"]
    assert fs["bytes_fetched"] == 4 * N + 8 * N
    assert fs["bytes_stored"] == N
    sep_fs = sep["engines"]["sip0.cube0.pe0.pe_fetch_store"]
    assert sep_fs["bytes_fetched"] > fs["bytes_fetched"]
    assert sep_fs["bytes_stored"] > fs["bytes_stored"]
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


# --- ADR-0727: a flash-attention block as one chain (a DAG with side outputs) ----------
# bank 0: int32 scores, then the chain's nominal intermediates; bank 1: the row state;
# bank 2: the kept row scale and the int8 probabilities
STATE = {"state_bank": 1, "state_offset": 0}
ATT = [
    {"opcode": "VE_DEQUANTIZE_TILE", "length": N, "rows": 1, "qbits_activation": 32,
     "out_qbits": 32, "in_dtype": "int32", "scale": 0.003, "in_bank": 0, "in_offset": 0,
     "out_bank": 0, "out_offset": 512},
    {"opcode": "VE_SOFTMAX_BLOCK_TILE", "length": N, "rows": 1, "qbits_activation": 32,
     "out_qbits": 32, "in_bank": 0, "in_offset": 512, "out_bank": 0, "out_offset": 1024,
     **STATE},
    {"opcode": "VE_ROWSCALE_TILE", "length": N, "rows": 1, "qbits_activation": 32,
     "bits": 8, "in_bank": 0, "in_offset": 1024, "out_bank": 2, "out_offset": 0},
    {"opcode": "VE_QUANTIZE_TILE", "length": N, "rows": 1, "qbits_activation": 32,
     "out_qbits": 8, "scale": 1.0, "in_bank": 0, "in_offset": 1024, "out_bank": 2,
     "out_offset": 64, "row_scale_bank": 2, "row_scale_offset": 0},
]


def _att_inputs() -> list[tuple[str, int, np.ndarray]]:
    r = np.random.default_rng(11)
    acc = r.integers(-3000, 3000, N).astype(np.int32)
    state = np.array([[1.5, 2.0, 1.0, 0.0]], np.float32)  # m, l, alpha, unused
    return [(SPACE, 0, acc), (SPACE, BANK, state)]


def _run_att(entries: list[dict]) -> tuple[MemoryStore, dict]:
    return _run(entries, _att_inputs)


def test_an_attention_block_chain_equals_its_steps_and_numpy():
    """dequantize → online-softmax step (state updated in place) → row scale (kept) →
    quantize with the row scale, which reads the softmax's result a second time: the int8
    probabilities, the kept row scale and the new state are bit-identical to the four
    entries, and match numpy's formulas."""
    fused, _ = _run_att([{**_fused(ATT), "keep": [2]}])
    apart, _ = _run_att(_separate(ATT))
    for addr, shape, dt in ((2 * BANK + 64, (N,), "int8"), (2 * BANK, (1,), "float32"),
                            (BANK, (4,), "float32")):
        np.testing.assert_array_equal(fused.read(SPACE, addr, shape, dt),
                                      apart.read(SPACE, addr, shape, dt))
    acc, st = (a for _, _, a in _att_inputs())
    x = acc.astype(np.float32) * np.float32(0.003)
    m = max(np.float32(st[0, 0]), x.max())
    e = np.exp(x - m).astype(np.float32)
    l_new = st[0, 1] * np.exp(st[0, 0] - m) + e.sum(dtype=np.float32)
    got_state = fused.read(SPACE, BANK, (4,), "float32")
    assert got_state[0] == m
    np.testing.assert_allclose(got_state[1], l_new, rtol=1e-6)
    rs = np.float32(np.abs(e).max() / 127)
    np.testing.assert_allclose(fused.read(SPACE, 2 * BANK, (1,), "float32"), [rs], rtol=1e-7)
    np.testing.assert_array_equal(fused.read(SPACE, 2 * BANK + 64, (N,), "int8"),
                                  quantize(e, rs, 0, 8, True))


def test_a_chain_writes_side_outputs_and_kept_steps_only():
    """Fetched: the scores and the state; written: the state (a side output), the kept
    row scale and the int8 result; the fp32 intermediates never touch TCM."""
    _, st = _run_att([{**_fused(ATT), "keep": [2]}])
    fs = st["engines"]["sip0.cube0.pe0.pe_fetch_store"]
    assert fs["bytes_fetched"] == 4 * N + 16
    assert fs["bytes_stored"] == 16 + 4 + N
    _, no_keep = _run_att([_fused(ATT)])
    assert no_keep["engines"]["sip0.cube0.pe0.pe_fetch_store"]["bytes_stored"] == 16 + N


@pytest.mark.parametrize("edit,field,reason", [
    (lambda s: s[:3] + [{**s[3], "row_scale_offset": 2}], "steps[3].row_scale_bank",
     "where step 2 wrote"),
    (lambda s: s[:2] + [{**s[2], "in_offset": 1040}] + s[3:], "steps[2].in_bank",
     "where step 1 wrote"),
])
def test_a_read_overlapping_an_earlier_result_is_refused(edit, field, reason):
    problems = _problems(_fused(edit(ATT)))
    assert len(problems) == 1, problems
    assert f"field '{field}'" in problems[0] and reason in problems[0]


def test_keep_must_name_an_earlier_step():
    problems = _problems({**_fused(ATT), "keep": [3]})
    assert len(problems) == 1 and "field 'keep'" in problems[0], problems
