"""HBM channels against hand counts: N readers saturate at channels × channel bandwidth,
an unaligned access splits over channels byte for byte, and a DMA write to the shared
SRAM takes latency + bytes / bottleneck and lands its bytes (spec §4.3, ADR-0014 D4)."""

from __future__ import annotations

import numpy as np
import pytest
from hw_helpers import spans_of
from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench.common.pe_commands import DmaRead, DmaWrite
from kernbench.components.builtin.hbm_ctrl import channel_shares
from kernbench.sim_engine.engine import Simulator
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology

#: every stage but the HBM channels made wide, so the channels are the only bottleneck
WIDE = ("cube.router.link_bw_gbs=4096", "cube.links.pe_router_bw_gbs=4096",
        "cube.hbm_ctrl.port_bw_gbs=4096", "cube.pe_template.pe_tcm.bw_gbs=4096")


def _fixed_ns(cfg, hops: int = 0) -> float:
    """Dispatch + DMA setup + every stage latency of an HBM read (hand sum, spec §4.3)."""
    pt, hbm = cfg.cube.pe_template, cfg.cube.hbm_ctrl
    return (pt.pe_cpu.dispatch_latency_cycles / pt.pe_cpu.clock_ghz
            + pt.pe_scheduler.dispatch_latency_cycles / pt.pe_scheduler.clock_ghz
            + pt.pe_dma.setup_cycles / pt.pe_dma.clock_ghz
            + hbm.latency_ns + hbm.port_latency_ns + hops * cfg.cube.router.hop_latency_ns
            + cfg.cube.links.pe_router_latency_ns + pt.pe_tcm.latency_ns)


@pytest.mark.parametrize("readers", [1, 2, 4])
def test_n_readers_saturate_at_channels_times_channel_bandwidth(make_sim, readers):
    """Four PEs read 64 KiB each, aligned to channels × interleave: every channel serves
    8 KiB of each read, FIFO, so read k finishes (k + 1) × 64 KiB / (8 × 32 GB/s) after its
    fixed latency, and the HBM as a whole moves exactly channels × channel_bw_gbs."""
    sim = make_sim("small", *WIDE)
    cfg = sim.topology.config
    hbm = cfg.cube.hbm_ctrl
    nbytes = 64 * 1024
    done = [sim.submit(pe, DmaRead(label=f"r{pe}", params={"nbytes": nbytes,
                                                          "addr": pe << 20}))
            for pe in range(readers)]
    sim.run()
    peak = hbm.channels * hbm.channel_bw_gbs  # 256 GB/s on `small`
    want = [_fixed_ns(cfg) + (k + 1) * nbytes / peak for k in range(readers)]
    assert sorted(d.value for d in done) == pytest.approx(want, abs=1e-9)
    # the HBM's own counters: every channel served readers × nbytes / channels bytes,
    # busy for exactly that at its bandwidth
    ctrl = sim.components["sip0.cube0.hbm_ctrl"]
    per_channel = readers * nbytes // hbm.channels
    for ch in ctrl.channels:
        assert ch.bytes == per_channel
        assert ch.busy_ns == pytest.approx(per_channel / hbm.channel_bw_gbs)
    # aggregate rate: all bytes over the time the channels were serving, the configured
    # peak exactly (never above it)
    assert readers * nbytes / (max(want) - _fixed_ns(cfg)) == pytest.approx(peak)


def _channels_by_byte(offset: int, nbytes: int, il: int, nch: int) -> list[tuple[int, int]]:
    """Reference: the channel of every byte, counted one by one."""
    ch = (np.arange(offset, offset + nbytes, dtype=np.int64) // il) % nch
    counts = np.bincount(ch, minlength=nch)
    return [(i, int(c)) for i, c in enumerate(counts) if c > 0]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 1 << 16), st.integers(0, 1 << 14), st.sampled_from([64, 256, 1000]),
       st.sampled_from([1, 3, 8]))
def test_channel_shares_of_any_range_match_a_byte_count(offset, nbytes, il, nch):
    assert channel_shares(offset, nbytes, il, nch) == _channels_by_byte(offset, nbytes, il, nch)


def test_unaligned_read_charges_each_channel_its_bytes(make_sim):
    """A read of 960 B (whole 64 B bursts) starting 192 B into the HBM: 64 B on channel 0,
    256 B on each of channels 1-3, the last 128 B on channel 4 (interleave 256 B); each
    channel serves its own bytes only, and the read ends with the fullest channel."""
    sim = make_sim("small", *WIDE)
    cfg = sim.topology.config
    hbm = cfg.cube.hbm_ctrl
    done = sim.submit(0, DmaRead(label="rd", params={"nbytes": 960, "addr": 192}))
    sim.run()
    ctrl = sim.components["sip0.cube0.hbm_ctrl"]
    assert [(i, ch.bytes) for i, ch in enumerate(ctrl.channels) if ch.bytes] == \
        [(0, 64), (1, 256), (2, 256), (3, 256), (4, 128)]
    assert done.value == pytest.approx(_fixed_ns(cfg) + 256 / hbm.channel_bw_gbs)


def test_dma_write_to_shared_sram_times_and_lands(make_sim):
    """PE3 (two hops from the SRAM's router r0c0) writes 4 KiB of its TCM to the shared
    SRAM; PE0 then reads it back and writes it to HBM. The write takes dispatch + setup +
    latencies + bytes / the slowest stage, the SRAM array is busy bytes / its bandwidth,
    and the bytes arrive unchanged."""
    topo = load_topology("small")
    log = OpLogger()
    sim = Simulator(topo, op_logger=log)
    cfg = topo.config
    pt, sram = cfg.cube.pe_template, cfg.cube.shared_sram
    base = topo.cubes[0].sram_base
    store = MemoryStore.for_topology(topo)
    x = np.random.default_rng(3).standard_normal(1024).astype(np.float32)
    t3, t0 = f"tcm:{topo.pes[3].id}", f"tcm:{topo.pes[0].id}"
    store.write(t3, 0, x)
    init = store.snapshot()

    def dma(cls, pe_space, space, addr, write):
        src, dst = ((pe_space, 0), (space, addr)) if write else ((space, addr), (pe_space, 0))
        return cls(label="w" if write else "r", params={
            "nbytes": x.nbytes, "addr": addr, "space": space, "data": {
                "op_kind": "memory", "op_name": "dma", "src_space": src[0],
                "src_addr": src[1], "dst_space": dst[0], "dst_addr": dst[1],
                "nbytes": x.nbytes}})

    ends = {}

    def proc():
        ends["write"] = yield sim.submit(3, dma(DmaWrite, t3, "sram", base + 512, True))
        yield sim.submit(0, dma(DmaRead, t0, "sram", base + 512, False))
        yield sim.submit(0, dma(DmaWrite, t0, "hbm", 8192, True))

    sim.env.process(proc())
    sim.run()
    dispatch = (pt.pe_cpu.dispatch_latency_cycles / pt.pe_cpu.clock_ghz
                + pt.pe_scheduler.dispatch_latency_cycles / pt.pe_scheduler.clock_ghz)
    lat = (pt.pe_tcm.latency_ns + cfg.cube.links.pe_router_latency_ns
           + 2 * cfg.cube.router.hop_latency_ns + sram.latency_ns)
    bw = min(pt.pe_tcm.bw_gbs, cfg.cube.links.pe_router_bw_gbs, cfg.cube.router.link_bw_gbs,
             sram.bw_gbs)
    (w,) = spans_of(sim, "pe3.pe_dma", "write")
    assert w[2] == dispatch
    assert w[3] - w[2] == pt.pe_dma.setup_cycles / pt.pe_dma.clock_ghz + lat + x.nbytes / bw
    array = sim.components["sip0.cube0.shared_sram"].server
    assert array.bytes == 2 * x.nbytes  # written once, read once
    assert array.busy_ns == pytest.approx(2 * x.nbytes / sram.bw_gbs)
    out = DataExecutor(log, init).run()
    assert np.array_equal(out.read("sram", base + 512, (1024,), "f32"), x)
    assert np.array_equal(out.read("hbm", 8192, (1024,), "f32"), x)


def test_a_narrow_mesh_link_sets_the_read_time(make_sim):
    """HBM reachable only at r0c0, mesh links of 16 GB/s: PE3's read crosses two of them,
    so 8 KiB take the hand sum of latencies + 8192 / 16 ns (the links are the slowest
    stage); PE0's read, on no mesh link, is set by the HBM's 256 GB/s."""
    times = {}
    for pe, hops in ((0, 0), (3, 2)):
        sim = make_sim("small", "cube.hbm_ctrl.attach=[r0c0]", "cube.router.link_bw_gbs=16")
        done = sim.submit(pe, DmaRead(label="rd", params={"nbytes": 8192, "addr": 0}))
        sim.run()
        times[pe] = (done.value, _fixed_ns(sim.topology.config, hops))
    cfg = load_topology("small").config
    hbm = cfg.cube.hbm_ctrl
    assert times[3][0] == pytest.approx(times[3][1] + 8192 / 16)
    assert times[0][0] == pytest.approx(times[0][1] + 8192 / min(
        hbm.channels * hbm.channel_bw_gbs, hbm.port_bw_gbs, cfg.cube.links.pe_router_bw_gbs,
        cfg.cube.pe_template.pe_tcm.bw_gbs))


def test_a_read_from_the_next_cube_pays_the_ucie_latency_and_bandwidth(make_sim):
    """On `base` PE0 (cube 0) reads 8 KiB from cube 1's HBM, which is one UCIe crossing
    away. Raising the UCIe latency by 100 ns delays the read by exactly 100 ns; a 4 GB/s
    UCIe (then the slowest stage) serialises it in 8192 / 4 ns instead of 8192 / the
    slowest other stage. A read from cube 0's own HBM does not change at all."""
    def read(addr_cube: int, *sets: str) -> float:
        sim = make_sim("base", *sets)
        addr = sim.topology.cubes[addr_cube].hbm_base
        done = sim.submit(0, DmaRead(label="rd", params={"nbytes": 8192, "addr": addr}))
        sim.run()
        return done.value

    cfg = load_topology("base").config
    lat = cfg.sip.ucie.latency_ns
    cs = cfg.cube
    others = min(cs.router.link_bw_gbs, cs.links.pe_router_bw_gbs, cs.pe_template.pe_tcm.bw_gbs,
                 cs.hbm_ctrl.port_bw_gbs, cs.hbm_ctrl.channels * cs.hbm_ctrl.channel_bw_gbs)
    far = read(1)
    assert read(1, f"sip.ucie.latency_ns={lat + 100}") == pytest.approx(far + 100)
    assert read(0, f"sip.ucie.latency_ns={lat + 100}") == read(0)
    slow = read(1, "sip.ucie.bw_gbs=4")
    fast = read(1, "sip.ucie.bw_gbs=1e6")  # the slowest other stage sets the rate
    assert slow - fast == pytest.approx(8192 / 4 - 8192 / others, rel=1e-6)
