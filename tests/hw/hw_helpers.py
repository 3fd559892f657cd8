"""Helpers of the hardware-model tests (a module of its own name, so that tests of several
folders run in one pytest call never import another folder's conftest)."""

from __future__ import annotations

from kernbench.sim_engine.engine import Simulator


def spans_of(sim: Simulator, component_suffix: str, channel: str | None = None) -> list[tuple]:
    """Engine spans (component, channel, start, end, label, tile, stage) of one engine."""
    return [
        s for s in sim.tracer.spans
        if s[0].endswith(component_suffix) and (channel is None or s[1] == channel)
    ]


def hbm_read_fixed_ns(cfg) -> float:  # noqa: ANN001
    """Dispatch + DMA setup + address translation + every stage latency of an HBM read
    from the PE's own router (a hand sum of the topology's figures, spec §4.3)."""
    pt, hbm = cfg.cube.pe_template, cfg.cube.hbm_ctrl
    return (pt.pe_cpu.dispatch_latency_cycles / pt.pe_cpu.clock_ghz
            + pt.pe_scheduler.dispatch_latency_cycles / pt.pe_scheduler.clock_ghz
            + pt.pe_dma.setup_cycles / pt.pe_dma.clock_ghz
            + pt.pe_mmu.translation_latency_ns
            + hbm.latency_ns + hbm.port_latency_ns
            + cfg.cube.links.pe_router_latency_ns + pt.pe_tcm.latency_ns)
