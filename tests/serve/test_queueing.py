"""The serving loop against queueing theory, with a closed-form program cost."""

from __future__ import annotations

import random

from serve_helpers import program_ns, run

from kernbench.host.serve.results import little, serve_stats
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
