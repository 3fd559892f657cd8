"""Helpers of the serving tests: a step timer whose programs cost a known closed form
(the queueing tests check the loop against queueing theory, not the simulator). A module
of its own name, not a conftest, so tests of several folders run in one pytest call
import the right one."""

from __future__ import annotations

from kernbench.host.serve.engine import serve_requests
from kernbench.host.serve.kv_cache import PagedKvCache
from kernbench.host.serve.policies import Limits, policy_for
from kernbench.host.serve.steps import StepTimer


def program_ns(shape: tuple[int, int, int]) -> int:
    """A made-up program cost: fixed weight time + per-token work + attention reads."""
    b, s, k = shape
    return 20_000 + 300 * b * s + 2 * b * (k + s)


def run(reqs, policy="continuous", blocks=10_000, block_tokens=16, max_batch=64,
        max_batch_tokens=8192):
    timer = StepTimer(program_ns, exact=True)
    pol = policy_for(policy, Limits(max_batch, max_batch_tokens))
    return serve_requests(reqs, pol, PagedKvCache(blocks, block_tokens), timer)
