"""Energy and area end to end: a one-GEMM ONNX model compiled and simulated through the CLI,
its energy against the closed form, a doubled price against the timing, the outputs that
show energy (summary, report, trace, per layer, per token) and `topology show --json`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.config import load_topology_config
from kernbench.report.units import fmt_power
from kernbench.topology import load_topology

M, K, N = 64, 256, 128
HBM_PRICE = "cube.hbm_ctrl.energy_pj_per_byte"


def _gemm_model(path: Path) -> Path:
    import onnx  # optional heavy import, only this test builds a model
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((K, N)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])],
                          initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9),
              path)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("energy")
    model = _gemm_model(tmp / "gemm.onnx")
    hbm = load_topology_config("small").cube.hbm_ctrl.energy_pj_per_byte
    out = {}
    for name, sets in (("base", []), ("double", ["--set", f"{HBM_PRICE}={2 * hbm}"])):
        out[name] = tmp / name
        assert main(["run", str(model), "--out", str(out[name]), "--keep-bundle", "--trace",
                     *sets]) == 0
    return out


def _load(d: Path, f: str) -> dict:
    return json.loads((d / f).read_text())


def test_gemm_model_dynamic_energy_equals_closed_form(runs):
    st = _load(runs["base"], "stats.json")
    topo = load_topology("small")
    cfg, pt = topo.config, topo.config.cube.pe_template
    cmdq = _load(runs["base"] / "bundle", "cmdq.json")["cmdq"]
    bits = {max(e["qbits_weight"], e["qbits_activation"]) for e in cmdq
            if e["opcode"].startswith("TE_")}
    assert len(bits) == 1
    b = bits.pop()
    mac = "int4" if b <= 4 else "int8" if b <= 8 else "fp16" if b <= 16 else "fp32"
    eng, mems = st["engines"], st["memories"]
    kinds = {lid: link.kind for lid, link in topo.links.items()}
    link_bytes: dict[str, int] = {}
    for lid, row in st["links"].items():
        link_bytes[kinds[lid]] = link_bytes.get(kinds[lid], 0) + row["bytes"]

    def total(key: str, suffix: str = "") -> int:
        return sum(v.get(key, 0) for k, v in {**eng, **mems}.items() if k.endswith(suffix))

    fetched, stored = total("bytes_fetched"), total("bytes_stored")
    tcm_read = total("bytes_written", "pe_dma") + fetched
    tcm_write = total("bytes_read", "pe_dma") + stored
    assert tcm_read + tcm_write == total("bytes", "pe_tcm")
    lane_cycles = 0
    for k, e in eng.items():  # busy cycles minus the pipeline fill of every op, × lanes
        if k.endswith("pe_math"):
            cyc = e["busy_ns"] * pt.pe_math.clock_ghz - e["ops"] * pt.pe_math.pipeline_latency_cycles
            lane_cycles += round(cyc) * pt.pe_math.lanes
    expected = (
        M * N * K * getattr(pt.pe_gemm, f"energy_pj_per_mac_{mac}")
        + total("bytes", "hbm_ctrl") * cfg.cube.hbm_ctrl.energy_pj_per_byte
        + tcm_read * pt.pe_tcm.energy_pj_per_byte_read
        + tcm_write * pt.pe_tcm.energy_pj_per_byte_write
        + fetched * pt.pe_fetch_store.energy_pj_per_byte_rf_write
        + stored * pt.pe_fetch_store.energy_pj_per_byte_rf_read
        + link_bytes.get("mesh", 0) * cfg.cube.router.energy_pj_per_byte_hop
        + sum(link_bytes.get(k, 0) for k in ("pe", "hbm_port", "sram_port"))
        * cfg.cube.router.energy_pj_per_byte_port
        + lane_cycles * pt.pe_math.energy_pj_per_lane_cycle
    )
    e = st["energy"]
    assert e["actions"][f"mac_{mac}"] == M * N * K  # the model's MACs, exactly
    assert e["dynamic_pj"] == pytest.approx(expected, abs=1e-2)
    assert e["total_pj"] == pytest.approx(e["dynamic_pj"] + e["static_pj"], abs=1e-2)
    # every entry belongs to a layer: the layers' energies add up to the run's
    assert sum(v["energy_pj"] for v in st["layers"].values()) == pytest.approx(
        e["total_pj"], rel=1e-9)
    assert "tokens" not in e  # not a language model


def test_doubled_price_changes_only_its_share_and_never_timing(runs):
    a, b = _load(runs["base"], "stats.json"), _load(runs["double"], "stats.json")

    def strip(o):  # noqa: ANN001, ANN202
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items()
                    if k not in ("energy", "energy_pj", "energy_by_kind_pj")}
        return o

    assert strip(a) == strip(b)
    ka, kb = a["energy"]["by_component_kind"], b["energy"]["by_component_kind"]
    assert kb["hbm_ctrl"]["dynamic_pj"] == pytest.approx(2 * ka["hbm_ctrl"]["dynamic_pj"])
    assert {k: v for k, v in ka.items() if k != "hbm_ctrl"} == \
           {k: v for k, v in kb.items() if k != "hbm_ctrl"}
    ta, tb = _load(runs["base"], "trace.json"), _load(runs["double"], "trace.json")
    assert [e for e in ta["traceEvents"] if e["ph"] != "C"] == \
           [e for e in tb["traceEvents"] if e["ph"] != "C"]
    assert (runs["base"] / "bundle" / "cmdq.json").read_bytes() == \
           (runs["double"] / "bundle" / "cmdq.json").read_bytes()


def test_outputs_show_energy(runs):
    st = _load(runs["base"], "stats.json")
    e = st["energy"]
    summary = (runs["base"] / "summary.txt").read_text()
    assert "energy per inference" in summary and "TOPS/W" in summary
    assert f"average power {fmt_power(e['average_power_mw'])}," in summary
    page = (runs["base"] / "report.html").read_text()
    assert "Energy by component kind" in page and "Energy per layer" in page
    assert "die area" in page
    trace = _load(runs["base"], "trace.json")
    power = [ev for ev in trace["traceEvents"] if ev["ph"] == "C" and ev["name"] == "power_mw"]
    width = st["total_ns"] / (len(power) - 1)
    assert sum(ev["args"]["total"] for ev in power) * width == pytest.approx(
        e["total_pj"], rel=1e-4)
    area = st["area_mm2"]
    assert area["total"] == pytest.approx(sum(area["by_component_kind"].values()), abs=1e-5)
    assert area["per_sip"] == {"sip0": area["total"]}


def test_language_model_energy_per_token(tmp_path):
    assert main(["run", "gpt2", "--kv-len", "16", "--out", str(tmp_path), "--no-report",
                 "--no-trace"]) == 0
    e = _load(tmp_path, "stats.json")["energy"]
    assert e["tokens"] == 1  # a decode step generates one token
    assert e["per_token_pj"] == pytest.approx(e["total_pj"], abs=1e-3)
    assert "energy per token" in (tmp_path / "summary.txt").read_text()


def test_topology_show_json_is_the_whole_config_and_loads_back(tmp_path, capsys):
    assert main(["topology", "show", "base", "--json", "--set", f"{HBM_PRICE}=7.5"]) == 0
    text = capsys.readouterr().out
    data = json.loads(text)
    assert data["cube"]["hbm_ctrl"]["energy_pj_per_byte"] == 7.5
    assert data["cube"]["pe_template"]["pe_gemm"]["area_um2_per_cell"] > 0
    assert data["sip"]["ucie"]["energy_pj_per_byte"] > 0
    f = tmp_path / "t.yaml"
    f.write_text(text)
    assert load_topology_config(str(f)) == load_topology_config("base", [f"{HBM_PRICE}=7.5"])
    assert main(["topology", "show", "small"]) == 0
    assert "die area" in capsys.readouterr().out


def test_simulating_a_bundle_with_other_prices_is_not_another_npu(runs, tmp_path, capsys):
    bundle = runs["base"] / "bundle"
    assert main(["simulate", str(bundle), "-t", "small", "--set", f"{HBM_PRICE}=1",
                 "--out", str(tmp_path / "a"), "--no-report", "--no-trace"]) == 0
    assert "different NPU" not in capsys.readouterr().err
    assert main(["simulate", str(bundle), "-t", "small", "--set", "cube.hbm_ctrl.latency_ns=9",
                 "--out", str(tmp_path / "b"), "--no-report", "--no-trace"]) == 0
    assert "different NPU" in capsys.readouterr().err
    a = _load(tmp_path / "a", "stats.json")
    assert a["total_ns"] == _load(runs["base"], "stats.json")["total_ns"]
    assert a["energy"]["by_component_kind"]["hbm_ctrl"]["dynamic_pj"] == \
        a["energy"]["actions"]["hbm_byte"] * 1.0
