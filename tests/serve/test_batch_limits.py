"""Batches at the edges of their limits. `static` pads a batch's prefill to its longest
prompt: the padded prompts must fit the KV cache's tokens, or the batch's one prefill
program could not run; a request that would take them beyond waits for the next batch,
and the first of a batch is always admitted. `continuous` recomputes a preempted
sequence in one prefill, alone in its step when it exceeds the token budget. `chunked`
holds blocks for a whole prompt from its admission."""

from __future__ import annotations

import random
from collections import deque

from serve_helpers import program_ns, run

from kernbench.host.serve.engine import serve_requests
from kernbench.host.serve.kv_cache import PagedKvCache, blocks_for
from kernbench.host.serve.policies import Limits, policy_for
from kernbench.host.serve.state import SchedState, Seq
from kernbench.host.serve.steps import StepTimer, step_programs
from kernbench.host.serve.workload import Request


def _state(prompts: list[int], blocks: int, block_tokens: int = 16) -> SchedState:
    reqs = [Request(i, 0, p, 2, f"request {i}") for i, p in enumerate(prompts)]
    return SchedState(PagedKvCache(blocks, block_tokens), deque(Seq(r) for r in reqs))


def test_a_batch_stops_where_its_padded_prompts_would_pass_the_cache():
    # 125 blocks of 16 = 2000 tokens: 1000 + 16 + 16 fit as blocks (63 + 2 + 2), but
    # padded to 1000 each, three prompts take 3000 tokens
    state = _state([1000, 16, 16, 16], blocks=125)
    step = policy_for("static", Limits(max_batch=8)).schedule(state, 0)
    assert [s.id for s, _ in step.prefill] == [0, 1]  # 2 × 1000 = 2000 fit, 3 × 1000 not
    assert step_programs(step) == [(2, 1000, 0)]
    assert [s.id for s in state.waiting] == [2, 3]


def test_short_prompts_after_a_long_one_still_batch_when_the_cache_holds_them():
    state = _state([1000, 16, 16, 16], blocks=1000)  # 16 000 tokens
    step = policy_for("static", Limits(max_batch=8)).schedule(state, 0)
    assert [s.id for s, _ in step.prefill] == [0, 1, 2, 3]
    assert step_programs(step) == [(4, 1000, 0)]


def test_the_first_request_of_a_batch_is_admitted_whatever_its_length():
    state = _state([1999, 16], blocks=125)  # 1999 + 2 - 1 = 2000 tokens: exactly the cache
    step = policy_for("static", Limits(max_batch=8)).schedule(state, 0)
    assert [s.id for s, _ in step.prefill] == [0]


def test_continuous_recomputes_a_preempted_sequence_beyond_the_budget_alone():
    from kernbench.host.serve.engine import serve_requests
    from kernbench.host.serve.steps import StepTimer

    # 3 requests of 100 + 50 tokens, a 110-token budget, a cache of 15 blocks of 16: two
    # prompts take 7 blocks each, their decodes need an 8th, so the later one is
    # preempted and recomputes 100 + generated tokens, more than the budget (such a
    # request was refused before it could ever happen)
    reqs = [Request(i, 0, 100, 50, f"request {i}") for i in range(3)]
    policy = policy_for("continuous", Limits(max_batch=8, max_batch_tokens=110))
    for r in reqs:
        policy.check(r.prompt, r.output)  # no longer refused
    seen: list[tuple[int, int, int]] = []

    def ns(shape: tuple[int, int, int]) -> float:
        seen.append(shape)
        return 1000.0 * shape[0] + 10.0 * shape[1] + shape[2]

    run = serve_requests(reqs, policy, PagedKvCache(15, 16), StepTimer(ns, exact=True),
                         lambda _n: None)
    assert all(q.finish_ns is not None for q in run.seqs)
    assert sum(q.preemptions for q in run.seqs) > 0
    recomputes = [s for s in seen if s[1] > 110]
    assert recomputes and all(b == 1 and past == 0 for b, _, past in recomputes)


def test_the_trace_shows_each_preemption_inside_its_request_s_phase():
    from kernbench.host.serve.engine import serve_requests
    from kernbench.host.serve.results import serve_trace
    from kernbench.host.serve.steps import StepTimer

    reqs = [Request(i, 0, 100, 50, f"request {i}") for i in range(3)]
    policy = policy_for("continuous", Limits(max_batch=8, max_batch_tokens=110))
    run = serve_requests(reqs, policy, PagedKvCache(15, 16),
                         StepTimer(lambda sh: 1000.0 * sh[0] + 10.0 * sh[1] + sh[2],
                                   exact=True), lambda _n: None)
    events = [e for e in serve_trace(run)["traceEvents"] if e["ph"] == "X"]
    for q in run.seqs:
        mine = [e for e in events if e["tid"] == q.req.id + 1]
        again = [e for e in mine if e["name"] == "preempted: queued again"]
        assert len(again) == q.preemptions == len(q.preempted)
        for e in again:  # within the prefill or decode slice it interrupted
            assert any(p["name"] in ("prefill", "decode") and p["ts"] <= e["ts"]
                       and e["ts"] + e["dur"] <= p["ts"] + p["dur"] for p in mine)
    assert sum(q.preemptions for q in run.seqs) > 0


def _tight_chunked_workload() -> list[Request]:
    rng = random.Random(1)
    t, reqs = 0, []
    for i in range(300):
        t += int(rng.expovariate(1 / 100_000))
        reqs.append(Request(i, t, rng.randint(100, 600), rng.randint(1, 60)))
    return reqs


def test_chunked_admits_a_prompt_only_with_blocks_for_all_of_it():
    """vLLM's chunked prefill allocates a prompt's blocks when it admits it: a partial
    prefill never waits for (or preempts another partial prefill for) blocks of its later
    chunks. Checked after every step of a cache that holds barely two prompts, with
    chunks far shorter than the prompts."""
    reqs = _tight_chunked_workload()
    kv = PagedKvCache(45, 16)
    pol = policy_for("chunked", Limits(16, 128))
    steps = []
    form = pol._form

    def checked(state, now_ns):  # noqa: ANN001, ANN202
        step = form(state, now_ns)
        for s in state.running:
            if s.prefilling:
                assert kv.owned(s.id) >= blocks_for(s.target, 16), (s.id, s.target)
        steps.append(step)
        return step

    pol._form = checked
    res = serve_requests(reqs, pol, kv, StepTimer(program_ns, exact=True))
    assert len(steps) > 1000 and all(s.finish_ns for s in res.seqs)
    # what admitting a chunk's blocks only did on this workload: thousands of preemptions
    # (every partial prefill pushing out the latest one) where continuous batching with
    # whole-prompt steps has a few dozen
    cont = run(reqs, policy="continuous", blocks=45, max_batch=16, max_batch_tokens=1024)
    assert res.preemptions <= 2 * cont.preemptions, (res.preemptions, cont.preemptions)
