"""Export the model zoo: small, randomly initialised real architectures as ONNX.

Run once by hand (never in CI) in a separate venv -- torch and transformers are this
script's own optional extra, never a dependency of kernbench::

    python3 -m venv /work/zoo-venv
    /work/zoo-venv/bin/pip install torch==2.13.0 transformers onnxscript onnx onnxruntime 'numpy<2.4'
    /work/zoo-venv/bin/python scripts/export_zoo.py              # -> tests/zoo/
    /work/zoo-venv/bin/python scripts/export_zoo.py --only gpt_neo,bloom

For every architecture it writes `tests/zoo/<name>.onnx`, `<name>.inputs.npz` (keys = graph
input names) and `<name>.outputs.npz` (onnxruntime CPU results for those inputs), plus
`tests/zoo/README.md` (one row per model: source class, config, exporter, opset, nodes,
bytes, op census). The `*_fp16` variants are the fp32 exports converted with
`scripts/float_convert.py` (onnx only, no torch: `--only gpt2_fp16,llama_fp16,bert_fp16`
runs in kernbench's own venv); bf16 variants are not committed (onnxruntime's CPU
provider lacks bf16 kernels, so there are no reference outputs): tests/test_zoo_bf16.py
converts at test time and checks against the IR interpreter. Weights come from
`torch.manual_seed(0)`, inputs from
`numpy.random.default_rng(0)`; every model is saved with ir_version 9 and static shapes.
A variant that fails to build is reported and left out (the README lists it as skipped).
"""

from __future__ import annotations

import argparse
import collections
import io
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx

SEED = 0
SEQ = 16
PAST = 16
VOCAB = 256
OUT = Path(__file__).resolve().parents[1] / "tests" / "zoo"
DROP_META = frozenset({"pkg.torch.onnx.stack_trace"})

_TEXT = dict(vocab_size=VOCAB)
# name -> (config class, model class, config kwargs, input kind)
CAUSAL = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_layer=2, n_embd=64, n_head=4, n_positions=64, **_TEXT)),
    "gpt_neo": ("GPTNeoConfig", "GPTNeoForCausalLM",
                dict(num_layers=2, hidden_size=64, num_heads=4, max_position_embeddings=64,
                     attention_types=[[["global", "local"], 1]], window_size=8, **_TEXT)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                 dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=64, rotary_pct=0.25,
                      **_TEXT)),
    "opt": ("OPTConfig", "OPTForCausalLM",
            dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                 word_embed_proj_dim=64, max_position_embeddings=64, **_TEXT)),
    "bloom": ("BloomConfig", "BloomForCausalLM",
              dict(n_layer=2, hidden_size=64, n_head=4, **_TEXT)),
    "falcon": ("FalconConfig", "FalconForCausalLM",
               dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    multi_query=True, new_decoder_architecture=False, parallel_attn=True,
                    alibi=False, **_TEXT)),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                   **_TEXT)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                     num_key_value_heads=2, intermediate_size=128, sliding_window=8,
                     max_position_embeddings=64, **_TEXT)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                   **_TEXT)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16, intermediate_size=128,
                   max_position_embeddings=64, **_TEXT)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=4, intermediate_size=128, max_position_embeddings=64,
                  pad_token_id=0, **_TEXT)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, intermediate_size=128,
                    max_position_embeddings=64, sliding_window=8, **_TEXT)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM",
                 dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=128,
                      max_position_embeddings=64, **_TEXT)),
}
ENCODERS = {
    "bert": ("BertConfig", "BertModel",
             dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=64, **_TEXT)),
    "roberta": ("RobertaConfig", "RobertaModel",
                dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=80, pad_token_id=1,
                     **_TEXT)),
    "distilbert": ("DistilBertConfig", "DistilBertModel",
                   dict(n_layers=2, dim=64, n_heads=4, hidden_dim=128,
                        max_position_embeddings=64, **_TEXT)),
    "t5_encoder": ("T5Config", "T5EncoderModel",
                   dict(num_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, **_TEXT)),
}


def _load(cls_names: tuple[str, str], kwargs: dict):  # noqa: ANN202
    import torch
    import transformers

    cfg_cls = getattr(transformers, cls_names[0])
    model_cls = getattr(transformers, cls_names[1])
    torch.manual_seed(SEED)
    cfg = cfg_cls(**kwargs)
    cfg._attn_implementation = "eager"
    return model_cls(cfg).eval(), cfg


def _causal(name: str):  # noqa: ANN202
    import torch

    cls, mcls, kw = CAUSAL[name]
    model, _ = _load((cls, mcls), kw)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits

    rng = np.random.default_rng(SEED)
    ids = rng.integers(3, VOCAB, (1, SEQ)).astype(np.int64)
    mask = np.ones((1, SEQ), np.int64)
    return Wrapper(), {"input_ids": ids, "attention_mask": mask}, ["logits"], f"{mcls}({kw})"


def _encoder(name: str):  # noqa: ANN202
    import torch

    cls, mcls, kw = ENCODERS[name]
    model, _ = _load((cls, mcls), kw)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    rng = np.random.default_rng(SEED)
    ids = rng.integers(3, VOCAB, (1, SEQ)).astype(np.int64)
    mask = np.ones((1, SEQ), np.int64)
    mask[0, -4:] = 0  # padding exercises the mask path
    return (Wrapper(), {"input_ids": ids, "attention_mask": mask}, ["last_hidden_state"],
            f"{mcls}({kw})")


def _vit():  # noqa: ANN202
    import torch

    kw = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
              intermediate_size=128, image_size=32, patch_size=8, num_channels=3)
    model, _ = _load(("ViTConfig", "ViTModel"), kw)

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state

    x = np.random.default_rng(SEED).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return Wrapper(), {"pixel_values": x}, ["last_hidden_state"], f"ViTModel({kw})"


def _whisper():  # noqa: ANN202
    import torch

    kw = dict(encoder_layers=2, decoder_layers=1, d_model=64, encoder_attention_heads=4,
              decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
              num_mel_bins=16, max_source_positions=16, vocab_size=VOCAB, pad_token_id=0,
              bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
              suppress_tokens=[], begin_suppress_tokens=[])
    model, _ = _load(("WhisperConfig", "WhisperModel"), kw)
    enc = model.get_encoder()

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = enc

        def forward(self, input_features):
            return self.m(input_features=input_features).last_hidden_state

    x = np.random.default_rng(SEED).standard_normal((1, 16, 32)).astype(np.float32)
    return Wrapper(), {"input_features": x}, ["last_hidden_state"], f"WhisperEncoder({kw})"


def _cnn(kind: str):  # noqa: ANN202
    """A ResNet-style (basic blocks, BN folded at export, max/avg pool) or MobileNet-style
    (depthwise-separable, ReLU6, global average pool) CNN written as a plain nn.Module."""
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    if kind == "resnet":
        class Block(nn.Module):
            def __init__(self, c_in: int, c_out: int, stride: int) -> None:
                super().__init__()
                self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
                self.b1 = nn.BatchNorm2d(c_out)
                self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
                self.b2 = nn.BatchNorm2d(c_out)
                self.down = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                           nn.BatchNorm2d(c_out))
                             if stride != 1 or c_in != c_out else nn.Identity())

            def forward(self, x):
                y = torch.relu(self.b1(self.c1(x)))
                return torch.relu(self.b2(self.c2(y)) + self.down(x))

        net = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16),
                            nn.ReLU(), nn.MaxPool2d(3, 2, 1), Block(16, 16, 1),
                            Block(16, 32, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(32, 10))
    else:
        def dw(c_in: int, c_out: int, stride: int) -> nn.Module:
            return nn.Sequential(nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False),
                                 nn.BatchNorm2d(c_in), nn.ReLU6(),
                                 nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out),
                                 nn.ReLU6())

        net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                            nn.ReLU6(), dw(16, 32, 1), dw(32, 64, 2), nn.AvgPool2d(2),
                            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    net.eval()
    with torch.no_grad():  # non-trivial BN statistics
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    x = np.random.default_rng(SEED).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return net, {"pixel_values": x}, ["logits"], f"{kind}-style CNN (plain nn.Module)"


def _decode(name: str):  # noqa: ANN202
    """One decode step with a KV cache as explicit inputs/outputs (NOTES.md recipe)."""
    import torch
    from transformers import DynamicCache

    cls, mcls, kw = CAUSAL[name]
    model, cfg = _load((cls, mcls), kw)
    n_layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", cfg.num_attention_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, *past):
            cache = DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1])
                                                 for i in range(n_layers)])
            out = self.m(input_ids=input_ids, attention_mask=attention_mask,
                         past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    rng = np.random.default_rng(SEED)
    feeds = {"input_ids": rng.integers(3, VOCAB, (1, 1)).astype(np.int64),
             "attention_mask": np.ones((1, PAST + 1), np.int64)}
    outs = ["logits"]
    for i in range(n_layers):
        for kv in ("key", "value"):
            feeds[f"past_{kv}_{i}"] = rng.standard_normal((1, kv_heads, PAST, head_dim)).astype(
                np.float32)
            outs.append(f"present_{kv}_{i}")
    return Wrapper(), feeds, outs, f"{mcls}({kw}) decode step, past {PAST}"


def _export(module, feeds: dict, outputs: list[str], path: Path) -> onnx.ModelProto:  # noqa: ANN001
    import torch

    args = tuple(torch.from_numpy(v) for v in feeds.values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(module, args, input_names=list(feeds),
                                 output_names=outputs, dynamo=True, opset_version=18,
                                 external_data=False, verbose=False)
    m = prog.model_proto
    for n in m.graph.node:
        keep = [p for p in n.metadata_props if p.key not in DROP_META]
        del n.metadata_props[:]
        n.metadata_props.extend(keep)
    m.ir_version = min(m.ir_version, 9)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    return m


def _ort(path: Path, feeds: dict) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ins = {i.name: feeds[i.name] for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, ins), strict=True))


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


def _quantized(src: Path, dst: Path, feeds: dict, how: str) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    if how == "dynamic":
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gemm"])
        return

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(SEED + 1)
            self.batches = iter([{k: (rng.integers(3, VOCAB, v.shape).astype(v.dtype)
                                      if v.dtype.kind == "i" and k == "input_ids" else v)
                                  for k, v in feeds.items()} for _ in range(4)])

        def get_next(self):  # noqa: ANN202
            return next(self.batches, None)

    if how == "qoperator":
        # QOperator (QLinearConv / QLinearMatMul, attention's MatMuls included), uint8
        # asymmetric activations, per-channel int8 weights. Only Conv and MatMul: Gemm would
        # become the com.microsoft QGemm contrib op, and other op types (Add, Mul, Softmax,
        # pools) their com.microsoft QLinear* forms, none of which are ONNX ops (ADR-0709).
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QOperator,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=True, op_types_to_quantize=["Conv", "MatMul"])
        return
    # onnxruntime's defaults: asymmetric uint8 activations (zero point != 0), int8 weights
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["MatMul", "Gemm"])


def _half(src: Path, dst: Path, feeds: dict, to: str) -> tuple[onnx.ModelProto, dict]:
    """The fp16 / bf16 variant of a zoo model (float_convert) and its inputs."""
    from float_convert import convert_feeds, convert_float

    m = convert_float(onnx.load(src), to)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, dst)
    return m, convert_feeds(feeds, to)


def build(name: str):  # noqa: ANN202
    if name in CAUSAL:
        return _causal(name)
    if name in ENCODERS:
        return _encoder(name)
    if name.endswith("_decode"):
        return _decode(name.removesuffix("_decode"))
    return {"vit": _vit, "whisper_encoder": _whisper, "resnet": lambda: _cnn("resnet"),
            "mobilenet": lambda: _cnn("mobilenet")}[name]()


NAMES = [*CAUSAL, *ENCODERS, "vit", "whisper_encoder", "resnet", "mobilenet", "llama_decode",
         "qwen2_decode"]
QUANT = {"bert_qdq_static": ("bert", "static"), "gpt2_qdq_static": ("gpt2", "static"),
         "bert_dynamic": ("bert", "dynamic"), "resnet_qoperator": ("resnet", "qoperator"),
         "mobilenet_qoperator": ("mobilenet", "qoperator"), "bert_qoperator": ("bert", "qoperator")}
#: half-precision exports (scripts/float_convert.py); only fp16: onnxruntime's CPU
#: provider lacks bf16 kernels, so bf16 is tested by converting at test time
HALF = {"gpt2_fp16": ("gpt2", "fp16"), "llama_fp16": ("llama", "fp16"),
        "bert_fp16": ("bert", "fp16")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    rows, skipped = [], {}
    for name in [*NAMES, *QUANT, *HALF]:
        if only and name not in only:
            continue
        try:
            rows.append(_one(name, args.out))
            print(f"ok   {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - report and carry on
            skipped[name] = " ".join(str(e).split())[:300]
            print(f"SKIP {name}: {skipped[name]}", flush=True)
    if not only:
        _readme(args.out, rows, skipped)
    return 0


def _one(name: str, out: Path) -> dict:
    if name in QUANT:
        base, how = QUANT[name]
        src = out / f"{base}.onnx"
        feeds = dict(np.load(out / f"{base}.inputs.npz"))
        path = out / f"{name}.onnx"
        with tempfile.TemporaryDirectory() as tmp:
            _quantized(src, Path(tmp) / "q.onnx", feeds, how)
            m = onnx.load(Path(tmp) / "q.onnx")
        m.ir_version = min(m.ir_version, 9)
        onnx.save(m, path)
        desc = (f"{base} via onnxruntime quantize_static (QOperator)" if how == "qoperator"
                else f"{base} via onnxruntime quantize_{how}")
    elif name in HALF:
        base, to = HALF[name]
        path = out / f"{name}.onnx"
        m, feeds = _half(out / f"{base}.onnx", path, dict(np.load(out / f"{base}.inputs.npz")),
                         to)
        desc = f"{base} converted to {to} (scripts/float_convert.py)"
    else:
        module, feeds, outputs, desc = build(name)
        path = out / f"{name}.onnx"
        m = _export(module, feeds, outputs, path)
    _save_npz(out / f"{name}.inputs.npz", feeds)
    _save_npz(out / f"{name}.outputs.npz", _ort(path, feeds))
    census = collections.Counter(n.op_type for n in m.graph.node)
    opset = next(i.version for i in m.opset_import if i.domain in ("", "ai.onnx"))
    return {"name": name, "desc": desc, "opset": opset, "nodes": len(m.graph.node),
            "bytes": path.stat().st_size, "ops": ", ".join(sorted(census))}


def _readme(out: Path, rows: list[dict], skipped: dict[str, str]) -> None:
    import torch
    import transformers

    lines = ["# Model zoo", "",
             "Small random-init exports of real architectures, written by "
             "`scripts/export_zoo.py` (do not edit by hand). Each `<name>.onnx` has "
             "`<name>.inputs.npz` and `<name>.outputs.npz` (onnxruntime CPU results). "
             f"Made with torch {torch.__version__}, transformers {transformers.__version__}, "
             f"onnx {onnx.__version__}; dynamo exporter, opset 18, ir_version 9. "
             "`*_fp16`: the fp32 export converted by `scripts/float_convert.py` (every float "
             "tensor fp16, extremes clamped to ±65504); bf16 conversions are tested at test "
             "time (tests/test_zoo_bf16.py), not committed: onnxruntime's CPU provider lacks "
             "bf16 kernels, so there are no reference outputs.", "",
             "| model | source | opset | nodes | bytes | ops |", "| --- | --- | --- | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| `{r['name']}` | {r['desc']} | {r['opset']} | {r['nodes']} | "
                     f"{r['bytes']} | {r['ops']} |")
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- `{k}`: {v}" for k, v in skipped.items()]
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
