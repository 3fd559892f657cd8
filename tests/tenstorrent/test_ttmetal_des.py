"""tt-metal's multicast matmul as a CMDQ program (benchmarks/ttmetal_des.py, ADR-0863):
the emitted entries of a tiny 2 × 2-core program (counts, the double-buffer handshake),
its data pass against numpy float64, the tile engine's fed cycle count in closed form,
and `silicon.py --engine des` on three rows."""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import silicon  # noqa: E402
import ttmetal_des as td  # noqa: E402
import ttmetal_matmul as tm  # noqa: E402

from kernbench.cmdq.hw import TcmData  # noqa: E402
from kernbench.cmdq.io import parse_program  # noqa: E402
from kernbench.components.builtin.pe_gemm import gemm_cycles  # noqa: E402
from kernbench.host.simulate import simulate_program  # noqa: E402
from kernbench.sim_engine.executor import DataExecutor  # noqa: E402
from kernbench.sim_engine.memory_store import MemoryStore  # noqa: E402
from kernbench.sim_engine.op_log import OpLogger  # noqa: E402
from kernbench.topology import load_topology  # noqa: E402

PARAMS = {"launch_ns": 8000.0, "host_oob_ns": 50000.0, "host_tuned_ns": 130000.0,
          "noc_eff": 0.3, "tile_overhead_cycles": 5.0, "unpack_words": 1.4}
BASE = load_topology("n150")
PROG = tm.Program("mcast2d", 2, 2, 1, 1, 1, 1, 1)  # 2 x 2 cores, one tile each, kw 1


def _row(**kw) -> dict:
    r = {"card": "N150", "config": "hand_tuned", "m": "64", "k": "96", "n": "64",
         "use_trace": "True", "grid_size": "2x2", "in0_sharded": "False",
         "out_sharded": "False", "in0_storage_type": "DRAM", "in1_storage_type": "DRAM",
         "out_storage_type": "DRAM", "dtype": "BFLOAT16", "math_fidelity": "HiFi4",
         "inference_time_avg_ns": "20000"}
    r.update(kw)
    return r


def _topo(row: dict):
    return load_topology("n150", td.des_overrides(row, BASE, PARAMS))


def test_tiny_program_entries_and_handshake():
    row = _row()
    entries = td.emit(row, PROG, _topo(row))
    ops = Counter(e["opcode"] for e in entries)
    # 3 K blocks x (2 in0 rows + 2 in1 columns: a load and a multicast each; 4 GEMMs),
    # then 4 output stores and END
    assert ops == {"DMA_LOAD_TILE": 12, "DMA_MCAST_TILE": 12, "TE_GEMM_TILE": 12,
                   "DMA_STORE_TILE": 4, "END": 1}
    by_id = {e["id"]: e for e in entries}
    gemms = [e for e in entries if e["opcode"] == "TE_GEMM_TILE"]
    pe3 = [g for g in gemms if g["pe"] == 9]  # core (1, 1) is router r1c1, PE 9
    assert [g["accumulate"] for g in pe3] == [False, True, True]
    feeds = sorted(by_id[d]["opcode"] for d in pe3[0]["deps_before"])
    assert feeds == ["DMA_MCAST_TILE", "DMA_MCAST_TILE"]  # in0 along row 1, in1 down col 1
    assert pe3[0]["id"] in pe3[1]["deps_before"]
    # the third K block reuses slot 0: its loads wait for the first block's GEMMs
    loads = [e for e in entries if e["opcode"] == "DMA_LOAD_TILE"]
    third = loads[8]
    assert third["spm_offset"] == loads[0]["spm_offset"]
    waited = {by_id[d]["opcode"] for d in third["deps_before"]}
    assert waited == {"TE_GEMM_TILE", "DMA_MCAST_TILE"}
    mc = by_id[next(d for d in pe3[0]["deps_before"]
                    if by_id[d]["dst_pes"] == [9] and by_id[d]["pe"] == 8)]
    assert mc["num_elements"] == 32 * 32 * 2  # one bf16 tile


def test_output_blocks_alternate_two_slots():
    """Three output blocks per core (2 K blocks each): blocks 0 and 2 share a slot, 1 the
    other; a block's first GEMM waits for the store of the block two before (the writer
    drains one slot while the engine fills the other), never for the previous one."""
    row = _row(m=str(2 * 3 * 32), k="64", n="64")
    prog = tm.Program("mcast2d", 2, 2, 3, 1, 1, 1, 1)
    entries = td.emit(row, prog, _topo(row))
    by_id = {e["id"]: e for e in entries}
    pe0 = [e for e in entries if e.get("pe") == 0]
    gemms = [e for e in pe0 if e["opcode"] == "TE_GEMM_TILE"]
    stores = [e for e in pe0 if e["opcode"] == "DMA_STORE_TILE"]
    assert len(gemms) == 6 and len(stores) == 3
    offs = [g["ofm_offset"] for g in gemms[::2]]
    assert offs[0] == offs[2] != offs[1]
    assert [s["spm_offset"] for s in stores] == offs
    waits = [{by_id[d]["opcode"] for d in g.get("deps_before", [])} for g in gemms[::2]]
    assert "DMA_STORE_TILE" not in waits[0] | waits[1]
    assert stores[0]["id"] in gemms[4]["deps_before"]
    assert stores[1]["id"] not in gemms[4]["deps_before"]


def test_data_pass_equals_numpy():
    row = _row()
    topo = _topo(row)
    entries = td.emit(row, PROG, topo, verify=True)
    where = entries[-1]["debug"]
    m, k, n = where["m"], where["k"], where["n"]
    r = np.random.default_rng(7)
    a = r.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = r.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    store = MemoryStore.for_topology(topo)
    store.write("hbm", where["in0"], a)
    store.write("hbm", where["in1"], b)
    init = store.snapshot()
    log = OpLogger()
    simulate_program(parse_program({"cmdq": entries}), topo, op_logger=log, data=TcmData())
    out = DataExecutor(log, init).run().read("hbm", where["out"], (m, n), "float32")
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fid,bits", [("LoFi", 16), ("LoFi", 8), ("HiFi4", 8)])
def test_fed_tile_engine_closed_form(fid, bits):
    """n tiles · (max(passes · 16, tile bytes / unpack rate) + issue cycles)."""
    row = _row(math_fidelity=fid)
    spec = _topo(row).config.cube.pe_template.pe_gemm
    rate = PARAMS["unpack_words"] * 32  # n150: a 32-byte NoC word per cycle
    per = max({"LoFi": 16, "HiFi4": 64}[fid], 32 * 32 * bits / 8 / rate)
    want = 2 * 3 * 4 * (per + PARAMS["tile_overhead_cycles"])
    assert gemm_cycles(spec, 64, 128, 96, bits) == int(np.ceil(want))


def test_silicon_des_on_three_rows(tmp_path):
    rows = [_row(m="256", k="256", n="256", grid_size="8x8"),
            _row(m="256", k="256", n="256", grid_size="8x8", use_trace="False",
                 config="out_of_box", math_fidelity="HiFi2"),
            _row(m="512", k="512", n="512", grid_size="8x8", dtype="BFLOAT8_B",
                 math_fidelity="LoFi"),
            _row(m="4096", k="4096", n="4096", grid_size="8x8")]  # beyond the bound
    table = tmp_path / "t.csv"
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    params = tmp_path / "p.json"
    params.write_text(json.dumps(PARAMS))
    dparams = tmp_path / "d.json"
    dparams.write_text(json.dumps({k: PARAMS[k] for k in silicon.DES_FIT_NAMES}))
    out = tmp_path / "o.csv"
    assert silicon.main(["--table", str(table), "--out", str(out), "--params", str(params),
                         "--des-params", str(dparams), "--engine", "des",
                         "--des-max-mkn", str(512 ** 3)]) == 0
    got = list(csv.DictReader(out.open()))
    assert [g["engine"] for g in got] == ["des", "des", "des", ""]
    assert got[3]["simulated_ns"] == "" and got[3]["error_pct"] == ""
    for g in got[:3]:
        sim = float(g["simulated_ns"])
        assert sim > PARAMS["launch_ns"] and int(g["des_entries"]) > 0
        assert float(g["error_pct"]) == pytest.approx(
            100 * (sim / float(g["inference_time_avg_ns"]) - 1), abs=0.01)
    assert float(got[1]["simulated_ns"]) >= PARAMS["host_oob_ns"]  # no trace: host floor


def test_extrapolation_is_exact_on_its_own_model():
    """T(o, k) = a + o · (c + k · b) is recovered from T(1, k1), T(1, k2), T(2, k2)."""
    a, b, c = 5000.0, 731.0, 2200.0

    def t(o: int, k: int) -> float:
        return a + o * (c + k * b)

    got = td.extrapolate(t(1, 4), t(1, 8), t(2, 8), 4, 8, obs=12, nkb=300)
    assert got == pytest.approx(t(12, 300), rel=1e-12)


def test_extrapolated_program_is_close_to_the_exact_run(monkeypatch):
    """A 2 × 2-core program of 3 output blocks (4 × 4 tiles) × 24 K blocks (one tile
    deep) per core, the shape of the table's largest programs: the prefix extrapolation
    lands within 1 % of running all of it."""
    row = _row(m=str(2 * 12 * 32), k=str(24 * 32), n=str(2 * 4 * 32))
    prog = tm.Program("mcast2d", 2, 2, 12, 4, 1, 4, 4)
    topo = _topo(row)
    assert td.blocks(row, prog) == (3, 24)
    exact, n_exact, how = td.device_ns(row, prog, topo, exact=True)
    assert how == "exact"
    monkeypatch.setattr(td, "MAX_CORE_STEPS", 0)
    approx, n_approx, how = td.device_ns(row, prog, topo)
    assert how == "extrapolated" and n_approx < n_exact
    assert approx == pytest.approx(exact, rel=0.01)


def test_des_fit_finds_launch_and_host_floors():
    """Rows whose measured time is exactly launch + device (trace) or the host floor (no
    trace) give back those three numbers (n150 rows only are looked at)."""
    want = {"launch_ns": 7000.0, "host_oob_ns": 45000.0, "host_tuned_ns": 120000.0}
    rows, dev = [], []
    for i, d in enumerate([20000.0, 50000.0, 90000.0, 150000.0, 300000.0]):
        for trace in ("True", "False"):
            for cfg in ("out_of_box", "hand_tuned"):
                r = _row(use_trace=trace, config=cfg, m=str(64 * (i + 1)))
                t = silicon.des_times([r], [d], want)[0]
                r["inference_time_avg_ns"] = str(t)
                rows.append(r)
                dev.append(d)
    rows.append(_row(card="P150", inference_time_avg_ns="1"))  # ignored by the fit
    dev.append(1e6)
    got = silicon.fit_des(rows, dev)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=0.02), k
