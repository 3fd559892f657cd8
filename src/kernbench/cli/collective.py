"""`kernbench collective OP [--topology t3k] [--bytes 1MiB] [--algorithm ring] ...`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SetOpt, TopologyOpt, err

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4}

def parse_bytes(text: str) -> int:
    """`1024`, `64KiB`, `1MiB`, `2GB` → bytes; InputError otherwise."""
    from kernbench.errors import InputError

    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS or int(m.group(1)) < 1:
        raise InputError(f"{text!r} is not a positive size (e.g. 4096, 64KiB, 1MiB)",
                         field="--bytes")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _chips(text: str | None, topo, algorithm: str) -> tuple[int, ...]:  # noqa: ANN001
    """`--chips N` (the first N chips, in ring order for the ring algorithm) or a list."""
    from kernbench.errors import InputError
    from kernbench.topology.chips import ring_order

    system = topo.config.system
    order = ring_order(system) if system is not None and algorithm == "ring" else \
        list(range(topo.chips))
    if text is None:
        return tuple(order)
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise InputError(f"{text!r} is not a chip count or a list of chip indices",
                         field="--chips")
    if len(parts) == 1:
        n = int(parts[0])
        if n < 1 or n > topo.chips:
            raise InputError(f"{n} chips requested; '{topo.name}' has {topo.chips}",
                             field="--chips")
        return tuple(order[:n])
    return tuple(int(p) for p in parts)


def _worker_count(given: int | None, topo, links: int) -> int:  # noqa: ANN001
    """`--workers`, checked against the PEs of a chip on the `links` lanes used; without
    it, DEFAULT_WORKERS or all of those PEs when the chip has fewer."""
    from kernbench.errors import InputError
    from kernbench.host.collective import DEFAULT_WORKERS, chip_pes

    have = chip_pes(topo, links)
    if given is None:
        return min(DEFAULT_WORKERS, have)
    if given < 1:
        raise InputError(f"--workers {given} must be at least 1", field="--workers")
    if given > have:
        raise InputError(f"--workers {given}: a chip of '{topo.name}' has {have} PE(s) on "
                         f"the {links} link(s) used", field="--workers")
    return given


@app.command("collective")
def collective(
    op: Annotated[str, typer.Argument(help="all_reduce, all_gather, reduce_scatter, "
                                           "all_to_all or send_recv")],
    topology: TopologyOpt = "t3k",
    set_: SetOpt = None,
    nbytes: Annotated[str, typer.Option("--bytes", help="bytes per chip (all_gather: of the "
                                                        "gathered output): 4096, 64KiB, 1MiB")] = "1MiB",
    algorithm: Annotated[str, typer.Option("--algorithm", "-a",
                                           help="ring, direct or 2d")] = "ring",
    dtype: Annotated[str, typer.Option("--dtype", help="bf16, fp16 or fp32")] = "bf16",
    chips: Annotated[str | None, typer.Option(
        "--chips", help="chip count (the first N, in ring order for ring) or indices "
                        "'0,1,5,4' in rank order (default: every chip)")] = None,
    unidirectional: Annotated[bool, typer.Option(
        "--unidirectional", help="ring: one direction only (default: both)")] = False,
    links: Annotated[int, typer.Option("--links", help="parallel links of a neighbour pair "
                                                       "to use")] = 1,
    workers: Annotated[int | None, typer.Option(
        "--workers", help="worker PEs per chip (default: 8, or every PE of a chip with "
                          "fewer)")] = None,
    verify: Annotated[bool, typer.Option("--verify", help="run the data pass and compare "
                                                          "every rank with numpy")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write cmdq.json, "
                                             "stats.json (and trace.json) here")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="with --out: also trace.json")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Lower one collective to DMA and vector-add CMDQ entries on a many-chip topology,
    simulate it and print its time and bus bandwidth (docs/multichip.md)."""
    from kernbench.compiler.collectives import ALGORITHMS, OPS, Collective
    from kernbench.errors import InputError
    from kernbench.host.collective import run_collective
    from kernbench.topology import load_topology

    if op not in OPS:
        raise InputError(f"unknown collective {op!r} (one of {', '.join(OPS)})", field="OP")
    if algorithm not in ALGORITHMS:
        raise InputError(f"unknown algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})",
                         field="--algorithm")
    topo = load_topology(topology, set_ or [])
    if topo.config.system is None:
        raise InputError(f"'{topo.name}' is one chip: give a topology with a system section "
                         "(t3k, large-x8) or --set system.chips=N", field="--topology")
    ranks = _chips(chips, topo, algorithm)
    if op == "send_recv" and chips is None:
        ranks = ranks[:2]
    size = parse_bytes(nbytes)
    from kernbench.compiler.collectives.plan import DTYPE_BYTES

    if dtype not in DTYPE_BYTES:
        raise InputError(f"dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}",
                         field="--dtype")
    if size % DTYPE_BYTES[dtype]:
        raise InputError(f"{size} bytes is not a whole number of {dtype} elements",
                         field="--bytes")
    grid = topo.config.system.grid if algorithm == "2d" and len(ranks) == topo.chips else None
    c = Collective(op, size // DTYPE_BYTES[dtype], ranks, algorithm, dtype,
                   not unidirectional, grid)
    err.print(f"{op} ({algorithm}) of {size} bytes per chip over {len(ranks)} chips of "
              f"'{topo.name}'")
    res = run_collective(topo, c, verify=verify, trace=trace and out is not None,
                         links=links, workers=_worker_count(workers, topo, links))
    summary = res.summary(c)
    if out is not None:
        _write(out, res, summary, trace)
    _print(res, summary, as_json)
    if res.verified is False:
        raise typer.Exit(1)


def _write(out: Path, res, summary: dict, trace: bool) -> None:  # noqa: ANN001
    """cmdq.json, stats.json (with a `collective` section) and, with `trace`, trace.json."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "cmdq.json").write_text(json.dumps(res.program.doc) + "\n")
    (out / "stats.json").write_text(json.dumps(res.run.stats({"collective": summary}),
                                               indent=1, sort_keys=True) + "\n")
    if trace:
        from kernbench.report.perfetto import build_trace

        (out / "trace.json").write_text(json.dumps(build_trace(res.run.sim)) + "\n")
    err.print(f"wrote {out}/")


def _print(res, summary: dict, as_json: bool) -> None:  # noqa: ANN001
    """The summary on stdout: one line, or JSON."""
    if as_json:
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
        return
    check = "" if res.verified is None else (
        "; verify: ok" if res.verified else f"; verify: FAILED on ranks {res.mismatched_ranks}")
    print(f"{summary['op']} {summary['algorithm']} {len(summary['chips'])} chips, "
          f"{summary['bytes_per_chip']} B/chip: {summary['time_us']:.2f} us, "
          f"busbw {summary['busbw_gbs']:.2f} GB/s, chip-link bytes "
          f"{summary['chip_link_bytes']}{check}")
