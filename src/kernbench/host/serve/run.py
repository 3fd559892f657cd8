"""`kernbench serve` as a flow: requests → checks → the serving loop → files.

`serve(model, topo, out, opts)` reads or draws the requests, opens the model
(`ServedModel`), sizes the KV cache from the topology, refuses what can never be served
(one InputError line: a prompt beyond the model's context, a request larger than the
whole cache or than the policy's step budget), runs the loop with step times from
simulated programs, and writes requests.csv, occupancy.csv, stats.json, trace.json and
report.html into `out`. Returns stats.json's content.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernbench.errors import InputError
from kernbench.host.block_replay import simulated_blocks
from kernbench.host.serve.chips import ChipPools, KvTransfer, one_chip
from kernbench.host.serve.disagg import serve_disaggregated
from kernbench.host.serve.engine import ServeRun, serve_requests
from kernbench.host.serve.kv_cache import PagedKvCache, blocks_for, capacity_blocks
from kernbench.host.serve.model import ServedModel
from kernbench.host.serve.policies import DISAGGREGATED, STATIC, Limits, Policy, policy_for
from kernbench.host.serve.pool import ProgramPool
from kernbench.host.serve.results import (
    kv_series,
    occupancy_csv,
    requests_csv,
    serve_stats,
    serve_trace,
    tpot_ns,
)
from kernbench.host.serve.slo import parse_slo
from kernbench.host.serve.step_cache import NO_ROUTING, RoutingOptions, StepCache, identity
from kernbench.host.serve.steps import Shape, StepTimer
from kernbench.host.serve.workload import LengthSpec, Request, poisson_requests, read_trace
from kernbench.host.simulate import PhaseHook, no_phase
from kernbench.report.serving import write_serving_report
from kernbench.report.stats import write_json
from kernbench.topology.model import Topology


@dataclass
class ServeOptions:
    policy: str = "continuous"
    requests: int | None = None       # default 100 (Poisson); not with a trace
    rate: float | None = None         # requests/s (Poisson); not with a trace
    prompt_len: str | None = None     # default "512"; not with a trace
    output_len: str | None = None     # default "128"; not with a trace
    seed: int | None = None  # of the drawn requests (None: 0); refused with a trace
    trace: Path | None = None         # arrival_s,prompt_tokens,output_tokens CSV
    slo: str | None = None            # ttft=1s,tpot=50ms
    max_batch: int = 64
    max_batch_tokens: int | None = None  # default 8192; refused with static (no budget)
    block_tokens: int = 16
    kv_fraction: float | None = None  # of the HBM the weights leave (None: 0.9)
    kv_blocks: int | None = None      # the cache's size in blocks, instead of the fraction
    exact_steps: bool = False
    qconfig: Path | None = None
    step_cache: Path | None = None    # simulated programs kept across runs (step_cache.py)
    prefill_chips: int | None = None  # disaggregated: chips that prefill (default half)
    # processes simulating step programs side by side; None: the CPU count, started once
    # the programs simulated in this process have taken `AUTO_START_CPU_S`
    workers: int | None = 1
    # decoder blocks each step program simulates before replaying the rest (None: run's
    # default); more let the replay leave out a long-context warm-up, at their CPU
    replay_blocks: int | None = None
    # an MoE config.json model's routing, as `run` takes it (--routing, --routing-seed,
    # --routing-same-layers): every step program is built with it
    routing: str | None = None
    routing_seed: int | None = None
    routing_same_layers: bool = False


def make_requests(opts: ServeOptions) -> tuple[list[Request], str]:
    """The requests and a one-line description of the workload."""
    drawn = {"--requests": opts.requests, "--rate": opts.rate,
             "--prompt-len": opts.prompt_len, "--output-len": opts.output_len,
             "--seed": opts.seed}
    if opts.trace is not None:
        for name, v in drawn.items():
            if v is not None:  # a trace fixes them: an ignored option would be a silent lie
                raise InputError("a trace gives the arrivals and lengths; drop it or --trace",
                                 field=name)
        reqs = read_trace(opts.trace)
        n = len(reqs)
        return reqs, f"trace {Path(opts.trace).name} ({n} request{'s' * (n != 1)})"
    if opts.rate is None:
        raise InputError("give --rate (Poisson arrivals) or --trace FILE.csv", field="--rate")
    n = 100 if opts.requests is None else opts.requests
    # an empty text is a mistake, not the default (LengthSpec refuses it)
    p = LengthSpec.parse("512" if opts.prompt_len is None else opts.prompt_len, "--prompt-len")
    o = LengthSpec.parse("128" if opts.output_len is None else opts.output_len, "--output-len")
    seed = opts.seed or 0
    reqs = poisson_requests(n, opts.rate, p, o, seed)
    return reqs, (f"{n} requests, Poisson {opts.rate:g}/s, prompt {p.text}, "
                  f"output {o.text}, seed {seed}")


def check_requests(reqs: list[Request], model: ServedModel, kv: PagedKvCache,
                   policy: Policy | None, file: str | None,
                   prefill_budget: int | None = None, cache_field: str | None = None) -> None:
    """Refuse a request that can never be served (the first one, one line).
    `prefill_budget` (the disaggregated prefill chips, which never preempt): the most
    prompt tokens one prefill step takes. `cache_field`: the option to blame when the KV
    cache is too small (None: the request's length)."""
    cap = kv.blocks * kv.block_tokens
    for r in reqs:
        if prefill_budget is not None and r.prompt > prefill_budget:
            raise InputError(f"a prompt of {r.prompt} tokens cannot be prefilled within "
                             f"{prefill_budget} tokens per step (raise it)", file=file,
                             where=r.where, field="--max-batch-tokens")
        # the positions the model sees, and the most a request caches: the prompt and every
        # generated token but the last, which is never fed back (a prompt of the whole
        # context still yields one token)
        need = r.prompt + r.output - 1
        if model.context is not None and need > model.context:
            raise InputError(f"{r.prompt} prompt + {r.output} output tokens need {need} "
                             f"positions, beyond the model's context of {model.context} "
                             "tokens", file=file, where=r.where,
                             field=_length_field(file, r.prompt > model.context))
        if blocks_for(need, kv.block_tokens) > kv.blocks:
            raise InputError(f"the KV cache ({kv.blocks} block{'' if kv.blocks == 1 else 's'} "
                             f"of {kv.block_tokens} tokens = "
                             f"{cap} tokens) is too small for one request of {r.prompt} + "
                             f"{r.output} tokens, which caches {need}", file=file,
                             where=r.where, field=cache_field or _length_field(
                                 file, blocks_for(r.prompt, kv.block_tokens) > kv.blocks))
        if policy is not None:
            try:
                policy.check(r.prompt, r.output)
            except InputError as e:  # the limit's field, at the request that breaks it
                raise InputError(e.reason, file=file, where=r.where, field=e.field) from None


def _length_field(trace: str | None, prompt: bool) -> str:
    """The length to blame for a request that cannot be served: its prompt when that alone
    is too long, else its output (a trace's column, or the option that drew it)."""
    if trace:
        return "prompt_tokens" if prompt else "output_tokens"
    return "--prompt-len" if prompt else "--output-len"


def _as_parsed(text: str | None, default: str) -> str:
    """A length option as stats.json records it: the default when not given, else the
    text without the spaces around it (as it was parsed)."""
    return default if text is None else text.strip()


def _kv_blocks(opts: ServeOptions, chip: Topology, m: ServedModel, kv_fraction: float,
               where: str) -> int:
    """The KV cache's blocks: `--kv-blocks` (refused beyond what the HBM holds beside the
    weights) or `kv_fraction` of that room."""
    if opts.kv_blocks is None:
        return capacity_blocks(chip.hbm_bytes, m.weight_bytes, m.kv_bytes_per_token,
                               opts.block_tokens, kv_fraction, where)
    if opts.kv_blocks < 1:
        raise InputError(f"must be >= 1, got {opts.kv_blocks}", field="--kv-blocks")
    most = capacity_blocks(chip.hbm_bytes, m.weight_bytes, m.kv_bytes_per_token,
                           opts.block_tokens, 1.0, where)
    if opts.kv_blocks > most:
        raise InputError(f"{opts.kv_blocks:,} blocks of {opts.block_tokens} tokens do not fit "
                         f"beside the weights in the HBM of {where}: at most {most:,}",
                         field="--kv-blocks")
    return opts.kv_blocks


def _limits(opts: ServeOptions) -> Limits:
    """The policy's limits; a token budget given to `static` (which has none) is refused:
    an ignored option would mislead."""
    if opts.max_batch_tokens is not None and opts.policy == STATIC:
        raise InputError("the static policy has no per-step token budget (it batches whole "
                         "prompts); drop it or choose another policy",
                         field="--max-batch-tokens")
    return Limits(opts.max_batch, 8192 if opts.max_batch_tokens is None
                  else opts.max_batch_tokens)


def _routing_stats(routing: RoutingOptions) -> dict[str, Any]:
    """stats.json's `routing` of an MoE model's run, when any of its options was given."""
    if routing == NO_ROUTING:
        return {}
    return {"routing": dict(zip(("routing", "seed", "same_layers"), routing, strict=True))}


def _kv_fraction(opts: ServeOptions) -> float:
    """The KV cache's share of the HBM the weights leave (unused with --kv-blocks, so not
    both)."""
    if opts.kv_fraction is not None and opts.kv_blocks is not None:
        raise InputError("give the KV cache's size as --kv-blocks or --kv-fraction, not both",
                         field="--kv-fraction")
    f = 0.9 if opts.kv_fraction is None else opts.kv_fraction
    if not (0 < f <= 1):
        raise InputError(f"must be in (0, 1], got {f}", field="--kv-fraction")
    return f


def serve(model: Path, topo: Topology, out: Path, opts: ServeOptions, workdir: Path,
          note: Callable[[str], None] = print, phase: PhaseHook = no_phase
          ) -> dict[str, Any]:
    """See the module docstring. `workdir`: scratch space for the step programs; `phase`
    wraps the serving loop ("serve", the requests, how many have finished so far; a
    progress display, which the disaggregated loop does not count)."""
    slo = parse_slo(opts.slo)
    policy = policy_for(opts.policy, _limits(opts))
    reqs, describe = make_requests(opts)
    if opts.workers is not None and opts.workers < 1:
        raise InputError(f"must be >= 1, got {opts.workers}", field="--workers")
    kv_fraction = _kv_fraction(opts)
    disagg = opts.policy == DISAGGREGATED
    if opts.prefill_chips is not None and not disagg:
        raise InputError("only the disaggregated policy splits chips", field="--prefill-chips")
    pools = ChipPools.split(topo, opts.prefill_chips) if disagg else None
    chip = one_chip(topo) if disagg else topo  # a step program runs on one chip
    blocks = simulated_blocks(opts.replay_blocks)
    routing = (opts.routing, opts.routing_seed, opts.routing_same_layers)
    cache = StepCache(opts.step_cache, identity(model, opts.qconfig, chip, blocks, routing))
    m = ServedModel.open(model, opts.qconfig, workdir, replay_blocks=blocks, routing=routing,
                         cache_option="--kv-fraction" if opts.kv_blocks is None else "--kv-blocks")
    blocks = _kv_blocks(opts, chip, m, kv_fraction, "one chip (disaggregated: each chip "
                        "holds the whole model)" if disagg else f"'{topo.name}'")
    kv = PagedKvCache(blocks, opts.block_tokens)
    # a cache the user sized, or one whose blocks are too large to have any, is at fault
    cache_field = ("--kv-blocks" if opts.kv_blocks is not None else None if blocks else
                   "--kv-fraction" if opts.kv_fraction is not None else "--block-tokens")
    check_requests(reqs, m, kv, None if disagg else policy,
                   str(opts.trace) if opts.trace else None,
                   policy.limits.max_batch_tokens if disagg else None, cache_field)
    where = (f"{pools.prefill} prefill + {pools.decode} decode chips of '{topo.name}', KV "
             f"cache {blocks:,} blocks of {opts.block_tokens} tokens per chip" if pools else
             f"'{topo.name}' ({opts.policy}); KV cache {blocks:,} blocks of "
             f"{opts.block_tokens} tokens")
    note(f"serving {len(reqs)} request{'' if len(reqs) == 1 else 's'} of {m.name} on {where}")

    t0 = time.process_time()
    width = opts.workers or os.cpu_count() or 1
    with ExitStack() as stack:
        src = _Programs(m, chip, cache, None)
        timer = StepTimer(src.simulate, exact=opts.exact_steps, record=src.record,
                          cached=cache.get, context=m.context,
                          max_batch=policy.limits.max_batch)
        start = _PoolStart(stack, src, timer, width, note)
        if opts.workers is None and width > 1:
            src.before_local = start.when_due  # a short run stays in this process
        elif width > 1:
            start()
        done = [0]
        count = None if pools else lambda: done[0]
        with phase("serve", len(reqs), count):
            run, total_blocks, extra = _loop(reqs, policy, kv, pools, topo, m, timer, opts,
                                             lambda n: done.__setitem__(0, n))
    loop_s = time.process_time() - t0 - timer.local_seconds
    stats = {"serve": {
        "model": m.name, "topology": topo.name, "policy": opts.policy,
        "limits": asdict(policy.limits) | ({"max_batch_tokens": None}
                                           if opts.policy == STATIC else {}),
        "workload": {"describe": describe, "requests": len(reqs), "rate_per_s": opts.rate
                     if opts.trace is None else None, "seed": None if opts.trace else opts.seed or 0,
                     "prompt_len": None if opts.trace else _as_parsed(opts.prompt_len, "512"),
                     "output_len": None if opts.trace else _as_parsed(opts.output_len, "128")},
        # per chip when every chip holds the model (disaggregated): the sizing's inputs
        "kv_cache": {"block_tokens": opts.block_tokens, "blocks": total_blocks,
                     "blocks_per_chip": blocks if disagg else None,
                     "bytes_per_token": m.kv_bytes_per_token, "weight_bytes": m.weight_bytes,
                     "hbm_bytes": chip.hbm_bytes},
        "steps": {"count": timer.steps, "exact": opts.exact_steps, "replay_blocks": m.replay_blocks,
                  "programs": len(timer.programs), "programs_simulated": len(src.fresh),
                  "shapes": len(timer.shapes)},
        "results": serve_stats(run, slo, total_blocks),
    } | extra | _routing_stats(routing)}
    write_outputs(Path(out), run, stats)
    note(_cost_line(timer, len(src.fresh), loop_s))
    return stats


def _cost_line(timer: StepTimer, fresh: int, loop_s: float) -> str:
    """The closing note: steps, programs (how many the step cache gave) and CPU spent."""
    n = len(timer.programs)
    return (f"{timer.steps:,} step{'s' * (timer.steps != 1)} from {n} program"
            f"{'s' * (n != 1)} ({n - fresh} from the step cache) "
            f"({timer.sim_seconds:.1f} CPU s simulating, {loop_s:.1f} CPU s in the loop"
            + (f", {timer.spare_seconds:.1f} CPU s simulated ahead and not needed"
               if timer.spare else "") + ")")


#: CPU s of the programs simulated in the serve process after which `--workers` left to
#: its default starts the pool: a pool costs its start-up and, in each call, the
#: speculative programs it waits for, which a short run would not earn back
AUTO_START_CPU_S = 20.0


class _PoolStart:
    """Starts the run's `ProgramPool` of `width` processes (once; it stops with `stack`)
    and hands it to the programs and the timer."""

    def __init__(self, stack: ExitStack, src: _Programs, timer: StepTimer, width: int,
                 note: Callable[[str], None]) -> None:
        self.stack, self.src, self.timer, self.width, self.note = stack, src, timer, width, note

    def __call__(self) -> None:
        src, timer = self.src, self.timer
        src.pool = self.stack.enter_context(ProgramPool(src.m, src.chip, self.width))
        timer.simulate_many, timer.speculate = src.simulate_many, src.speculate
        timer.width = self.width

    def when_due(self) -> None:
        """`--workers` left to its default: start once the programs simulated in this
        process (the timer's count) have taken `AUTO_START_CPU_S`."""
        spent = self.timer.local_seconds
        if spent >= AUTO_START_CPU_S:
            self.src.before_local = None
            self.note(f"simulating step programs on {self.width} processes from here on "
                      f"(those so far took {spent:.1f} CPU s; --workers sets the count)")
            self()


class _Programs:
    """Where a serving run's step programs come from: the step cache, else a simulation
    (in this process, or side by side on `pool`), recorded in the cache and in `fresh`
    once the run uses it. `before_local`: called before each program simulated in this
    process (`--workers` left to its default: `_PoolStart.when_due`)."""

    def __init__(self, m: ServedModel, chip: Topology, cache: StepCache,
                 pool: ProgramPool | None) -> None:
        self.m, self.chip, self.cache, self.pool = m, chip, cache, pool
        self.fresh: list[Shape] = []  # simulated by this run, in the order used
        self.before_local: Callable[[], None] | None = None

    def simulate(self, shape: Shape) -> float:
        """A program the step cache does not hold (the timer asks the cache first)."""
        if self.before_local is not None:
            self.before_local()
        ns = self.m.simulate(shape, self.chip)
        self.record(shape, ns)
        return ns

    def simulate_many(self, shapes: list[Shape]) -> list[tuple[float, float]]:
        out = self.speculate(shapes)
        for s, res in zip(shapes, out, strict=True):  # in the order asked
            assert res is not None
            self.record(s, res[0])
        return out  # type: ignore[return-value]

    def speculate(self, shapes: list[Shape], optional: int = 0
                  ) -> list[tuple[float, float] | None]:
        """(ns, CPU s) of each of `shapes`, side by side on the pool, not recorded; None
        for one of the last `optional` whose simulation failed."""
        assert self.pool is not None
        todo = [s for s in shapes if self.cache.get(s) is None]
        maybe = set(shapes[len(shapes) - optional:])  # never in the cache: last in `todo`
        done = dict(zip(todo, self.pool.simulate_many(
            todo, sum(s in maybe for s in todo)), strict=True)) if todo else {}
        return [done[s] if s in done else (self.cache.programs[s], 0.0) for s in shapes]

    def record(self, shape: Shape, ns: float) -> None:
        if self.cache.get(shape) is None:  # simulated by this run: into the step cache
            self.cache.put(shape, ns)
            self.fresh.append(shape)


def _loop(reqs: list[Request], policy: Policy, kv: PagedKvCache, pools: ChipPools | None,
          topo: Topology, m: ServedModel, timer: StepTimer, opts: ServeOptions,
          finished: Callable[[int], None]) -> tuple[ServeRun, int, dict[str, Any]]:
    """The serving loop: (its run, the KV blocks of every chip, the stats it adds)."""
    if pools is None:
        return serve_requests(reqs, policy, kv, timer, finished), kv.blocks, {}
    xfer = KvTransfer(topo, pools, m.kv_bytes_per_token, exact=opts.exact_steps)
    run = serve_disaggregated(reqs, policy.limits, kv.blocks, kv.blocks, opts.block_tokens,
                              pools.prefill, pools.decode, timer, xfer.ns)
    return run, kv.blocks * (pools.prefill + pools.decode), {"chips": {
        "prefill": pools.prefill, "decode": pools.decode, "kv_transfer": xfer.describe()}}


def write_outputs(out: Path, run: ServeRun, stats: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "requests.csv").write_text(requests_csv(run), encoding="utf-8", newline="\n")
    (out / "occupancy.csv").write_text(occupancy_csv(run), encoding="utf-8", newline="\n")
    write_json(stats, out / "stats.json")
    write_json(serve_trace(run), out / "trace.json")
    s = stats["serve"]
    lat = {"TTFT": [(q.first_token_ns - q.req.arrival_ns) / 1e9 for q in run.seqs],
           "TPOT": [t / 1e9 for q in run.seqs if (t := tpot_ns(q)) is not None],
           "end-to-end": [(q.finish_ns - q.req.arrival_ns) / 1e9 for q in run.seqs]}
    blocks = s["kv_cache"]["blocks"]
    ts, ks = kv_series(run.timeline)
    occ = ([t / 1e9 for t in ts], [k / blocks for k in ks])
    write_serving_report(out / "report.html", f"kernbench serve — {s['model']}", s, lat, occ)
