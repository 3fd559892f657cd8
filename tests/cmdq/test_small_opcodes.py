"""The opcodes of ADR-0707 on their own: DMA_GATHER_TILE moves one burst-rounded row per
index (closed form) and picks table rows as numpy's take does; VE_ELEMENTWISE_TILE
broadcasts like numpy; VE_CUMSUM_TILE sums like a loop; bad shapes are refused in one
line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.validate import validate_document
from kernbench.errors import SimulationError
from kernbench.host.simulate import simulate_program
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology

SMALL = load_topology("small")
LIMITS = limits_for(SMALL)
BANK = LIMITS.tcm_bank_bytes
SPACE = f"tcm:{SMALL.pes[0].id}"
TABLE_ADDR = 1 << 16


def _gather(rows: int, row_bytes: int, table_rows: int = 50) -> dict:
    return {"opcode": "DMA_GATHER_TILE", "id": 0, "dram_addr": TABLE_ADDR,
            "table_rows": table_rows, "row_bytes": row_bytes, "rows": rows,
            "index_dtype": "int64", "ids_bank": 0, "ids_offset": 0, "spm_bank": 1,
            "spm_offset": 0}


def _execute(entry: dict, writes: list[tuple[str, int, np.ndarray]]) -> MemoryStore:
    """Simulate one entry with `writes` in memory first; the data pass's final store."""
    doc = {"cmdq": [entry, {"opcode": "END", "id": 1}]}
    assert validate_document(doc, LIMITS, "p.json") == []
    store = MemoryStore.for_topology(SMALL)
    for space, addr, arr in writes:
        store.write(space, addr, arr)
    init = store.snapshot()
    log = OpLogger()
    simulate_program(parse_program(doc), SMALL, op_logger=log, data=TcmData())
    return DataExecutor(log, init).run()


@pytest.mark.parametrize("rows,row_bytes", [(5, 8), (16, 64), (7, 100), (3, 256)])
def test_gather_moves_one_burst_rounded_row_per_index(rows, row_bytes):
    """The DMA reads rows × ceil(row_bytes / burst) bursts: a gather of short rows pays a
    whole burst per row, unlike one contiguous load of the same bytes."""
    prog = parse_program({"cmdq": [_gather(rows, row_bytes), {"opcode": "END", "id": 1}]})
    st = simulate_program(prog, SMALL).stats()
    dma = st["engines"]["sip0.cube0.pe0.pe_dma"]
    burst = SMALL.config.cube.pe_template.pe_dma.burst_bytes
    assert dma["bytes_read"] == rows * math.ceil(row_bytes / burst) * burst
    assert st["entries"]["0"]["engine"] == "sip0.cube0.pe0.pe_dma"


def test_gather_picks_table_rows_negative_ids_from_the_end():
    table = np.random.default_rng(0).standard_normal((50, 12)).astype(np.float32)
    ids = np.array([3, 0, 49, -1, 7, -50, 3], np.int64)
    store = _execute(_gather(len(ids), 48), [(SPACE, 0, ids), ("hbm", TABLE_ADDR, table)])
    got = store.read(SPACE, BANK, (len(ids), 12), "float32")
    np.testing.assert_array_equal(got, np.take(table, ids, axis=0))


def test_gather_index_out_of_range_is_a_data_error():
    table = np.zeros((50, 12), np.float32)
    ids = np.array([1, 50], np.int64)
    with pytest.raises(SimulationError, match="gather index 50 is outside a table of 50 rows"):
        _execute(_gather(2, 48), [(SPACE, 0, ids), ("hbm", TABLE_ADDR, table)])


def test_elementwise_tile_broadcasts_like_numpy():
    """where(keep [4, 1, 8], 0, bias [1, 6, 8]) → [4, 6, 8] fp32."""
    r = np.random.default_rng(1)
    keep = r.random((4, 1, 8)) < 0.5
    bias = r.standard_normal((1, 6, 8)).astype(np.float32)
    zero = np.zeros((1, 1, 1), np.float32)
    e = {"opcode": "VE_ELEMENTWISE_TILE", "id": 0, "op": "where", "cost": "where",
         "out_shape": [4, 6, 8], "out_dtype": "fp32", "out_bank": 3, "out_offset": 0,
         "in_bank": 0, "in_offset": 0, "in_shape": [4, 1, 8], "in_dtype": "bool",
         "in2_bank": 1, "in2_offset": 0, "in2_shape": [1, 1, 1], "in2_dtype": "fp32",
         "in3_bank": 2, "in3_offset": 0, "in3_shape": [1, 6, 8], "in3_dtype": "fp32"}
    store = _execute(e, [(SPACE, 0, keep), (SPACE, BANK, zero), (SPACE, 2 * BANK, bias)])
    got = store.read(SPACE, 3 * BANK, (4, 6, 8), "float32")
    want = np.empty((4, 6, 8), np.float32)
    for i in range(4):
        for j in range(6):
            for k in range(8):
                want[i, j, k] = 0.0 if keep[i, 0, k] else bias[0, j, k]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_cumsum_tile_sums_each_row(exclusive, reverse):
    x = np.random.default_rng(2).integers(-5, 9, (3, 10)).astype(np.int64)
    e = {"opcode": "VE_CUMSUM_TILE", "id": 0, "rows": 3, "length": 10, "out_dtype": "int64",
         "exclusive": exclusive, "reverse": reverse, "in_bank": 0, "in_offset": 0,
         "out_bank": 1, "out_offset": 0}
    got = _execute(e, [(SPACE, 0, x)]).read(SPACE, BANK, (3, 10), "int64")
    want = np.zeros_like(x)
    for r in range(3):
        order = range(9, -1, -1) if reverse else range(10)
        acc = 0
        for c in order:
            if exclusive:
                want[r, c] = acc
                acc += x[r, c]
            else:
                acc += x[r, c]
                want[r, c] = acc
    np.testing.assert_array_equal(got, want)


def test_an_operand_that_does_not_broadcast_is_refused_in_one_line():
    e = {"opcode": "VE_ELEMENTWISE_TILE", "id": 0, "op": "add", "out_shape": [4, 8],
         "out_dtype": "fp32", "out_bank": 2, "out_offset": 0, "in_bank": 0, "in_offset": 0,
         "in_shape": [4, 8], "in_dtype": "fp32", "in2_bank": 1, "in2_offset": 0,
         "in2_shape": [3, 8]}
    (err,) = validate_document({"cmdq": [e, {"opcode": "END", "id": 1}]}, LIMITS, "p.json")
    assert (err.where, err.field) == ("entry 0", "in2_shape")
    assert "does not broadcast" in str(err) and "\n" not in str(err)
