"""DMA timing: latency + bytes / bottleneck bandwidth over the mesh, channel rules (ADR-0014 D4)."""

from __future__ import annotations

from hw_helpers import spans_of

from kernbench.common.pe_commands import DmaRead, DmaWrite


def expected_read_ns(sim, pe, nbytes: int, hops: int) -> tuple[float, float]:
    """(dispatch time, DMA service time) for an uncontended HBM → TCM read, by formula."""
    cfg = sim.topology.config
    pt = cfg.cube.pe_template
    hbm = cfg.cube.hbm_ctrl
    dispatch = (pt.pe_cpu.dispatch_latency_cycles / pt.pe_cpu.clock_ghz
                + pt.pe_scheduler.dispatch_latency_cycles / pt.pe_scheduler.clock_ghz)
    setup = pt.pe_dma.setup_cycles / pt.pe_dma.clock_ghz
    latency = (hbm.latency_ns + hbm.port_latency_ns + hops * cfg.cube.router.hop_latency_ns
               + cfg.cube.links.pe_router_latency_ns + pt.pe_tcm.latency_ns)
    # HBM bytes split evenly over channels (nbytes is a multiple of channels × interleave)
    per_channel_bw = hbm.channel_bw_gbs * hbm.channels
    bw = min(per_channel_bw, hbm.port_bw_gbs, cfg.cube.router.link_bw_gbs,
             cfg.cube.links.pe_router_bw_gbs, pt.pe_tcm.bw_gbs)
    return dispatch, setup + latency + nbytes / bw


def test_read_across_k_hops_matches_formula(make_sim):
    # HBM attached only at r0c0: PE3 on r1c1 is two mesh hops away (X then Y).
    for pe, hops in ((0, 0), (1, 1), (3, 2)):
        sim = make_sim("small", "cube.hbm_ctrl.attach=[r0c0]")
        nbytes = 8192
        done = sim.submit(pe, DmaRead(label="rd", params={"nbytes": nbytes, "addr": 0}))
        sim.run()
        dispatch, service = expected_read_ns(sim, sim.topology.pe(pe), nbytes, hops)
        assert done.value == dispatch + service
        (span,) = spans_of(sim, f"pe{pe}.pe_dma", "read")
        assert span[2] == dispatch and span[3] - span[2] == service


def test_bottleneck_bandwidth_sets_time(make_sim):
    sim = make_sim("small", "cube.links.pe_router_bw_gbs=16")
    done = sim.submit(0, DmaRead(label="rd", params={"nbytes": 4096, "addr": 0}))
    sim.run()
    dispatch, _ = expected_read_ns(sim, sim.topology.pe(0), 4096, 0)
    # 16 GB/s is now the bottleneck: 4096 B take 256 ns on the wire
    cfg = sim.topology.config
    lat = (cfg.cube.hbm_ctrl.latency_ns + cfg.cube.hbm_ctrl.port_latency_ns
           + cfg.cube.links.pe_router_latency_ns + cfg.cube.pe_template.pe_tcm.latency_ns)
    assert done.value == dispatch + 8 + lat + 4096 / 16


def test_two_reads_serialize_on_the_read_channel(make_sim):
    sim = make_sim("small")
    a = sim.submit(0, DmaRead(label="a", params={"nbytes": 8192, "addr": 0}))
    b = sim.submit(0, DmaRead(label="b", params={"nbytes": 8192, "addr": 1 << 20}))
    sim.run()
    ra, rb = spans_of(sim, "pe0.pe_dma", "read")
    assert ra[4] == "a" and rb[4] == "b"
    assert rb[2] == ra[3], "the second read starts when the first ends"
    assert rb[3] - rb[2] == ra[3] - ra[2]
    assert b.value > a.value


def test_read_and_write_overlap(make_sim):
    alone = make_sim("small")
    alone.submit(0, DmaWrite(label="w", params={"nbytes": 8192, "addr": 1 << 20}))
    alone.run()
    (w_alone,) = spans_of(alone, "pe0.pe_dma", "write")

    sim = make_sim("small")
    sim.submit(0, DmaRead(label="r", params={"nbytes": 8192, "addr": 0}))
    sim.submit(0, DmaWrite(label="w", params={"nbytes": 8192, "addr": 1 << 20}))
    sim.run()
    (r,) = spans_of(sim, "pe0.pe_dma", "read")
    (w,) = spans_of(sim, "pe0.pe_dma", "write")
    assert w[2] < r[3] and r[2] < w[3], "read and write channels run at the same time"
    assert w[3] - w[2] == w_alone[3] - w_alone[2], "and the write is not slowed by the read"


def test_burst_rounding_and_2d_rows(make_sim):
    sim = make_sim("small")
    dma = sim.components["sip0.cube0.pe0.pe_dma"]
    burst = sim.topology.config.cube.pe_template.pe_dma.burst_bytes
    assert dma.wire_bytes(1, 1) == burst
    assert dma.wire_bytes(burst * 3, 1) == burst * 3
    # 4 rows of (burst + 1) bytes: every row rounds up to two bursts
    assert dma.wire_bytes(4 * (burst + 1), 4) == 4 * 2 * burst


def test_contended_link_is_shared_fifo(make_sim):
    # PE0 and PE1 write to HBM through r0c0 only; their data crosses the same port link.
    sim = make_sim("small", "cube.hbm_ctrl.attach=[r0c0]", "cube.hbm_ctrl.port_bw_gbs=8")
    sim.submit(0, DmaWrite(label="w0", params={"nbytes": 4096, "addr": 0}))
    sim.submit(1, DmaWrite(label="w1", params={"nbytes": 4096, "addr": 1 << 20}))
    sim.run()
    port = sim.servers["sip0.cube0.r0c0->sip0.cube0.hbm_ctrl"]
    assert port.bytes == 2 * 4096
    assert port.busy_ns == 2 * 4096 / 8
    (w0,) = spans_of(sim, "pe0.pe_dma", "write")
    (w1,) = spans_of(sim, "pe1.pe_dma", "write")
    # the port serialises 512 ns per write, so the two finish at least 512 ns apart
    assert abs(w1[3] - w0[3]) >= 4096 / 8


def test_dma_to_shared_sram_crosses_the_mesh(make_sim):
    # SRAM hangs off r0c0; PE3 (r1c1) reaches it over two mesh hops, PE0 over none
    times = {}
    for pe in (0, 3):
        sim = make_sim("small")
        base = sim.topology.cubes[0].sram_base
        done = sim.submit(pe, DmaRead(label="s", params={"nbytes": 4096, "space": "sram",
                                                          "addr": base}))
        sim.run()
        times[pe] = done.value
    hop = load_hop_latency()
    assert times[3] - times[0] == 2 * hop


def load_hop_latency() -> float:
    from kernbench.config import load_topology_config

    return load_topology_config("small").cube.router.hop_latency_ns


def test_out_of_range_hbm_address_is_an_error(make_sim):
    import pytest

    from kernbench.errors import AddressError

    sim = make_sim("small")
    sim.submit(0, DmaRead(label="bad", params={"nbytes": 64, "addr": 1 << 40}))
    with pytest.raises(AddressError, match="bad"):
        sim.run()
