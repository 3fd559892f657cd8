"""The step memo's error: bucketed step times against --exact-steps on one trace.

    .venv/bin/python benchmarks/serve_memo_error.py [--cache FILE] [--requests N] [--seed S]

Serves the same 60 (--requests) Poisson requests of the tiny Llama config (tests/hf_configs/
tiny-llama.json, `small`; prompt 16:400, output 2:64, 40 000 requests/s, seed 1 (--seed),
max-batch 16, max-batch-tokens 512) with every policy, once with the bucket rule and
once with every program shape simulated, and prints the relative error of the TTFT, TPOT
and end-to-end percentiles (markdown, docs/serving.md). `disaggregated` serves the trace
on `small` with two chips (one prefill, one decode; its step programs run on one chip,
its KV transfers are bucketed or simulated for every token count with them). Programs are
simulated once and shared by both modes (a step cache). `--per-octave B,S,K` measures
another grid of edges for batch, new and past tokens instead of the rule's 16 each
(ADR-1150), `--tol
B,S,K` other tolerances of the midpoint check than the rule's 0.005,0.005,0.01 (ADR-1240),
`--agree F` edges whose times differ by at most F tolerances trusted without a midpoint
instead of the rule's 2 (0: every midpoint checked, the rule before ADR-1300).
`--policies a,b` serves with those policies only.

`--noise SD` is a control, not the memo: the first run of each pair takes every program
shape's exact time times (1 + SD × z), z a standard normal drawn per shape (seeded by
`--noise-seed` and the shape, so a shape always gets the same factor), with exact KV
transfers. It shows how far an unbiased per-program error of SD moves each percentile,
whatever approximation makes it: docs/serving.md's disaggregated TPOT tail moves as far
under SD 0.001 as under the memo.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from kernbench.host.serve.buckets import AGREE, TOLERANCE
from kernbench.host.serve.chips import ChipPools, KvTransfer, one_chip
from kernbench.host.serve.disagg import serve_disaggregated
from kernbench.host.serve.engine import serve_requests
from kernbench.host.serve.kv_cache import PagedKvCache
from kernbench.host.serve.model import ServedModel
from kernbench.host.serve.policies import DISAGGREGATED, POLICIES, Limits, policy_for
from kernbench.host.serve.results import serve_stats
from kernbench.host.serve.step_cache import StepCache, identity
from kernbench.host.serve.steps import StepTimer
from kernbench.host.serve.workload import LengthSpec, poisson_requests
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "tests" / "hf_configs" / "tiny-llama.json"
METRICS = [(m, p) for m in ("ttft_s", "tpot_s", "e2e_s") for p in ("p50", "p90", "p99")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, default=None, help="step cache file to keep")
    ap.add_argument("--requests", type=int, default=60, help="requests in the trace")
    ap.add_argument("--seed", type=int, default=1, help="the trace's seed")
    ap.add_argument("--per-octave", default=None,
                    help="B,S,K: edges an octave of batch, new and past tokens instead of "
                         "serve's rule (16 each; ADR-1150)")
    ap.add_argument("--tol", default=None,
                    help="B,S,K: the midpoint check's relative tolerance for batch, new and "
                         "past tokens instead of serve's rule (ADR-1240)")
    ap.add_argument("--agree", type=float, default=AGREE,
                    help="edges whose times differ by at most this many tolerances need no "
                         "midpoint (0: every interval checks its midpoint; ADR-1300)")
    ap.add_argument("--policies", default=None,
                    help="a,b: serve with these policies only (default: every policy)")
    ap.add_argument("--noise", type=float, default=None,
                    help="SD: exact times with a seeded relative error of SD per program "
                         "shape instead of the bucket rule (a control)")
    ap.add_argument("--noise-seed", type=int, default=0, help="seed of --noise's factors")
    a = ap.parse_args()
    rule = tuple(int(x) for x in a.per_octave.split(",")) if a.per_octave else None
    tol = tuple(float(x) for x in a.tol.split(",")) if a.tol else TOLERANCE
    topo = load_topology("small")
    with tempfile.TemporaryDirectory() as d:
        m = ServedModel.open(MODEL, None, Path(d))
        cache = StepCache(a.cache, identity(MODEL, None, topo))

        def sim(shape: tuple[int, int, int]) -> float:
            v = cache.get(shape)
            if v is None:
                v = m.simulate(shape, topo)
                cache.put(shape, v)
            return v

        reqs = poisson_requests(a.requests, 40_000, LengthSpec.parse("16:400", "p"),
                                LengthSpec.parse("2:64", "o"), a.seed)
        print("| policy | programs: buckets / exact | "
              + " | ".join(f"{m[:-2].upper()} {p}" for m, p in METRICS) + " |")
        print("| --- | ---: |" + " ---: |" * len(METRICS))
        two = load_topology("small", ["system.chips=2"])
        pools = ChipPools.split(two, None)
        assert one_chip(two).config == topo.config  # the same step programs as `small`'s
        def noisy(shape: tuple[int, int, int]) -> float:  # --noise: the control
            z = random.Random(f"{a.noise_seed}:{shape}").gauss(0.0, 1.0)
            return sim(shape) * (1.0 + a.noise * z)

        names = [*sorted(POLICIES), DISAGGREGATED]
        for name in a.policies.split(",") if a.policies else names:
            if name not in names:
                ap.error(f"--policies: unknown policy '{name}' (known: {', '.join(names)})")
            res = {}
            for exact in (False, True):
                if a.noise is not None and not exact:
                    t = StepTimer(noisy, exact=True)
                else:
                    t = StepTimer(sim, exact=exact, per_octave=rule, tol=tol, agree=a.agree)
                if name == DISAGGREGATED:
                    xfer = KvTransfer(two, pools, m.kv_bytes_per_token,
                                      exact=exact or a.noise is not None)
                    run = serve_disaggregated(reqs, Limits(16, 512), 10**6, 10**6, 16,
                                              pools.prefill, pools.decode, t, xfer.ns)
                else:
                    run = serve_requests(reqs, policy_for(name, Limits(16, 512)),
                                         PagedKvCache(10**6, 16), t)
                res[exact] = (serve_stats(run, {}, 10**6), len(t.programs))
            errs = [100 * (res[False][0][m][p] - res[True][0][m][p]) / res[True][0][m][p]
                    for m, p in METRICS]
            print(f"| {name} | {res[False][1]} / {res[True][1]} | "
                  + " | ".join(f"{e:+.2f} %" for e in errs) + " |")


if __name__ == "__main__":
    main()
