"""MemoryStore (ADR-0020 D7): bounds, alignment, uninitialised reads, reinterpretation,
int4 packing, bf16, the tensor cache and snapshots."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernbench.errors import AddressError
from kernbench.numerics import quant as qmath
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.topology import load_topology


@pytest.fixture
def st() -> MemoryStore:
    return MemoryStore({"hbm": 1 << 20, "tcm:pe0": 4096})


def test_roundtrip_and_cache(st):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    st.write("hbm", 256, a)
    r = st.read("hbm", 256, (3, 4), "f32")
    assert np.array_equal(r, a) and not r.flags.writeable  # cached, read-only
    # a partial read goes through the bytes
    assert np.array_equal(st.read("hbm", 256 + 16, (4,), np.float32), a[1])


def test_bounds(st):
    with pytest.raises(AddressError, match=r"tcm:pe0.*0xffc.*outside"):
        st.write("tcm:pe0", 4092, np.zeros(2, np.float32))
    with pytest.raises(AddressError, match="outside"):
        st.read("hbm", -4, (1,), "f32")
    with pytest.raises(AddressError, match="does not exist"):
        st.read("sram", 0, (1,), "f32")


def test_alignment(st):
    with pytest.raises(AddressError, match="aligned"):
        st.write("hbm", 2, np.zeros(2, np.float32))
    st.write("hbm", 0, np.zeros(8, np.uint8))
    with pytest.raises(AddressError, match="aligned"):
        st.read("hbm", 1, (1,), "f16")


def test_uninitialised(st):
    st.write("hbm", 0, np.ones(4, np.float32))
    with pytest.raises(AddressError, match="never written"):
        st.read("hbm", 8, (4,), "f32")
    assert np.array_equal(st.read("hbm", 8, (4,), "f32", zeros_ok=True), [1, 1, 0, 0])
    with pytest.raises(AddressError, match="never written"):
        st.read("hbm", 1 << 19, (1,), "i8")


def test_reinterpret_by_nbytes(st):
    a = np.array([1.0, -2.0], np.float32)
    st.write("hbm", 64, a)
    assert np.array_equal(st.read("hbm", 64, (2,), "i32"), a.view(np.int32))
    assert np.array_equal(st.read("hbm", 64, (8,), "u8"), a.view(np.uint8))
    with pytest.raises(AddressError, match="same number of bytes"):
        st.read("hbm", 64, (1,), "i32")


def test_partial_overwrite_evicts_cache(st):
    a = np.arange(8, dtype=np.int32)
    st.write("hbm", 0, a)
    st.write("hbm", 8, np.array([100], np.int32))
    assert st.read("hbm", 0, (8,), "i32").tolist() == [0, 1, 100, 3, 4, 5, 6, 7]


def test_int4_packed(st):
    q = np.array([-8, 7, 3, -1, 5], np.int8)
    st.write("hbm", 10, q, dtype="int4")
    assert np.array_equal(st.read_bytes("hbm", 10, 3), qmath.pack_int4(q))
    assert np.array_equal(st.read("hbm", 10, (5,), "int4"), q)
    st.write("hbm", 20, q.astype(ml_dtypes.int4))
    assert np.array_equal(st.read("hbm", 20, (5,), "int4"), q)


def test_bf16_and_fp8(st):
    x = np.array([1.5, -3.25, 1e-3], np.float32)
    b = x.astype(ml_dtypes.bfloat16)
    st.write("hbm", 32, b)
    r = st.read("hbm", 32, (3,), "bf16")
    assert r.dtype == ml_dtypes.bfloat16 and np.array_equal(r, b)
    f8 = x.astype(ml_dtypes.float8_e4m3fn)
    st.write("hbm", 48, f8)
    assert np.array_equal(st.read("hbm", 48, (3,), "fp8").astype(np.float32),
                          f8.astype(np.float32))


def test_page_crossing_and_snapshot(st):
    a = np.random.default_rng(0).standard_normal(40000).astype(np.float32)  # > 2 pages
    st.write("hbm", 1000 * 4, a)
    snap = st.snapshot()
    st.write("hbm", 1000 * 4, np.zeros_like(a))
    assert np.array_equal(snap.read("hbm", 4000, a.shape, "f32"), a)
    assert np.array_equal(snap.read_bytes("hbm", 4000 + 70000, 8), a.view(np.uint8)[70000:70008])


def test_for_topology_spaces():
    topo = load_topology("small")
    st = MemoryStore.for_topology(topo)
    sp = st.spaces
    assert sp["hbm"] == topo.hbm_bytes
    assert sp["tcm:sip0.cube0.pe3"] == topo.config.cube.pe_template.pe_tcm.capacity_kib * 1024
    assert "sram" in sp
