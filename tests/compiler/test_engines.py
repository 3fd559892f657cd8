"""Several engines per PE (ADR-0701): the compiler assigns te_id / ve_id, a compute-bound
GEMM on two tensor engines per PE takes at most 0.6x the time of one, and the data pass
stays exact."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx

from kernbench.cli import main
from kernbench.topology import load_topology, peaks

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import int8_gemm  # noqa: E402

QCONFIG = 'overrides:\n  - {match: "*", activation: 8}\n'
GPT2 = Path(__file__).parent.parent / "models" / "gpt2.onnx"


def _engines(n: int) -> list[str]:
    return ["--set", f"cube.pe_template.pe_gemm.count={n}",
            "--set", f"cube.pe_template.pe_math.count={n}"]


def _run_gemm(tmp: Path, m: int, n: int, k: int, count: int,
              verify: bool = False) -> tuple[dict, list[dict]]:
    tmp.mkdir(parents=True, exist_ok=True)
    onnx.save(int8_gemm(m, n, k), tmp / "g.onnx")
    (tmp / "q.yaml").write_text(QCONFIG)
    out = tmp / "out"
    assert main(["run", "--keep-bundle", str(tmp / "g.onnx"), "--qconfig", str(tmp / "q.yaml"),
                 "--out", str(out), "--no-trace", *_engines(count),
                 *(["--verify"] if verify else [])]) == 0
    stats = json.loads((out / "stats.json").read_text())
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    return stats, cmdq


def test_two_engines_per_pe_nearly_halve_a_compute_bound_gemm(tmp_path):
    m, n, k = 1536, 1024, 2048
    s1, q1 = _run_gemm(tmp_path / "one", m, n, k, 1)
    s2, q2 = _run_gemm(tmp_path / "two", m, n, k, 2)
    layer = next(v for v in s1["layers"].values() if v["op_type"] == "GEMM")
    assert layer["bound_by"] == "compute"
    assert s2["total_ns"] <= 0.6 * s1["total_ns"], (s1["total_ns"], s2["total_ns"])
    # never faster than both arrays of every PE at their peak (closed form)
    topo = load_topology("small", [])
    assert s2["total_ns"] >= m * n * k / (2 * peaks.macs_per_ns(topo, 8))
    # one engine: no engine field at all (the program of a one-engine PE is unchanged)
    assert not any("te_id" in e or "ve_id" in e for e in q1)
    ops = {k: v.get("ops", 0) for k, v in s2["engines"].items()}
    for pe in range(4):
        for eng in ("pe_gemm", "pe_gemm1", "pe_math", "pe_math1"):
            assert ops[f"sip0.cube0.pe{pe}.{eng}"] > 0, eng


def test_the_k_loop_of_one_accumulator_stays_on_one_tensor_engine(tmp_path):
    # K = 4096: two K steps per tile; the data pass is exact against the interpreter
    _, cmdq = _run_gemm(tmp_path, 256, 256, 4096, 2, verify=True)
    v = json.loads((tmp_path / "out" / "verification.json").read_text())
    assert v["ok"] and v["checks"][0]["max_abs_err"] == 0
    te = [e for e in cmdq if e["opcode"] == "TE_GEMM_TILE"]
    assert {e["te_id"] for e in te} == {0, 1}
    first: dict[tuple, int] = {}
    for e in te:
        key = (e["pe"], e["ofm_bank"], e["ofm_offset"])
        if not e["accumulate"]:
            first[key] = e["te_id"]
        else:
            assert first[key] == e["te_id"]


def test_gpt2_verifies_exactly_with_two_engines_per_pe(tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(GPT2), "--out", str(out), "--verify", "--no-trace",
                 *_engines(2)]) == 0
    v = json.loads((out / "verification.json").read_text())
    assert v["ok"] and all(c["max_abs_err"] == 0 for c in v["checks"]
                           if c["reference"] == "interpreter")
