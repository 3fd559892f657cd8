"""The golden outputs of kernbench: sha256 of every file a run writes, per case.

`python tests/golden/record.py` (re)writes `tests/golden/hashes.json` and
`tests/golden/float_outputs.npz`; `tests/test_golden.py` recomputes and compares. Cases: every committed test model and the tiny built-in
models (prefill and a decode step) compiled, simulated and verified on `small` and `base`,
and the bundled tl benches. Everything goes through the CLI, so the cases survive any
restructuring of the code behind it. Fields that record wall time or the kernbench version
are left out of the hash; everything else is byte-for-byte, except the float arrays of
outputs.npz (docs/verification.md, "Golden outputs on any CPU"): numpy picks SIMD kernels by
CPU, so their last bits move from machine to machine. They are checked two ways instead:
exactly against the IR reference interpreter run in the same process (verification.json's
interpreter checks must show max abs err 0, and verification.json is hashed), and within
`FLOAT_BOUND` of the recorded arrays (float_outputs.npz: each distinct array once,
compressed). Integer and bool arrays of outputs.npz stay exact.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tempfile
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HASHES = Path(__file__).with_name("hashes.json")
FLOATS = Path(__file__).with_name("float_outputs.npz")
MODELS = sorted(p.stem for p in (ROOT / "tests" / "models").glob("*.onnx"))
BUILTINS = [("gpt2", ["--seq-len", "8"]), ("gpt2", ["--kv-len", "16"]),
            ("llama", ["--seq-len", "8"]), ("llama", ["--kv-len", "16"])]
BENCHES = ["vector_add.py::add_kernel", "matmul.py::matmul_kernel",
           "fused_softmax.py::softmax_kernel", "layernorm.py::layernorm_kernel",
           "flash_attention.py::attn_fwd"]
TOPOLOGIES = ["small", "base"]
# written by a run and hashed: the bundle (compile) and the run's results
HASHED = ["ir.json", "cmdq.json", "memory.json", "weights.npz", "roofline.json", "stats.json",
          "verification.json", "trace.json"]
# the graph outputs a run writes: compared array by array (float ones within FLOAT_BOUND)
OUTPUTS = "outputs.npz"
# How far a golden case's float outputs may move between CPUs (numpy's SIMD dispatch),
# per array (docs/verification.md has the measured spread they cover):
# - float activations: |got - golden| <= FLOAT_BOUND * max|golden|, element-wise;
# - activations quantized to integers (one element on a rounding boundary moves by a whole
#   step on another CPU, and the step propagates): ||got - golden||_2 <= QUANT_BOUND *
#   ||golden||_2.
FLOAT_BOUND = 1e-5
QUANT_BOUND = 5e-2
# the precision modes (host.verify.ort_mode) whose activations are integers
QUANT_MODES = ("qdq", "qdq-int4", "dynamic", "qoperator")
# the bundle and the trace are opt-in since a run writes < 50 MB by default (docs/errors.md);
# the golden cases ask for them so the same files are hashed as before
KEEP = ["--keep-bundle", "--trace"]
# on `base` the tiny golden models would run on a few PEs of cube 0 (compiler.pe_choice):
# --all-pes keeps these cases exercising the whole 64-PE, four-cube fabric
SPREAD = {"small": [], "base": ["--all-pes"]}
# keys that record wall time or the tool version, dropped before hashing
VOLATILE = {"wall_s", "wall_time_s", "elapsed_s", "kernbench_version", "created_at"}


def cases() -> list[tuple[str, list[str]]]:
    """(case id, CLI argv) for every golden case."""
    out: list[tuple[str, list[str]]] = []
    for topo in TOPOLOGIES:
        for m in MODELS:
            out.append((f"{m}@{topo}", ["run", str(ROOT / "tests/models" / f"{m}.onnx"),
                                         "--topology", topo, *SPREAD[topo], "--verify",
                                         *KEEP]))
        for name, extra in BUILTINS:
            out.append((f"{name}{''.join(extra)}@{topo}",
                        ["run", name, *extra, "--topology", topo, *SPREAD[topo], "--verify",
                         *KEEP]))
    for b in BENCHES:
        out.append((f"kernel:{b}", ["kernel", str(ROOT / "benches" / b), "--topology", "small",
                                    "--trace"]))
    return out


def _strip(obj):  # noqa: ANN001, ANN202
    if isinstance(obj, dict) and obj.get("reference") == "onnxruntime":
        return None  # onnxruntime's own numbers move with its version; ours must not
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def file_hash(path: Path) -> str:
    """sha256 of a written file: JSON without volatile keys; npz by member contents (the
    zip container's own bytes are not what we promise); anything else by its bytes."""
    data = path.read_bytes()
    if path.suffix == ".json":
        data = json.dumps(_strip(json.loads(data)), sort_keys=True).encode()
    elif path.suffix == ".npz":
        h = hashlib.sha256()
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for name in sorted(z.namelist()):
                h.update(name.encode() + b"\0" + z.read(name))
        return h.hexdigest()
    return hashlib.sha256(data).hexdigest()


class CaseResult(NamedTuple):
    """What one golden case wrote: file hashes (and the exit code), the graph outputs, and
    the interpreter checks of verification.json (a list of dicts; empty without one)."""

    hashes: dict[str, str]
    outputs: dict[str, np.ndarray]
    interpreter_checks: list[dict]
    quantized_activations: bool = False


def run_case(argv: list[str]) -> CaseResult:
    """Run one case through the CLI in this process; what it wrote."""
    from kernbench.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        args = [*argv, "--out", str(out)]
        sink = io.StringIO()
        with redirect_stdout(sink), redirect_stderr(sink):
            code = main(args)
        if code not in (0, 1):  # 1 = verification failed: still a deterministic result
            raise RuntimeError(f"{' '.join(args)} exited {code}:\n{sink.getvalue()[-2000:]}")
        found = {"exit_code": str(code)}
        for p in sorted(out.rglob("*")):
            if p.is_file() and p.name in HASHED:
                found[str(p.relative_to(out))] = file_hash(p)
        outputs: dict[str, np.ndarray] = {}
        if (out / OUTPUTS).is_file():
            with np.load(out / OUTPUTS, allow_pickle=False) as z:
                outputs = {k: z[k] for k in sorted(z.files)}
        checks: list[dict] = []
        if (out / "verification.json").is_file():
            v = json.loads((out / "verification.json").read_text(encoding="utf-8"))
            checks = [c for c in v.get("checks", []) if c.get("reference") == "interpreter"]
        ir = out / "bundle" / "ir.json"
        quant = ir.is_file() and quantized_activations(ir.read_text(encoding="utf-8"))
        return CaseResult(found, outputs, checks, quant)


def quantized_activations(ir_json: str) -> bool:
    """Whether the compiled IR computes with integer activations (W8A8, QDQ, ...)."""
    from kernbench.host.verify import ort_mode
    from kernbench.ir.model import Graph

    mode = ort_mode(Graph.from_json(ir_json))
    return mode in QUANT_MODES or "A" in mode


def output_mismatches(got: dict[str, np.ndarray], want: dict[str, np.ndarray],
                      quantized: bool = False) -> list[str]:
    """Why `got` (a case's graph outputs) is not `want` (the recorded ones): names, dtypes
    and shapes must match; integer / bool arrays must be equal; float arrays must have NaN
    where want has and agree within FLOAT_BOUND element-wise, or with `quantized`
    activations within QUANT_BOUND in L2 (see the bounds). Empty when they match."""
    bad = [f"{n}: missing" for n in sorted(set(want) - set(got))]
    bad += [f"{n}: not in the golden outputs" for n in sorted(set(got) - set(want))]
    for n in sorted(set(got) & set(want)):
        g, w = got[n], want[n]
        if g.dtype != w.dtype or g.shape != w.shape:
            bad.append(f"{n}: {g.dtype}{list(g.shape)} != golden {w.dtype}{list(w.shape)}")
        elif g.dtype.kind not in "fc":
            if not np.array_equal(g, w):
                bad.append(f"{n}: {int(np.count_nonzero(g != w))} elements differ (exact)")
        else:
            gf, wf = g.astype(np.float64), w.astype(np.float64)
            if not np.array_equal(np.isnan(gf), np.isnan(wf)):
                bad.append(f"{n}: NaN at other positions than the golden")
                continue
            fin = ~np.isnan(wf)
            if quantized:
                err = float(np.linalg.norm(gf[fin] - wf[fin]))
                scale, bound, what = float(np.linalg.norm(wf[fin])), QUANT_BOUND, "L2"
            else:
                err = float(np.abs(gf[fin] - wf[fin]).max()) if fin.any() else 0.0
                scale = float(np.abs(wf[fin]).max()) if fin.any() else 0.0
                bound, what = FLOAT_BOUND, "max abs"
            if not err <= bound * scale:
                bad.append(f"{n}: {what} err {err:.3g} > {bound:g} x {what} of golden "
                           f"{scale:.3g}")
    return bad


def load_floats(path: Path = FLOATS) -> dict[str, dict[str, np.ndarray]]:
    """The recorded graph outputs: case id → {output name → array}."""
    with np.load(path, allow_pickle=False) as z:
        index = json.loads(str(z["index"]))
        return {cid: {n: z[key] for n, key in names.items()} for cid, names in index.items()}


def save_floats(outputs: dict[str, dict[str, np.ndarray]], path: Path = FLOATS) -> None:
    """Write every case's graph outputs, each distinct array once (compressed npz; the
    `index` member maps case id → output name → member)."""
    arrays: dict[str, np.ndarray] = {}
    index: dict[str, dict[str, str]] = {}
    for cid in sorted(outputs):
        for name, a in sorted(outputs[cid].items()):
            key = "a" + hashlib.sha256(a.dtype.str.encode() + str(a.shape).encode()
                                       + a.tobytes()).hexdigest()[:16]
            arrays[key] = a
            index.setdefault(cid, {})[name] = key
    np.savez_compressed(path, index=np.array(json.dumps(index, sort_keys=True)), **arrays)


def record() -> dict[str, CaseResult]:
    return {cid: run_case(argv) for cid, argv in cases()}


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(
        description="Re-record every golden case: rewrites tests/golden/hashes.json and "
                    "float_outputs.npz (a few minutes). Commit them with the change that "
                    "moved them, saying which hashes changed and why.").parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    result = record()
    hashes = {cid: r.hashes for cid, r in result.items()}
    HASHES.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    save_floats({cid: r.outputs for cid, r in result.items() if r.outputs})
    print(f"{len(result)} cases, {sum(len(v) for v in hashes.values())} hashes → {HASHES}, "
          f"outputs → {FLOATS}")
