"""Export tiny random-weight decoder LMs WITH a past KV cache to ONNX, the way users do.

Made with torch 2.13.0+cpu, transformers 5.24.0, onnx 1.23.2, onnxscript 0.7.2,
onnxruntime 1.32.0 (checks only). Every parameter random (see randomize()).

Styles (one file each, <arch> = gpt2 | llama):
  <arch>_legacy.onnx        torch.onnx.export(dynamo=False, dynamic_axes=...), opset 18,
                            axis names as Optimum writes them (batch_size, sequence_length,
                            past_sequence_length, past_sequence_length + sequence_length)
  <arch>_legacy_op14.onnx   the same at opset 14 (no LayerNormalization op: decomposed)
  <arch>_dynamo.onnx        torch.onnx.export(dynamo=True, dynamic_shapes=Dim.DYNAMIC):
                            dims named s18, s70, ... (one per input axis)
  <arch>_dynamo_named.onnx  dynamo=True with named Dims batch / seq / past / total
(optimum_export.py, a separate venv with optimum-onnx 0.1.0 + transformers 4.57.6, gives
<arch>_optimum.onnx via `optimum-cli export onnx --task text-generation-with-past`.)

Inputs:  input_ids [batch, seq], attention_mask [batch, past+seq],
         (llama: position_ids [batch, seq]),
         past_key_values.{i}.key / .value [batch, kv_heads, past, head_dim]
Outputs: logits [batch, seq, vocab], present.{i}.key / .value [batch, kv_heads, past+seq, head_dim]

Each file is checked with onnxruntime against torch at two shapes
(batch 1 seq 5 past 0 and batch 2 seq 1 past 7).

Usage: python export.py [OUTDIR] [--only NAME ...]
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB = 512
N_LAYER = 2
OPSET = 18
STYLES = ("legacy", "legacy_op14", "dynamo", "dynamo_named")
# not in STYLES: "dynamo_axes" (dynamo=True with dynamic_axes) fails inside torch.onnx with this
# varargs wrapper: "Failed to convert dynamic_axes to dynamic_shapes"


def build(arch: str):
    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = GPT2Config(n_layer=N_LAYER, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=256)
        model = GPT2LMHeadModel(cfg)
        kv_heads, head_dim, pos_ids = 4, 16, False
    elif arch == "llama":
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=N_LAYER,
                          num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                          max_position_embeddings=256)
        model = LlamaForCausalLM(cfg)
        kv_heads, head_dim, pos_ids = 2, 16, True
    else:
        raise ValueError(arch)
    randomize(model)
    model.eval()
    return model, cfg, kv_heads, head_dim, pos_ids


def randomize(model) -> None:
    """Every parameter random (HF init leaves biases 0 and norm weights 1: identical
    initializers that the exporter deduplicates across layers, which trained weights
    never are). Norm weights near 1, the rest N(0, 0.02)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if ("ln" in name or "norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.1 * r)
            else:
                p.copy_(0.02 * r if p.dim() > 1 else 0.05 * r)


class Wrapper(torch.nn.Module):
    """Flat past tensors in, flat present tensors out (the cache object built inside)."""

    def __init__(self, model, n_layer: int, pos_ids: bool):
        super().__init__()
        self.model, self.n_layer, self.pos_ids = model, n_layer, pos_ids

    def forward(self, input_ids, attention_mask, *rest):
        if self.pos_ids:
            position_ids, past = rest[0], rest[1:]
        else:
            position_ids, past = None, rest
        cache = DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1])
                                             for i in range(self.n_layer)])
        kw = dict(input_ids=input_ids, attention_mask=attention_mask,
                  past_key_values=cache, use_cache=True)
        if position_ids is not None:
            kw["position_ids"] = position_ids
        out = self.model(**kw)
        flat = [out.logits]
        for layer in out.past_key_values.layers:
            flat += [layer.keys, layer.values]
        return tuple(flat)


def names(n_layer: int, pos_ids: bool):
    ins = ["input_ids", "attention_mask"] + (["position_ids"] if pos_ids else [])
    for i in range(n_layer):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
    outs = ["logits"]
    for i in range(n_layer):
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def sample(batch, seq, past, kv_heads, head_dim, pos_ids, seed=0):
    g = torch.Generator().manual_seed(seed)
    args = [torch.randint(0, VOCAB, (batch, seq), generator=g),
            torch.ones(batch, past + seq, dtype=torch.int64)]
    if pos_ids:
        args.append(torch.arange(past, past + seq, dtype=torch.int64).unsqueeze(0)
                    .expand(batch, seq).contiguous())
    for _ in range(N_LAYER):
        for _ in range(2):
            args.append(torch.randn(batch, kv_heads, past, head_dim, generator=g))
    return tuple(args)


def _legacy_axes(ins, outs, pos_ids):
    dyn = {"input_ids": {0: "batch_size", 1: "sequence_length"},
           "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
           "logits": {0: "batch_size", 1: "sequence_length"}}
    if pos_ids:
        dyn["position_ids"] = {0: "batch_size", 1: "sequence_length"}
    for n in ins:
        if n.startswith("past_key_values."):
            dyn[n] = {0: "batch_size", 2: "past_sequence_length"}
    for n in outs[1:]:
        dyn[n] = {0: "batch_size", 2: "past_sequence_length + sequence_length"}
    return dyn


def export(arch: str, style: str, outdir: Path) -> Path:
    model, cfg, kv_heads, head_dim, pos_ids = build(arch)
    w = Wrapper(model, N_LAYER, pos_ids).eval()
    ins, outs = names(N_LAYER, pos_ids)
    # trace shape: nothing 0 or 1 (the exporters specialize those)
    args = sample(2, 3, 4, kv_heads, head_dim, pos_ids)
    path = outdir / f"{arch}_{style}.onnx"
    if style == "legacy":
        dyn = {"input_ids": {0: "batch_size", 1: "sequence_length"},
               "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
               "logits": {0: "batch_size", 1: "sequence_length"}}
        if pos_ids:
            dyn["position_ids"] = {0: "batch_size", 1: "sequence_length"}
        for n in ins[len(ins) - 2 * N_LAYER:]:
            dyn[n] = {0: "batch_size", 2: "past_sequence_length"}
        for n in outs[1:]:
            dyn[n] = {0: "batch_size", 2: "past_sequence_length + sequence_length"}
        with torch.no_grad():
            torch.onnx.export(w, args, str(path), input_names=ins, output_names=outs,
                              dynamic_axes=dyn, opset_version=OPSET, dynamo=False,
                              do_constant_folding=True)
    elif style == "legacy_op14":
        # opset 14, Optimum's default for these models: no LayerNormalization op
        dyn = _legacy_axes(ins, outs, pos_ids)
        with torch.no_grad():
            torch.onnx.export(w, args, str(path), input_names=ins, output_names=outs,
                              dynamic_axes=dyn, opset_version=14, dynamo=False,
                              do_constant_folding=True)
    elif style == "dynamo_axes":
        # old code with dynamo=True flipped on: dynamic_axes converted by torch.onnx
        dyn = _legacy_axes(ins, outs, pos_ids)
        with torch.no_grad():
            prog = torch.onnx.export(w, args, None, input_names=ins, output_names=outs,
                                     dynamic_axes=dyn, opset_version=OPSET, dynamo=True)
        prog.save(str(path))
    elif style == "dynamo_named":
        # named dims: batch, seq, past shared by every input; the mask's length its own dim
        Dim = torch.export.Dim
        batch, seq, past, total = Dim("batch"), Dim("seq"), Dim("past"), Dim("total")
        ds = [{0: batch, 1: seq}, {0: batch, 1: total}] + ([{0: batch, 1: seq}] if pos_ids else [])
        ds += [{0: batch, 2: past}] * (2 * N_LAYER)
        with torch.no_grad():
            prog = torch.onnx.export(w, args, None, input_names=ins, output_names=outs,
                                     dynamic_shapes=(ds[0], ds[1], tuple(ds[2:])),
                                     opset_version=OPSET, dynamo=True)
        prog.save(str(path))
    elif style == "dynamo":
        D = torch.export.Dim.DYNAMIC
        ds = [{0: D, 1: D}, {0: D, 1: D}] + ([{0: D, 1: D}] if pos_ids else [])
        ds += [{0: D, 2: D}] * (2 * N_LAYER)
        # positional: (input_ids, attention_mask, *rest) -> rest is one tuple
        n_fixed = 2
        dyn_shapes = (ds[0], ds[1], tuple(ds[n_fixed:]))
        with torch.no_grad():
            prog = torch.onnx.export(w, args, None, input_names=ins, output_names=outs,
                                     dynamic_shapes=dyn_shapes, opset_version=OPSET,
                                     dynamo=True, optimize=True)
        prog.save(str(path))
    else:
        raise ValueError(style)
    check(path, w, kv_heads, head_dim, pos_ids)
    return path


def check(path: Path, w, kv_heads, head_dim, pos_ids) -> None:
    import onnx
    import onnxruntime as ort

    m = onnx.load(str(path))
    onnx.checker.check_model(m)
    def shp(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
    print(f"  {path.name}: {len(m.graph.node)} nodes, opset "
          f"{[o.version for o in m.opset_import if o.domain in ('', 'ai.onnx')]}, "
          f"{path.stat().st_size} bytes")
    for vi in m.graph.input:
        print(f"    in  {vi.name} {shp(vi)}")
    for vi in m.graph.output:
        print(f"    out {vi.name} {shp(vi)}")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    in_names = [i.name for i in sess.get_inputs()]
    for b, s, p in ((1, 5, 0), (2, 1, 7)):
        args = sample(b, s, p, kv_heads, head_dim, pos_ids, seed=1)
        with torch.no_grad():
            ref = w(*args)
        got = sess.run(None, dict(zip(in_names, [a.numpy() for a in args], strict=False)))
        err = max(float(np.abs(r.numpy() - g).max()) for r, g in zip(ref, got, strict=False))
        shapes = [tuple(g.shape) for g in got[:2]]
        ok = err < 1e-4
        print(f"    ort b{b} seq{s} past{p}: outputs {shapes}..., max|torch-ort| = {err:.2e} "
              f"{'OK' if ok else 'MISMATCH'}")
        if not ok:
            raise AssertionError(f"{path.name}: onnxruntime differs from torch at "
                                 f"b{b} s{s} p{p}: {err}")


def main() -> int:
    argv = sys.argv[1:]
    outdir = Path(argv[0]) if argv and not argv[0].startswith("--") else Path(".")
    only = argv[argv.index("--only") + 1:] if "--only" in argv else None
    outdir.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    failed = []
    for arch in ("gpt2", "llama"):
        for style in STYLES:
            name = f"{arch}_{style}"
            if only and name not in only:
                continue
            print(f"== {name}")
            try:
                export(arch, style, outdir)
            except Exception:  # noqa: BLE001 - report and go on with the other styles
                traceback.print_exc()
                failed.append(name)
    print("failed:", failed or "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
