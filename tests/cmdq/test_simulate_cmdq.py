"""The Control FSM running CMDQ programs on the hardware model (spec §3.2, §13, §15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernbench.cli import main
from kernbench.cmdq.io import load_program, parse_program
from kernbench.components.builtin.systolic import systolic_compute_cycles
from kernbench.host.simulate import simulate_program
from kernbench.topology import load_topology

DATA = Path(__file__).parent / "data"
SMALL = load_topology("small")


def _run(obj_or_path, topo=SMALL):
    prog = load_program(obj_or_path) if isinstance(obj_or_path, Path) else parse_program(obj_or_path)
    return simulate_program(prog, topo)


def test_spec_example_runs_unchanged_and_respects_deps(tmp_path):
    run = _run(DATA / "spec_example.json")
    stats = run.stats()
    entries = stats["entries"]
    assert len(entries) == 6
    prog = json.loads((DATA / "spec_example.json").read_text())
    for e in prog["cmdq"]:
        row = entries[str(e["id"])]
        for d in e["deps_before"]:
            assert row["start_ns"] >= entries[str(d)]["end_ns"], (e["id"], d)
            assert row["issue_ns"] >= entries[str(d)]["end_ns"]
    assert entries["2"]["engine"] == "sip0.cube0.pe0.pe_gemm"
    assert stats["total_ns"] == entries["5"]["end_ns"]
    assert stats["critical_path"][-1] == 4
    # the CLI writes the same numbers
    assert main(["simulate", str(DATA / "spec_example.json"), "--out", str(tmp_path), "--trace"]) == 0
    on_disk = json.loads((tmp_path / "stats.json").read_text())
    assert on_disk["entries"] == json.loads(json.dumps(entries))
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


def _load(i, pe, addr, n=4096, deps=()):
    return {"opcode": "DMA_LOAD_TILE", "id": i, "pe": pe, "qbits": 8, "dram_addr": addr,
            "spm_bank": 0, "spm_offset": 0, "num_elements": n, "deps_before": list(deps)}


def _gemm(i, pe, m=64, n=64, k=64, deps=()):
    return {"opcode": "TE_GEMM_TILE", "id": i, "pe": pe, "ifm_bank": 0, "ifm_offset": 0,
            "wgt_bank": 1, "wgt_offset": 0, "ofm_bank": 2, "ofm_offset": 0, "m": m, "n": n,
            "k": k, "qbits_weight": 8, "qbits_activation": 8, "deps_before": list(deps)}


def test_barrier_holds_back_what_follows():
    prog = {"cmdq": [
        _load(0, 0, 0, n=65536), _load(1, 1, 1 << 20, n=8192),
        {"opcode": "BARRIER", "id": 2, "wait_for": [0, 1]},
        _gemm(3, 2), _gemm(4, 3),
        {"opcode": "END", "id": 5},
    ]}
    stats = _run(prog).stats()
    e = stats["entries"]
    released = max(e["0"]["end_ns"], e["1"]["end_ns"])
    assert e["2"]["end_ns"] == released
    for i in ("3", "4"):
        assert e[i]["issue_ns"] >= released, "nothing after a BARRIER issues before it passes"
    # without the barrier, the GEMMs on other PEs start at once
    free = _run({"cmdq": [prog["cmdq"][0], prog["cmdq"][1],
                          {"opcode": "NOP", "id": 2}, *prog["cmdq"][3:]]}).stats()["entries"]
    assert free["3"]["start_ns"] < released


def test_te_gemm_busy_is_systolic_cycles_over_clock():
    topo = load_topology("small", ["cube.pe_template.pe_gemm.clock_ghz=2.0",
                                   "cube.pe_template.pe_gemm.dataflow=os"])
    run = _run({"cmdq": [_gemm(0, 1, m=100, n=70, k=300), {"opcode": "END", "id": 1}]}, topo)
    stats = run.stats()
    eng = stats["engines"]["sip0.cube0.pe1.pe_gemm"]
    assert eng["busy_ns"] == systolic_compute_cycles(100, 70, 300, 32, 32, "os") / 2.0


def test_dma_load_time_follows_bytes_over_mesh_and_hbm():
    # qbits 4: 8192 elements → 4096 bytes; HBM attached at r0c0 only, PE3 is 2 hops away
    topo = load_topology("small", ["cube.hbm_ctrl.attach=[r0c0]"])
    prog = {"cmdq": [{"opcode": "DMA_LOAD_TILE", "id": 0, "pe": 3, "qbits": 4,
                      "dram_addr": 0, "spm_bank": 0, "spm_offset": 0, "num_elements": 8192},
                     {"opcode": "END", "id": 1}]}
    run = _run(prog, topo)
    cfg = topo.config
    pt = cfg.cube.pe_template
    hbm = cfg.cube.hbm_ctrl
    lat = (hbm.latency_ns + hbm.port_latency_ns + 2 * cfg.cube.router.hop_latency_ns
           + cfg.cube.links.pe_router_latency_ns + pt.pe_tcm.latency_ns)
    bw = min(hbm.channel_bw_gbs * hbm.channels, hbm.port_bw_gbs, cfg.cube.router.link_bw_gbs,
             cfg.cube.links.pe_router_bw_gbs, pt.pe_tcm.bw_gbs)
    busy = run.stats()["engines"]["sip0.cube0.pe3.pe_dma"]["channels"]["read"]["busy_ns"]
    assert busy == pt.pe_dma.setup_cycles + lat + 4096 / bw


def test_utilization_is_busy_time_over_the_run():
    """One 64 KiB load on `small`: each of the 8 HBM channels serves 8 KiB at 32 GB/s
    (256 ns), the PE's DMA read channel is busy setup + latency + bytes / 128 GB/s; every
    utilization in stats.json is that busy time over the run (an engine's over its
    channels' time), as docs/stats.md defines it."""
    run = _run({"cmdq": [_load(0, 0, 0, n=65536), {"opcode": "END", "id": 1}]})
    stats = run.stats()
    total = stats["total_ns"]
    cfg = SMALL.config
    hbm, pt = cfg.cube.hbm_ctrl, cfg.cube.pe_template
    ch_busy = 65536 / hbm.channels / hbm.channel_bw_gbs
    mem = stats["memories"]["sip0.cube0.hbm_ctrl"]
    for ch in mem["channels"].values():
        assert ch["busy_ns"] == ch_busy
        assert ch["utilization"] == pytest.approx(ch_busy / total, abs=1e-6)
    assert mem["utilization"] == pytest.approx(ch_busy / total, abs=1e-6)
    lat = (hbm.latency_ns + hbm.port_latency_ns + cfg.cube.links.pe_router_latency_ns
           + pt.pe_tcm.latency_ns)
    read = pt.pe_dma.setup_cycles / pt.pe_dma.clock_ghz + lat + 65536 / min(
        hbm.port_bw_gbs, cfg.cube.links.pe_router_bw_gbs, pt.pe_tcm.bw_gbs)
    dma = stats["engines"]["sip0.cube0.pe0.pe_dma"]
    assert dma["channels"]["read"]["busy_ns"] == read
    assert dma["channels"]["read"]["utilization"] == pytest.approx(read / total, abs=1e-6)
    assert dma["utilization"] == pytest.approx(read / (2 * total), abs=1e-6)  # read + write
    port = stats["links"]["sip0.cube0.hbm_ctrl->sip0.cube0.r0c0"]
    assert port["utilization"] == pytest.approx(65536 / hbm.port_bw_gbs / total, abs=1e-6)
    # the read channel is busy for all but the command's trip: the most utilized resource
    assert stats["bottleneck"] == {"component": "sip0.cube0.pe0.pe_dma.read",
                                   "kind": "pe_dma",
                                   "utilization": dma["channels"]["read"]["utilization"],
                                   "bound_by": "memory"}  # a DMA channel moves data


def test_stride_bytes_makes_a_2d_transfer():
    base = {"opcode": "DMA_LOAD_TILE", "id": 0, "qbits": 8, "dram_addr": 0, "spm_bank": 0,
            "spm_offset": 0, "num_elements": 64 * 65}
    flat = _run({"cmdq": [base, {"opcode": "END", "id": 1}]}).stats()
    strided = _run({"cmdq": [dict(base, stride_bytes=4096, rows=64),
                             {"opcode": "END", "id": 1}]}).stats()
    # 64 rows of 65 B: each row rounds up to 2 bursts of 64 B → 8192 wire bytes, not 4160
    rd = "sip0.cube0.pe0.pe_dma"
    assert flat["engines"][rd]["bytes_read"] == 4160
    assert strided["engines"][rd]["bytes_read"] == 64 * 128


def test_deps_after_holds_the_later_entry_back_by_the_hand_schedule():
    """Entry 0 (a 64 KiB load on PE0) names entry 1 (a GEMM on PE1) in deps_after: the
    GEMM issues when the load ends, not at once; with the field removed it issues at the
    M_CPU's issue latency. Both schedules from the parts' own closed forms."""
    load, gemm = _load(0, 0, 0, n=65536), _gemm(1, 1)
    bound = {"cmdq": [dict(load, deps_after=[1]), gemm, {"opcode": "END", "id": 2}]}
    free = {"cmdq": [load, gemm, {"opcode": "END", "id": 2}]}
    tb, tf = (_run(p).stats()["entries"] for p in (bound, free))
    mcpu = SMALL.config.cube.m_cpu
    issue_ns = mcpu.issue_latency_cycles / mcpu.clock_ghz
    assert tf["1"]["issue_ns"] == tf["0"]["issue_ns"] + issue_ns  # back to back
    assert tb["0"] == tf["0"], "the load itself is not delayed"
    assert tb["1"]["issue_ns"] == tb["0"]["end_ns"] + issue_ns
    assert tb["1"]["end_ns"] - tb["1"]["issue_ns"] == tf["1"]["end_ns"] - tf["1"]["issue_ns"]


def test_issue_window_bounds_the_entries_in_flight():
    """Four independent loads on four PEs under an issue window of 2: the third issues when
    the first completes and the fourth when the second does (each one issue latency
    later); with a window of 4 they all issue back to back."""
    prog = {"cmdq": [*(_load(i, i, i << 20, n=16384) for i in range(4)),
                     {"opcode": "END", "id": 4}]}
    mcpu = SMALL.config.cube.m_cpu
    issue_ns = mcpu.issue_latency_cycles / mcpu.clock_ghz
    two = _run(prog, load_topology("small", ["cube.m_cpu.issue_window=2"])).stats()["entries"]
    four = _run(prog, load_topology("small", ["cube.m_cpu.issue_window=4"])).stats()["entries"]
    assert [four[str(i)]["issue_ns"] for i in range(4)] == \
        [four["0"]["issue_ns"] + i * issue_ns for i in range(4)]
    ends = sorted(two[str(i)]["end_ns"] for i in range(2))
    for i, freed in zip((2, 3), ends, strict=True):
        assert two[str(i)]["issue_ns"] == pytest.approx(freed + issue_ns), i


@st.composite
def dags(draw):
    n = draw(st.integers(min_value=1, max_value=250))
    entries = []
    for i in range(n):
        deps = sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3)))) if i else []
        pe = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["load", "store", "gemm", "ve", "nop", "barrier"]))
        if kind == "load":
            e = _load(i, pe, draw(st.integers(0, 1 << 20)) * 64, n=draw(st.integers(1, 8192)),
                      deps=deps)
        elif kind == "store":
            e = dict(_load(i, pe, 64 * draw(st.integers(0, 1 << 20)), deps=deps),
                     opcode="DMA_STORE_TILE")
        elif kind == "gemm":
            e = _gemm(i, pe, m=draw(st.integers(1, 64)), n=draw(st.integers(1, 64)),
                      k=draw(st.integers(1, 64)), deps=deps)
        elif kind == "ve":
            e = {"opcode": draw(st.sampled_from(["VE_SOFTMAX_TILE", "VE_GELU_TILE"])), "id": i,
                 "pe": pe, "in_bank": 0, "in_offset": 0, "out_bank": 1, "out_offset": 0,
                 "length": draw(st.integers(1, 1024)), "qbits_activation": 8, "deps_before": deps}
        elif kind == "nop":
            e = {"opcode": "NOP", "id": i, "deps_before": deps}
        else:
            e = {"opcode": "BARRIER", "id": i, "wait_for": deps}
        entries.append(e)
    for i, e in enumerate(entries):  # deps_after: "entry i must end before these start"
        if i + 1 < n and draw(st.integers(0, 3)) == 0:
            e["deps_after"] = sorted(set(draw(st.lists(st.integers(i + 1, n - 1), min_size=1,
                                                       max_size=2))))
    entries.append({"opcode": "END", "id": n})
    window = draw(st.integers(1, 64))
    return {"cmdq": entries}, window


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_random_dags_complete_once_in_dependency_order(case):
    prog, window = case
    topo = load_topology("small", [f"cube.m_cpu.issue_window={window}"])
    run = _run(prog, topo)
    stats = run.stats()
    entries = stats["entries"]
    n = len(prog["cmdq"])
    assert sorted(map(int, entries)) == list(range(n))
    commands = [e for e in prog["cmdq"] if e["opcode"] not in ("NOP", "BARRIER", "END")]
    assert stats["commands_completed"] == len(commands), "every command completes exactly once"
    for e in prog["cmdq"]:
        row = entries[str(e["id"])]
        assert row["end_ns"] is not None
        for d in e.get("deps_before", []) + e.get("wait_for", []):
            assert row["issue_ns"] >= entries[str(d)]["end_ns"]
            assert row["start_ns"] >= entries[str(d)]["end_ns"]
        for later in e.get("deps_after", []):
            assert entries[str(later)]["issue_ns"] >= row["end_ns"], (e["id"], later)
            assert entries[str(later)]["start_ns"] >= row["end_ns"], (e["id"], later)
    again = _run(prog, topo).stats()
    assert json.dumps(again, sort_keys=True) == json.dumps(stats, sort_keys=True)


BAD_PROGRAMS = [
    ("{not json", "malformed JSON"),
    ('{"cmdq": [{"opcode": "FLY", "id": 0}, {"opcode": "END", "id": 1}]}', "entry 0"),
    ('{"cmdq": [{"opcode": "NOP", "id": 0}, {"opcode": "NOP", "id": 0}, '
     '{"opcode": "END", "id": 2}]}', "entry 0"),
    ('{"cmdq": [{"opcode": "NOP", "id": 0, "deps_before": [7]}, {"opcode": "END", "id": 1}]}',
     "deps_before"),
    ('{"cmdq": [{"opcode": "BARRIER", "id": 0, "wait_for": [1]}, {"opcode": "END", "id": 1}]}',
     "wait_for"),
    (json.dumps({"cmdq": [_gemm(0, 9), {"opcode": "END", "id": 1}]}), "'pe'"),
    (json.dumps({"cmdq": [dict(_gemm(0, 0), te_id=3), {"opcode": "END", "id": 1}]}), "te_id"),
    (json.dumps({"cmdq": [dict(_load(0, 0, 0), qbits=3), {"opcode": "END", "id": 1}]}), "qbits"),
    (json.dumps({"cmdq": [dict(_load(0, 0, 0), spm_offset=10**7), {"opcode": "END", "id": 1}]}),
     "spm"),
    (json.dumps({"cmdq": [_load(0, 0, 1 << 40), {"opcode": "END", "id": 1}]}), "dram_addr"),
    (json.dumps({"cmdq": [_load(0, 0, 0)]}), "END"),
]


def test_malformed_programs_exit_2_with_one_line(tmp_path, capsys):
    for i, (text, expected) in enumerate(BAD_PROGRAMS):
        f = tmp_path / f"bad{i}.json"
        f.write_text(text)
        for cmd in (["simulate", str(f), "--out", str(tmp_path / "o")], ["validate", str(f)]):
            code = main(cmd)
            err = capsys.readouterr().err
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("simulat")]
            assert code == 2, (cmd, text, err)
            assert "Traceback" not in err
            assert len(lines) == 1, (text, err)
            assert expected in lines[0], (expected, lines[0])
            assert str(f) in lines[0]
    assert not (tmp_path / "o" / "stats.json").exists(), "nothing half-written"
