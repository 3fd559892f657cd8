"""What a serving run reports: per-request latencies, percentiles, throughput, goodput,
KV-cache occupancy, a Little's-law self-check, and the files of --out.

- `requests.csv`: id, arrival_s, prompt_tokens, output_tokens, first_token_s, finish_s,
  ttft_s, tpot_s (empty for a one-token request), e2e_s, preemptions;
- `occupancy.csv`: one row per interval over which its counts hold (a step, cut again at
  every arrival during it): start and end (s), KV blocks used, running and waiting
  sequences during it, and the new tokens of the step ending at its end;
- `trace.json`: Perfetto, one track per request (queued → prefill → decode spans) and a
  KV-blocks counter;
- the `serve` section of stats.json (`serve_stats`, schema in docs/serving.md).

Times in the CSV files are seconds with 9 decimals: the run's integer ns, exact at any
time a run reaches (`_s`). `tpot_s`, a mean of whole-ns gaps, is not a whole number of ns:
it is the float nearest to it in seconds written to 9 decimals (`_mean_s`), so its nearest
ns while a float resolves one (a TPOT of weeks would not), a mean exactly halfway between
two ns going the way the float falls. In stats.json latencies keep the ns (9 decimals),
the rates and fractions 6 decimals, or 6 significant digits where that keeps more
(`_fig`: a low rate's throughput or a large cache's occupancy does not round to 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench.host.serve.engine import ServeRun, Timeline
from kernbench.host.serve.slo import meets
from kernbench.host.serve.state import Seq

PERCENTILES = (50, 90, 99)


def _s(ns: int) -> str:
    """Integer ns as seconds with 9 decimals, exactly: `ns / 1e9`, a float, loses ns from
    2**23 s (about 97 days) on, and a trace's arrivals go up to 1e9 s."""
    q, r = divmod(abs(ns), 10**9)
    return f"{'-' if ns < 0 else ''}{q}.{r:09d}"


def _mean_s(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1e9:.9f}"


def _fig(x: float) -> float:
    """`x` to 6 decimals, or to 6 significant digits below 0.1 (where 6 decimals keep
    fewer), so that a small figure keeps its digits and a usual one its old text."""
    return round(x, 6) if abs(x) >= 0.1 else float(f"{x:.6g}")


def tpot_ns(seq: Seq) -> float | None:
    n = seq.req.output - 1
    return None if n < 1 else (seq.finish_ns - seq.first_token_ns) / n


def requests_csv(run: ServeRun) -> str:
    lines = ["id,arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s,ttft_s,"
             "tpot_s,e2e_s,preemptions"]
    for s in run.seqs:
        r = s.req
        lines.append(",".join((str(r.id), _s(r.arrival_ns), str(r.prompt), str(r.output),
                               _s(s.first_token_ns), _s(s.finish_ns),
                               _s(s.first_token_ns - r.arrival_ns), _mean_s(tpot_ns(s)),
                               _s(s.finish_ns - r.arrival_ns), str(s.preemptions))))
    return "\n".join(lines) + "\n"


def occupancy_csv(run: ServeRun) -> str:
    tl = run.timeline
    lines = ["start_s,end_s,kv_blocks,running,waiting,tokens"]
    lines += [f"{_s(a)},{_s(b)},{k},{r},{w},{t}" for a, b, k, r, w, t in
              zip(tl.start_ns, tl.end_ns, tl.blocks, tl.running, tl.waiting, tl.tokens,
                  strict=True)]
    return "\n".join(lines) + "\n"


def _summary(values_ns: list[float]) -> dict[str, float | None]:
    if not values_ns:
        return {f"p{p}": None for p in PERCENTILES} | {"mean": None, "max": None}
    a = np.asarray(values_ns, dtype=np.float64) / 1e9
    out = {f"p{p}": round(float(np.percentile(a, p)), 9) for p in PERCENTILES}
    out["mean"] = round(float(a.mean()), 9)
    out["max"] = round(float(a.max()), 9)
    return out


def little(run: ServeRun) -> dict[str, float]:
    """Little's law on the run: L, the time-average number of requests in the system
    integrated from the loop's own counts (the timeline's running + waiting over each
    row), against λ·W from the requests' timestamps. They agree exactly when the loop
    loses or double-counts no request; the stats keep the relative error."""
    tl = run.timeline
    start = np.asarray(tl.start_ns, dtype=np.int64)
    end = np.asarray(tl.end_ns, dtype=np.int64)
    n = np.asarray(tl.running, dtype=np.int64) + np.asarray(tl.waiting, dtype=np.int64)
    arrival = np.asarray([s.req.arrival_ns for s in run.seqs], dtype=np.int64)
    finish = np.asarray([s.finish_ns for s in run.seqs], dtype=np.int64)
    area = int(((end - start) * n).sum())
    span = run.end_ns - int(arrival.min())
    L = area / span
    lam_w = float((finish - arrival).sum()) / span  # λ·W = (N / span) · (Σ e2e / N)
    return {"L": _fig(L), "lambda_W": _fig(lam_w),
            "relative_error": round(abs(L - lam_w) / lam_w, 9) if lam_w else 0.0}


def serve_stats(run: ServeRun, slo: dict[str, float], kv_blocks: int) -> dict[str, Any]:
    seqs = run.seqs
    first = min(s.req.arrival_ns for s in seqs)
    span_s = (run.end_ns - first) / 1e9
    ttft = [s.first_token_ns - s.req.arrival_ns for s in seqs]
    tpots = [t for s in seqs if (t := tpot_ns(s)) is not None]
    e2e = [s.finish_ns - s.req.arrival_ns for s in seqs]
    out_tokens = sum(s.req.output for s in seqs)
    tl = run.timeline
    busy = sum(e - b for b, e in zip(tl.start_ns, tl.end_ns, strict=True))
    weighted = sum((e - b) * k for b, e, k in zip(tl.start_ns, tl.end_ns, tl.blocks,
                                                   strict=True))
    stats: dict[str, Any] = {
        "requests": len(seqs),
        "span_s": round(span_s, 9),
        "ttft_s": _summary(ttft),
        "tpot_s": _summary(tpots),
        "e2e_s": _summary(e2e),
        "throughput": {
            "requests_per_s": _fig(len(seqs) / span_s),
            "output_tokens_per_s": _fig(out_tokens / span_s),
            "tokens_per_s": _fig((out_tokens + sum(s.req.prompt for s in seqs)) / span_s),
        },
        "preemptions": run.preemptions,
        "preempted_requests": sum(1 for s in seqs if s.preemptions),
        "kv_occupancy": {
            "blocks": kv_blocks,
            "peak_blocks": max(tl.blocks, default=0),
            "peak_fraction": _fig(max(tl.blocks, default=0) / kv_blocks),
            "mean_fraction_busy": _fig(weighted / busy / kv_blocks) if busy else 0.0,
        },
        "busy_fraction": _fig(busy / (run.end_ns - first)) if run.end_ns > first else 0.0,
        "little": little(run),
    }
    if slo:
        good = sum(1 for s, a, e in zip(seqs, ttft, e2e, strict=True)
                   if meets(slo, a, tpot_ns(s), e))
        stats["goodput"] = {"slo_s": {k: v / 1e9 for k, v in slo.items()},
                            "requests": good, "fraction": _fig(good / len(seqs)),
                            "requests_per_s": _fig(good / span_s)}
    return stats


def serve_trace(run: ServeRun) -> dict[str, Any]:
    """Perfetto trace: pid 1 holds one thread per request, pid 2 the KV counter."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "requests"}},
        {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "kv cache"}},
    ]
    for s in run.seqs:
        r, tid = s.req, s.req.id + 1
        ev.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                   "args": {"name": f"request {r.id}"}})
        args = {"prompt_tokens": r.prompt, "output_tokens": r.output,
                "preemptions": s.preemptions}
        spans = [("queued", r.arrival_ns, s.admitted_ns),
                 ("prefill", s.admitted_ns, s.first_token_ns),
                 ("decode", s.first_token_ns, s.finish_ns)]
        # a preemption nests in its phase: queued again until admitted, then it recomputes
        spans += [("preempted: queued again", a, b) for a, b in s.preempted if b is not None]
        for name, a, b in spans:
            if b > a:
                ev.append({"ph": "X", "name": name, "cat": "request", "pid": 1, "tid": tid,
                           "ts": a / 1e3, "dur": (b - a) / 1e3, "args": args})
    ev += _kv_counter(run.timeline)
    return {"traceEvents": ev, "displayTimeUnit": "ns"}


def kv_series(tl: Timeline) -> tuple[list[int], list[int]]:
    """KV blocks over time as (ns, blocks) change points: each row's blocks from its start
    where they change, 0 from the end of a row no row follows at once (the system empty)."""
    ts: list[int] = []
    ks: list[int] = []
    for i, (a, e, k) in enumerate(zip(tl.start_ns, tl.end_ns, tl.blocks, strict=True)):
        if not ks or k != ks[-1]:
            ts.append(a)
            ks.append(k)
        if (i + 1 == len(tl.end_ns) or tl.start_ns[i + 1] != e) and ks[-1] != 0:
            ts.append(e)
            ks.append(0)
    return ts, ks


def _kv_counter(tl: Timeline) -> list[dict[str, Any]]:
    """The KV-blocks counter track (`kv_series`)."""
    return [{"ph": "C", "name": "kv_blocks", "pid": 2, "tid": 0, "ts": t / 1e3,
             "args": {"blocks": k}} for t, k in zip(*kv_series(tl), strict=True)]
