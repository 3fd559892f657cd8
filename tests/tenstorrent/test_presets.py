"""The n150 / p150 presets: they load, p150 changes only spec-sheet values, and every value
they set is cited in docs/topologies.md (a row naming the field with the preset's value)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kernbench.config.load import PRESET_DIR
from kernbench.topology import load_topology
from kernbench.topology.peaks import peak_figures

DOC = Path(__file__).resolve().parents[2] / "docs" / "topologies.md"


def _leaves(d: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        out.update(_leaves(v, path) if isinstance(v, dict) else {path: v})
    return out


@pytest.mark.parametrize("name, pes, clock, dram", [("n150", 64, 1.0, 288.0),
                                                    ("p150", 130, 1.35, 512.0)])
def test_preset_peaks_follow_the_published_engine(name, pes, clock, dram):
    # 8x16 by 16x16 = 2048 multiply-adds per cycle per core at LoFi, a quarter at HiFi4
    topo = load_topology(name, ["cube.pe_template.pe_gemm.math_fidelity=LoFi"])
    p = peak_figures(topo)
    assert p.pes == pes and p.hbm_gbs == pytest.approx(dram)
    assert p.macs_per_ns[16] == pytest.approx(pes * 2048 * clock, rel=1e-9)
    hifi4 = peak_figures(load_topology(name, ["cube.pe_template.pe_gemm.math_fidelity=HiFi4"]))
    assert hifi4.macs_per_ns[16] == pytest.approx(pes * 2048 * clock / 4, rel=1e-9)


def test_p150_overlays_n150_with_spec_sheet_fields_only():
    raw = yaml.safe_load((PRESET_DIR / "p150.yaml").read_text())
    assert raw["extends"] == "n150"
    allowed = {"name", "extends", "cube.mesh", "cube.pe_layout", "cube.router",
               "cube.hbm_ctrl", "cube.links", "cube.pe_template.pe_gemm.clock_ghz",
               "cube.pe_template.pe_math.clock_ghz", "cube.pe_template.pe_dma"}
    for leaf in _leaves(raw):
        assert any(leaf == a or leaf.startswith(a + ".") for a in allowed), leaf


@pytest.mark.parametrize("name", ["n150", "p150"])
def test_every_preset_field_is_cited(name):
    raw = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())
    doc = DOC.read_text()
    section = doc[doc.index("## `n150` and `p150`"):]
    cited = {m.group(1) for m in re.finditer(r"`([a-z_]+(?:\.[a-z_]+)*)`", section)}
    for leaf in _leaves(raw.get("cube", {})):
        if leaf in ("pe_layout", "hbm_ctrl.attach", "router.clock_ghz",
                    "pe_template.pe_math.clock_ghz", "pe_template.pe_dma.clock_ghz"):
            continue  # the grid's enumeration and the clocks share the rows above
        if leaf.endswith("throughput_factor.16") or leaf == "pe_template.pe_gemm.impl":
            continue  # the tile engine's rate does not vary with width; the impl is ADR-0860
        parts = leaf.replace("pe_template.", "").split(".")
        short = {".".join(parts[i:j]) for i in range(len(parts))
                 for j in range(i + 1, len(parts) + 1)}
        short |= {"cube." + ".".join(parts[:j]) for j in range(1, len(parts) + 1)}
        assert short & cited, f"{name}: {leaf} has no citation row in docs/topologies.md"


@pytest.mark.parametrize("preset", ["n150", "p150"])
def test_run_with_block_float_weights_verifies_on_the_preset(tmp_path, capsys, preset):
    """`kernbench run` on the card presets like on any other: an ONNX model with the BFP8
    QConfig example, tiled over the card's cores (no whole-layer GEMM), and --verify
    passes against the interpreter and onnxruntime."""
    import json

    from kernbench.cli import main

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    code = main(["run", str(root / "tests" / "models" / "llama.onnx"), "-t", preset,
                 "--qconfig", str(root / "examples" / "qconfig" / "bfp8.yaml"), "--verify",
                 "--quiet", "--no-trace", "--no-report", "--keep-bundle", "--out", str(out)])
    assert code == 0, capsys.readouterr().err[-2000:]
    checks = {c["reference"]: c for c in
              json.loads((out / "verification.json").read_text())["checks"]}
    assert checks["interpreter"]["ok"] and checks["onnxruntime"]["ok"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["topology"] == preset
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    assert not [e for e in cmdq if e["opcode"] == "TE_LAYER_OP"]
    assert {e["block_float"] for e in cmdq if e.get("block_float")} == {"bfp8_b"}
