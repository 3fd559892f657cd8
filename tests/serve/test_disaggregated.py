"""Disaggregated serving: prefill chips, decode chips and the KV cache sent between them,
checked against hand-computed timelines with a closed-form program cost."""

from __future__ import annotations

import json
import random

import pytest
from serve_helpers import program_ns

from kernbench.errors import InputError
from kernbench.host.serve.chips import ChipPools, KvTransfer, one_chip, simulated_send
from kernbench.host.serve.disagg import serve_disaggregated
from kernbench.host.serve.policies import Limits
from kernbench.host.serve.results import little
from kernbench.host.serve.steps import StepTimer
from kernbench.host.serve.workload import Request
from kernbench.topology import load_topology


def xfer(tokens: int, src: int, dst: int) -> int:
    """A made-up transfer cost that depends on the pair, so a wrong pair shows."""
    return 1_000 + 10 * tokens + 100 * src + 7 * dst


def run(reqs, prefill=2, decode=2, blocks=10_000, max_batch=64, max_batch_tokens=8192):
    return serve_disaggregated(reqs, Limits(max_batch, max_batch_tokens), blocks, blocks, 16,
                               prefill, decode, StepTimer(program_ns, exact=True), xfer)


def test_one_request_is_prefill_then_transfer_then_decodes():
    reqs = [Request(i, i * 10**9, 20 + 7 * i, 5 + i) for i in range(4)]
    res = run(reqs)
    for s in res.seqs:
        P, n = s.req.prompt, s.req.output
        assert s.first_token_ns - s.req.arrival_ns == program_ns((1, P, 0))
        # alone, a request goes to prefill chip 0 and to the decode chip with most room: 0
        decode = sum(program_ns((1, 1, P + j - 1)) for j in range(1, n))
        assert s.finish_ns - s.first_token_ns == xfer(P, 0, 0) + decode


def test_simultaneous_prompts_prefill_in_parallel_on_the_prefill_chips():
    reqs = [Request(0, 0, 100, 1), Request(1, 0, 100, 1), Request(2, 0, 100, 1)]
    t = program_ns((1, 100, 0))
    # a step of 100 tokens: two chips take one each, the third waits for chip 0's step
    res = run(reqs, prefill=2, max_batch_tokens=100)
    assert [s.first_token_ns for s in res.seqs] == [t, t, 2 * t]
    # with room for two prompts a step, chip 0 (the tie goes low) runs two programs at once
    res = run(reqs, prefill=2)
    assert [s.first_token_ns for s in res.seqs] == [2 * t, t, 2 * t]


def test_decode_batches_what_has_arrived_and_sends_are_one_fifo_per_prefill_chip():
    reqs = [Request(0, 0, 50, 3), Request(1, 0, 50, 3)]
    res = run(reqs, prefill=1, decode=1, max_batch_tokens=100)
    pre = program_ns((1, 50, 0)) * 2          # one step, one program per prompt
    a, b = res.seqs
    assert a.first_token_ns == b.first_token_ns == pre
    sent_a = pre + xfer(50, 0, 0)
    sent_b = sent_a + xfer(50, 0, 0)           # behind a's transfer on the same links
    d1 = program_ns((1, 1, 50))                # a alone: b is still on the links
    assert sent_b < sent_a + d1                # b has arrived when a's first decode ends
    # then both in one batch: past = the mean of 51 and 50 cached tokens, halves up
    assert a.finish_ns == sent_a + d1 + program_ns((2, 1, (51 + 50 + 1) // 2))
    assert b.finish_ns == a.finish_ns + program_ns((1, 1, 51))


def test_a_full_decode_chip_holds_the_request_on_its_prefill_chip():
    # decode chips hold 4 blocks of 16 tokens: one request of 40 + 20 tokens at a time
    reqs = [Request(0, 0, 40, 20), Request(1, 0, 40, 20)]
    res = serve_disaggregated(reqs, Limits(), 10_000, 4, 16, 1, 1,
                              StepTimer(program_ns, exact=True), xfer)
    a, b = res.seqs
    assert b.finish_ns - a.finish_ns >= xfer(40, 0, 0) + program_ns((1, 1, 40))


def test_littles_law_and_determinism():
    rng = random.Random(4)
    t, reqs = 0, []
    for i in range(2000):
        t += int(rng.expovariate(1 / 40_000))
        reqs.append(Request(i, t, rng.randint(16, 300), rng.randint(1, 60)))
    res = run(reqs, prefill=2, decode=3, blocks=300, max_batch=16, max_batch_tokens=512)
    law = little(res)
    assert law["relative_error"] <= 1e-9, law
    assert law["L"] > 2.0  # loaded: requests queue
    again = run(reqs, prefill=2, decode=3, blocks=300, max_batch=16, max_batch_tokens=512)
    assert [(s.first_token_ns, s.finish_ns) for s in res.seqs] == \
        [(s.first_token_ns, s.finish_ns) for s in again.seqs]
    assert all(s.finish_ns >= s.first_token_ns >= s.req.arrival_ns for s in res.seqs)


def test_kv_transfer_simulates_one_pair_per_route_distance_and_interpolates():
    topo = load_topology("t3k")
    pools = ChipPools.split(topo, 4)
    calls = []

    def cost(t, src, dst, nbytes):
        return 5_000.0 + 0.1 * nbytes + 700.0 * len(t.route(f"sip{src}.cube0.r0c0",
                                                             f"sip{dst}.cube0.r0c0"))

    def sim(t, src, dst, nbytes):
        calls.append((src, dst, nbytes))
        return cost(t, src, dst, nbytes)

    x = KvTransfer(topo, pools, bytes_per_token=1000, simulate=sim)
    # t3k is a 2 × 4 mesh: chip 0 → chip 4 (decode 0) is one hop down, → chip 7 four hops
    assert x.hops(0, 0) == 1 and x.hops(0, 3) == 4 and x.hops(1, 1) == 1
    # 300 tokens lie between the bucket edges 288 and 304: those and the midpoint 296 are
    # simulated (the edges' times disagree; a linear cost: the midpoint lies on the chord)
    # for pair (0, 0), which stands for (1, 1)
    assert x.ns(300, 1, 1) == round(cost(topo, 0, 4, 300_000))
    assert sorted(calls) == [(0, 4, 288_000), (0, 4, 296_000), (0, 4, 304_000)]
    assert x.ns(290, 0, 0) == round(cost(topo, 0, 4, 290_000)) and len(calls) == 3
    assert x.ns(300, 0, 3) == round(cost(topo, 0, 7, 300_000)) and len(calls) == 6
    exact = KvTransfer(topo, pools, bytes_per_token=1000, simulate=sim, exact=True)
    exact.ns(300, 0, 0)
    assert calls[-1] == (0, 4, 300_000)
    # stats.json lists each simulated send with its bytes and rate
    d = x.describe()
    assert d["bytes_per_token"] == 1000 and d["programs"] == len(d["sends"]) == 6
    first = d["sends"][0]
    assert (first["src_chip"], first["dst_chip"], first["tokens"]) == (0, 4, 288)
    assert first["bytes"] == 288_000
    assert first["gb_per_s"] == round(288_000 / cost(topo, 0, 4, 288_000), 3)


def test_a_simulated_send_takes_at_least_the_links_time():
    topo = load_topology("small", ["system.chips=2"])
    link = topo.config.system.link
    nbytes = 4 << 20
    ns = simulated_send(topo, 0, 1, nbytes)
    floor = link.latency_ns + nbytes / (link.bw_gbs * link.links_per_pair)
    assert floor <= ns <= 3 * floor


def test_one_chip_of_a_system_is_its_sip():
    topo = load_topology("t3k")
    chip = one_chip(topo)
    assert chip.chips == 1 and len(chip.pes) * 8 == len(topo.pes)
    assert chip.hbm_bytes * 8 == topo.hbm_bytes


@pytest.mark.parametrize(("preset", "prefill", "needle"), [
    ("large", None, "at least 2 chips"),
    ("t3k", 8, "--prefill-chips"),
    ("t3k", 0, "--prefill-chips"),
])
def test_pools_refuse_what_cannot_split(preset, prefill, needle):
    with pytest.raises(InputError) as e:
        ChipPools.split(load_topology(preset), prefill)
    assert needle in str(e.value)


def test_occupancy_tokens_count_prompts_and_decodes_as_the_other_policies_do():
    reqs = [Request(i, i * 1_000, 20 + 3 * i, 4 + i) for i in range(6)]
    res = run(reqs, prefill=2, decode=2)
    # every prompt token is prefilled once and every output token but the first decoded
    want = sum(r.prompt + r.output - 1 for r in reqs)
    assert sum(res.timeline.tokens) == want


@pytest.mark.parametrize("nbytes", [4096, 32768, 1 << 20])
def test_a_simulated_send_is_the_collective_command_of_the_same_bytes(nbytes, capsys):
    """The KV transfer is `kernbench collective send_recv` of the KV bytes, with its
    default worker PEs: on a chip of fewer than 8 PEs (`small` has 4) that is every PE,
    not 8 workers cut over 4 PEs (which made a 32 KiB send 39 % slower)."""
    from kernbench.cli import main

    topo = load_topology("small", ["system.chips=2"])
    ns = simulated_send(topo, 0, 1, nbytes)
    code = main(["collective", "send_recv", "-t", "small", "--set", "system.chips=2",
                 "--bytes", str(nbytes), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bytes_per_chip"] == nbytes
    assert round(ns / 1000, 3) == summary["time_us"]
