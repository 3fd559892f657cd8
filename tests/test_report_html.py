"""The one-page HTML report and its plots (kernbench.report.html / .plots)."""

from __future__ import annotations

import base64
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.report import plots
from kernbench.report.html import write_report
from kernbench.report.units import fmt_time
from kernbench.topology import load_topology

HERE = Path(__file__).parent
GPT2 = HERE / "models" / "gpt2.onnx"
SPEC_EXAMPLE = HERE / "cmdq" / "data" / "spec_example.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMG_RE = re.compile(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


def _load(out: Path) -> tuple[dict, dict]:
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    trace = json.loads((out / "trace.json").read_text(encoding="utf-8"))
    return stats, trace


def _pngs(page: str) -> dict[str, bytes]:
    return {alt: base64.b64decode(b64) for alt, b64 in IMG_RE.findall(page)}


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def gpt2_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    out = tmp_path_factory.mktemp("gpt2_run")
    assert main(["run", "--keep-bundle", "--trace", str(GPT2), "--out", str(out)]) == 0
    stats, trace = _load(out)
    return out, stats, trace


@pytest.fixture(scope="module")
def gpt2_report(gpt2_run: tuple[Path, dict, dict]) -> tuple[Path, str]:
    out, stats, trace = gpt2_run
    topo = load_topology(stats["topology"])
    path = write_report(out, stats, trace, topology=topo, title="gpt2 <test>")
    return path, path.read_text(encoding="utf-8")


def test_report_headline_and_tables(gpt2_run, gpt2_report) -> None:  # noqa: ANN001
    _, stats, _ = gpt2_run
    path, page = gpt2_report
    assert path.name == "report.html"
    assert page.startswith("<!DOCTYPE html>")
    # headline
    assert fmt_time(stats["total_ns"]) in page
    assert f"{stats['total_cycles']:,}" in page
    assert f"@ {stats['clock_ghz']:g} GHz" in page
    assert stats["bottleneck"]["component"] in page
    assert f"{stats['roofline_fraction']:.3f}" in page
    assert f"{stats['model_bound']['bound_by']}-bound" in page
    assert "gpt2 &lt;test&gt;" in page and "gpt2 <test>" not in page  # title escaped
    # the layers table: slowest first, one row per layer (up to the cap)
    order = sorted(stats["layers"], key=lambda lid: (-stats["layers"][lid]["ns"], lid))
    shown = order[:25]
    positions = [page.index(f"<tr><td>{lid}</td><td>{stats['layers'][lid]['op_type']}</td>")
                 for lid in shown]
    assert positions == sorted(positions)
    slowest = stats["layers"][order[0]]
    assert f'<td class="n">{slowest["ns"]:,.1f}</td>' in page
    # engine table
    for cid in stats["engines"]:
        assert f"<tr><td>{cid}</td>" in page
    # self-contained: no scripts, no external references
    assert "<script" not in page.lower()
    assert not re.search(r'(src|href)="(?!data:)', page)


def test_report_embeds_five_pngs(gpt2_report) -> None:  # noqa: ANN001
    _, page = gpt2_report
    imgs = _pngs(page)
    assert set(imgs) == {"Engine timeline", "Utilization", "Roofline (per layer)",
                         "Energy by component kind", "Energy per layer (by component kind)"}
    for data in imgs.values():
        w, h = _png_size(data)
        assert w >= 400 and h >= 200


def test_report_is_deterministic(gpt2_run, gpt2_report, tmp_path: Path) -> None:  # noqa: ANN001
    out, stats, trace = gpt2_run
    path, _ = gpt2_report
    first = path.read_bytes()
    topo = load_topology(stats["topology"])
    again = write_report(tmp_path, stats, trace, topology=topo, title="gpt2 <test>")
    assert again.read_bytes() == first
    assert write_report(out, stats, trace, topology=topo,
                        title="gpt2 <test>").read_bytes() == first


def test_verdict_table_is_escaped(gpt2_run, tmp_path: Path) -> None:  # noqa: ANN001
    _, stats, _ = gpt2_run
    verdict = {"ok": False, "mode": "quantized", "error": None,
               "checks": [{"output": "<logits>", "reference": "onnxruntime", "ok": False,
                           "max_abs_err": 0.5, "cosine": 0.9, "threshold": "cosine >= 0.999"}],
               "first_divergence": {"layer": "gemm_<7>", "op_type": "GEMM"}}
    page = write_report(tmp_path, stats, verdict=verdict).read_text(encoding="utf-8")
    assert "Verification: <span class=\"bad\">FAIL</span>" in page
    assert "&lt;logits&gt;" in page and "<logits>" not in page
    assert "cosine &gt;= 0.999" in page
    assert "gemm_&lt;7&gt;" in page
    # no trace, no topology: utilization, roofline (roofs recovered from the layers), energy
    assert set(_pngs(page)) == {"Utilization", "Roofline (per layer)",
                                "Energy by component kind",
                                "Energy per layer (by component kind)"}


def test_cmdq_simulation_report_has_no_roofline(tmp_path: Path) -> None:
    assert main(["simulate", str(SPEC_EXAMPLE), "--out", str(tmp_path), "--trace"]) == 0
    stats, trace = _load(tmp_path)
    assert "layers" not in stats
    page = write_report(tmp_path, stats, trace).read_text(encoding="utf-8")
    assert fmt_time(stats["total_ns"]) in page
    assert "Layers (slowest first)" not in page
    # no layers: no roofline and no per-layer energy
    assert set(_pngs(page)) == {"Engine timeline", "Utilization", "Energy by component kind"}
    assert plots.roofline(stats, None, tmp_path / "r.png") is None
    assert not (tmp_path / "r.png").exists()
    p = plots.engine_timeline(trace, tmp_path / "t.png")
    assert p == tmp_path / "t.png" and p.read_bytes()[:8] == PNG_MAGIC


def test_peaks_from_topology_match_roofline_bounds() -> None:
    topo = load_topology("small")
    g = topo.config.cube.pe_template.pe_gemm
    hbm = topo.config.cube.hbm_ctrl
    peaks = plots.peaks_from_topology(topo)
    assert peaks.peak_macs_per_ns == g.rows * g.cols * g.clock_ghz * len(topo.pes)
    assert peaks.hbm_gbs == hbm.channels * hbm.channel_bw_gbs * len(topo.cubes)


def test_no_matplotlib_at_import_and_no_pyplot_state() -> None:
    code = (
        "import sys\n"
        "import kernbench, kernbench.report.html, kernbench.report.plots as p\n"
        "assert 'matplotlib' not in sys.modules\n"
        "t = {'traceEvents': [{'ph': 'X', 'cat': 'GEMM', 'pid': 1, 'tid': 1, 'ts': 0.0,"
        " 'dur': 0.5}]}\n"
        "assert p.timeline_png(t)[:4] == b'\\x89PNG'\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
