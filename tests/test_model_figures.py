"""The figures `stats.json` reports for a model, against their definitions computed by
hand from the model and the topology (not from the code that reports them):

- a layer's roofline bytes: fp32 activations in and out, weights at the QConfig's width
  (K · N · bits / 8), so W4 weights are half of W8's;
- its compute bound MACs / (PEs · rows · cols · clock · throughput factor), its memory
  bound bytes / (channels · channel bandwidth), its bound the larger of the two; the
  model's bounds their sums and its roofline fraction Σ bound / total time;
- a layer's static energy: the run's static energy (Σ static power · total time) times
  the layer's span over the sum of all layers' spans (report.energy.group_energy);
- its MACs M · N · K.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.topology import load_topology

#: (M, K, N) of the two MatMuls: x[64, 256] · w1[256, 128] · w2[128, 16]
LAYERS = {"gemm_0": (64, 256, 128), "gemm_1": (64, 128, 16)}


def _model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    (m, k0, n0), (_, k1, n1) = LAYERS.values()
    init = [numpy_helper.from_array(rng.standard_normal((k0, n0)).astype(np.float32), "w1"),
            numpy_helper.from_array(rng.standard_normal((k1, n1)).astype(np.float32), "w2")]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("MatMul", ["h", "w2"], ["y"])], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n1])], initializer=init)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9),
              path)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, dict]:
    tmp = tmp_path_factory.mktemp("figures")
    model = _model(tmp / "two.onnx")
    out = {}
    for bits in (8, 4):
        q = tmp / f"w{bits}.yaml"
        q.write_text(f"default: {{weight: {bits}, activation: 8}}\n")
        d = tmp / f"w{bits}"
        assert main(["run", str(model), "--qconfig", str(q), "--out", str(d), "--no-report",
                     "--quiet"]) == 0
        out[bits] = json.loads((d / "stats.json").read_text())
    return out


@pytest.mark.parametrize("bits", [8, 4])
def test_layer_bytes_and_bounds_by_hand(runs, bits):
    stats = runs[bits]
    topo = load_topology("small")
    cfg = topo.config
    gemm, hbm = cfg.cube.pe_template.pe_gemm, cfg.cube.hbm_ctrl
    peak_macs = len(topo.pes) * gemm.rows * gemm.cols * gemm.clock_ghz  # 8-bit operands
    hbm_gbs = len(topo.cubes) * hbm.channels * hbm.channel_bw_gbs
    for lid, (m, k, n) in LAYERS.items():
        row = stats["layers"][lid]
        want_bytes = m * k * 4 + k * n * bits // 8 + m * n * 4
        assert row["bytes"] == want_bytes, (lid, row["bytes"], want_bytes)
        assert row["macs"] == m * n * k
        assert row["compute_bound_ns"] == pytest.approx(m * n * k / peak_macs, abs=1e-3)
        assert row["memory_bound_ns"] == pytest.approx(want_bytes / hbm_gbs, abs=1e-3)
        assert row["bound_ns"] == max(row["compute_bound_ns"], row["memory_bound_ns"])
        assert row["roofline_fraction"] == pytest.approx(row["bound_ns"] / row["ns"], rel=1e-5)
        # the bound is a bound: the simulated span of the layer is not below it
        assert row["ns"] >= row["bound_ns"]
    mb = stats["model_bound"]
    layers = stats["layers"].values()
    assert mb["compute_bound_ns"] == pytest.approx(sum(v["compute_bound_ns"] for v in layers))
    assert mb["memory_bound_ns"] == pytest.approx(sum(v["memory_bound_ns"] for v in layers))
    assert stats["roofline_fraction"] == pytest.approx(
        sum(v["bound_ns"] for v in layers) / stats["total_ns"], rel=1e-5)


def test_w4_weights_are_half_the_bytes_of_w8(runs):
    for lid, (_, k, n) in LAYERS.items():
        assert runs[8]["layers"][lid]["bytes"] - runs[4]["layers"][lid]["bytes"] == k * n // 2


def _static_power_mw(topo) -> float:  # noqa: ANN001
    """Σ static power of every instance in the topology, read from its config."""
    cs = topo.config.cube
    pt = cs.pe_template
    per_pe = sum(getattr(pt, part).static_power_mw for part in type(pt).model_fields
                 if hasattr(getattr(pt, part), "static_power_mw"))
    per_cube = sum(getattr(cs, part).static_power_mw for part in ("router", "hbm_ctrl",
                                                                   "shared_sram", "m_cpu"))
    routers = cs.mesh.rows * cs.mesh.cols
    return (len(topo.pes) * per_pe + len(topo.cubes)
            * (per_cube + (routers - 1) * cs.router.static_power_mw))


@pytest.mark.parametrize("bits", [8, 4])
def test_layer_static_energy_is_the_span_share_of_the_runs(runs, bits):
    stats = runs[bits]
    topo = load_topology("small")
    static = _static_power_mw(topo) * stats["total_ns"]  # mW · ns = pJ
    assert stats["energy"]["static_pj"] == pytest.approx(static, rel=1e-6)
    spans = {lid: v["ns"] for lid, v in stats["layers"].items()}
    assert len(set(spans.values())) == len(spans), "the layers' spans differ"
    for lid, v in stats["layers"].items():
        want = static * spans[lid] / sum(spans.values())
        assert v["energy_by_kind_pj"]["static"] == pytest.approx(want, rel=1e-6), lid
        dyn = sum(e for k, e in v["energy_by_kind_pj"].items() if k != "static")
        assert v["energy_pj"] == pytest.approx(dyn + want, rel=1e-6)
