"""DMA_MCAST_TILE (ADR-0862): one copy of a TCM range into the TCMs of a list of PEs.

Timing: on an idle 2 × 2 mesh the copy from PE 0 to PEs 1, 2, 3 is one pipelined transfer
over the union of the XY routes (each mesh link once), so it takes the DMA setup + MMU
translation + the sum of the stages' latencies + bytes over the slowest stage (closed
form). Data: every destination holds the source bytes. Validation: every destination's
range is bounds-checked; unknown or repeated PEs and a copy over the source are refused."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.cmdq.validate import validate_document
from kernbench.host.simulate import simulate_program
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology
from kernbench.topology.model import link_id

SMALL = load_topology("small")  # 2 x 2 mesh, one PE per router
LIMITS = limits_for(SMALL)
BANK = LIMITS.tcm_bank_bytes


def _mcast(dst_pes: list[int], n: int = 4096, **kw) -> dict:
    e = {"opcode": "DMA_MCAST_TILE", "id": 0, "qbits": 8, "num_elements": n, "spm_bank": 0,
         "spm_offset": 0, "dst_pes": dst_pes, "dst_bank": 1, "dst_offset": 64}
    e.update(kw)
    return e


def _doc(entry: dict) -> dict:
    return {"cmdq": [entry, {"opcode": "END", "id": 1}]}


def test_copy_lands_in_every_destination():
    src = np.random.default_rng(3).integers(0, 256, 1000, dtype=np.uint8)
    doc = _doc(_mcast([1, 3, 2], n=1000))
    assert validate_document(doc, LIMITS, "p.json") == []
    store = MemoryStore.for_topology(SMALL)
    store.write(f"tcm:{SMALL.pes[0].id}", 0, src)
    init = store.snapshot()
    log = OpLogger()
    simulate_program(parse_program(doc), SMALL, op_logger=log, data=TcmData())
    out = DataExecutor(log, init).run()
    for d in (1, 2, 3):
        got = out.read(f"tcm:{SMALL.pes[d].id}", BANK + 64, (1000,), "uint8")
        np.testing.assert_array_equal(got, src)


def test_one_transfer_time_is_the_pipelined_closed_form():
    pes = SMALL.pes
    n = 4096
    st = simulate_program(parse_program(_doc(_mcast([1, 2, 3], n=n))), SMALL).stats()
    e = st["entries"]["0"]
    # the links by hand: injection at PE 0, each mesh link of the three XY routes once
    # (PE 3's route shares its first hop with PE 1's or PE 2's), each ejection link
    mesh = {lk for d in (1, 2, 3) for lk in SMALL.route(pes[0].router, pes[d].router)}
    assert len(mesh) == 3
    links = [link_id(pes[0].id, pes[0].router), *mesh,
             *(link_id(pes[d].router, pes[d].id) for d in (1, 2, 3))]
    tcm = SMALL.config.cube.pe_template.pe_tcm
    lat = sum(SMALL.links[lk].latency_ns for lk in links) + 4 * tcm.latency_ns
    bw = min([SMALL.links[lk].bw_gbs for lk in links] + [tcm.bw_gbs])
    dma = SMALL.config.cube.pe_template.pe_dma
    mmu = SMALL.config.cube.pe_template.pe_mmu
    burst = dma.burst_bytes
    wire = -(-n // burst) * burst
    want = dma.setup_cycles / dma.clock_ghz + mmu.translation_latency_ns + lat + wire / bw
    dma_st = st["engines"][f"{pes[0].id}.pe_dma"]
    assert dma_st["busy_ns"] == pytest.approx(want, rel=1e-9)
    assert e["end_ns"] - e["start_ns"] >= want
    assert dma_st["bytes_written"] == 3 * wire


@pytest.mark.parametrize("entry,field,reason,count", [
    (_mcast([1, 4]), "dst_pes", "PE 4 is out of range", 1),
    (_mcast([1, 1]), "dst_pes", "PE 1 is named twice", 1),
    (_mcast([0, 1], dst_bank=0, dst_offset=100), "dst_offset", "overlaps its source", 1),
    (_mcast([1, 2], dst_offset=BANK - 100), "dst_offset", "beyond the", 2),  # per destination
])
def test_refusals_name_the_field(entry, field, reason, count):
    probs = validate_document(_doc(entry), LIMITS, "p.json")
    assert len(probs) == count, probs
    assert field in str(probs[0]) and reason in str(probs[0])


def test_a_copy_into_the_sender_elsewhere_is_accepted():
    assert validate_document(_doc(_mcast([0, 1], dst_bank=0, dst_offset=8192)), LIMITS,
                             "p.json") == []
