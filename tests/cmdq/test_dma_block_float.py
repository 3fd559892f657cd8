"""DMA_LOAD_TILE with `block_float` (ADR-0916): the HBM side holds BFP8_B / BFP4_B blocks
(an exponent byte and 16 codes), the transfer counts those bytes, and the data pass
writes the decoded values into the TCM as bf16, against numpy's float64 rounding."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernbench.cmdq.io import parse_program
from kernbench.cmdq.limits import CmdqLimits
from kernbench.cmdq.opcodes.base import TcmDataEnv
from kernbench.cmdq.schema import DmaLoadTile
from kernbench.cmdq.validate import validate_program
from kernbench.numerics.block_float import block_bytes, block_float, encode
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpRecord

BANK = 1 << 14
LIMITS = CmdqLimits.default_small()


def _reference(x: np.ndarray, mbits: int) -> np.ndarray:
    """float64 block rounding (see tests/numerics/test_block_float.py)."""
    b = x.astype(np.float64).reshape(*x.shape[:-1], -1, 16)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    e = np.floor(np.log2(np.where(amax > 0, amax, 1.0)))
    step = 2.0 ** (e - (mbits - 1))
    q = np.minimum(np.round(np.abs(b) / step), 2**mbits - 1)
    return (np.sign(b) * q * step).reshape(x.shape)


def _load(e: DmaLoadTile, hbm: np.ndarray) -> MemoryStore:
    st = MemoryStore({"hbm": 1 << 16, "tcm:pe0": 4 * BANK})
    st.write_bytes("hbm", 0, hbm)
    d = e.data(TcmDataEnv(e, "pe0", BANK))
    p = {k: v for k, v in d.items() if k not in ("op_kind", "op_name")}
    DataExecutor([OpRecord(0.0, 1.0, "pe0", d["op_kind"], d["op_name"], p)], st).run()
    return st


@pytest.mark.parametrize("fmt", ["bfp8_b", "bfp4_b"])
def test_strided_rows_decode_into_bf16(fmt):
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((4, 64)) * rng.uniform(0.01, 10, (4, 1))).astype(np.float32)
    hbm = encode(w, fmt)
    bb = block_bytes(fmt)
    # rows 1..3, columns 16..47 (two blocks a row) of the 4 x 64 matrix
    e = DmaLoadTile(id=0, qbits=16, block_float=fmt, dram_addr=(64 // 16 + 1) * bb,
                    spm_bank=1, spm_offset=0, num_elements=3 * 32, rows=3,
                    stride_bytes=64 // 16 * bb, tensor_role="weight")
    assert e.nbytes == 3 * 2 * bb  # the blocks' bytes move, exponents included
    st = _load(e, hbm)
    got = st.read("tcm:pe0", BANK, (3, 32), "bfloat16").astype(np.float32)
    want = _reference(w, block_float(fmt).mantissa_bits)[1:4, 16:48]
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(want.astype(ml_dtypes.bfloat16).astype(np.float64), want)


def test_contiguous_load_moves_the_block_bytes():
    e = DmaLoadTile(id=0, qbits=16, block_float="bfp8_b", dram_addr=0, spm_bank=0,
                    spm_offset=0, num_elements=64)
    assert e.nbytes == 4 * 17 and e.dram_range().nbytes == 68
    assert e.tcm_ranges()[0].nbytes == 128  # bf16 in the TCM


@pytest.mark.parametrize(("fields", "field"), [
    ({"qbits": 8}, "qbits"),                            # the TCM side is bf16
    ({"num_elements": 40}, "num_elements"),             # not whole blocks
    ({"num_elements": 96, "rows": 4, "stride_bytes": 68}, "num_elements"),  # 24 a row
])
def test_bad_block_float_loads_are_refused(fields, field):
    e = {"id": 0, "opcode": "DMA_LOAD_TILE", "qbits": 16, "block_float": "bfp8_b",
         "dram_addr": 0, "spm_bank": 0, "spm_offset": 0, "num_elements": 64, **fields}
    errs = validate_program(parse_program({"cmdq": [e, {"id": 1, "opcode": "END"}]}), LIMITS)
    assert [x.field for x in errs] == [field], errs


def test_a_block_float_store_is_refused():
    e = {"id": 0, "opcode": "DMA_STORE_TILE", "qbits": 16, "block_float": "bfp8_b",
         "dram_addr": 0, "spm_bank": 0, "spm_offset": 0, "num_elements": 64}
    errs = validate_program(parse_program({"cmdq": [e, {"id": 1, "opcode": "END"}]}), LIMITS)
    assert [x.field for x in errs] == ["block_float"], errs
