"""A small model on a big NPU runs on the PEs the cost model picks (compiler.pe_choice,
ADR-0711): part of cube 0, its PEs nearest the M_CPU (ADR-0732), whose PEs and addresses
are the topology's own, chosen by the estimated end-to-end time, with the roofline still
that of the whole NPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.compiler import pe_choice
from kernbench.topology import load_topology

ZOO = Path(__file__).resolve().parents[1] / "zoo"


def test_subsets_are_the_pes_nearest_the_command_processor():
    """Cube 0 whole, then the PEs nearest its M_CPU (ADR-0732): on `base`'s 4 x 4 mesh
    with the M_CPU at r0c0, the 2 x 2 block for 4; for 8 the six within 2 hops and the
    two 3-hop routers of the smaller row / column distance (r1c2, r2c1), in layout
    order; every candidate PE sits at a router of the topology's cube 0."""
    base = load_topology("base")
    subs = pe_choice.subsets(base)
    assert [len(s.pes) for s in subs] == [16, 8, 4]
    routers = [[pe.router.rsplit(".", 1)[1] for pe in s.pes] for s in subs]
    assert routers[0] == list(base.config.cube.pe_layout)
    assert routers[2] == ["r0c0", "r0c1", "r1c0", "r1c1"]
    assert routers[1] == ["r0c0", "r0c1", "r0c2", "r1c0", "r1c1", "r1c2", "r2c0", "r2c1"]
    for s in subs:
        assert len(s.cubes) == 1 and s.cubes[0].hbm_base == base.cubes[0].hbm_base == 0
        assert s.cubes[0].sram_base == base.cubes[0].sram_base
        assert {pe.router for pe in s.pes} <= {pe.router for pe in base.pes[:16]}
    small = load_topology("small")  # one cube of 4 PEs: nothing smaller is tried
    assert pe_choice.subsets(small) == []


def _run(tmp_path: Path, name: str, *extra: str) -> tuple[dict, list[dict], dict]:
    out = tmp_path / name
    code = main(["run", str(ZOO / "llama.onnx"), "-t", "base", "--out", str(out), "--quiet",
                 "--verify", "--inputs", str(ZOO / "llama.inputs.npz"), "--keep-bundle",
                 "--no-report", *extra])
    assert code == 0
    stats = json.loads((out / "stats.json").read_text())
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    roof = json.loads((out / "bundle" / "roofline.json").read_text())
    assert json.loads((out / "verification.json").read_text())["ok"]
    return stats, cmdq, roof


def test_a_tiny_model_on_base_runs_on_the_pes_the_estimate_picks(tmp_path):
    stats, cmdq, roof = _run(tmp_path, "auto")
    choice = stats["pe_choice"]
    ests = {int(k): v for k, v in choice["estimates_ns"].items()}
    assert choice["of"] == 64 and set(ests) == {64, 16, 8, 4}
    assert choice["pes"] == min(ests, key=lambda k: (ests[k], -k)) < 64
    pes = {e["pe"] for e in cmdq if "pe" in e}
    base = load_topology("base")
    chosen = next(s for s in pe_choice.subsets(base) if len(s.pes) == choice["pes"])
    # only the chosen PEs, named by the topology's own indices (`remap_pes`)
    assert pes and pes <= {i for i, pe in enumerate(base.pes)
                           if pe.router in {p.router for p in chosen.pes}}
    spread, cmdq_all, roof_all = _run(tmp_path, "all", "--all-pes")
    assert "pe_choice" not in spread and cmdq_all != cmdq
    # the chosen program is faster in the simulation too, against the same roofline
    assert stats["total_ns"] < spread["total_ns"]
    assert roof == roof_all
    assert stats["roofline_fraction"] > spread["roofline_fraction"]


def test_programs_over_the_limit_are_compiled_for_the_whole_topology(tmp_path, monkeypatch,
                                                                     capsys):
    def program(name: str, *extra: str) -> list[dict]:
        out = tmp_path / name
        assert main(["run", str(ZOO / "llama.onnx"), "-t", "base", "--out", str(out),
                     "--no-report", "--keep-bundle", *extra]) == 0
        assert "pe_choice" not in json.loads((out / "stats.json").read_text())
        return json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]

    monkeypatch.setattr(pe_choice, "MAX_ENTRIES", 10)
    limited = program("limited")
    assert "PEs: the program uses" not in capsys.readouterr().err
    assert limited == program("all", "--all-pes")


@pytest.mark.parametrize("model", ["llama", "bert_qdq_static", "whisper_encoder"])
def test_base_is_not_slower_than_small(tmp_path, model):
    """Issue 14's target on zoo models that were slower on `base` with every PE
    used (simulated time: deterministic)."""
    t = {}
    for topo in ("small", "base"):
        out = tmp_path / topo
        assert main(["run", str(ZOO / f"{model}.onnx"), "-t", topo, "--out", str(out),
                     "--quiet", "--no-report", "--no-trace"]) == 0
        t[topo] = json.loads((out / "stats.json").read_text())["total_ns"]
    assert t["base"] <= t["small"], t


def test_candidates_share_the_weight_arrays():
    """The graph is copied for each candidate, but not its weights: a shape-only model's
    are broadcast views that a deep copy would materialize (Llama-3-8B: 32 GB)."""
    from kernbench.compiler.pipeline import load_model

    g, _ = load_model(ZOO / "llama.onnx")
    c = pe_choice.structure_copy(g)
    assert c.weights is not g.weights and c.nodes is not g.nodes
    assert c.weights.keys() == g.weights.keys()
    assert all(c.weights[k] is g.weights[k] for k in g.weights)


def test_the_candidates_share_one_calibration_run_and_compile_as_before(tmp_path,
                                                                         monkeypatch):
    """The quantize pass's interpreter run is memoized by graph content (ADR-0850): the
    whole compile and every PE subset's compile of one graph run it once, and each subset
    compiles to the program a fresh compile for that subset gives."""
    from kernbench.compiler.pipeline import compile_graph, load_model
    from kernbench.compiler.state import CompileOptions
    from kernbench.ir.interpreter import Interpreter

    runs = []
    real = Interpreter.run

    def counted(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        runs.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(Interpreter, "run", counted)
    model = Path(__file__).resolve().parents[1] / "models" / "gpt2.onnx"
    base = load_topology("base")
    opts = CompileOptions(calibration={})
    seen = {}

    def compile_fn(g, t):  # noqa: ANN001, ANN202
        st, _ = compile_graph(g, t, opts)
        seen[len(t.pes)] = st.cmdq.to_json()["cmdq"]
        return st

    graph, _ = load_model(model)
    pe_choice.compile_on_best_pes(graph, base, compile_fn)
    assert len(seen) > 1 and len(runs) == 1
    for n, entries in seen.items():
        sub = next(s for s in [base, *pe_choice.subsets(base)] if len(s.pes) == n)
        fresh, _ = compile_graph(load_model(model)[0], sub, CompileOptions())
        if n < len(base.pes):
            pe_choice.remap_pes(fresh, sub, base)
        assert fresh.cmdq.to_json()["cmdq"] == entries, n
    assert len(runs) == 1 + len(seen)
