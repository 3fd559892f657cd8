"""Simulated against measured: tt-metal's published matmul rows on the n150 / p150 presets.

Run:
  .venv/bin/python benchmarks/silicon.py --fit                      # fit on n150 rows only
  .venv/bin/python benchmarks/silicon.py --table benchmarks/data/tt_gemm_flops.csv \\
      --out RESULT.csv [--plot docs/img/silicon_vs_measured.png] [--kernbench-max-mkn 2147483648]

Reads a CSV of published rows (columns of scripts/tt_gemm_flops.py; lines starting with
'#' are comments), evaluates each row on its card's preset (N150 -> n150, P150 -> p150)
with tt-metal's own matmul algorithm (benchmarks/ttmetal_matmul.py, ADR-0861) and writes
the same rows plus `simulated_ns`, `error_pct` (empty when the row has no measured time),
`program` (the program config used) and `kernbench_ns` (kernbench's own compiler and
simulator on the same chip, for the rows --kernbench-max-mkn selects; empty otherwise).
The per-group error table (card x dtype x fidelity x config) goes to stdout as markdown;
progress to stderr.

--engine des (ADR-0863, ADR-0913) runs tt-metal's program on kernbench's discrete-event
simulator instead (benchmarks/ttmetal_des.py) for every row (or those with m*k*n <=
--des-max-mkn; programs of many steps are extrapolated from prefix runs), with the
tile engine's two fitted parameters from --params, noc_eff unused, and launch / host
times from --des-params (`--engine des --fit` fits those three on the n150 rows' DES
times and writes them there); the result adds columns engine, analytic_ns, des_entries
and des_note, and the group table puts the analytic model's MAPE on the same rows
beside the DES's.

--fit fits the free parameters (ttmetal_matmul.PARAM_NAMES, at most six) on the n150 rows
with a measured time, minimizing their mean absolute percentage error (Nelder-Mead on the
parameters' logarithms, fixed start, fixed iteration count: deterministic), and writes
them to --params (default benchmarks/data/silicon_params.json). Without --fit the
parameters are read from that file; the p150 rows are predictions with them unchanged.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from ttmetal_matmul import (  # noqa: E402
    DEFAULT_PARAMS,
    DRAM_EFFICIENCY,
    PARAM_NAMES,
    Chip,
    predict_ns,
    program,
)

from kernbench.errors import InputError  # noqa: E402
from kernbench.topology import load_topology  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "data" / "tt_gemm_flops.csv"
PARAMS = ROOT / "benchmarks" / "data" / "silicon_params.json"
REQUIRED = ("card", "config", "m", "k", "n", "use_trace", "grid_size", "in0_storage_type",
            "in1_storage_type", "out_storage_type", "dtype", "math_fidelity",
            "inference_time_avg_ns")
CARDS = {"N150": "n150", "P150": "p150"}
DTYPES = ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B")
FIDELITIES = ("LoFi", "HiFi2", "HiFi3", "HiFi4")


class BadTable(Exception):
    """A row or column of the input table that cannot be used."""


def read_table(path: Path) -> list[dict]:
    """Rows of the CSV at `path`, checked (BadTable names the line and the field)."""
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines()
                 if ln.strip() and not ln.startswith("#")]
    except OSError as e:
        raise BadTable(f"{path}: {e.strerror}") from None
    reader = csv.DictReader(lines)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise BadTable(f"{path}: no column '{missing[0]}'")
    rows = list(reader)
    for i, r in enumerate(rows, 2):
        where = f"{path}: row {i}"
        if r["card"] not in CARDS:
            raise BadTable(f"{where}: card '{r['card']}' is not N150 or P150")
        if r["dtype"] not in DTYPES:
            raise BadTable(f"{where}: dtype '{r['dtype']}' is not one of {', '.join(DTYPES)}")
        if r["math_fidelity"] not in FIDELITIES:
            raise BadTable(f"{where}: math_fidelity '{r['math_fidelity']}' is unknown")
        if r["config"] not in ("out_of_box", "hand_tuned"):
            raise BadTable(f"{where}: config '{r['config']}' is not out_of_box or hand_tuned")
        for d in ("m", "k", "n"):
            if not r[d].isdigit() or int(r[d]) < 1:
                raise BadTable(f"{where}: {d} '{r[d]}' is not a positive integer")
        try:
            gx, gy = (int(v) for v in r["grid_size"].split("x"))
        except ValueError:
            raise BadTable(f"{where}: grid_size '{r['grid_size']}' is not COLSxROWS") from None
        t = r["inference_time_avg_ns"].strip()
        try:
            if t and float(t) <= 0:
                raise ValueError
        except ValueError:
            raise BadTable(f"{where}: inference_time_avg_ns '{t}' is not a positive number") from None
        for c in ("in0_storage_type", "in1_storage_type", "out_storage_type"):
            if r[c] not in ("L1", "DRAM"):
                raise BadTable(f"{where}: {c} '{r[c]}' is not L1 or DRAM")
        if r["use_trace"] not in ("True", "False"):
            raise BadTable(f"{where}: use_trace '{r['use_trace']}' is not True or False")
    return rows


def chips() -> dict[str, Chip]:
    return {card: Chip.from_topology(load_topology(p, [])) for card, p in CARDS.items()}


def check_grid(rows: list[dict], cs: dict[str, Chip]) -> None:
    for i, r in enumerate(rows, 2):
        gx, gy = (int(v) for v in r["grid_size"].split("x"))
        topo = load_topology(CARDS[r["card"]], [])
        mesh = topo.config.cube.mesh
        if gx > mesh.cols or gy > mesh.rows:
            raise BadTable(f"row {i}: grid_size {r['grid_size']} is larger than the "
                           f"{CARDS[r['card']]} compute grid {mesh.cols}x{mesh.rows}")


def simulate(rows: list[dict], params: dict[str, float], cs: dict[str, Chip]) -> list[float]:
    return [predict_ns(r, cs[r["card"]], params, DRAM_EFFICIENCY[CARDS[r["card"]]])[0]
            for r in rows]


def mape(sim: list[float], rows: list[dict]) -> float:
    errs = [abs(s / float(r["inference_time_avg_ns"]) - 1) for s, r in zip(sim, rows, strict=True)]
    return 100.0 * float(np.mean(errs))


def nelder_mead(f, x0: np.ndarray, iters: int = 3000, step: float = 0.3) -> np.ndarray:
    """Minimize f from x0 (deterministic: fixed simplex, fixed iteration count)."""
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals, kind="stable")
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[int(np.argmin(vals))]


def fit(rows: list[dict], cs: dict[str, Chip]) -> dict[str, float]:
    """The parameters that minimize the n150 rows' MAPE (p150 rows are not looked at)."""
    train = [r for r in rows if r["card"] == "N150" and r["inference_time_avg_ns"].strip()]
    if not train:
        raise BadTable("no N150 row with a measured time to fit on")

    def loss(x: np.ndarray) -> float:
        p = dict(zip(PARAM_NAMES, np.exp(x), strict=True))
        if p["noc_eff"] > 1.0:
            return 1e9
        return mape(simulate(train, p, cs), train)

    x = nelder_mead(loss, np.log([DEFAULT_PARAMS[k] for k in PARAM_NAMES]))
    x = nelder_mead(loss, x, iters=2000, step=0.1)
    return {k: float(f"{v:.6g}") for k, v in zip(PARAM_NAMES, np.exp(x), strict=True)}


def groups(rows: list[dict], sim: list[float]) -> list[tuple[str, int, float, float, int]]:
    """(group, rows, MAPE %, worst |error| %, rows over 35 %) per card x dtype x fidelity x
    config, then per card with and without trace (trace rows time the device alone) and
    per card overall."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r, s in zip(rows, sim, strict=True):
        if r["inference_time_avg_ns"].strip():
            e = 100.0 * abs(s / float(r["inference_time_avg_ns"]) - 1)
            key = f"{r['card']} {r['dtype']} {r['math_fidelity']} {r['config']}"
            acc[key].append(e)
            trace = "trace (device time)" if r["use_trace"] == "True" else "no trace (host-bound floor)"
            acc[f"{r['card']} ~ {trace}"].append(e)
            acc[f"{r['card']} ~~ all rows"].append(e)
    return [(k.replace("~ ", "").replace("~", ""), len(v), float(np.mean(v)), float(np.max(v)),
             sum(e > 35.0 for e in v)) for k, v in sorted(acc.items())]


#: the QConfig weight format of each published dtype; activations are bf16 (kernbench's
#: block floats are weight formats, computed in float: docs/quantization.md)
KB_WEIGHT = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfp8_b", "BFLOAT4_B": "bfp4_b"}


def kernbench_ns(row: dict, workdir: Path) -> float:
    """Layer time of the row's GEMM compiled and simulated by kernbench itself on the
    card's preset at the row's math fidelity: the weight in the row's format (bf16, or
    the block float with its shared exponents), the activation in bf16 (tt-metal's
    block-float rows also take in0 as a block float; kernbench keeps activations float)."""
    import onnx

    from kernbench.host.flow import (
        TIMING_ONLY,
        CompileRequest,
        compile_model,
        simulate_bundle,
    )
    from models import single_gemm
    m, k, n = int(row["m"]), int(row["k"]), int(row["n"])
    w = KB_WEIGHT[row["dtype"]]
    d = workdir / f"{row['card']}-{m}-{k}-{n}-{w}-{row['math_fidelity']}"
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(single_gemm(m, n, k), d / "g.onnx")
    (d / "q.yaml").write_text(f"default: {{weight: {w}, activation: bf16}}\n")
    topo = load_topology(CARDS[row["card"]],
                         [f"cube.pe_template.pe_gemm.math_fidelity={row['math_fidelity']}"])
    compile_model(d / "g.onnx", topo, d / "b", CompileRequest(qconfig=d / "q.yaml"))
    res = simulate_bundle(d / "b", topo, d / "o", TIMING_ONLY)
    return sum(v["ns"] for v in res.stats["layers"].values() if v["op_type"] == "GEMM")


#: --engine des runs every row by default (large programs are extrapolated, ADR-0913)
DES_MAX_MKN = 1 << 62
#: the DES's own fitted launch / host numbers (ADR-0913); the engine's two come from PARAMS
DES_PARAMS = ROOT / "benchmarks" / "data" / "silicon_des_params.json"
DES_FIT_NAMES = ("launch_ns", "host_oob_ns", "host_tuned_ns")


def des_key(row: dict) -> tuple:
    """What the device time of a row depends on (trace and host do not enter it)."""
    return (row["card"], row["config"], row["m"], row["k"], row["n"], row["grid_size"],
            row["dtype"], row["math_fidelity"], row["in0_storage_type"],
            row["out_storage_type"])


def simulate_des(rows: list[dict], params: dict[str, float], cs: dict[str, Chip],
                 max_mkn: int) -> tuple[list[float | None], list[int | None], list[str | None]]:
    """(simulated device time, CMDQ entries simulated, note) of every row with
    m·k·n <= max_mkn through kernbench's discrete-event simulator (ttmetal_des,
    ADR-0863 / ADR-0913); the note says "extrapolated" for a program extrapolated from
    prefix runs, or why a row was not run (device time None). `params` gives the tile
    engine's two fitted values (des_overrides)."""
    import ttmetal_des

    base = {card: load_topology(p, []) for card, p in CARDS.items()}
    memo: dict[tuple, tuple[float, int, str] | str] = {}
    dev: list[float | None] = []
    ents: list[int | None] = []
    notes: list[str | None] = []
    for r in rows:
        if int(r["m"]) * int(r["k"]) * int(r["n"]) > max_mkn:
            dev.append(None)
            ents.append(None)
            notes.append("outside the DES subset")
            continue
        key = des_key(r)
        if key not in memo:
            prog = program(r, cs[r["card"]])
            topo = load_topology(CARDS[r["card"]],
                                 ttmetal_des.des_overrides(r, base[r["card"]], params, prog))
            print(f"des {' '.join(key)} {prog.label()}", file=sys.stderr)
            try:
                memo[key] = ttmetal_des.device_ns(r, prog, topo)
            except ValueError as e:  # the program's buffers do not fit this TCM
                memo[key] = str(e)
        hit = memo[key]
        if isinstance(hit, str):
            dev.append(None)
            ents.append(None)
            notes.append(hit)
            continue
        t, n, how = hit
        dev.append(t)
        ents.append(n)
        notes.append(how if how != "exact" else None)
    return dev, ents, notes


def des_times(rows: list[dict], dev: list[float | None],
              p: dict[str, float]) -> list[float | None]:
    """The time the benchmark reports for a DES device time: launch_ns + device time,
    floored without trace by the host's per-op time (as the analytic model does)."""
    out: list[float | None] = []
    for r, d in zip(rows, dev, strict=True):
        if d is None:
            out.append(None)
            continue
        t = p["launch_ns"] + d
        if r["use_trace"] != "True":
            t = max(t, p["host_tuned_ns"] if r["config"] == "hand_tuned" else p["host_oob_ns"])
        out.append(t)
    return out


def fit_des(rows: list[dict], dev: list[float | None]) -> dict[str, float]:
    """launch_ns, host_oob_ns, host_tuned_ns that minimize the MAPE of the n150 rows the
    DES ran (p150 rows are not looked at); the device times do not depend on them."""
    idx = [i for i, r in enumerate(rows) if r["card"] == "N150" and dev[i] is not None
           and r["inference_time_avg_ns"].strip()]
    if not idx:
        raise BadTable("no N150 row with a measured time and a DES time to fit on")
    train = [rows[i] for i in idx]
    d = [dev[i] for i in idx]

    def loss(x: np.ndarray) -> float:
        p = dict(zip(DES_FIT_NAMES, np.exp(x), strict=True))
        return mape(des_times(train, d, p), train)

    x = nelder_mead(loss, np.log([DEFAULT_PARAMS[k] for k in DES_FIT_NAMES]))
    x = nelder_mead(loss, x, iters=2000, step=0.1)
    return {k: float(f"{v:.6g}") for k, v in zip(DES_FIT_NAMES, np.exp(x), strict=True)}


def plot(rows: list[dict], sim: list[float | None], path: Path,
         title: str = "tt-metal matmul: simulated vs measured") -> None:
    """Log-log scatter of simulated against measured time per card and config (rows
    without a simulated or measured time left out), with y = x and ±10 % lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for card, mark in (("N150", "o"), ("P150", "^")):
        for cfg, color in (("out_of_box", "tab:blue"), ("hand_tuned", "tab:orange")):
            pts = [(float(r["inference_time_avg_ns"]) / 1e3, s / 1e3) for r, s in
                   zip(rows, sim, strict=True) if r["card"] == card and r["config"] == cfg
                   and r["inference_time_avg_ns"].strip() and s is not None]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, s=10, marker=mark, color=color, alpha=0.6,
                           label=f"{card} {cfg.replace('_', ' ')}"
                                 + (" (fitted)" if card == "N150" else " (predicted)"))
    lo, hi = 5.0, 3e5
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="y = x")
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.8, label="±10 %")
    ax.plot([lo, hi], [lo / 1.1, hi / 1.1], "k:", lw=0.8)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="measured (µs, tt-metal GEMM_FLOPS.md)", ylabel="simulated (µs)",
           title=title)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def write_out(path: Path, rows: list[dict], sim: list[float | None], progs: list[str],
              kb: list[float | None], extra: dict[str, list] | None = None) -> None:
    """The rows plus simulated_ns, error_pct (empty without a measured or a simulated
    time), program, kernbench_ns and the `extra` columns (DES: engine, analytic_ns,
    des_entries)."""
    extra = extra or {}
    cols = list(rows[0]) + ["simulated_ns", "error_pct", "program", "kernbench_ns", *extra]
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for i, (r, s, p, k) in enumerate(zip(rows, sim, progs, kb, strict=True)):
            meas = r["inference_time_avg_ns"].strip()
            err = f"{100.0 * (s / float(meas) - 1):.2f}" if meas and s is not None else ""
            w.writerow({**r, "simulated_ns": "" if s is None else f"{s:.1f}",
                        "error_pct": err, "program": p,
                        "kernbench_ns": "" if k is None else f"{k:.1f}",
                        **{c: ("" if v[i] is None else v[i]) for c, v in extra.items()}})
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=TABLE, help="CSV of published rows")
    ap.add_argument("--out", type=Path, help="result CSV (the rows + simulated_ns, error_pct)")
    ap.add_argument("--params", type=Path, default=PARAMS, help="fitted parameters (JSON)")
    ap.add_argument("--fit", action="store_true", help="fit the parameters on n150 rows")
    ap.add_argument("--plot", type=Path, help="log-log PNG of simulated vs measured")
    ap.add_argument("--kernbench-max-mkn", type=int, default=0, metavar="N",
                    help="also compile+simulate with kernbench's own compiler the rows "
                         "(both cards, every dtype) with m*k*n <= N")
    ap.add_argument("--engine", choices=("analytic", "des"), default="analytic",
                    help="analytic: the block-pipeline model (all rows); des: tt-metal's "
                         "program on kernbench's discrete-event simulator (rows up to "
                         "--des-max-mkn; the analytic figure goes beside it)")
    ap.add_argument("--des-max-mkn", type=int, default=DES_MAX_MKN, metavar="N",
                    help="--engine des runs the rows with m*k*n <= N (default: every row)")
    ap.add_argument("--des-params", type=Path, default=DES_PARAMS,
                    help="--engine des: its launch / host parameters (JSON; --fit writes "
                         "them, fitted on the n150 rows' DES times)")
    args = ap.parse_args(argv)
    try:
        rows = read_table(args.table)
        cs = chips()
        check_grid(rows, cs)
        if args.fit and args.engine == "analytic":
            params = fit(rows, cs)
            args.params.write_text(json.dumps(params, indent=1) + "\n")
            print(f"fitted on {sum(r['card'] == 'N150' for r in rows)} n150 rows -> "
                  f"{args.params}: {params}", file=sys.stderr)
        else:
            try:
                params = json.loads(args.params.read_text())
            except (OSError, ValueError) as e:
                raise BadTable(f"{args.params}: cannot read the parameters ({e})") from None
            if sorted(params) != sorted(PARAM_NAMES):
                raise BadTable(f"{args.params}: expected keys {', '.join(PARAM_NAMES)}")
    except (BadTable, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = [predict_ns(r, cs[r["card"]], params, DRAM_EFFICIENCY[CARDS[r["card"]]])
           for r in rows]
    sim = [o[0] for o in out]
    if args.engine == "des":
        return _des_main(args, rows, params, cs, out)
    kb: list[float | None] = [None] * len(rows)
    if args.kernbench_max_mkn:
        import tempfile
        work = Path(tempfile.mkdtemp(prefix="kb-silicon-"))
        memo: dict[tuple, float | None] = {}
        for i, r in enumerate(rows):
            size = int(r["m"]) * int(r["k"]) * int(r["n"])
            if size > args.kernbench_max_mkn:
                continue
            key = (r["card"], r["m"], r["k"], r["n"], r["dtype"], r["math_fidelity"])
            if key not in memo:
                print(f"kernbench {' '.join(key)}", file=sys.stderr)
                memo[key] = kernbench_ns(r, work)
            kb[i] = memo[key]
    if args.out:
        write_out(args.out, rows, sim, [o[1].label() for o in out], kb)
    if args.plot:
        plot(rows, sim, args.plot)
    print("| group | rows | MAPE % | worst % | rows > 35 % |\n| --- | ---: | ---: | ---: | ---: |")
    for g, n, mp, worst, over in groups(rows, sim):
        print(f"| {g} | {n} | {mp:.1f} | {worst:.1f} | {over} |")
    return 0


def _des_main(args: argparse.Namespace, rows: list[dict], params: dict[str, float],
              cs: dict[str, Chip], out: list) -> int:
    """--engine des: simulate the rows, fit (--fit) or read the DES's launch / host
    parameters, write every row (empty where not run), print DES and analytic MAPE per
    group on the same rows."""
    ana = [o[0] for o in out]
    dev, ents, notes = simulate_des(rows, params, cs, args.des_max_mkn)
    try:
        if args.fit:
            dp = fit_des(rows, dev)
            args.des_params.write_text(json.dumps(dp, indent=1) + "\n")
            print(f"DES launch / host fitted on the n150 rows -> {args.des_params}: {dp}",
                  file=sys.stderr)
        else:
            try:
                dp = json.loads(args.des_params.read_text())
            except (OSError, ValueError) as e:
                raise BadTable(f"{args.des_params}: cannot read the parameters ({e})") from None
            if sorted(dp) != sorted(DES_FIT_NAMES):
                raise BadTable(f"{args.des_params}: expected keys {', '.join(DES_FIT_NAMES)}")
    except BadTable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    des = des_times(rows, dev, dp)
    if args.out:
        write_out(args.out, rows, des, [o[1].label() for o in out], [None] * len(rows),
                  {"engine": ["des" if d is not None else None for d in des],
                   "analytic_ns": [f"{a:.1f}" for a in ana], "des_entries": ents,
                   "des_note": notes})
    if args.plot:
        plot(rows, des, args.plot, "tt-metal matmul on kernbench's DES vs measured")
    ran = [i for i, d in enumerate(des) if d is not None]
    sub = [rows[i] for i in ran]
    if not sub:
        print(f"error: no row has m*k*n <= {args.des_max_mkn}", file=sys.stderr)
        return 2
    g_des = groups(sub, [des[i] for i in ran])
    g_ana = {g[0]: g for g in groups(sub, [ana[i] for i in ran])}
    unfit = sum(n is not None and n not in ("outside the DES subset", "extrapolated")
                for n in notes)
    extra = sum(n == "extrapolated" for n in notes)
    print(f"DES on {len(sub)} rows ({extra} of them extrapolated from prefix runs; {unfit} "
          "not run: buffers exceed the TCM); analytic on the same rows")
    print("| group | rows | DES MAPE % | analytic MAPE % | DES worst % | DES rows > 35 % |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for g, n, mp, worst, over in g_des:
        print(f"| {g} | {n} | {mp:.1f} | {g_ana[g][2]:.1f} | {worst:.1f} | {over} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
