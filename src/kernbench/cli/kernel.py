"""`kernbench kernel FILE.py::NAME [--grid G] [--topology T] [--set k=v]... [--out DIR]`.

FILE.py defines NAME (a `@kernbench.jit` kernel) and a `setup()` function (or
`setup_NAME()`) returning a dict: `args` (tuple), `meta` (constexpr kwargs), `grid`,
and optionally `out` (the output DeviceBuffer) and `expected` (numpy reference) to verify.
The benches/ kernels follow this convention.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernbench.cli import app
from kernbench.cli.common import SetOpt, err


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
    sys.path.insert(0, str(path.resolve().parent))
    spec = importlib.util.spec_from_file_location(f"_kb_kernel_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InputError("not a Python file", file=str(path))
    mod = importlib.util.module_from_spec(spec)
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
    topology: Annotated[str, typer.Option("--topology", "-t", help="preset or YAML")] = "small",
    set_: SetOpt = None,
    pes: Annotated[int | None, typer.Option("--pes", help="use only the first N PEs")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder")] = Path("out"),
    no_trace: Annotated[bool, typer.Option("--no-trace", help="skip trace.json")] = False,
    no_data: Annotated[bool, typer.Option("--no-data", help="timing only (skip pass 2)")] = False,
) -> None:
    """Run a tl kernel on the NPU model (pass 1) and the data pass; write stats and trace."""
    from kernbench.errors import InputError, VerificationError
    from kernbench.numerics.compare import compare
    from kernbench.report.stats import write_json
    from kernbench.report.summary import print_summary
    from kernbench.topology import load_topology
    from kernbench.triton_emu.runtime import DEVICE

    topo = load_topology(topology, set_ or [])
    kern, setup = _load(target)
    DEVICE.reset()  # a fresh device: results never depend on what ran before in the process
    s = setup()
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
    res = kern[g](*s["args"], topology=topo, pes=pes, data_pass=not no_data,
                  trace=not no_trace, **s.get("meta", {}))
    verdict = None
    if not no_data and s.get("out") is not None and s.get("expected") is not None:
        import numpy as np

        actual = s["out"].numpy()
        exp = np.asarray(s["expected"])
        c = compare(actual.astype(np.float32) if actual.dtype.kind == "f" else actual,
                    exp.astype(np.float32) if exp.dtype.kind == "f" else exp,
                    dtype=actual.dtype, tol=s.get("tol"))
        verdict = c
        res.stats["verify"] = c
    out.mkdir(parents=True, exist_ok=True)
    write_json(res.stats, out / "stats.json")
    written = [out / "stats.json"]
    if res.trace is not None:
        write_json(res.trace, out / "trace.json")
        written.append(out / "trace.json")
    print_summary(res.stats, err)
    err.print("wrote " + ", ".join(str(p) for p in written))
    if verdict is not None:
        err.print(f"verify: allclose={verdict['allclose']} max_abs_err={verdict['max_abs_err']:.3g}"
                  f" cosine={verdict['cosine']:.6f}")
        if not verdict["allclose"]:
            raise VerificationError(f"{target}: output differs from the reference "
                                    f"(max abs err {verdict['max_abs_err']:.3g})")
