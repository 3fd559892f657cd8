"""The cost model (compiler/cost.py) against closed forms written out by hand from the
`small` preset's numbers, and against the simulator on programs it must price exactly."""

from __future__ import annotations

import math

import pytest

from kernbench.cmdq.hw import to_program
from kernbench.cmdq.io import parse_program
from kernbench.compiler.cost import CostModel, estimate_program
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology

SMALL = load_topology("small")
# the small preset, written out (config/presets/small.yaml) so that the closed forms below
# do not read the code under test: 32×32 os array, 64 lanes, 1 GHz clocks everywhere
ROWS = COLS = 32
LANES, PIPE = 64, 4
DMA_SETUP = 8            # cycles
HBM_LAT, PORT_LAT, LINK_LAT, TCM_LAT = 80.0, 1.0, 1.0, 1.0
PE_LINK_BW, TCM_BW = 128.0, 512.0
CMD_BYTES = 64
ISSUE = 1.0              # the M_CPU's issue latency: 1 cycle at 1 GHz
PRE = (LINK_LAT + LINK_LAT + CMD_BYTES / PE_LINK_BW) + 2 + 1   # M_CPU → PE 0, dispatch
POST = LINK_LAT + LINK_LAT + CMD_BYTES / PE_LINK_BW             # completion back


def gemm_closed_form(m: int, n: int, k: int) -> float:
    """Output stationary: ceil(m/rows)·ceil(n/cols) folds of rows + cols + k − 2 cycles,
    minus one (SCALE-Sim's count), at 1 GHz."""
    return math.ceil(m / ROWS) * math.ceil(n / COLS) * (ROWS + COLS + k - 2) - 1


def load_closed_form(nbytes: int) -> float:
    """PE 0 ← cube 0's HBM via router r0c0 (the PE's own router): setup + HBM, port, PE
    link and TCM latencies + bytes over the slowest stage (the 128 GB/s PE link)."""
    return DMA_SETUP + HBM_LAT + PORT_LAT + LINK_LAT + TCM_LAT + nbytes / PE_LINK_BW


@pytest.mark.parametrize("m,n,k", [(32, 32, 32), (64, 96, 200), (1, 1, 1), (128, 256, 512)])
def test_gemm_tile_time_is_the_systolic_closed_form(m, n, k):
    assert CostModel(SMALL).gemm_ns(m, n, k, 8) == gemm_closed_form(m, n, k)


@pytest.mark.parametrize("op,per", [("softmax", 7.0), ("layernorm", 6.0), ("add", 1.0)])
def test_rowwise_op_time_is_the_lane_closed_form(op, per):
    rows, length = 16, 768
    want = PIPE + math.ceil(math.ceil(rows * length / LANES) * per)
    assert CostModel(SMALL).math_ns(op, length, rows) == want


def _chain_program() -> dict:
    """Load A, load W, GEMM, softmax over the result, store: one chain on PE 0."""
    m, n, k = 64, 64, 128
    a, w, c = m * k, k * n, m * n  # int8 operands, the GEMM's int32 output read as 32-bit
    return {"cmdq": [
        {"opcode": "DMA_LOAD_TILE", "id": 0, "layer_id": "L", "pe": 0, "qbits": 8,
         "dram_addr": 0, "spm_bank": 0, "spm_offset": 0, "num_elements": a},
        {"opcode": "DMA_LOAD_TILE", "id": 1, "layer_id": "L", "pe": 0, "qbits": 8,
         "dram_addr": 1 << 20, "spm_bank": 1, "spm_offset": 0, "num_elements": w,
         "deps_before": [0]},
        {"opcode": "TE_GEMM_TILE", "id": 2, "layer_id": "L", "pe": 0, "m": m, "n": n, "k": k,
         "ifm_bank": 0, "ifm_offset": 0, "wgt_bank": 1, "wgt_offset": 0, "ofm_bank": 2,
         "ofm_offset": 0, "qbits_weight": 8, "qbits_activation": 8, "deps_before": [1]},
        {"opcode": "VE_SOFTMAX_TILE", "id": 3, "layer_id": "S", "pe": 0, "in_bank": 2,
         "in_offset": 0, "out_bank": 3, "out_offset": 0, "rows": m, "length": n,
         "qbits_activation": 32, "deps_before": [2]},
        {"opcode": "DMA_STORE_TILE", "id": 4, "layer_id": "S", "pe": 0, "qbits": 32,
         "dram_addr": 2 << 20, "spm_bank": 3, "spm_offset": 0, "num_elements": c,
         "deps_before": [3]},
        {"opcode": "END", "id": 5, "deps_before": [4]},
    ]}, (m, n, k, a, w, c)


def test_a_dependency_chain_is_priced_by_the_closed_form_and_matches_the_simulator():
    doc, (m, n, k, a, w, c) = _chain_program()
    prog = parse_program(doc)
    est = estimate_program(to_program(prog, SMALL), SMALL)
    fetch = TCM_LAT + (a + w) / TCM_BW          # TCM → registers before the array
    store = TCM_LAT + 4 * m * n / TCM_BW        # int32 accumulator back to TCM
    gemm = fetch + gemm_closed_form(m, n, k) + store
    soft = (TCM_LAT + 4 * c / TCM_BW) + PIPE + math.ceil(m * n / LANES) * 7 \
        + (TCM_LAT + 4 * c / TCM_BW)
    # a store travels TCM → PE link → r0c0's HBM port → HBM: the same stages reversed
    store_dma = load_closed_form(4 * c)
    # every entry after a completion waits one M_CPU issue slot before its command trip
    layer_l = (PRE + load_closed_form(a) + POST) + (ISSUE + PRE + load_closed_form(w) + POST) \
        + (ISSUE + PRE + gemm + POST) - PRE   # a layer's span starts at its first engine start
    layer_s = (PRE + soft + POST) + (ISSUE + PRE + store_dma + POST) - PRE
    assert est.layers["L"].estimate_ns == pytest.approx(layer_l, abs=1e-6)
    assert est.layers["S"].estimate_ns == pytest.approx(layer_s, abs=1e-6)
    # busy: one PE, the union of the entries' [first engine start, completion] intervals
    busy_l = (load_closed_form(a) + POST) + (load_closed_form(w) + POST) + (gemm + POST)
    assert est.layers["L"].busy_ns == pytest.approx(busy_l, abs=1e-6)
    assert est.layers["S"].busy_ns == pytest.approx(soft + store_dma + 2 * POST, abs=1e-6)
    assert est.layers["L"].bound_by == "path"
    run = simulate_program(prog, SMALL)
    sim = run.stats()
    # nothing contends: the schedule is the simulator's to the ns, issue slots included
    assert est.estimate_ns == pytest.approx(ISSUE + PRE + layer_l + ISSUE + PRE + layer_s,
                                            abs=1e-6)
    assert est.estimate_ns == pytest.approx(sim["total_ns"], abs=1e-6)
    spans = run.layer_spans(sim)
    assert spans["L"].pe_busy_ns == pytest.approx(busy_l, abs=1e-6)


def test_independent_loads_are_bound_by_the_dma_read_channel():
    """Sixteen 64 KiB loads on PE 0 with no dependencies: the DMA read channel serves them
    one after another, so the estimate is their sum (the channel is the busiest resource)
    plus the command trip back; the simulator agrees within a few per cent."""
    nbytes = 64 * 1024
    entries = [{"opcode": "DMA_LOAD_TILE", "id": i, "layer_id": "L", "pe": 0, "qbits": 8,
                "dram_addr": i * nbytes, "spm_bank": i % 4, "spm_offset": 0,
                "num_elements": nbytes} for i in range(16)]
    prog = parse_program({"cmdq": [*entries, {"opcode": "END", "id": 16,
                                              "deps_before": list(range(16))}]})
    est = estimate_program(to_program(prog, SMALL), SMALL)
    layer = est.layers["L"]
    assert layer.resource == "sip0.cube0.pe0.pe_dma.read"
    assert layer.resource_ns == pytest.approx(16 * load_closed_form(nbytes) + POST)
    sim = simulate_program(prog, SMALL).stats()
    assert est.estimate_ns == pytest.approx(sim["total_ns"], rel=0.05)
