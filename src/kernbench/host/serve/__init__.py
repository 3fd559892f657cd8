"""Serving: many requests on one simulated NPU, scheduled by a policy, each step's time
from a compiled and simulated program (docs/serving.md, DESIGN.md §10).

workload.py (requests: Poisson or a trace) → policies.py (static / continuous / chunked,
a registry) over state.py (sequences, queue, batch) and kv_cache.py (paged blocks) →
steps.py (a step's programs, memoized through the bucket rule of buckets.py, simulated by
model.py through host.run) → engine.py (the loop) → results.py (latencies, stats, files)
→ run.py (`serve`, the flow the CLI calls).
"""

from __future__ import annotations

from kernbench.host.serve.policies import POLICIES, Limits, Policy, register
from kernbench.host.serve.run import ServeOptions, serve

__all__ = ["POLICIES", "Limits", "Policy", "ServeOptions", "register", "serve"]
