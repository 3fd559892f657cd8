"""The serving loop against queueing theory, with a closed-form program cost."""

from __future__ import annotations

import random

import pytest
from serve_helpers import program_ns, run

from kernbench.host.serve.disagg import serve_disaggregated
from kernbench.host.serve.policies import Limits
from kernbench.host.serve.results import little, occupancy_csv, serve_stats
from kernbench.host.serve.steps import StepTimer
from kernbench.host.serve.workload import LengthSpec, Request, poisson_requests


def test_static_batch1_is_an_md1_queue():
    """Static batching at batch 1 with fixed lengths is M/D/1: every request's wait follows
    Lindley's recursion on the same arrivals, exactly, and the mean wait is
    Pollaczek-Khinchine's ρS / (2(1 − ρ))."""
    P, n_out = 64, 8
    prefill = program_ns((1, P, 0))
    service = prefill + sum(program_ns((1, 1, P + j - 1)) for j in range(1, n_out))
    rate = 0.5 / (service / 1e9)  # ρ = 0.5
    reqs = poisson_requests(20_000, rate, LengthSpec("fixed", P, P),
                            LengthSpec("fixed", n_out, n_out), seed=3)
    res = run(reqs, policy="static", max_batch=1)
    wait, free_at = [], 0
    for r in reqs:  # Lindley: a request starts when it has arrived and the server is free
        start = max(r.arrival_ns, free_at)
        wait.append(start - r.arrival_ns)
        free_at = start + service
    for s, w in zip(res.seqs, wait, strict=True):
        assert s.first_token_ns == s.req.arrival_ns + w + prefill
        assert s.finish_ns == s.req.arrival_ns + w + service
    rho = rate * service / 1e9
    pk = rho * service / (2 * (1 - rho))
    assert abs(sum(wait) / len(wait) - pk) / pk < 0.08


def test_littles_law_holds():
    rng = random.Random(1)
    t, reqs = 0, []
    for i in range(3000):
        t += int(rng.expovariate(1 / 150_000))
        reqs.append(Request(i, t, rng.randint(16, 300), rng.randint(1, 60)))
    for policy in ("static", "continuous", "chunked"):
        res = run(reqs, policy=policy, blocks=400, max_batch=16, max_batch_tokens=512)
        law = little(res)
        assert law["relative_error"] <= 0.02, (policy, law)
        assert law["L"] > 1.0  # a loaded system: the check is not 0 ≈ 0


def test_one_request_at_a_time_is_prefill_plus_decodes():
    reqs = [Request(i, i * 10**9, 20 + 7 * i, 5 + i) for i in range(4)]
    for policy in ("static", "continuous", "chunked"):
        res = run(reqs, policy=policy)
        for s in res.seqs:
            P, n_out = s.req.prompt, s.req.output
            assert s.first_token_ns - s.req.arrival_ns == program_ns((1, P, 0))
            assert s.finish_ns - s.first_token_ns == sum(
                program_ns((1, 1, P + j - 1)) for j in range(1, n_out))


def test_preemption_recomputes_and_everyone_finishes():
    reqs = [Request(i, 0, 100, 200) for i in range(12)]
    res = run(reqs, policy="continuous", blocks=60, block_tokens=16)
    assert res.preemptions > 0
    assert all(s.finish_ns is not None for s in res.seqs)
    assert max(res.timeline.blocks) <= 60
    st = serve_stats(res, {}, 60)
    assert st["preemptions"] == sum(s.preemptions for s in res.seqs) == res.preemptions


def test_chunked_keeps_the_token_budget_and_batches_decodes():
    rng = random.Random(2)
    reqs = [Request(i, i * 2000, rng.randint(50, 900), rng.randint(2, 40)) for i in range(200)]
    res = run(reqs, policy="chunked", max_batch=32, max_batch_tokens=256)
    assert max(res.timeline.tokens) <= 256
    assert max(res.timeline.running) <= 32
    cont = run(reqs, policy="continuous", max_batch=32, max_batch_tokens=2048)
    # prefill joins the decodes instead of stopping them: a better worst-case TPOT
    assert max(s.finish_ns - s.first_token_ns for s in res.seqs) > 0
    assert serve_stats(res, {}, 10_000)["tpot_s"]["max"] < \
        serve_stats(cont, {}, 10_000)["tpot_s"]["max"]


def _l_from_occupancy(text: str) -> tuple[float, float]:
    """(Σ (end − start) · (running + waiting), the busy time) read from occupancy.csv as a
    user reads it, in seconds."""
    rows = [dict(zip(text.splitlines()[0].split(","), line.split(","), strict=True))
            for line in text.splitlines()[1:]]
    area = sum((float(r["end_s"]) - float(r["start_s"])) * (int(r["running"]) + int(r["waiting"]))
               for r in rows)
    return area, sum(float(r["end_s"]) - float(r["start_s"]) for r in rows)


def _disaggregated(reqs: list[Request]):  # noqa: ANN202
    return serve_disaggregated(reqs, Limits(16, 512), 300, 300, 16, 2, 2,
                               StepTimer(program_ns, exact=True),
                               lambda tokens, src, dst: 1_000 + 10 * tokens)


def test_occupancy_csv_integrates_to_the_requests_time_in_the_system():
    """Little's law from the files alone: the time integral of running + waiting in
    occupancy.csv is Σ (finish − arrival) of requests.csv, at a light load with short
    outputs (where counts taken at a step's end miss each request's last step) and loaded,
    under every policy; and the rows tile the busy time with no overlap."""
    rng = random.Random(7)
    light = [Request(i, i * 3_000_000 + rng.randint(0, 999_999), rng.randint(8, 40), 4)
             for i in range(200)]
    t, loaded = 0, []
    for i in range(1500):
        t += int(rng.expovariate(1 / 150_000))
        loaded.append(Request(i, t, rng.randint(16, 300), rng.randint(1, 60)))
    for reqs in (light, loaded):
        runs = [run(reqs, policy=p, blocks=400, max_batch=16, max_batch_tokens=512)
                for p in ("static", "continuous", "chunked")] + [_disaggregated(reqs)]
        for res in runs:
            area, busy = _l_from_occupancy(occupancy_csv(res))
            in_system = sum(s.finish_ns - s.req.arrival_ns for s in res.seqs) / 1e9
            assert area == pytest.approx(in_system, rel=1e-9)
            tl = res.timeline
            assert all(b > a for a, b in zip(tl.start_ns, tl.end_ns, strict=True))
            assert all(b <= a for a, b in zip(tl.start_ns[1:], tl.end_ns, strict=False))
            if not res.preemptions:  # the rows cut from a step keep its tokens once
                assert sum(tl.tokens) == sum(s.req.prompt + s.req.output - 1
                                             for s in res.seqs)
            assert little(res)["relative_error"] == 0.0
