"""The benchmark scripts' own arithmetic: what they charge, count and write.

docs/performance.md is built from `benchmarks/model_roofline.py` (table, loss ranking,
estimate shares), `benchmarks/critical_path.py` (time on the critical path) and
`benchmarks/doc_section.py` (the generated section in place). These tests pin that
arithmetic on small hand-made inputs whose answers are worked out below, and run one
case end to end against the stats.json it reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import critical_path  # noqa: E402
import model_roofline  # noqa: E402
from doc_section import replace_section  # noqa: E402

ZOO = Path(__file__).resolve().parent / "zoo"


def _stats() -> dict:
    """A path of three entries: a load (0–100 ns), a GEMM tile that waits 20 ns after it
    (120–400) and a store on another PE that starts before the tile ends (380–450)."""
    e = {
        "1": {"layer_id": "g", "opcode": "DMA_LOAD_TILE", "pe": "p0",
              "start_ns": 0.0, "end_ns": 100.0},
        "2": {"layer_id": "g", "opcode": "TE_GEMM_TILE", "pe": "p0",
              "start_ns": 120.0, "end_ns": 400.0},
        "3": {"layer_id": "a", "opcode": "DMA_STORE_TILE", "pe": "p1",
              "start_ns": 380.0, "end_ns": 450.0},
    }
    return {"entries": e, "critical_path": [1, 2, 3],
            "layers": {"g": {"op_type": "GEMM"}, "a": {"op_type": "ADD"}}}


def test_critical_path_charges_each_entry_from_the_previous_end():
    end, by_op, by_opcode = critical_path.breakdown(_stats())
    assert end == 450.0
    # the GEMM layer: the load's 100 ns, then 20 ns of wait and 280 of its tile
    assert by_op == {"GEMM": 400.0, "ADD": 50.0}
    assert by_opcode[("GEMM", "DMA_LOAD_TILE")] == [100.0, 0.0]
    assert by_opcode[("GEMM", "TE_GEMM_TILE")] == [280.0, 20.0]
    # the store started before the tile ended: only the 50 ns after it count, all busy
    assert by_opcode[("ADD", "DMA_STORE_TILE")] == [50.0, 0.0]
    assert sum(by_op.values()) == end


def test_critical_path_window_lists_entries_ending_inside():
    rows = critical_path.window(_stats(), 100.0, 400.0)
    assert [(r[0], r[2], r[6], r[7]) for r in rows] == [
        ("g", "DMA_LOAD_TILE", 0.0, 100.0), ("g", "TE_GEMM_TILE", 20.0, 280.0)]


def test_critical_path_cli_refuses_stats_without_a_path(tmp_path, capsys):
    p = tmp_path / "stats.json"
    p.write_text(json.dumps({"entries": {}, "critical_path": []}))
    assert critical_path.main([str(p)]) == 2
    assert "no critical_path" in capsys.readouterr().err


def test_within_counts_and_weights_by_the_simulated_figure():
    # (simulated, estimated): 100 → 110 is within 15 %, 1000 → 1200 is not, 0 → 0 is
    pairs = [(100.0, 110.0), (1000.0, 1200.0), (0.0, 0.0)]
    n, w = model_roofline.within(pairs)
    assert n == pytest.approx(2 / 3)
    assert w == pytest.approx(100 / 1100)
    assert model_roofline.within([]) == (0.0, 0.0)
    assert model_roofline.within([(100.0, 120.0)], tol=0.2) == (1.0, 1.0)


def test_render_rows_losses_ratio_and_failures():
    case = model_roofline.Case("m", "m.onnx")
    ok = model_roofline.Row(True, total_ns=2000.0, roofline=0.25, bound_by="memory",
                            losses=[("l1", "memory", 1500.0), ("l2", "compute", 100.0)],
                            estimate_ns=2200.0, busy=[(10.0, 11.0)], span=[(10.0, 20.0)],
                            wall_s=1.25)
    bad = model_roofline.Row(False, error="exit 2: ['x.onnx: bad']", wall_s=0.5)
    table = model_roofline.render([(case, "base", ok), (case, "small", bad)]).splitlines()
    assert table[2] == ("| m | base | 2.0 | 0.250 | memory | l1 (memory) 1.5; l2 (compute) "
                        "0.1 | 2.2 (1.10) | 100 % / 100 % | 0 % / 0 % | 1.2 |")
    assert table[3].startswith("| m | small | – | – | – | failed: exit 2")


def test_replace_section_in_place_and_appended(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("# Doc\n\n## T\n\n<!-- b -->\nold\n<!-- e -->\n\n## After\nkept\n")
    replace_section(doc, "## T", "<!-- b -->", "<!-- e -->", "## T\n\n<!-- b -->\nnew\n<!-- e -->")
    assert doc.read_text() == "# Doc\n\n## T\n\n<!-- b -->\nnew\n<!-- e -->\n\n## After\nkept\n"
    other = tmp_path / "o.md"
    other.write_text("# Other\n")
    replace_section(other, "## T", "<!-- b -->", "<!-- e -->", "## T\n<!-- b -->x<!-- e -->")
    assert other.read_text() == "# Other\n\n## T\n<!-- b -->x<!-- e -->\n"


def test_run_case_reads_what_the_run_wrote(tmp_path):
    case = model_roofline.Case("mobilenet q", str(ZOO / "mobilenet_qoperator.onnx"))
    row = model_roofline.run_case(case, "small", tmp_path)
    assert row.ok, row.error
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert row.total_ns == stats["total_ns"]
    assert row.roofline == stats["roofline_fraction"]
    layers = stats["layers"]
    lost = sorted((v["ns"] - v["bound_ns"] for v in layers.values()), reverse=True)[:3]
    assert [ns for _, _, ns in row.losses] == lost
    assert all(layers[lid]["bound_by"] == by for lid, by, _ in row.losses)
    assert len(row.busy) == sum("estimate_busy_ns" in v for v in layers.values()) > 0


def test_run_case_reports_a_failed_run(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    row = model_roofline.run_case(model_roofline.Case("bad", str(bad)), "small", tmp_path / "o")
    assert not row.ok
    assert row.error.startswith("exit 2")


def test_multichip_llm_table_rows() -> None:
    """benchmarks/multichip.py --llm: a kept result gives its figure against the published
    one (1e3 / ms a token; sim / published − 1), an unfinished run what was measured up to
    its end, a case without a result 'not run'."""
    import multichip

    name = "llama-3.1-70b t3k tp8 decode"
    done = {"reference": {"tokens_per_s_user": 16.6}, "total_ns": 40e6, "wall_s": 1.0,
            "cpu_s": 2.0, "rss_mb": 3, "entries": 10, "collective_entries": 4}
    rows = multichip.llm_section({name: done})
    # 40 ms a token: 25.0 tokens/s/user, 25 / 16.6 − 1 = +50.6 %
    assert f"| {name} | 25.0 tokens/s/user (40.00 ms a token) | 16.6 published: +50.6% " \
           "(OUTSIDE 25 %) | 1.0 | 2.0 | 3 | 10 (4) |" in rows
    part = {"unfinished": "stopped", "cpu_s": 5.0, "rss_mb": 6, "entries": 7,
            "collective_entries": 1}
    rows = multichip.llm_section({name: part})
    assert f"| {name} | not finished: stopped | – | – | 5.0 so far | 6 so far | 7 (1) |" \
        in rows
    assert "| llama-3.1-8b t3k tp8 decode | not run | – | – | – | – | – |" in rows


def test_a_case_recorded_keeps_rows_another_run_wrote_meanwhile(tmp_path, monkeypatch) -> None:
    """benchmarks/multichip.py --llm: two runs of different cases that overlap both keep
    their rows (the results file is re-read when a case ends, not only at the start)."""
    import multichip
    import results_file

    row = {"reference": {"tokens_per_s_user": 16.6}, "total_ns": 40e6, "wall_s": 1.0,
           "cpu_s": 2.0, "rss_mb": 3, "entries": 10, "collective_entries": 4}
    other = {"unfinished": "stopped", "cpu_s": 5.0, "rss_mb": 6, "entries": 7,
             "collective_entries": 1}
    path = tmp_path / "multichip_llm.json"
    earlier, ours = "llama-3.1-8b t3k tp8 decode", "llama-3.1-70b t3k tp8 decode"
    theirs = "llama-3-70b large-x8 tp8 decode b32 kv4096"
    results_file.record(path, earlier, row)

    def run_case(name: str) -> dict:  # another run ends while this one simulates
        results_file.record(path, theirs, other)
        return {**row, "total_ns": 50e6}

    monkeypatch.setattr(multichip, "LLM_RESULTS", path)
    monkeypatch.setattr(multichip, "run_llm_case", run_case)
    assert multichip.main_llm([ours], doc=False) == 0
    assert json.loads(path.read_text()) == {earlier: row, theirs: other,
                                            ours: {**row, "total_ns": 50e6}}
    assert [p.name for p in tmp_path.iterdir()] == ["multichip_llm.json"]
