"""The golden outputs of kernbench: sha256 of every file a run writes, per case.

`python tests/golden/record.py` (re)writes `tests/golden/hashes.json`; `tests/test_golden.py`
recomputes the hashes and compares. Cases: every committed test model and the tiny built-in
models (prefill and a decode step) compiled, simulated and verified on `small` and `base`,
and the bundled tl benches. Everything goes through the CLI, so the cases survive any
restructuring of the code behind it. Fields that record wall time or the kernbench version
are left out of the hash; everything else is byte-for-byte.
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

ROOT = Path(__file__).resolve().parents[2]
HASHES = Path(__file__).with_name("hashes.json")
MODELS = sorted(p.stem for p in (ROOT / "tests" / "models").glob("*.onnx"))
BUILTINS = [("gpt2", ["--seq-len", "8"]), ("gpt2", ["--kv-len", "16"]),
            ("llama", ["--seq-len", "8"]), ("llama", ["--kv-len", "16"])]
BENCHES = ["vector_add.py::add_kernel", "matmul.py::matmul_kernel",
           "fused_softmax.py::softmax_kernel", "layernorm.py::layernorm_kernel",
           "flash_attention.py::attn_fwd"]
TOPOLOGIES = ["small", "base"]
# written by a run and hashed: the bundle (compile) and the run's results
HASHED = ["ir.json", "cmdq.json", "memory.json", "weights.npz", "roofline.json", "stats.json",
          "outputs.npz", "verification.json", "trace.json"]
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


def run_case(argv: list[str]) -> dict[str, str]:
    """Run one case through the CLI in this process; the hashes of what it wrote."""
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
        return found


def record() -> dict[str, dict[str, str]]:
    return {cid: run_case(argv) for cid, argv in cases()}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    result = record()
    HASHES.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(result)} cases, {sum(len(v) for v in result.values())} files → {HASHES}")
