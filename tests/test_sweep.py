"""`kernbench sweep`: spec validation, expansion and IDs, pool / Ray execution, resume,
results.csv and report.html (docs/sweep.md)."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

import kernbench.host.sweep.runner as runner_mod
from kernbench.cli import main
from kernbench.host.flow import TIMING_ONLY, compile_model, simulate_bundle
from kernbench.host.sweep import finish_sweep, plan_sweep
from kernbench.host.sweep.report import pareto_front
from kernbench.host.sweep.spec import schema_text
from kernbench.models.builders import model_for
from kernbench.topology import load_topology

REPO = Path(__file__).resolve().parents[1]
ROWS = "cube.pe_template.pe_gemm.rows"
BW = "cube.hbm_ctrl.channel_bw_gbs"
TCM = "cube.pe_template.pe_tcm"
TINY_TCM = '{"banks":1,"capacity_kib":2,"reserved_kib":0}'
# A TCM of 2 KiB in one bank fits no GEMM tile of the tiny GPT-2: those points fail.
# (A grid value that is a mapping sets several linked keys at once.)
FOUR_OK_FOUR_FAIL = f"""
model: gpt2
seq_len: 4
grid:
  {TCM}: [{{capacity_kib: 2048}}, {TINY_TCM}]
  {ROWS}: [16, 32]
  {BW}: [16.0, 32.0]
"""


def _spec(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))


def _sweep(spec: Path, out: Path, *extra: str) -> int:
    return main(["sweep", str(spec), "--out", str(out), "--quiet", *extra])


def test_grid_runs_on_two_workers_and_records_failures(tmp_path):
    spec = _spec(tmp_path, FOUR_OK_FOUR_FAIL)
    out = tmp_path / "out"
    assert _sweep(spec, out, "--workers", "2") == 0
    rows = _rows(out)
    assert len(rows) == 8
    # rows in spec order: the last grid key varies fastest
    combos = [(r[TCM], r[ROWS], r[BW]) for r in rows]
    assert combos == [(t, r, b) for t in ('{"capacity_kib":2048}', TINY_TCM) for r in ("16", "32")
                      for b in ("16.0", "32.0")]
    assert [r["point"] for r in rows] == [str(i) for i in range(8)]
    for r in rows:
        pdir = out / "points" / r["id"]
        if r[TCM] == TINY_TCM:  # the failed points are recorded, the sweep went on
            assert r["status"] == "error" and "no GEMM tiling" in r["error"]
            assert (pdir / "error.json").is_file() and not (pdir / "stats.json").exists()
            continue
        assert r["status"] == "ok" and r["error"] == ""
        stats = json.loads((pdir / "stats.json").read_text())
        total = float(r["total_ns"])
        assert total == stats["total_ns"] > 0
        assert float(r["tokens_per_s"]) == pytest.approx(4 * 1e9 / total, rel=1e-6)
        assert r["bound_by"] == stats["model_bound"]["bound_by"]
        assert int(r["macs"]) == 4 * int(r[ROWS]) * 32  # small: 4 PEs, 32 columns
        assert float(r["hbm_gbs"]) == 8 * float(r[BW])  # 8 channels
        assert float(r["energy_pj"]) == pytest.approx(stats["energy"]["total_pj"])
        assert float(r["area_mm2"]) == stats["area_mm2"]["total"] > 0
        assert float(r["average_power_mw"]) == stats["energy"]["average_power_mw"]
        assert float(r["energy_per_token_pj"]) == stats["energy"]["per_token_pj"]
    # one point against the same configuration run through the plain flow
    ref = load_topology("small", [f"{ROWS}=16", f"{BW}=16.0"])
    onnx.save(model_for("gpt2", seq_len=4), str(tmp_path / "gpt2.onnx"))
    compile_model(tmp_path / "gpt2.onnx", ref, tmp_path / "bundle")
    res = simulate_bundle(tmp_path / "bundle", ref, tmp_path / "sim", TIMING_ONLY)
    assert json.loads((out / "points" / rows[0]["id"] / "stats.json").read_text()) == res.stats
    html = (out / "report.html").read_text()
    assert html.count("<img") == 1 + 3  # Pareto + one sensitivity plot per grid key
    assert "class=\"sortable\"" in html and "<script>" in html and "src=\"http" not in html


def test_resume_after_kill_recomputes_nothing_finished(tmp_path, monkeypatch):
    spec = _spec(tmp_path, f"model: gpt2\nseq_len: 4\ngrid:\n  {ROWS}: [8, 16, 32]\n"
                           f"  {BW}: [16.0, 32.0]\n")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen([sys.executable, "-c", "from kernbench.cli import run; run()", "sweep", str(spec), "--out",
                             str(out), "--workers", "1", "--quiet"], env=env,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("points/*/stats.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-sweep, no chance to clean up
    proc.wait()
    finished = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.glob("points/*/stats.json")}
    assert 1 <= len(finished) < 6 and not (out / "results.csv").exists()
    calls = []
    real = runner_mod.run_point
    monkeypatch.setattr(runner_mod, "run_point", lambda p: calls.append(p.id) or real(p))
    assert _sweep(spec, out, "--workers", "1") == 0
    assert len(calls) == 6 - len(finished)
    assert not {p.parent.name for p in finished} & set(calls)
    for p, (mtime, data) in finished.items():
        assert p.stat().st_mtime_ns == mtime and p.read_bytes() == data
    rows = _rows(out)
    assert [r["status"] for r in rows] == ["ok"] * 6
    first = (out / "results.csv").read_bytes()
    calls.clear()
    assert _sweep(spec, out, "--workers", "1") == 0  # all finished: nothing runs
    assert calls == [] and (out / "results.csv").read_bytes() == first


def test_ray_local_and_pool_give_identical_results(tmp_path, monkeypatch):
    import ray  # the test extra installs Ray: the --ray path is exercised here

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from a test

    spec = _spec(tmp_path, FOUR_OK_FOUR_FAIL.replace("[16, 32]", "[16]")
                 .replace("[16.0, 32.0]", "[32.0]"))
    pool, on_ray = tmp_path / "pool", tmp_path / "ray"
    assert _sweep(spec, pool, "--workers", "2") == 0
    # a local Ray with 2 CPUs and no dashboard, shut down by the command afterwards
    assert _sweep(spec, on_ray, "--workers", "2", "--ray") == 0
    assert not ray.is_initialized()
    assert (pool / "results.csv").read_bytes() == (on_ray / "results.csv").read_bytes()
    assert [r["status"] for r in _rows(on_ray)] == ["ok", "error"]
    for f in pool.glob("points/*/*.json"):
        assert (on_ray / f.relative_to(pool)).read_bytes() == f.read_bytes()


def test_without_ray_installed_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    spec = _spec(tmp_path, "model: gpt2\nseq_len: 4\n")
    assert _sweep(spec, tmp_path / "out", "--ray") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["error: Ray is not installed; install it with: pip install "
                     "'kernbench[sweep]'"]
    assert not (tmp_path / "out" / "points").exists()


BAD_SPECS = [
    ("model: gpt2\ngird:\n  cube.mesh.rows: [2]\n", "field 'gird': unknown key"),
    ("model: gpt2\nseq_len: [4, 0]\n", "field 'seq_len[1]'"),
    ("model: gpt2\nqconfig: {weight: 3}\n", "field 'qconfig[0].weight'"),
    (f"model: gpt2\ngrid:\n  {ROWS}x: [16]\n", f"field '{ROWS}x': value 16: unknown key"),
    ("model: gpt2\ngrid:\n  cube.pe_templat.pe_gemm.rows: [16]\n",
     "field 'cube.pe_templat.pe_gemm.rows'"),
    (f"model: gpt2\ngrid:\n  {ROWS}: [16, -1]\n", f"field '{ROWS}': value -1"),
    ("model: gpt2\ngrid:\n  cube.pe_template.pe_gemm.dataflow: [os, xs]\n", "value \"xs\""),
    ("model: gpt2\ngrid:\n  name.x: [1]\n", "'name' is not a mapping"),
    ("model: gpt3\n", "field 'model': 'gpt3' is neither a file nor a built-in model"),
    ("model: gpt2\ntopology: nowhere\n", "field 'topology'"),
    ("model: gpt2\nstep_cache: s.json\n", "unknown key (did you mean 'serve.step_cache'?)"),
    ("model: gpt2\nserve:\n  rate: 5\n  trace: t.csv\n",
     "field 'serve.trace': unknown key; a load sweep draws Poisson arrivals"),
]


@pytest.mark.parametrize("text,needle", BAD_SPECS)
def test_invalid_spec_exits_2_before_any_point_runs(tmp_path, monkeypatch, capsys, text,
                                                    needle):
    monkeypatch.setattr(runner_mod, "run_point", lambda p: pytest.fail("a point ran"))
    spec = _spec(tmp_path, text)
    assert _sweep(spec, tmp_path / "out", "--workers", "1") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {spec}: ") and needle in lines[0]
    assert not (tmp_path / "out").exists()


def test_point_ids_hash_content_not_spelling(tmp_path):
    shutil.copy(REPO / "tests" / "models" / "gpt2.onnx", tmp_path / "a.onnx")
    shutil.copy(REPO / "tests" / "models" / "gpt2.onnx", tmp_path / "b.onnx")
    (tmp_path / "q.yaml").write_text("default: {weight: 4, activation: 8, kv: 8}\n")

    def ids(text: str) -> list[str]:
        return [p.id for p in plan_sweep(_spec(tmp_path, text)).points]

    # a file's name does not matter, its bytes do
    assert ids("model: a.onnx\n") == ids("model: b.onnx\n") != ids("model: gpt2\n")
    # an override equal to the preset's value is the same topology, so the same point
    assert ids(f"model: gpt2\ngrid: {{{ROWS}: [32]}}\n") == ids("model: gpt2\n")
    assert ids(f"model: gpt2\ngrid: {{{ROWS}: [16]}}\n") != ids("model: gpt2\n")
    # a qconfig file and the same bits written inline are one qconfig
    assert ids("model: gpt2\nqconfig: q.yaml\n") == ids("model: gpt2\nqconfig: {weight: 4}\n")
    assert ids("model: gpt2\nseq_len: 4\n") != ids("model: gpt2\nseq_len: 8\n")
    assert ids("model: gpt2\nkv_len: 0\n") == ids("model: gpt2\nseq_len: 16\n")
    assert len(set(ids(f"model: gpt2\nseq_len: [4, 8]\ngrid: {{{ROWS}: [8, 16]}}\n"))) == 4


def test_random_samples_are_seeded_and_in_spec_order(tmp_path):
    grid = f"model: gpt2\nseq_len: [4, 8]\ngrid:\n  {ROWS}: [8, 16, 32]\n  {BW}: [8.0, 16.0]\n"
    full = [p.id for p in plan_sweep(_spec(tmp_path, grid)).points]
    assert len(full) == 12
    a = [p.id for p in plan_sweep(_spec(tmp_path, grid + "random: 5\nseed: 1\n")).points]
    b = [p.id for p in plan_sweep(_spec(tmp_path, grid + "random: 5\nseed: 1\n")).points]
    c = [p.id for p in plan_sweep(_spec(tmp_path, grid + "random: 5\nseed: 2\n")).points]
    assert a == b and len(set(a)) == 5 and a != c
    assert a == [i for i in full if i in a]  # a subsequence of the full grid, in its order
    big = [p.id for p in plan_sweep(_spec(tmp_path, grid + "random: 50\n")).points]
    assert big == full


def test_pareto_front_matches_brute_force():
    rng = random.Random(7)
    for _ in range(200):
        pts = [(rng.randint(0, 6), rng.randint(0, 6)) for _ in range(rng.randint(1, 12))]
        got = {pts[i] for i in pareto_front(pts)}
        want = {p for p in pts if not any(q[0] <= p[0] and q[1] <= p[1] and q != p
                                          for q in pts)}
        assert got == want


def test_committed_json_schema_matches_the_model():
    committed = (REPO / "schemas" / "sweep.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), ("schemas/sweep.schema.json is stale: run "
                                        ".venv/bin/python scripts/gen_sweep_schema.py")


def test_example_spec_is_valid():
    plan = plan_sweep(REPO / "examples" / "sweep_small.yaml")
    assert len(plan.points) == 16 and plan.swept[0] == "seq_len"


def test_table_reads_energy_when_the_stats_carry_it(tmp_path):
    plan = plan_sweep(_spec(tmp_path, f"model: gpt2\nseq_len: 8\ngrid: {{{ROWS}: [16, 32]}}\n"))
    out = tmp_path / "out"
    for p, (ns, pj) in zip(plan.points, [(2000.0, 7.5), (1000.0, None)], strict=True):
        stats = {"total_ns": ns, "roofline_fraction": 0.5,
                 "model_bound": {"bound_by": "compute"}}
        if pj is not None:
            stats["energy"] = {"total_pj": pj}
        (out / "points" / p.id).mkdir(parents=True)
        (out / "points" / p.id / "stats.json").write_text(json.dumps(stats))
    table, csv_path, html_path = finish_sweep(plan, out)
    rows = _rows(out)
    assert [r["energy_pj"] for r in rows] == ["7.5", ""]
    assert [float(r["tokens_per_s"]) for r in rows] == [8 * 1e9 / 2000.0, 8 * 1e9 / 1000.0]
    assert [r["bound_by"] for r in rows] == ["compute", "compute"]
    assert html_path.read_text().count("<img") == 2  # Pareto + the one swept key


def test_invalid_combination_is_a_failed_point_retried_only_on_request(tmp_path, monkeypatch):
    # 512 KiB alone is a valid capacity, but not above small's 512 KiB reserved region
    spec = _spec(tmp_path, "model: gpt2\ngrid: {cube.pe_template.pe_tcm.capacity_kib: [512]}\n")
    out = tmp_path / "out"
    calls = []
    real = runner_mod.run_point
    monkeypatch.setattr(runner_mod, "run_point", lambda p: calls.append(p.id) or real(p))
    assert _sweep(spec, out, "--workers", "1") == 0
    (row,) = _rows(out)
    assert row["status"] == "error" and "reserved_kib must leave an allocatable region" in \
        row["error"] and row["total_ns"] == "" and row["pes"] == ""
    assert _sweep(spec, out, "--workers", "1") == 0 and len(calls) == 1  # failed = finished
    assert _sweep(spec, out, "--workers", "1", "--retry-failed") == 0 and len(calls) == 2
