"""DataExecutor (ADR-0020 D6): time-faithful ordering, batching, integer exactness, and
the op log written by the component hooks during a real simulation."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.common.pe_commands import DmaRead, DmaWrite, GemmCmd, MathCmd
from kernbench.numerics import quant as qmath
from kernbench.sim_engine.engine import Simulator
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger, OpRecord
from kernbench.topology import load_topology

T = "tcm:pe0"


def store() -> MemoryStore:
    return MemoryStore({"hbm": 1 << 20, T: 1 << 16})


def math_rec(t0, t1, op, ins, dst, shape, dtype="float32", **kw) -> OpRecord:
    p = {"op": op, "space": T, "input_addrs": [a for a, _ in ins],
         "input_shapes": [shape] * len(ins), "input_dtypes": [d for _, d in ins],
         "dst_addr": dst, "shape_out": shape, "dtype": dtype, **kw}
    return OpRecord(t0, t1, "pe0.pe_math", "math", op, p, [])


def test_race_is_observable():
    """A consumer that starts before its producer ended reads the old data."""
    x = np.arange(4, dtype=np.float32)
    results = {}
    for name, consumer_start in (("ordered", 10.0), ("race", 5.0)):
        st = store()
        st.write(T, 0, x)
        st.write(T, 64, np.zeros(4, np.float32))  # old contents of the producer's output
        log = [math_rec(0, 10, "exp", [(0, "f32")], 64, (4,)),
               math_rec(consumer_start, consumer_start + 10, "neg", [(64, "f32")], 128, (4,))]
        DataExecutor(log, st).run()
        results[name] = st.read(T, 128, (4,), "f32")
    assert np.allclose(results["ordered"], -np.exp(x))
    assert np.array_equal(results["race"], -np.zeros(4, np.float32))


def test_explicit_dependency_is_honoured():
    x = np.arange(4, dtype=np.float32)
    st = store()
    st.write(T, 0, x)
    st.write(T, 64, np.zeros(4, np.float32))
    prod = math_rec(0, 10, "exp", [(0, "f32")], 64, (4,))
    cons = math_rec(5, 15, "neg", [(64, "f32")], 128, (4,))
    cons.dependency_ids = [0]
    ex = DataExecutor([prod, cons], st)
    ex.run()
    assert np.allclose(st.read(T, 128, (4,), "f32"), -np.exp(x)) and ex.forced == 1


def test_zero_duration_same_time_chain():
    st = store()
    st.write(T, 0, np.ones(4, np.float32))
    log = [math_rec(3, 3, "add", [(0, "f32"), (0, "f32")], 64, (4,)),
           math_rec(3, 9, "mul", [(64, "f32"), (64, "f32")], 128, (4,))]
    DataExecutor(log, st).run()
    assert np.array_equal(st.read(T, 128, (4,), "f32"), np.full(4, 4, np.float32))


def _gemm(t, a, b, c, shape_a, shape_b, dt="float32", acc="float32", out="float32", **kw):
    p = {"space": T, "src_a_addr": a, "src_b_addr": b, "dst_addr": c, "shape_a": shape_a,
         "shape_b": shape_b, "shape_out": (shape_a[0], shape_b[1]), "dtype_in": dt,
         "dtype_acc": acc, "dtype_out": out, "transpose_a": False, "transpose_b": False, **kw}
    return OpRecord(t, t + 10, "pe0.pe_gemm", "gemm", "gemm", p, [])


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_batching_matches_unbatched(dt):
    from kernbench.numerics.dtypes import np_dtype

    rng = np.random.default_rng(1)
    outs = []
    for batch in (True, False):
        st = store()
        log = []
        for i in range(6):
            a = rng.standard_normal((8, 16)).astype(np_dtype(dt))
            b = rng.standard_normal((16, 4)).astype(np_dtype(dt))
            st.write(T, i * 1024, a)
            st.write(T, i * 1024 + 512, b)
            log.append(_gemm(0.0, i * 1024, i * 1024 + 512, 8192 + i * 128, (8, 16), (16, 4),
                             dt=dt, out=dt))
        rng = np.random.default_rng(1)
        ex = DataExecutor(log, st, batch=batch)
        ex.run()
        assert ex.batched == (6 if batch else 0)
        outs.append([st.read(T, 8192 + i * 128, (8, 4), dt).tobytes() for i in range(6)])
    assert outs[0] == outs[1]


@pytest.mark.parametrize("bits_a", [8, 4])
def test_integer_gemm_is_exact(bits_a):
    rng = np.random.default_rng(2)
    lo, hi = qmath.qrange(bits_a)
    a = rng.integers(lo, hi + 1, (16, 64)).astype(np.int8)
    b = rng.integers(-128, 128, (64, 8)).astype(np.int8)
    st = store()
    st.write(T, 0, a, dtype="int4" if bits_a == 4 else None)
    st.write(T, 4096, b)
    st.write(T, 16384, np.full((16, 8), 5, np.int32))
    rec = _gemm(0, 0, 4096, 16384, (16, 64), (64, 8), dt=None, acc="int32", out="int32",
                dtype_a="int4" if bits_a == 4 else "int8", dtype_b="int8", accumulate=True)
    DataExecutor([rec], st).run()
    ref = a.astype(np.int64) @ b.astype(np.int64) + 5
    assert np.array_equal(st.read(T, 16384, (16, 8), "int32"), ref)


def test_gemm_accumulate_transpose_bias():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    bt = rng.standard_normal((6, 8)).astype(np.float32)
    c0 = rng.standard_normal((4, 6)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    st = store()
    st.write(T, 0, a)
    st.write(T, 1024, bt)
    st.write(T, 2048, c0)
    st.write(T, 4096, bias)
    rec = _gemm(0, 0, 1024, 2048, (4, 8), (6, 8), accumulate=True, transpose_b=True,
                bias_addr=4096)
    rec.params["shape_out"] = (4, 6)
    DataExecutor([rec], st).run()
    np.testing.assert_allclose(st.read(T, 2048, (4, 6), "f32"), a @ bt.T + c0 + bias,
                               rtol=1e-6)


def test_memory_ops_dma_2d_gather_scatter():
    st = store()
    m = np.arange(64, dtype=np.float32).reshape(8, 8)
    st.write("hbm", 0, m)
    recs = [
        OpRecord(0, 5, "pe0.pe_dma", "memory", "dma", {
            "src_space": "hbm", "src_addr": 8 * 4 * 2, "dst_space": T, "dst_addr": 0,
            "nbytes": 3 * 16, "rows": 3, "row_bytes": 16, "src_stride": 32, "dst_stride": 16}),
        OpRecord(0, 5, "pe0.pe_dma", "memory", "gather", {
            "src_space": "hbm", "addrs": np.arange(0, 8) * 32 + 4, "mask": np.arange(8) < 6,
            "other": -1.0, "dtype": "float32", "shape": (8,), "dst_space": T, "dst_addr": 256}),
        OpRecord(6, 9, "pe0.pe_dma", "memory", "scatter", {
            "src_space": T, "src_addr": 256, "dtype": "float32", "shape": (8,),
            "dst_space": "hbm", "addrs": 4096 + np.arange(8)[::-1] * 4, "mask": None}),
    ]
    DataExecutor(recs, st).run()
    assert np.array_equal(st.read(T, 0, (3, 4), "f32"), m[2:5, :4])
    col = np.where(np.arange(8) < 6, m[:, 1], -1)
    assert np.array_equal(st.read(T, 256, (8,), "f32"), col)
    assert np.array_equal(st.read("hbm", 4096, (8,), "f32"), col[::-1])


def test_simulation_op_log_end_to_end():
    topo = load_topology("small")
    log = OpLogger()
    sim = Simulator(topo, op_logger=log)
    st = MemoryStore.for_topology(topo)
    pe = topo.pes[1].id
    tcm = f"tcm:{pe}"
    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    st.write("hbm", 0, a)
    st.write("hbm", 4096, b)
    init = st.snapshot()

    def rd(src, dst, n):
        return DmaRead(label="rd", params={"nbytes": n, "addr": src, "space": "hbm", "data": {
            "op_kind": "memory", "op_name": "dma", "src_space": "hbm", "src_addr": src,
            "dst_space": tcm, "dst_addr": dst, "nbytes": n}})

    def proc():
        yield sim.submit(pe, rd(0, 0, a.nbytes)) & sim.submit(pe, rd(4096, 4096, b.nbytes))
        g = GemmCmd(label="mm", fetch_nbytes=a.nbytes + b.nbytes, store_nbytes=16 * 8 * 4,
                    params={"m": 16, "n": 8, "k": 32, "qbits_weight": 32, "qbits_activation": 32,
                            "data": {"op_kind": "gemm", "op_name": "gemm", "space": tcm,
                                     "src_a_addr": 0, "src_b_addr": 4096, "dst_addr": 8192,
                                     "shape_a": (16, 32), "shape_b": (32, 8),
                                     "shape_out": (16, 8), "dtype_in": "f32",
                                     "dtype_acc": "f32", "dtype_out": "f32"}})
        yield sim.submit(pe, g)
        m = MathCmd(label="relu", fetch_nbytes=512, store_nbytes=512,
                    params={"op": "max", "length": 128, "data": {
                        "op_kind": "math", "op_name": "maximum", "op": "maximum", "space": tcm,
                        "input_addrs": [8192, None], "input_shapes": [(16, 8), ()],
                        "input_dtypes": ["f32", "f32"], "imm": [None, 0.0],
                        "dst_addr": 8192, "shape_out": (16, 8), "dtype": "f32"}})
        yield sim.submit(pe, m)
        yield sim.submit(pe, DmaWrite(label="wr", params={
            "nbytes": 512, "addr": 65536, "space": "hbm", "data": {
                "op_kind": "memory", "op_name": "dma", "src_space": tcm, "src_addr": 8192,
                "dst_space": "hbm", "dst_addr": 65536, "nbytes": 512}}))

    sim.env.process(proc())
    sim.run()
    kinds = [(r.op_kind, r.component_id.rsplit(".", 1)[1]) for r in log.records]
    assert kinds == [("memory", "pe_dma"), ("memory", "pe_dma"), ("gemm", "pe_gemm"),
                     ("math", "pe_math"), ("memory", "pe_dma")]
    assert all(r.t_end >= r.t_start for r in log.records) and log.open_records == 0
    out = DataExecutor(log, init).run()
    np.testing.assert_allclose(out.read("hbm", 65536, (16, 8), "f32"), np.maximum(a @ b, 0),
                               rtol=1e-5, atol=1e-5)


def test_no_logger_no_records():
    topo = load_topology("small")
    sim = Simulator(topo)
    assert all(c._op_logger is None for c in sim.components.values())
    sim.submit(0, DmaRead(label="rd", params={"nbytes": 64, "addr": 0, "data": {
        "op_kind": "memory", "op_name": "dma"}}))
    sim.run()  # would fail in the logger if it were called (incomplete data dict)
