"""A core's own DRAM read ceiling (`pe_dma.hbm_read_bytes_per_cycle`), against the closed
form of a cut-through transfer: fixed latencies + bytes / the slowest stage's rate.

* The ceiling is the reader's average rate over a whole read, the DRAM trip included (the
  published figure is bytes over the read loop's cycles): a read of HBM takes
  issue + max(memory trip + bytes / channel, bytes / (rate × clock)) + TCM; a rate above
  the path's bottleneck changes nothing.
* The ceiling is the core's own: two cores reading two channels at once each get it.
* Writes, and reads without the key, are not touched.
"""

from __future__ import annotations

import pytest
from hw_helpers import hbm_read_fixed_ns

from kernbench.common.pe_commands import DmaRead, DmaWrite

IL = 4096
CH_BW = 16.0  # GB/s of one channel: the path's bottleneck without the ceiling
BANKED = ("cube.hbm_ctrl.channels=4", f"cube.hbm_ctrl.interleave_bytes={IL}",
          f"cube.hbm_ctrl.channel_bw_gbs={CH_BW}", "cube.router.link_bw_gbs=4096",
          "cube.links.pe_router_bw_gbs=4096", "cube.hbm_ctrl.port_bw_gbs=4096",
          "cube.pe_template.pe_tcm.bw_gbs=4096",
          "cube.hbm_ctrl.channel_routers=[r0c0, r0c1, r1c0, r1c1]")
CLOCK = 2.0  # GHz of the DMA engine: the ceiling counts its cycles


def _trip_ns(cfg) -> float:
    """The latencies inside the banked memory stage of a read from the PE's own router:
    channel, its port, the PE's link (no mesh hop)."""
    hbm = cfg.cube.hbm_ctrl
    return hbm.latency_ns + hbm.port_latency_ns + cfg.cube.links.pe_router_latency_ns


def _capped_ns(cfg, nbytes: int, rate: float) -> float:
    trip = _trip_ns(cfg)
    return hbm_read_fixed_ns(cfg) - trip + max(trip + nbytes / CH_BW, nbytes / (rate * CLOCK))


def _channel_of_pe(topo, pe: int) -> int:
    name = topo.pes[pe].router.rsplit(".", 1)[1]
    return topo.config.cube.hbm_ctrl.channel_routers.index(name)


def _sim(make_sim, rate: float | None):
    extra = [f"cube.pe_template.pe_dma.clock_ghz={CLOCK}"]
    if rate is not None:
        extra.append(f"cube.pe_template.pe_dma.hbm_read_bytes_per_cycle={rate}")
    return make_sim("small", *BANKED, *extra)


@pytest.mark.parametrize("rate", [1.0, 3.0])  # 2 and 6 GB/s at 2 GHz: below the channel
def test_a_read_runs_at_the_cores_ceiling(make_sim, rate):
    sim = _sim(make_sim, rate)
    done = sim.submit(0, DmaRead(label="r", params={
        "nbytes": IL, "addr": _channel_of_pe(sim.topology, 0) * IL}))
    sim.run()
    cfg = sim.topology.config
    assert IL / (rate * CLOCK) > _trip_ns(cfg) + IL / CH_BW  # the ceiling binds
    assert done.value == pytest.approx(_capped_ns(cfg, IL, rate), abs=1e-9)


@pytest.mark.parametrize("rate", [None, 64.0])  # off, or above the channel's 16 GB/s
def test_a_ceiling_above_the_path_changes_nothing(make_sim, rate):
    sim = _sim(make_sim, rate)
    done = sim.submit(0, DmaRead(label="r", params={
        "nbytes": IL, "addr": _channel_of_pe(sim.topology, 0) * IL}))
    sim.run()
    assert done.value == pytest.approx(hbm_read_fixed_ns(sim.topology.config) + IL / CH_BW, abs=1e-9)


def test_the_ceiling_is_per_core(make_sim):
    rate = 1.0
    sim = _sim(make_sim, rate)
    topo = sim.topology
    done = [sim.submit(pe, DmaRead(label=f"r{pe}", params={
        "nbytes": IL, "addr": _channel_of_pe(topo, pe) * IL})) for pe in (0, 1)]
    sim.run()
    one = _capped_ns(topo.config, IL, rate)
    assert [d.value for d in done] == pytest.approx([one, one], abs=1e-9)


def test_writes_are_not_capped(make_sim):
    capped, free = _sim(make_sim, 1.0), _sim(make_sim, None)
    ends = []
    for sim in (capped, free):
        d = sim.submit(0, DmaWrite(label="w", params={
            "nbytes": IL, "addr": _channel_of_pe(sim.topology, 0) * IL}))
        sim.run()
        ends.append(d.value)
    assert ends[0] == pytest.approx(ends[1], abs=1e-12)
    assert ends[0] < _capped_ns(capped.topology.config, IL, 1.0)
