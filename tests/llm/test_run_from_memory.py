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
