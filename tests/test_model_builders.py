"""kernbench.models.builders: GPT-2 / Llama graphs of any prefill / decode shape import,
fuse like the exporter's graphs, match onnxruntime, and `kernbench run NAME --kv-len N`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernbench.errors import InputError
from kernbench.ir.interpreter import run
from kernbench.ir.onnx_import import import_model_proto
from kernbench.ir.qconfig import QConfig
from kernbench.models.builders import build_gpt2, build_llama, model_for

ort = pytest.importorskip("onnxruntime")

CASES = {
    "gpt2-prefill": lambda: build_gpt2(seq=8),
    "gpt2-decode": lambda: build_gpt2(seq=1, kv_len=12),
    "gpt2-chunk": lambda: build_gpt2(seq=3, kv_len=5),
    "llama-prefill": lambda: build_llama(seq=8),
    "llama-decode": lambda: build_llama(seq=1, kv_len=12),
    "llama-chunk": lambda: build_llama(seq=3, kv_len=5),
}


def _feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = rng.integers(0, 256, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("case", list(CASES))
def test_fuses_and_matches_onnxruntime(case: str) -> None:
    m = CASES[case]()
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version == 9 and m.opset_import[0].version == 18
    g = import_model_proto(m, QConfig.fp32())
    ops = Counter(n.op_type for n in g.nodes)
    family, kind = case.split("-")
    assert ops["QKV_PROJ"] == 2 and ops["ATTENTION"] == 2 and ops["GEMM"] >= 7
    if family == "gpt2":
        assert ops["LAYER_NORM"] == 5 and ops["GELU"] == 2
    else:
        assert ops["RMS_NORM"] == 5 and ops["SILU"] == 2 and ops["ROPE"] == 4
        for n in g.nodes:
            if n.op_type == "ATTENTION":
                assert n.attributes["num_kv_heads"] == 2 < n.attributes["num_heads"] == 4
    assert ops["KV_UPDATE"] == (0 if kind == "prefill" else 4)
    feeds = _feeds(m)
    names = [o.name for o in m.graph.output]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    got = run(g, feeds, quantize=False)
    for name, r in zip(names, ref, strict=True):
        assert got[name].shape == r.shape
        assert float(np.max(np.abs(got[name] - r))) <= 1e-4, name


def test_decode_io_shapes() -> None:
    m = build_llama(seq=1, kv_len=40)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.input) + list(m.graph.output)}
    assert shapes["input_ids"] == [1, 1]
    assert shapes["past_key_values.1.value"] == [1, 2, 40, 16]
    assert shapes["present.0.key"] == [1, 2, 41, 16]
    assert shapes["logits"] == [1, 1, 256]
    assert [o.name for o in m.graph.output][0] == "logits"


def _with_present(m: onnx.ModelProto) -> onnx.ModelProto:
    """A prefill model with each layer's K / V (before the kv-head repeat) exposed as
    present.{i}.key/value outputs."""
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}

    def back(t: str, ops: tuple[str, ...]) -> str:
        while t in prod and prod[t].op_type in ops:
            t = prod[t].input[0]
        return t

    layout = ("Reshape", "Expand", "Unsqueeze")
    sdpa = [n for n in g.node if n.output[0].startswith("scaled_dot_product_attention")]
    for i, mm2 in enumerate(sdpa):
        v = back(mm2.input[1], layout)
        p = prod[mm2.input[0]]  # Where(IsNaN(p), 0, p) <- Softmax <- Add(scores, mask)
        scores = prod[prod[prod[p.input[2]].input[0]].input[0]]
        kt = prod[scores.input[1]].input[0]  # Mul(kT, scale)
        for _ in range(3):  # K^T = Reshape(Transpose(Reshape(k)))
            kt = prod[kt].input[0]
        k = back(kt, layout)
        for kind, t in (("key", k), ("value", v)):
            g.node.append(onnx.helper.make_node("Identity", [t], [f"present.{i}.{kind}"]))
            g.output.append(onnx.helper.make_tensor_value_info(
                f"present.{i}.{kind}", onnx.TensorProto.FLOAT, None))
    return m


def _step(m: onnx.ModelProto, feeds: dict[str, np.ndarray]):  # noqa: ANN202
    outs = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    names = [o.name for o in m.graph.output]
    past = {n.replace("present", "past_key_values"): v
            for n, v in zip(names, outs, strict=True) if n.startswith("present")}
    return outs[0], past


@pytest.mark.parametrize("build", [build_gpt2, build_llama])
def test_decode_continues_prefill(build) -> None:  # noqa: ANN001
    """prefill(7 tokens) == prefill(4) -> chunk(2 after 4) -> decode(1 after 6): checks the
    position-embedding / RoPE offsets, the causal mask and the cache layout."""
    ids = np.random.default_rng(1).integers(0, 256, (1, 7)).astype(np.int64)
    full, _ = _step(build(seq=7), {"input_ids": ids})
    first, past = _step(_with_present(build(seq=4)), {"input_ids": ids[:, :4]})
    assert first.shape == (1, 4, 256) and len(past) == 4
    np.testing.assert_allclose(first, full[:, :4], atol=1e-5)
    mid, past = _step(build(seq=2, kv_len=4), {"input_ids": ids[:, 4:6], **past})
    np.testing.assert_allclose(mid, full[:, 4:6], atol=1e-5)
    last, past = _step(build(seq=1, kv_len=6), {"input_ids": ids[:, 6:], **past})
    np.testing.assert_allclose(last, full[:, 6:], atol=1e-5)
    assert past["past_key_values.0.key"].shape[2] == 7


def test_model_for_and_errors() -> None:
    m = model_for("llama", seq_len=1, kv_len=8)
    assert any(i.name == "past_key_values.0.key" for i in m.graph.input)
    assert model_for("gpt2").graph.input[0].type.tensor_type.shape.dim[1].dim_value == 16
    with pytest.raises(InputError):
        model_for("nope")
    with pytest.raises(InputError):
        build_llama(heads=4, kv_heads=3)
    with pytest.raises(InputError):
        build_gpt2(seq=0)


def test_cli_run_llama_decode(tmp_path: Path) -> None:
    from kernbench.cli import main

    out = tmp_path / "run"
    assert main(["run", "--keep-bundle", "--trace", "llama", "--kv-len", "64", "--out", str(out), "--no-trace"]) == 0
    assert (out / "stats.json").exists()
    assert (out / "bundle" / "model.onnx").exists()
    m = onnx.load(str(out / "bundle" / "model.onnx"))
    assert [d.dim_value for d in m.graph.input[1].type.tensor_type.shape.dim] == [1, 2, 64, 16]


def test_cli_compile_named_and_file_errors(tmp_path: Path) -> None:
    from kernbench.cli import main

    out = tmp_path / "b"
    assert main(["compile", "gpt2", "--seq-len", "8", "-o", str(out)]) == 0
    assert (out / "cmdq.json").exists() and (out / "model.onnx").exists()
    model = Path(__file__).parent / "models" / "gpt2.onnx"
    assert main(["compile", str(model), "--kv-len", "4", "-o", str(tmp_path / "c")]) == 2


def test_llama_decode_with_512_kv_is_memory_bound(tmp_path):
    import json

    from kernbench.cli import main
    from kernbench.report.units import fmt_time

    out = tmp_path / "out"
    assert main(["run", "--keep-bundle", "--trace", "llama", "--kv-len", "512", "--out", str(out), "--no-trace"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["model_bound"]["bound_by"] == "memory"
    assert all(layer["bound_by"] == "memory" for layer in stats["layers"].values())
    mb = stats["model_bound"]
    assert mb["memory_bound_ns"] > mb["compute_bound_ns"]  # Σ per-layer bounds, as printed:
    assert (f"Σ compute bounds {fmt_time(mb['compute_bound_ns'])}, Σ memory bounds "
            f"{fmt_time(mb['memory_bound_ns'])}") in (out / "summary.txt").read_text()


def test_long_kv_decode_stays_accurate(tmp_path):
    """Per-row probability scales keep a 256-token decode within W8A8 accuracy."""
    import json

    from kernbench.cli import main

    out = tmp_path / "out"
    assert main(["run", "--keep-bundle", "--trace", "llama", "--kv-len", "256", "--out", str(out), "--verify",
                 "--no-trace", "--no-report"]) == 0
    v = json.loads((out / "verification.json").read_text())
    assert all(c["cosine"] >= 0.999 for c in v["checks"] if c["reference"] == "onnxruntime")
