"""pe_gemm timing and the ADR-0021 tile pipeline: overlap, back-pressure, deadlock report."""

from __future__ import annotations

import math

import pytest
from hw_helpers import spans_of

from kernbench.common.pe_commands import CompositeCmd, GemmCmd, MathCmd, composite_gemm
from kernbench.common.tile_plan import StageType
from kernbench.components.builtin.systolic import systolic_compute_cycles
from kernbench.errors import CapacityError, DeadlockError


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
@pytest.mark.parametrize("mnk", [(64, 64, 64), (100, 37, 300), (1, 256, 33)])
def test_gemm_tile_busy_equals_systolic_formula(make_sim, dataflow, mnk):
    m, n, k = mnk
    sim = make_sim("small", f"cube.pe_template.pe_gemm.dataflow={dataflow}",
                   "cube.pe_template.pe_gemm.rows=16", "cube.pe_template.pe_gemm.cols=8",
                   "cube.pe_template.pe_gemm.clock_ghz=1.25")
    sim.submit(0, GemmCmd(label="g", params={"m": m, "n": n, "k": k}))
    sim.run()
    (span,) = spans_of(sim, "pe0.pe_gemm")
    cycles = systolic_compute_cycles(m, n, k, 16, 8, dataflow)
    assert span[3] - span[2] == pytest.approx(cycles / 1.25, abs=1e-9)


def test_throughput_factor_by_bitwidth(make_sim):
    sim = make_sim("small", "cube.pe_template.pe_gemm.throughput_factor={4: 2.0, 8: 1.0}",
                   "cube.pe_template.pe_gemm.dataflow=ws")
    sim.submit(0, GemmCmd(label="w4", params={"m": 64, "n": 64, "k": 64, "qbits_weight": 4,
                                               "qbits_activation": 4}))
    sim.submit(0, GemmCmd(label="w8", params={"m": 64, "n": 64, "k": 64}))
    sim.run()
    s4, s8 = spans_of(sim, "pe0.pe_gemm")
    raw = systolic_compute_cycles(64, 64, 64, 32, 32, "ws")
    assert s8[3] - s8[2] == raw
    assert s4[3] - s4[2] == math.ceil(raw / 2)


def test_mixed_widths_run_at_the_wider_operands_rate(make_sim):
    """W4A8 and W8A4 tiles take the 8-bit rate: the array runs at its widest operand."""
    sim = make_sim("small", "cube.pe_template.pe_gemm.throughput_factor={4: 2.0, 8: 1.0}",
                   "cube.pe_template.pe_gemm.dataflow=ws")
    for w, a in ((4, 8), (8, 4)):
        sim.submit(0, GemmCmd(label=f"w{w}a{a}", params={
            "m": 64, "n": 64, "k": 64, "qbits_weight": w, "qbits_activation": a}))
    sim.run()
    raw = systolic_compute_cycles(64, 64, 64, 32, 32, "ws")
    assert [s[3] - s[2] for s in spans_of(sim, "pe0.pe_gemm")] == [raw, raw]


def test_math_cost_table(make_sim):
    sim = make_sim("small")
    sim.submit(0, MathCmd(label="sm", params={"op": "softmax", "length": 1000, "rows": 3}))
    sim.run()
    (span,) = spans_of(sim, "pe0.pe_math")
    spec = sim.topology.config.cube.pe_template.pe_math
    cycles = spec.pipeline_latency_cycles + math.ceil(3000 / spec.lanes) * spec.op_cycles["softmax"]
    assert span[3] - span[2] == cycles


def _overlaps(a, b) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def test_composite_dma_of_next_tile_overlaps_gemm_of_current(make_sim):
    sim = make_sim("small")
    sim.submit(0, composite_gemm("cg", m_tiles=6, tile_m=64, n=64, k=256))
    sim.run()
    reads = {s[5]: s for s in spans_of(sim, "pe0.pe_dma", "read")}
    gemms = {s[5]: s for s in spans_of(sim, "pe0.pe_gemm")}
    writes = {s[5]: s for s in spans_of(sim, "pe0.pe_dma", "write")}
    assert sorted(reads) == sorted(gemms) == list(range(6))
    for t in range(5):
        assert _overlaps(reads[t + 1], gemms[t]) or reads[t + 1][3] <= gemms[t][2], (
            "DMA_READ(t+1) runs no later than GEMM(t)")
    assert any(_overlaps(reads[t + 1], gemms[t]) for t in range(5))
    assert any(_overlaps(writes[t - 1], gemms[t]) for t in range(1, 6))
    # per-tile order: read → gemm → write
    for t in range(6):
        assert reads[t][3] <= gemms[t][2] <= gemms[t][3] <= writes[t][2]
    # one GEMM at a time
    g = sorted(gemms.values(), key=lambda s: s[2])
    assert all(a[3] <= b[2] for a, b in zip(g, g[1:], strict=False))


def _max_ahead(sim) -> int:
    """Most tiles whose DMA read had started while their GEMM had not."""
    reads = {s[5]: s[2] for s in spans_of(sim, "pe0.pe_dma", "read")}
    gemms = {s[5]: s[2] for s in spans_of(sim, "pe0.pe_gemm")}
    return max(sum(1 for t in reads if reads[t] <= r < gemms[t]) for r in reads.values())


def test_back_pressure_when_queues_are_full(make_sim):
    # a slow GEMM (k=512) behind a fast DMA: how far the DMA runs ahead is bounded by queues
    cmd = dict(m_tiles=16, tile_m=32, n=32, k=512)
    shallow = make_sim("small", "cube.pe_template.pe_tcm.reserved_kib=1024",
                       "cube.pe_template.pe_gemm.dataflow=ws",
                       "cube.pe_template.pe_dma.queue_depth=1",
                       "cube.pe_template.pe_fetch_store.queue_depth=1",
                       "cube.pe_template.pe_gemm.queue_depth=1")
    shallow.submit(0, composite_gemm("cg", **cmd))
    shallow.run()
    deep = make_sim("small", "cube.pe_template.pe_tcm.reserved_kib=1024",
                    "cube.pe_template.pe_gemm.dataflow=ws",
                    "cube.pe_template.pe_dma.queue_depth=64",
                    "cube.pe_template.pe_fetch_store.queue_depth=64",
                    "cube.pe_template.pe_gemm.queue_depth=64")
    deep.submit(0, composite_gemm("cg", **cmd))
    deep.run()
    # tokens between DMA-read start and GEMM start: DMA (in service + blocked put),
    # fetch (queue 1 + in service + blocked put), gemm queue 1 → at most 6
    assert _max_ahead(shallow) <= 6
    assert _max_ahead(deep) >= 12, "without back-pressure the DMA runs far ahead"
    # the GEMM engine is the bottleneck either way, so total time is the same
    assert shallow.env.now == deep.env.now


def test_staging_tcm_bounds_tiles_in_flight(make_sim):
    # each tile holds 32*512 + 32*32*4 = 20 KiB of SchedulerReservedTCM; 64 KiB → 3 in flight
    sim = make_sim("small", "cube.pe_template.pe_tcm.banks=32",
                   "cube.pe_template.pe_tcm.reserved_kib=64",
                   "cube.pe_template.pe_dma.queue_depth=64",
                   "cube.pe_template.pe_fetch_store.queue_depth=64",
                   "cube.pe_template.pe_gemm.queue_depth=64")
    sim.submit(0, composite_gemm("cg", m_tiles=16, tile_m=32, n=32, k=512))
    sim.run()
    assert _max_ahead(sim) <= 3


def test_tile_larger_than_staging_is_a_capacity_error(make_sim):
    sim = make_sim("small", "cube.pe_template.pe_tcm.banks=32",
                   "cube.pe_template.pe_tcm.reserved_kib=64")
    sim.submit(0, composite_gemm("huge-gemm", m_tiles=2, tile_m=256, n=256, k=512))
    with pytest.raises(CapacityError, match="huge-gemm tile 0"):
        sim.run()


def test_feeder_does_not_interleave_commands(make_sim):
    sim = make_sim("small")
    sim.submit(0, composite_gemm("c1", m_tiles=4, tile_m=32, n=32, k=64))
    sim.submit(0, composite_gemm("c2", m_tiles=4, tile_m=32, n=32, k=64))
    sim.run()
    fed = [e[3] for e in sim.tracer.events if e[1] == "sub_command_dispatched"]
    assert fed == ["c1"] * 4 + ["c2"] * 4


def test_shared_compute_slot_switch(make_sim):
    def run(shared: bool):
        sim = make_sim("small", f"cube.pe_template.pe_scheduler.shared_compute_slot={shared}")
        sim.submit(0, GemmCmd(label="g", params={"m": 256, "n": 64, "k": 64}))
        sim.submit(0, MathCmd(label="m", params={"op": "exp", "length": 4096}))
        sim.run()
        return spans_of(sim, "pe0.pe_gemm")[0], spans_of(sim, "pe0.pe_math")[0]

    g, m = run(False)
    assert _overlaps(g, m), "ADR-0021: separate GEMM and MATH engines overlap"
    g, m = run(True)
    assert not _overlaps(g, m), "ADR-0014 D4: one shared compute slot"


def test_planted_deadlock_is_reported_not_hung(make_sim):
    # A plan that revisits the fetch channel through depth-1 queues: fetch waits on a full
    # GEMM queue while GEMM waits on the full fetch queue. The run must end with a report.
    sim = make_sim("small", "cube.pe_template.pe_fetch_store.queue_depth=1",
                   "cube.pe_template.pe_gemm.queue_depth=1",
                   "cube.pe_template.pe_tcm.reserved_kib=0")
    g = {"m": 32, "n": 32, "k": 32}
    tiles = [[(StageType.FETCH, {"nbytes": 64}), (StageType.GEMM, g),
              (StageType.FETCH, {"nbytes": 64}), (StageType.GEMM, g)] for _ in range(8)]
    sim.submit(0, CompositeCmd(label="cyclic-plan", tile_stages=tiles))
    with pytest.raises(DeadlockError) as err:
        sim.run()
    msg = str(err.value)
    assert "cyclic-plan" in msg
    assert "sip0.cube0.pe0.pe_fetch_store.fetch holds 1/1" in msg
    assert "sip0.cube0.pe0.pe_gemm.main holds 1/1" in msg
    assert "\n" not in msg


def test_consecutive_stages_on_one_channel_do_not_wait_on_themselves(make_sim):
    # A split transfer is several DMA_READ stages in a row on one channel. The channel
    # serves the next piece itself: putting the token back into its own full inbox (depth
    # 1, more tiles fed behind it) would wait on itself forever.
    sim = make_sim("small", "cube.pe_template.pe_dma.queue_depth=1",
                   "cube.pe_template.pe_tcm.reserved_kib=0")
    read = {"nbytes": 256, "addr": 0}
    tiles = [[(StageType.DMA_READ, read)] * 3 + [(StageType.DMA_WRITE, read)]
             for _ in range(6)]
    sim.submit(0, CompositeCmd(label="split-reads", tile_stages=tiles))
    sim.run()
    reads = spans_of(sim, "pe0.pe_dma", "read")
    assert len(reads) == 18
    # a tile's three pieces are served back to back, in order
    assert [s[5] for s in reads] == [t for t in range(6) for _ in range(3)]


def test_weights_stream_from_hbm_straight_to_the_array(make_sim):
    # ADR-0014 D5: a GEMM may pull its weights from HBM; the tile then takes the longer of
    # the array time and the transfer (which skips the TCM)
    sim = make_sim("small", "cube.pe_template.pe_dma.setup_cycles=0")
    small = {"m": 32, "n": 32, "k": 32}
    sim.submit(0, GemmCmd(label="plain", params=dict(small)))
    sim.submit(1, GemmCmd(label="streamed", params=dict(
        small, weight_stream_nbytes=1 << 20, weight_addr=0)))
    sim.run()
    (plain,) = spans_of(sim, "pe0.pe_gemm")
    (streamed,) = spans_of(sim, "pe1.pe_gemm")
    cfg = sim.topology.config
    bw = min(cfg.cube.hbm_ctrl.channel_bw_gbs * cfg.cube.hbm_ctrl.channels,
             cfg.cube.hbm_ctrl.port_bw_gbs, cfg.cube.links.pe_router_bw_gbs)
    assert plain[3] - plain[2] == systolic_compute_cycles(32, 32, 32, 32, 32, "os")
    assert streamed[3] - streamed[2] >= (1 << 20) / bw
    assert sim.components["sip0.cube0.pe1.pe_tcm"].port.bytes == 0, "not through the TCM"
