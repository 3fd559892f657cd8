"""A bundle written without its weights (`CompileRequest.write_weights` False: a timing-only
run's scratch bundle) holds every other file byte for byte as the full bundle, and its
timing-only simulation gives the same stats."""

from __future__ import annotations

from pathlib import Path

from kernbench.host.flow import TIMING_ONLY, CompileRequest, compile_model, simulate_bundle
from kernbench.topology import load_topology

MODELS = Path(__file__).resolve().parents[1] / "models"
WEIGHTS = {"weights.npz", "ir_weights.npz", "ir_weights_model.json", "model.onnx"}


def test_bundle_without_weights_is_the_rest_of_the_full_bundle(tmp_path):
    topo = load_topology("small")
    full, light = tmp_path / "full", tmp_path / "light"
    compile_model(MODELS / "gpt2.onnx", topo, full)
    compile_model(MODELS / "gpt2.onnx", topo, light, CompileRequest(write_weights=False))
    names = {p.name for p in full.iterdir()}
    assert names >= WEIGHTS
    assert {p.name for p in light.iterdir()} == names - WEIGHTS
    for name in names - WEIGHTS:
        assert (light / name).read_bytes() == (full / name).read_bytes(), name
    a = simulate_bundle(full, topo, tmp_path / "a", TIMING_ONLY)
    b = simulate_bundle(light, topo, tmp_path / "b", TIMING_ONLY)
    assert a.stats == b.stats
