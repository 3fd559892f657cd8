"""Mutation pass: does the suite catch wrong answers, not only changed ones?

Each mutant below is one small wrong change to a module whose output users read (a timing
component, the Control FSM, validation, a numerics kernel, the roofline, the cost model,
stats and energy, block replay, an importer fusion): a file under src/kernbench/, the exact
text it replaces (found exactly once), the wrong text, and the tests where a behavioural
check of that answer belongs. tests/test_golden.py is never run: a golden hash flags every
change, so a mutant only it catches counts as survived.

The tree (without .venv / .git) is copied once to a temporary directory; every mutant is
applied to that copy, its tests run there (`pytest -x -q -n 0`, PYTHONPATH pointing at the
copy's src), and the file is restored before the next. The working tree is never touched.
A mutant is killed when its tests fail (or time out), survived when they pass.

    .venv/bin/python benchmarks/mutation.py                  # every mutant, score to stdout
    .venv/bin/python benchmarks/mutation.py --only hbm_trim  # some (names or prefixes)
    .venv/bin/python benchmarks/mutation.py --baseline       # the named tests, unmutated
    .venv/bin/python benchmarks/mutation.py --only fsm --tests tests/cmdq/test_simulate_cmdq.py::test_x
    .venv/bin/python benchmarks/mutation.py --list

`make mutation` runs the first. Results go to stdout (one line per mutant, then the
score); progress to stderr. Exit code 0 when the score is at least --target (0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str  # under src/kernbench/
    old: str
    new: str
    tests: tuple[str, ...]
    wrong: str  # the wrong answer a user would read


HW = "tests/hw/test_hbm_channels.py"
DMA = "tests/hw/test_dma_timing.py"
SIMQ = "tests/cmdq/test_simulate_cmdq.py"
FIG = "tests/test_model_figures.py"
ROOF = "tests/compiler/test_roofline_bound.py"
NUM = "tests/numerics"
MATH = "tests/sim_engine/test_math_ops.py"
CONF = "tests/ir/test_conformance.py"
FUSE = "tests/ir/test_fusion_values.py"

MUTANTS: tuple[Mutant, ...] = (
    # --- components: timing of the hardware ---------------------------------------------
    Mutant("hbm_channel_bw_doubled", "components/builtin/hbm_ctrl.py",
           'Server(f"{self.id}.ch{i}", 0.0, s.channel_bw_gbs)',
           'Server(f"{self.id}.ch{i}", 0.0, 2 * s.channel_bw_gbs)', (HW, DMA),
           "four PEs read faster than channels × channel bandwidth"),
    Mutant("hbm_trim_removed", "components/builtin/hbm_ctrl.py",
           "    out[first % nch] -= a - first * il\n    out[last % nch] -= (last + 1) * il - end\n",
           "", (HW,), "an unaligned access charges its channels whole interleave blocks"),
    Mutant("hbm_latency_dropped", "components/builtin/hbm_ctrl.py",
           "self.latency_ns = ctrl.spec.latency_ns", "self.latency_ns = 0.0", (DMA,),
           "HBM reads without the HBM's access latency"),
    Mutant("dma_burst_not_rounded", "components/builtin/pe_dma.py",
           "return rows * (-(-row // burst_bytes) * burst_bytes)", "return rows * row",
           (DMA, SIMQ), "a 65-byte row moves 65 bytes, not two bursts"),
    Mutant("dma_setup_dropped", "components/builtin/pe_dma.py",
           "start = now + self.spec.setup_cycles / self.spec.clock_ghz + mmu_ns",
           "start = now + mmu_ns", (DMA,), "a DMA without its setup cycles"),
    Mutant("gemm_throughput_factor_ignored", "components/builtin/pe_gemm.py",
           "return math.ceil(raw * phases / throughput_factor(spec, bits))",
           "return math.ceil(raw * phases)",
           ("tests/hw/test_gemm_pipeline.py",), "int4 GEMMs as slow as int8"),
    Mutant("systolic_no_preload", "components/builtin/systolic.py",
           'preload = 0 if dataflow == "os" else rows', "preload = 0",
           ("tests/test_systolic_scalesim.py",), "ws / is arrays without the weight load"),
    Mutant("math_no_pipeline_fill", "components/builtin/pe_math.py",
           "return spec.pipeline_latency_cycles + math.ceil(", "return math.ceil(",
           ("tests/hw/test_gemm_pipeline.py",), "vector ops without their pipeline fill"),
    Mutant("gemm_narrowest_operand_speed", "components/builtin/pe_gemm.py",
           'bits = max(p.get("qbits_weight", 8), p.get("qbits_activation", 8))',
           'bits = min(p.get("qbits_weight", 8), p.get("qbits_activation", 8))',
           ("tests/hw/test_gemm_pipeline.py", SIMQ),
           "a W4A8 GEMM timed at the int4 rate"),
    Mutant("math_lane_energy_with_fill", "components/builtin/pe_math.py",
           "(cycles - fill) * self.spec.lanes, now, now + busy)",
           "cycles * self.spec.lanes, now, now + busy)",
           ("tests/hw/test_energy.py", "tests/test_energy_cli.py"),
           "vector energy charged for the pipeline fill"),
    Mutant("shared_compute_slot_ignored", "components/builtin/pe_scheduler.py",
           "        if self.spec.shared_compute_slot:\n",
           "        if False:\n", ("tests/hw/test_gemm_pipeline.py", SIMQ),
           "GEMM and vector ops overlapping on a PE whose config says they share a slot"),
    Mutant("sram_bw_doubled", "components/builtin/sram.py",
           'Server(f"{self.id}.array", 0.0, self.spec.bw_gbs)',
           'Server(f"{self.id}.array", 0.0, 2 * self.spec.bw_gbs)', (HW, DMA),
           "the shared SRAM twice as fast as configured"),
    Mutant("fabric_not_cut_through", "components/fabric.py",
           "        head = start + lat\n", "        head = end + lat\n",
           (DMA, "tests/hw/test_gemm_pipeline.py"),
           "a transfer store-and-forwards at every hop"),
    Mutant("mcpu_window_one_more", "components/builtin/m_cpu.py",
           "run = _Run(entries, self.spec.issue_window)",
           "run = _Run(entries, self.spec.issue_window + 1)",
           (f"{SIMQ}::test_issue_window_bounds_the_entries_in_flight",),
           "one entry more in flight than the issue window allows"),
    Mutant("mcpu_no_issue_latency", "components/builtin/m_cpu.py",
           "issue_ns = self.spec.issue_latency_cycles / self.spec.clock_ghz",
           "issue_ns = 0.0", (SIMQ,), "the M_CPU issues entries in no time"),
    Mutant("mesh_link_bw_doubled", "topology/build.py",
           'cs.router.link_bw_gbs, "mesh")', '2 * cs.router.link_bw_gbs, "mesh")', (DMA, HW),
           "router-to-router links twice as wide as configured"),
    Mutant("ucie_latency_dropped", "topology/build.py",
           'u.latency_ns, u.bw_gbs, "ucie")', '0.0, u.bw_gbs, "ucie")', (DMA, HW),
           "a cube-to-cube transfer without the UCIe latency"),
    # --- cmdq: the Control FSM and validation --------------------------------------------
    Mutant("fsm_ignores_deps_after", "cmdq/hw.py",
           "                self.after.setdefault(later, set()).add(e.id)\n",
           "                pass\n",
           (f"{SIMQ}::test_deps_after_holds_the_later_entry_back_by_the_hand_schedule",
            f"{SIMQ}::test_random_dags_complete_once_in_dependency_order"),
           "an entry issued before the one it must follow ends"),
    Mutant("validate_tcm_end_loose", "cmdq/validate.py",
           "elif r.end > bank_bytes:", "elif r.end > bank_bytes + 64:",
           ("tests/cmdq/test_validate_cmdq.py",), "an operand past its TCM bank accepted"),
    Mutant("validate_any_qbits", "cmdq/validate.py",
           "if value is not None and value not in _QBITS_SET:",
           "if value is not None and value < 0:",
           ("tests/cmdq/test_validate_cmdq.py",), "a 3-bit operand accepted"),
    Mutant("validate_later_dep_accepted", "cmdq/validate.py",
           "elif earlier and j > i:", "elif earlier and j > i + 1:",
           ("tests/cmdq/test_validate_cmdq.py",), "a wait on the next entry (a cycle) accepted"),
    # --- numerics: the math both the interpreter and the data pass use -------------------
    Mutant("requantize_half_up", "numerics/quant.py",
           "y = np.rint(np.asarray(acc).astype(np.float32) * m).astype(np.int64)",
           "y = np.floor(np.asarray(acc).astype(np.float32) * m + 0.5).astype(np.int64)",
           (NUM, MATH), "int8 requantize ties rounded half up, not to even"),
    Mutant("quantize_half_up", "numerics/quant.py",
           "            r = np.rint(x / s)\n",
           "            r = np.floor(x / s + 0.5)\n", (NUM,),
           "quantize ties rounded half up"),
    Mutant("int_matmul_zero_point_ignored", "numerics/quant.py",
           "b = np.asarray(b_q).astype(np.float64) - _zp_cols(b_zp, np.asarray(b_q).shape)",
           "b = np.asarray(b_q).astype(np.float64)", (NUM,),
           "integer GEMMs without the weight zero point"),
    Mutant("softmax_biased", "numerics/softmax.py", "    return e / s\n",
           "    return e / (s + np.float32(1e-3))\n", (NUM, MATH, CONF),
           "softmax rows summing to slightly under 1"),
    Mutant("layernorm_eps_outside_sqrt", "numerics/norms.py",
           "inv = 1.0 / np.sqrt(var + np.float32(eps))",
           "inv = 1.0 / (np.sqrt(var) + np.float32(eps))", (NUM, MATH, CONF),
           "LayerNorm with eps added to the std, not the variance"),
    Mutant("rmsnorm_as_std", "numerics/norms.py",
           "ms = np.mean(xf * xf, axis=axes, keepdims=True)",
           "ms = np.var(xf, axis=axes, keepdims=True)", (NUM, MATH, CONF),
           "RMSNorm that subtracts the mean"),
    Mutant("gelu_tanh_constant", "numerics/activations.py", "np.float32(0.044715)",
           "np.float32(0.04)", (NUM, MATH, CONF), "tanh GELU with a wrong cubic term"),
    Mutant("rope_rotation_sign", "numerics/rope.py",
           "rot = np.concatenate([-xf[..., h:], xf[..., :h]], axis=-1)",
           "rot = np.concatenate([xf[..., h:], -xf[..., :h]], axis=-1)", (NUM, MATH, CONF),
           "RoPE rotating the wrong way"),
    Mutant("attention_gqa_heads_tiled", "numerics/attention.py",
           "        k = np.repeat(k, rep, axis=1)\n        v = np.repeat(v, rep, axis=1)\n",
           "        k = np.tile(k, (1, rep, 1, 1))\n        v = np.tile(v, (1, rep, 1, 1))\n",
           (NUM, "tests/ir/test_models.py"),
           "grouped-query attention pairing query heads with the wrong KV head"),
    Mutant("attention_int_scale_rooted", "numerics/attention.py",
           "(np.float32(sq) * np.float32(sk) * scale)",
           "(np.float32(sq) * np.float32(sk) * np.sqrt(scale))",
           (NUM, "tests/ir/test_models.py"), "integer attention scores scaled by sqrt(scale)"),
    Mutant("flash_rescale_dropped", "numerics/flash.py",
           "    l_new = (state[..., 1] * alpha + np.sum(e, axis=-1, dtype=np.float32))",
           "    l_new = (state[..., 1] + np.sum(e, axis=-1, dtype=np.float32))",
           (NUM, "tests/compiler/test_kv_bits_flash.py"),
           "KV-blocked attention without rescaling the running sum"),
    Mutant("data_pass_transpose_b_ignored", "sim_engine/executor.py",
           '        if p0.get("transpose_b"):\n            b = np.swapaxes(b, -1, -2)\n', "",
           ("tests/sim_engine/test_executor.py",),
           "the data pass multiplying by Bᵀ's storage as if it were B"),
    # --- compiler: roofline and cost model ------------------------------------------------
    Mutant("roofline_int4_as_int8", "compiler/roofline.py",
           'dt = "int4" if n.qbits_weight == 4 else "int8"', 'dt = "int8"', (FIG, ROOF),
           "W4 weights counted at 8 bits in the memory bound"),
    Mutant("roofline_one_cube_hbm", "compiler/roofline.py",
           "hbm_bw = peaks.hbm_gbs(topo)", "hbm_bw = peaks.hbm_gbs(topo, 1)", (FIG, ROOF),
           "a multi-cube memory bound over one cube's HBM"),
    Mutant("roofline_narrowest_operand", "compiler/roofline.py",
           "    return max(b if isinstance(b, int)", "    return min(b if isinstance(b, int)",
           (FIG, ROOF), "the compute bound at the narrowest operand's peak"),
    Mutant("roofline_gather_whole_table", "compiler/roofline.py",
           "        elems = min(elems, _elements(g, n))\n", "        elems = elems\n", (ROOF,),
           "an embedding bound by its whole table"),
    Mutant("cost_dma_no_hbm_latency", "compiler/cost.py",
           "            lat += self.hbm.latency_ns\n", "            lat += 0.0\n",
           ("tests/compiler/test_cost.py",), "estimates without the HBM latency"),
    Mutant("cost_gemm_half", "compiler/cost.py",
           "v = self._gemm[key] = gemm_cycles(g, m, n, k, bits) / g.clock_ghz",
           "v = self._gemm[key] = gemm_cycles(g, m, n, k, bits) / g.clock_ghz / 2",
           ("tests/compiler/test_cost.py",), "estimated GEMM tiles twice as fast"),
    Mutant("model_fraction_of_the_largest_layer", "host/flow.py",
           'total_bound = sum(v["bound_ns"] for v in layers.values())',
           'total_bound = max(v["bound_ns"] for v in layers.values())', (FIG,),
           "the model's roofline fraction from its largest layer only"),
    # --- host: block replay ---------------------------------------------------------------
    Mutant("replay_one_block_short", "host/block_replay.py",
           "    total = sim_total + extra * d\n", "    total = sim_total + (extra - 1) * d\n",
           ("tests/llm/test_block_replay.py",), "a replayed run one block period short"),
    Mutant("replay_bound_without_replayed_blocks", "host/block_replay.py",
           "+ extra * block_bound[k]", "+ 0 * block_bound[k]",
           ("tests/llm/test_block_replay.py", "tests/llm/test_replay_figures.py"),
           "the whole-model bound of a replayed run without the replayed blocks"),
    Mutant("llm_kv_bytes_keys_only", "host/llm.py",
           "for i in n.inputs[1:3])", "for i in n.inputs[1:2])",
           ("tests/llm/test_llm_figures.py",), "the KV cache's bytes without the values"),
    Mutant("verify_ort_cosine_ignored", "host/verify.py",
           'ok, thr = cos >= lim, f"cosine >= {lim:g} ({omode})"',
           'ok, thr = True, f"cosine >= {lim:g} ({omode})"',
           ("tests/compiler/test_corruption.py", "tests/cli/test_verify_modes.py"),
           "--verify passes whatever onnxruntime says"),
    Mutant("verify_any_check_passes", "host/verify.py",
           "return self.error is None and all(c.ok for c in self.checks)",
           "return self.error is None and any(c.ok for c in self.checks)",
           ("tests/compiler/test_corruption.py", "tests/cli/test_verify_modes.py"),
           "a verdict of ok when one output of several matches"),
    # --- report: stats and energy ---------------------------------------------------------
    Mutant("static_split_evenly", "report/energy.py",
           "share = static * spans_ns.get(g, 0.0) / span_sum if span_sum > 0 else 0.0",
           "share = static / len(groups) if span_sum > 0 else 0.0", (FIG,),
           "per-layer static energy split evenly, not by span"),
    Mutant("dynamic_energy_per_action_once", "report/energy.py",
           "out[kind] = out.get(kind, 0.0) + n * price", "out[kind] = out.get(kind, 0.0) + price",
           ("tests/test_energy_cli.py", "tests/hw/test_energy.py"),
           "dynamic energy of one action per kind"),
    Mutant("utilization_of_twice_the_time", "report/stats.py",
           "return round(busy / total, 6) if total > 0 else 0.0",
           "return round(busy / (2 * total), 6) if total > 0 else 0.0",
           (f"{SIMQ}::test_utilization_is_busy_time_over_the_run",),
           "utilizations half of busy / total"),
    Mutant("bottleneck_least_utilized", "report/stats.py",
           "u, name, kind = max(cands, key=lambda c: (c[0], c[1]))",
           "u, name, kind = min(cands, key=lambda c: (c[0], c[1]))",
           (f"{SIMQ}::test_utilization_is_busy_time_over_the_run",),
           "the bottleneck named is the least used resource"),
    Mutant("verify_tolerance_tenfold", "numerics/compare.py",
           "ok = bool(np.allclose(af, ef, rtol=t, atol=t, equal_nan=True))",
           "ok = bool(np.allclose(af, ef, rtol=10 * t, atol=10 * t, equal_nan=True))",
           ("tests/numerics/test_compare.py",), "--verify passes outputs 10x off tolerance"),
    Mutant("ucie_static_power_dropped", "report/energy.py",
           'out["ucie"] = out.get("ucie", 0.0) + n_ucie * topology.config.sip.ucie.static_power_mw',
           'out["ucie"] = out.get("ucie", 0.0)', ("tests/hw/test_energy.py", FIG),
           "multi-cube static energy without the UCIe links"),
    # --- the importer's fusions -----------------------------------------------------------
    Mutant("rms_norm_any_exponent", "ir/onnx_import/fuse/rms_norm.py",
           "scalar(g, sq.inputs[1]) == 2.0", "scalar(g, sq.inputs[1]) is not None", (FUSE,),
           "mean(x³) fused as an RMSNorm"),
    Mutant("rms_norm_any_axis", "ir/onnx_import/fuse/rms_norm.py",
           "    if a.get(\"axes\") != [rank - 1]:\n        return None\n", "", (FUSE,),
           "a mean over the first axis fused as a last-axis RMSNorm"),
    Mutant("gelu_loose_match", "ir/onnx_import/fuse/activation.py",
           'MATCH_TOL = {"fp32": 1e-5,', 'MATCH_TOL = {"fp32": 1e-1,', (FUSE,),
           "a tanh curve near GELU fused as GELU"),
)


def _copy_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns(".venv", ".git", "out", "build", "*.egg-info",
                                    ".pytest_cache", ".ruff_cache", "__pycache__")
    shutil.copytree(ROOT, dst, ignore=ignore, symlinks=True)


def _groups(tests: tuple[str, ...]) -> list[list[str]]:
    """The test paths by folder, in order: folders with their own conftest.py each import
    it as the top-level module `conftest`, so they cannot share one pytest process."""
    out: dict[str, list[str]] = {}
    for t in tests:
        p = Path(t.split("::")[0])
        folder = str(p if p.suffix != ".py" else p.parent)
        out.setdefault(folder, []).append(t)
    return list(out.values())


def _pytest(tree: Path, tests: tuple[str, ...]) -> tuple[int, float]:
    """Run `tests` in `tree` against its src, one pytest per folder, stopping at the first
    failure; (exit code, seconds). A timeout is exit 124."""
    assert not any("test_golden" in t for t in tests), "golden hashes are not a test here"
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), PYTHONHASHSEED="0")
    t0 = time.monotonic()
    rc = 0
    for group in _groups(tests):
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
               *group]
        left = TIMEOUT_S - (time.monotonic() - t0)
        try:
            rc = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=max(left, 1)).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            break
    return rc, time.monotonic() - t0


def _verdict(rc: int) -> str:
    if rc == 0:
        return "survived"
    if rc in (4, 5):  # pytest usage error / no tests collected: the list is wrong
        return "error"
    return "killed"


def run(mutants: list[Mutant], tree: Path) -> list[dict]:
    rows = []
    for i, m in enumerate(mutants, 1):
        path = tree / "src" / "kernbench" / m.file
        text = path.read_text()
        if text.count(m.old) != 1:
            rows.append({"name": m.name, "verdict": "stale", "rc": None, "seconds": 0.0,
                         "file": m.file, "wrong": m.wrong, "tests": list(m.tests)})
            print(f"[{i}/{len(mutants)}] {m.name}: stale (text found "
                  f"{text.count(m.old)} times)", file=sys.stderr)
            continue
        try:
            path.write_text(text.replace(m.old, m.new))
            rc, secs = _pytest(tree, m.tests)
        finally:
            path.write_text(text)
        v = _verdict(rc)
        rows.append({"name": m.name, "verdict": v, "rc": rc, "seconds": round(secs, 1),
                     "file": m.file, "wrong": m.wrong, "tests": list(m.tests)})
        print(f"[{i}/{len(mutants)}] {m.name}: {v} ({secs:.0f} s)", file=sys.stderr)
    return rows


def _select(names: list[str] | None) -> list[Mutant]:
    if not names:
        return list(MUTANTS)
    out = [m for m in MUTANTS if any(m.name.startswith(n) for n in names)]
    if not out:
        sys.exit(f"mutation.py: --only {' '.join(names)}: no such mutant (see --list)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="mutants by name or prefix")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--baseline", action="store_true",
                    help="run the selected mutants' tests on the unmutated copy")
    ap.add_argument("--tests", nargs="+", metavar="PATH",
                    help="run these tests instead of each mutant's own (to check that one "
                         "test alone kills a mutant)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--target", type=float, default=0.9, help="score to exit 0 (default 0.9)")
    args = ap.parse_args(argv)
    mutants = _select(args.only)
    if args.tests:
        mutants = [replace(m, tests=tuple(args.tests)) for m in mutants]
    if args.list:
        for m in mutants:
            print(f"{m.name:34} {m.file:36} {m.wrong}")
        return 0
    with tempfile.TemporaryDirectory(prefix="kb-mutation-") as tmp:
        tree = Path(tmp) / "tree"
        print(f"copying the tree to {tree}", file=sys.stderr)
        _copy_tree(tree)
        if args.baseline:
            tests = tuple(sorted({t for m in mutants for t in m.tests}))
            rc, secs = _pytest(tree, tests)
            print(f"baseline: {len(tests)} test paths, exit {rc} ({secs:.0f} s)")
            return 0 if rc == 0 else 1
        rows = run(mutants, tree)
    for r in rows:
        print(f"{r['verdict']:9} {r['name']:34} {r['file']:36} {r['wrong']}")
    scored = [r for r in rows if r["verdict"] in ("killed", "survived")]
    killed = sum(r["verdict"] == "killed" for r in scored)
    score = killed / len(scored) if scored else 0.0
    print(f"score: {killed}/{len(scored)} killed ({100 * score:.0f} %) without "
          f"tests/test_golden.py; {len(rows) - len(scored)} stale or in error")
    if args.json:
        args.json.write_text(json.dumps({"score": score, "mutants": rows}, indent=1) + "\n")
    return 0 if score >= args.target and len(scored) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
