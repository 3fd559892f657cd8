"""`kernbench run` simulates the compiled program from memory (ADR-0708): cmdq.json is
written only when the bundle is kept, never read back, and the results do not depend on
it; a written file over the CMDQ size limit is announced."""

from __future__ import annotations

import json
from pathlib import Path

import kernbench.host.flow as flow
from kernbench.cmdq.io import load_program
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology

CFG = Path(__file__).parent.parent / "hf_configs" / "tiny-llama.json"


def _run(tmp: Path, write_cmdq: bool):  # noqa: ANN202
    res = resolve_model(CFG, ShapeOptions(1, 16, None), tmp)
    return run_model(res.path, load_topology("small"), tmp / "out",
                     RunOptions(trace=False, report=False, write_cmdq=write_cmdq,
                                bundle=tmp / "bundle"),
                     RunHooks(note=lambda _m: None))


def test_cmdq_json_only_when_kept_and_results_identical(tmp_path):
    lean = _run(tmp_path / "a", write_cmdq=False)
    kept = _run(tmp_path / "b", write_cmdq=True)
    assert not (tmp_path / "a" / "bundle" / "cmdq.json").exists()
    assert (tmp_path / "a" / "bundle" / "roofline.json").exists()  # the rest is written
    written = load_program(tmp_path / "b" / "bundle" / "cmdq.json")
    assert len(written.cmdq) == lean.stats["entry_count"] == kept.stats["entry_count"]
    for name in ("stats.json", "summary.txt"):
        assert (tmp_path / "a" / "out" / name).read_bytes() == \
            (tmp_path / "b" / "out" / name).read_bytes()
    assert json.loads((tmp_path / "a" / "out" / "stats.json").read_text())["total_ns"] > 0


def test_a_cmdq_json_over_the_limit_is_announced(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(flow, "MAX_CMDQ_BYTES", 1000)
    _run(tmp_path, write_cmdq=True)
    err = capsys.readouterr().err
    assert "over the 1000-byte limit of CMDQ files" in err
    assert "kernbench simulate` will refuse" in err


def test_a_run_keeping_nothing_per_entry_is_compiled_layer_by_layer(tmp_path, monkeypatch):
    """ADR-0713: without trace, report, verify and cmdq.json, `run` compiles the program
    while it runs (compiler.stream); the results are byte-identical to the program
    compiled whole. Here a 4-layer batched decode, every layer simulated, on all 64 PEs."""
    import kernbench.host.run as run_mod
    from kernbench.cmdq.stream import EntryStream

    streamed = []
    real = run_mod.compile_for_run

    def spy(*a, **k):  # noqa: ANN002, ANN003, ANN202
        got = real(*a, **k)
        streamed.append(isinstance(got[0].cmdq, EntryStream))
        return got

    monkeypatch.setattr(run_mod, "compile_for_run", spy)
    cfg = CFG.parent / "tiny-llama-4l.json"
    outs = []
    for name, keep in (("lean", False), ("kept", True)):
        tmp = tmp_path / name
        res = resolve_model(cfg, ShapeOptions(2, 1, 64), tmp)
        run_model(res.path, load_topology("base"), tmp / "out",
                  RunOptions(trace=False, report=False, write_cmdq=keep, exact=True,
                             all_pes=True, bundle=tmp / "bundle"),
                  RunHooks(note=lambda _m: None))
        outs.append(tmp / "out")
    assert streamed == [True]  # only the lean run asked, and it streamed
    for name in ("stats.json", "summary.txt"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
    info = json.loads((tmp_path / "lean" / "bundle" / "compile.json").read_text())
    assert info["entries"] == json.loads((outs[0] / "stats.json").read_text())["entry_count"]
