"""`kernbench kernel FILE.py::NAME [--grid G] [--topology T] [--set k=v]... [--out DIR]`.

FILE.py defines NAME (a `@kernbench.jit` kernel) and a `setup()` function (or
`setup_NAME()`) returning a dict: `args` (tuple), `meta` (constexpr kwargs), `grid`,
and optionally `out` (the output DeviceBuffer) and `expected` (numpy reference) to verify.
The benches/ kernels follow this convention.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import (
    JsonOpt,
    QuietOpt,
    SetOpt,
    TraceOpt,
    err,
    preset_list,
    print_result,
    set_quiet,
)
from kernbench.triton_emu.runtime import DEFAULT_MAX_OPS

MAX_KERNEL_BYTES = 1 << 20


@contextlib.contextmanager
def user_code(path: Path) -> Iterator[None]:
    """Errors raised by the user's kernel file (import, setup(), the kernel body) become
    one InputError line `file:line: Type: message` (exit 2); kernbench's own errors and
    Ctrl-C pass through."""
    from kernbench.errors import InputError, KernbenchError

    try:
        yield
    except KernbenchError:
        raise
    except SyntaxError as e:
        raise InputError(f"SyntaxError: {e.msg}", file=f"{e.filename}:{e.lineno}") from None
    except Exception as e:
        where = str(path)
        want = str(path.resolve())
        for fs in traceback.extract_tb(e.__traceback__):
            if str(Path(fs.filename).resolve()) == want:
                where = f"{path}:{fs.lineno}"
        raise InputError(f"{type(e).__name__}: {e}", file=where) from None


def _load(target: str):  # noqa: ANN202
    import importlib.util
    import sys

    from kernbench.errors import InputError

    path_s, sep, name = target.partition("::")
    path = Path(path_s)
    if not sep or not name:
        raise InputError("expected FILE.py::NAME", file=target)
    if not path.is_file():
        raise InputError("no such file", file=str(path))
    if not path.is_file() or path.stat().st_size > MAX_KERNEL_BYTES:
        raise InputError(f"not a regular file of at most {MAX_KERNEL_BYTES} bytes",
                         file=str(path))
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(f"_kb_kernel_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InputError("not a Python file", file=str(path))
    mod = importlib.util.module_from_spec(spec)
    with user_code(path):
        spec.loader.exec_module(mod)
    kern = getattr(mod, name, None)
    if kern is None or not hasattr(kern, "fn"):
        raise InputError(f"'{name}' is not a @kernbench.jit kernel in the file", file=str(path))
    setup = getattr(mod, f"setup_{name}", None) or getattr(mod, "setup", None)
    if setup is None:
        raise InputError("the file defines no setup() giving the kernel's arguments",
                         file=str(path))
    return kern, setup


@app.command("kernel")
def kernel(
    target: Annotated[str, typer.Argument(help="FILE.py::NAME of a @kernbench.jit kernel")],
    grid: Annotated[str | None, typer.Option("--grid", "-g", help="grid, e.g. 8 or 4,2")] = None,
    topology: Annotated[str, typer.Option("--topology", "-t", help=f"preset ({preset_list()}) or YAML")] = "small",
    set_: SetOpt = None,
    pes: Annotated[int | None, typer.Option("--pes", help="use only the first N PEs")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    trace: TraceOpt = False,
    no_data: Annotated[bool, typer.Option("--no-data", help="timing only (skip pass 2)")] = False,
    max_ops: Annotated[int, typer.Option(
        "--max-ops", min=1, help="tl operations the launch may run before it is stopped "
                                 "(an endless loop)")] = DEFAULT_MAX_OPS,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Run a tl kernel on the NPU model (pass 1) and the data pass; write stats.json
    (+ trace.json with --trace) and print the summary."""
    from kernbench.cli.outdir import OutDir
    from kernbench.errors import InputError, VerificationError
    from kernbench.report.stats import write_json
    from kernbench.report.summary import print_summary
    from kernbench.topology import load_topology
    from kernbench.triton_emu.runtime import DEVICE

    set_quiet(quiet)
    topo = load_topology(topology, set_ or [])
    if pes is not None and not 1 <= pes <= len(topo.pes):
        raise InputError(f"want 1..{len(topo.pes)} (the PEs of '{topo.name}'), got {pes}",
                         field="--pes")
    kern, setup = _load(target)
    path = Path(target.partition("::")[0])
    DEVICE.reset()  # a fresh device: results never depend on what ran before in the process
    with user_code(path):
        s = setup()
    if not isinstance(s, dict) or "args" not in s:
        raise InputError("setup() must return a dict with 'args' (and 'grid', 'meta', ...)",
                         file=str(path))
    g = s.get("grid")
    if grid is not None:
        try:
            g = tuple(int(x) for x in grid.split(","))
        except ValueError:
            raise InputError(f"bad grid {grid!r}: want ints separated by commas",
                             field="--grid") from None
    if g is None:
        raise InputError("no grid: pass --grid or return 'grid' from setup()", file=target)
    err.print(f"kernel {kern.__name__} grid {g} on '{topo.name}'")
    with OutDir(out) as stage:
        with user_code(path):
            res = kern[g](*s["args"], topology=topo, pes=pes, data_pass=not no_data,
                          trace=trace, max_ops=max_ops, **s.get("meta", {}))
        verdict = _check(s, res) if not no_data else None
        write_json(res.stats, stage / "stats.json")
        if res.trace is not None:
            write_json(res.trace, stage / "trace.json")
        summary = _summary(res.stats, verdict, _problem(s, res.stats))
        (stage / "summary.txt").write_text(summary, encoding="utf-8")
    print_summary(res.stats, err)
    print_result(res.stats, summary, json_)
    err.print(f"wrote {out}/")
    if verdict is not None and not verdict["allclose"]:
        raise VerificationError(f"{target}: output differs from the reference "
                                f"(max abs err {verdict['max_abs_err']:.3g})")


def _check(s: dict, res) -> dict | None:  # noqa: ANN001
    """Compare the kernel's output buffer with setup()'s `expected`, if it gave both."""
    if s.get("out") is None or s.get("expected") is None:
        return None
    import numpy as np

    from kernbench.numerics.compare import compare
    from kernbench.report.stats import set_section

    actual = s["out"].numpy()
    exp = np.asarray(s["expected"])
    c = compare(actual.astype(np.float32) if actual.dtype.kind == "f" else actual,
                exp.astype(np.float32) if exp.dtype.kind == "f" else exp,
                dtype=actual.dtype, tol=s.get("tol"))
    set_section(res.stats, "verify", c)
    return c


def _problem(s: dict, stats: dict) -> list[str]:
    """The problem size (the device buffers setup() passed, and its `flops` / `bytes` /
    `bits` when given) and the rate achieved: flops / total_ns. Operations counted are
    setup()'s, the problem's own, not the padded tiles the array executed; at `bits` ≤ 8
    the rate is in TOPS, else TFLOPS."""
    from kernbench.report.units import fmt_time
    from kernbench.triton_emu.device import DeviceBuffer

    bufs = [a for a in s["args"] if isinstance(a, DeviceBuffer)]
    lines = ["problem: " + (", ".join(
        f"{b.name}[{'×'.join(str(d) for d in b.shape)}] {b.dtype}" for b in bufs) or "no buffers")]
    flops, total = s.get("flops"), stats["total_ns"]
    if flops is None:
        lines.append("rate: unknown (setup() returns no 'flops')")
        return lines
    bits = int(s.get("bits", 16))
    unit = "TOPS" if bits <= 8 else "TFLOPS"
    size = f"{int(flops):,} operations"
    if s.get("bytes") is not None:
        size += f", {int(s['bytes']):,} bytes"
    rate = float(flops) / total / 1e3 if total > 0 else float("nan")
    lines.append(f"rate: {size} in {fmt_time(total)} = {rate:.4g} {unit} achieved ({bits}-bit)")
    return lines


def _summary(stats: dict, verdict: dict | None, problem: list[str] | None = None) -> str:
    from kernbench.report.energy import energy_lines
    from kernbench.report.units import fmt_time
    from kernbench.report.verdict import bottleneck_line

    lines = [f"total {fmt_time(stats['total_ns'])} = {stats['total_cycles']:,} cycles at "
             f"{stats['clock_ghz']:g} GHz on '{stats['topology']}'"]
    lines += problem or []
    lines.append(bottleneck_line(stats["bottleneck"]))
    lines += energy_lines(stats)
    if verdict is not None:
        lines.append(f"verify: allclose={verdict['allclose']} "
                     f"max_abs_err={verdict['max_abs_err']:.3g} cosine={verdict['cosine']:.6f}")
    return "\n".join(lines) + "\n"
