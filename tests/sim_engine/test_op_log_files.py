"""The op log is plain data: saved to a folder and loaded back exactly; non-plain params
are refused when recorded; a MemoryStore snapshot saves and loads exactly."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from kernbench.errors import SimulationError
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLog, OpLogger, OpRecord, check_plain


def _params() -> dict:
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    return {"shape_out": (2, 3), "axis": [0, 1], "scale": np.float64(0.5), "n": 3,
            "flag": True, "name": "x", "none": None, "w": w, "again": w,
            "bf": np.array([1.5, -2.25], ml_dtypes.bfloat16), "nested": {"q": np.int8(-3),
                                                                        "b": np.ones(2, bool)}}


def test_save_load_roundtrip_exact(tmp_path):
    recs = [OpRecord(0.0, 1.5, "pe0.pe_math", "math", "layer", _params(), []),
            OpRecord(1.0, float("nan"), "pe0.pe_dma", "memory", "dma", {"nbytes": 8}, [0])]
    OpLog(recs).save(tmp_path)
    got = OpLog.load(tmp_path).records
    assert [(r.t_start, r.component_id, r.op_kind, r.op_name, r.dependency_ids) for r in got] \
        == [(r.t_start, r.component_id, r.op_kind, r.op_name, r.dependency_ids) for r in recs]
    assert got[0].t_end == 1.5 and math.isnan(got[1].t_end)
    p = got[0].params
    assert p["shape_out"] == (2, 3) and p["axis"] == [0, 1] and p["none"] is None
    assert isinstance(p["scale"], np.float64) and p["scale"] == 0.5
    assert p["w"].dtype == np.float32 and np.array_equal(p["w"], _params()["w"])
    assert p["bf"].dtype == ml_dtypes.bfloat16 and np.array_equal(p["bf"], _params()["bf"])
    assert p["nested"]["q"] == np.int8(-3) and p["nested"]["q"].dtype == np.int8
    assert p["nested"]["b"].dtype == bool
    # one shared array is stored once; the same log saves to the same bytes
    first = (tmp_path / "oplog.npz").read_bytes()
    OpLog(recs).save(tmp_path)
    assert (tmp_path / "oplog.npz").read_bytes() == first
    with np.load(tmp_path / "oplog.npz") as z:
        assert len(z.files) == 5  # w (shared with "again"), scale, bf, q, b


def test_non_plain_params_are_refused():
    check_plain(_params(), "ok")
    for bad in ({"ctx": object()}, {"f": lambda: 0}, {"a": np.array([object()])},
                {1: "int key"}):
        with pytest.raises(SimulationError):
            check_plain(bad, "rec")
    log = OpLogger()
    msg = type("M", (), {"params": {"data": {"op_kind": "math", "op_name": "x",
                                             "ctx": (object(),)}}})()
    with pytest.raises(SimulationError, match="plain data"):
        log.record_start(0.0, "pe0.pe_math", msg)


def test_memory_store_save_load(tmp_path):
    st = MemoryStore({"hbm": 1 << 20, "tcm:pe0": 1 << 17})
    x = np.arange(40000, dtype=np.float32)  # crosses a 64 KiB page
    st.write("hbm", 1000 * 4, x)
    st.write("tcm:pe0", 8, np.array([1, -2, 3], np.int8), "int4")
    st.save(tmp_path)
    back = MemoryStore.load(tmp_path)
    assert back.spaces == st.spaces
    assert np.array_equal(back.read("hbm", 4000, (40000,), "float32"), x)
    assert np.array_equal(back.read("tcm:pe0", 8, (3,), "int4"), [1, -2, 3])
    assert back.written_bytes("hbm") == st.written_bytes("hbm")
    with pytest.raises(Exception, match="never written"):
        back.read("hbm", 0, (4,), "float32")


def test_replay_of_a_saved_log_matches(tmp_path):
    st = MemoryStore({"t": 1 << 12})
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    st.write("t", 0, a)
    rec = OpRecord(0.0, 1.0, "pe0.pe_math", "math", "softmax", {
        "op": "softmax", "space": "t", "input_addrs": [0], "input_shapes": [(3, 4)],
        "input_dtypes": ["float32"], "dst_addr": 256, "shape_out": (3, 4),
        "dtype": "float32", "causal_offset": 0}, [])
    st.save(tmp_path / "m")
    OpLog([rec]).save(tmp_path / "l")
    direct = DataExecutor([rec], st.snapshot()).run().read("t", 256, (3, 4), "float32")
    replayed = DataExecutor(OpLog.load(tmp_path / "l"), MemoryStore.load(tmp_path / "m")).run()
    assert np.array_equal(replayed.read("t", 256, (3, 4), "float32"), direct)
