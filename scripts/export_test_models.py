"""Export tiny, randomly initialised HuggingFace transformers as ONNX test models.

Run once by hand (not in CI) with a separate venv -- torch must never be
installed into the project's own ``.venv``::

    python3 -m venv /work/export-venv
    /work/export-venv/bin/pip install torch==2.13.0 transformers onnxscript onnx onnxruntime
    /work/export-venv/bin/python scripts/export_test_models.py            # -> tests/models/
    /work/export-venv/bin/python scripts/export_test_models.py --out DIR  # elsewhere

Made with torch 2.13.0+cpu, transformers 5.23.0, onnx 1.23.2, onnxscript 0.7.2,
onnxruntime 1.31.1.  Every weight comes from ``torch.manual_seed(SEED)`` and every
input from ``numpy.random.default_rng(SEED)``, so re-running the script gives the same
models up to exporter version changes.

What it writes (all into ``tests/models/``):

* ``gpt2.onnx``   -- GPT2LMHeadModel (n_layer=2, n_embd=64, n_head=4, vocab 256,
  n_positions 128), input ``input_ids`` [1, 16] int64, output ``logits``, use_cache=False.
* ``bert.onnx``   -- BertModel (2 layers, hidden 64, 4 heads, intermediate 128,
  vocab 256), inputs ``input_ids`` and ``attention_mask`` [1, 16] int64 (the mask has
  the last 4 positions zeroed to exercise padding), output ``last_hidden_state``.
* ``llama.onnx``  -- LlamaForCausalLM (2 layers, hidden 64, 4 heads, 2 KV heads so
  grouped-query attention, intermediate 128, vocab 256), ``input_ids`` [1, 16],
  use_cache=False, output ``logits``.
* ``gpt2_decode.onnx`` / ``llama_decode.onnx`` -- one decode step with a KV cache: inputs
  ``input_ids`` [1, 1] plus ``past_key_values.{layer}.{key,value}`` [1, kv_heads, 16, 16]
  as explicit graph inputs; outputs ``logits`` [1, 1, 256] and
  ``present.{layer}.{key,value}`` [1, kv_heads, 17, 16].  Done with a thin
  ``torch.nn.Module`` wrapper (``_DecodeWrapper``) that takes the past tensors as plain
  inputs, builds a ``transformers.DynamicCache(ddp_cache_data=...)`` inside ``forward``
  and returns the cache's keys/values after the step; the HF model itself is unchanged,
  and the graph holds a Concat of the new K/V onto each past K/V input.  The weights are
  the same as the prefill model of the same family (same seed).
* ``gpt2_qdq.onnx``, ``bert_qdq.onnx``, ``llama_qdq.onnx`` --
  ``onnxruntime.quantization.quantize_static`` with QuantFormat.QDQ, QInt8 activations
  and weights, per-tensor, op_types_to_quantize=["MatMul", "Gemm"], MinMax calibration
  on CALIB_BATCHES random token batches.
* ``bert_qoperator.onnx`` -- same but QuantFormat.QOperator (QLinearMatMul).
* ``bert_dynamic.onnx`` -- ``quantize_dynamic`` (QInt8 weights, MatMul only) giving
  DynamicQuantizeLinear + MatMulInteger.
* ``llama_int4.onnx`` -- ``matmul_nbits_quantizer.MatMulNBitsQuantizer`` with
  ``DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True,
  quant_format=QuantFormat.QDQ)``: int4 weights + blocked DequantizeLinear (opset 21).
* ``llama_opset23.onnx`` -- the Llama model exported with opset_version=23, where the
  exporter emits RMSNormalization and Attention nodes (onnxruntime 1.31 runs it).

For every model ``<name>.inputs.npz`` (np.savez, keys = graph input names, no pickled
objects) and ``<name>.outputs.npz`` (keys = graph output names, onnxruntime
CPUExecutionProvider results for those inputs) are written next to it, plus
``README.md`` describing every file with an op-type census.

The exporter's per-node ``pkg.torch.onnx.stack_trace`` metadata (absolute paths) is
stripped; the module-scope metadata (``namespace``, ``pkg.torch.onnx.name_scopes``, ...)
is kept so layer boundaries stay visible.  Every model is saved with ir_version <= 10
(onnxruntime 1.31 loads it) and passes
``onnx.checker.check_model(model, full_check=True)``.

No variant had to be skipped with the versions above; if one fails to build, the script
prints why, leaves it out of the README and carries on (see ``SKIPPED`` in the output).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx

SEED = 0
SEQ = 16  # prompt length of the prefill models
PAST = 16  # KV-cache length fed to the decode models
VOCAB = 256
CALIB_BATCHES = 8
MAX_IR_VERSION = 10
MAX_BYTES = 1 << 20
# torch.onnx attaches per-node metadata; the Python stack trace (absolute paths into the
# venv, ~40% of the file) is dropped, "namespace" / "pkg.torch.onnx.name_scopes" /
# "pkg.torch.onnx.class_hierarchy" / "pkg.torch.onnx.fx_node" are kept.
DROP_NODE_METADATA = frozenset({"pkg.torch.onnx.stack_trace"})

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "models"

# name -> dict(config=..., opset=..., how=...) filled while exporting, used for README
INFO: dict[str, dict[str, str]] = {}
SKIPPED: dict[str, str] = {}


# ---------------------------------------------------------------------------
# configs and torch wrappers (torch imported lazily so ruff/pytest never need it)
# ---------------------------------------------------------------------------

GPT2_CFG = dict(
    n_layer=2,
    n_embd=64,
    n_head=4,
    vocab_size=VOCAB,
    n_positions=128,
    bos_token_id=0,
    eos_token_id=1,
)
BERT_CFG = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    intermediate_size=128,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    pad_token_id=0,
)
LLAMA_CFG = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=VOCAB,
    max_position_embeddings=128,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
)


def _cfg_str(cls_name: str, cfg: dict) -> str:
    return cls_name + "(" + ", ".join(f"{k}={v}" for k, v in cfg.items()) + ")"


def _make_hf_models():
    """Build the three HF models with fixed seeds. Returns dict family -> model."""
    import torch
    from transformers import (
        BertConfig,
        BertModel,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
    )

    models = {}
    torch.manual_seed(SEED)
    models["gpt2"] = GPT2LMHeadModel(GPT2Config(**GPT2_CFG)).eval()
    torch.manual_seed(SEED)
    models["bert"] = BertModel(BertConfig(**BERT_CFG)).eval()
    torch.manual_seed(SEED)
    models["llama"] = LlamaForCausalLM(LlamaConfig(**LLAMA_CFG)).eval()
    return models


def _wrappers():
    import torch
    from transformers import DynamicCache

    class LogitsWrapper(torch.nn.Module):
        """Causal LM prefill without cache: input_ids -> logits."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, use_cache=False).logits

    class BertWrapper(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class DecodeWrapper(torch.nn.Module):
        """One decode step: past K/V are plain tensor inputs, present K/V are outputs."""

        def __init__(self, model, n_layers):
            super().__init__()
            self.model = model
            self.n_layers = n_layers

        def forward(self, input_ids, *past):
            cache = DynamicCache(
                ddp_cache_data=[(past[2 * i], past[2 * i + 1]) for i in range(self.n_layers)]
            )
            out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return LogitsWrapper, BertWrapper, DecodeWrapper


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------


def _token_ids(rng: np.random.Generator, seq: int) -> np.ndarray:
    return rng.integers(0, VOCAB, size=(1, seq), dtype=np.int64)


def _bert_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    mask = np.ones((1, SEQ), dtype=np.int64)
    mask[:, SEQ - 4 :] = 0  # padded tail
    return {"input_ids": _token_ids(rng, SEQ), "attention_mask": mask}


def _decode_names(n_layers: int) -> tuple[list[str], list[str]]:
    ins = ["input_ids"] + [
        f"past_key_values.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")
    ]
    outs = ["logits"] + [f"present.{i}.{kv}" for i in range(n_layers) for kv in ("key", "value")]
    return ins, outs


def _decode_inputs(
    rng: np.random.Generator, n_layers: int, kv_heads: int, head_dim: int
) -> dict[str, np.ndarray]:
    names, _ = _decode_names(n_layers)
    feeds = {"input_ids": _token_ids(rng, 1)}
    for name in names[1:]:
        feeds[name] = rng.standard_normal((1, kv_heads, PAST, head_dim)).astype(np.float32)
    return feeds


# ---------------------------------------------------------------------------
# ONNX helpers
# ---------------------------------------------------------------------------


def _finalize(path: Path) -> onnx.ModelProto:
    """Clamp ir_version, run the full checker and re-save the model in place."""
    model = onnx.load(str(path))
    for node in model.graph.node:  # drop machine-specific source paths, keep the scopes
        keep = [p for p in node.metadata_props if p.key not in DROP_NODE_METADATA]
        if len(keep) != len(node.metadata_props):
            del node.metadata_props[:]
            node.metadata_props.extend(keep)
    if model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    for stale in path.parent.glob(path.name + ".data"):
        stale.unlink()
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise RuntimeError(f"{path.name} is {size} bytes (> {MAX_BYTES})")
    return model


def _run_ort(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def _save_io(out: Path, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    outputs = _run_ort(out / f"{name}.onnx", feeds)
    np.savez(out / f"{name}.inputs.npz", **feeds)
    np.savez(out / f"{name}.outputs.npz", **outputs)
    return outputs


def _export(
    module,
    feeds: dict[str, np.ndarray],
    path: Path,
    opset: int,
    input_names: list[str],
    output_names: list[str],
) -> None:
    import torch

    args = tuple(torch.from_numpy(feeds[n]) for n in input_names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            args,
            str(path),
            dynamo=True,
            opset_version=opset,
            external_data=False,
            input_names=input_names,
            output_names=output_names,
        )


def _check_against_torch(
    module, feeds, input_names, ort_out: dict[str, np.ndarray], tol=1e-4
) -> float:
    import torch

    with torch.no_grad():
        ref = module(*(torch.from_numpy(feeds[n]) for n in input_names))
    if isinstance(ref, torch.Tensor):
        ref = (ref,)
    err = max(
        float(np.abs(r.numpy() - o).max()) for r, o in zip(ref, ort_out.values(), strict=True)
    )
    if err > tol:
        raise RuntimeError(f"onnxruntime and torch disagree: max abs err {err}")
    return err


class _Reader:
    """CalibrationDataReader over a list of feed dicts."""

    def __init__(self, batches: list[dict[str, np.ndarray]]):
        self._it = iter(batches)

    def get_next(self):
        return next(self._it, None)

    def rewind(self):  # pragma: no cover - interface completeness
        pass


def _calib_batches(family: str, rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    if family == "bert":
        out = []
        for _ in range(CALIB_BATCHES):
            feeds = _bert_inputs(rng)
            feeds["attention_mask"][:] = 1
            feeds["attention_mask"][:, SEQ - int(rng.integers(0, 8)) :] = 0
            out.append(feeds)
        return out
    return [{"input_ids": _token_ids(rng, SEQ)} for _ in range(CALIB_BATCHES)]


# ---------------------------------------------------------------------------
# model builders
# ---------------------------------------------------------------------------


def export_float(out: Path, rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    """Export the float models. Returns name -> input feeds (reused by quantized variants)."""
    LogitsWrapper, BertWrapper, DecodeWrapper = _wrappers()
    hf = _make_hf_models()
    feeds_by_name: dict[str, dict[str, np.ndarray]] = {}

    jobs = [
        (
            "gpt2",
            LogitsWrapper(hf["gpt2"]),
            {"input_ids": _token_ids(rng, SEQ)},
            ["input_ids"],
            ["logits"],
            18,
            _cfg_str("GPT2Config", GPT2_CFG),
            "GPT2LMHeadModel prefill, use_cache=False",
        ),
        (
            "bert",
            BertWrapper(hf["bert"]),
            _bert_inputs(rng),
            ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            18,
            _cfg_str("BertConfig", BERT_CFG),
            "BertModel, attention_mask with last 4 positions padded",
        ),
        (
            "llama",
            LogitsWrapper(hf["llama"]),
            {"input_ids": _token_ids(rng, SEQ)},
            ["input_ids"],
            ["logits"],
            18,
            _cfg_str("LlamaConfig", LLAMA_CFG),
            "LlamaForCausalLM prefill (GQA 4 q heads / 2 kv heads), use_cache=False",
        ),
    ]
    gpt2_in, gpt2_out = _decode_names(GPT2_CFG["n_layer"])
    jobs.append(
        (
            "gpt2_decode",
            DecodeWrapper(hf["gpt2"], GPT2_CFG["n_layer"]),
            _decode_inputs(
                rng,
                GPT2_CFG["n_layer"],
                GPT2_CFG["n_head"],
                GPT2_CFG["n_embd"] // GPT2_CFG["n_head"],
            ),
            gpt2_in,
            gpt2_out,
            18,
            _cfg_str("GPT2Config", GPT2_CFG),
            f"GPT2LMHeadModel single-token decode step, past length {PAST} as graph inputs "
            "(DynamicCache built inside a wrapper module)",
        )
    )
    llama_hd = LLAMA_CFG["hidden_size"] // LLAMA_CFG["num_attention_heads"]
    llama_in, llama_out = _decode_names(LLAMA_CFG["num_hidden_layers"])
    jobs.append(
        (
            "llama_decode",
            DecodeWrapper(hf["llama"], LLAMA_CFG["num_hidden_layers"]),
            _decode_inputs(
                rng, LLAMA_CFG["num_hidden_layers"], LLAMA_CFG["num_key_value_heads"], llama_hd
            ),
            llama_in,
            llama_out,
            18,
            _cfg_str("LlamaConfig", LLAMA_CFG),
            f"LlamaForCausalLM single-token decode step, past length {PAST} as graph inputs "
            "(DynamicCache built inside a wrapper module)",
        )
    )
    jobs.append(
        (
            "llama_opset23",
            LogitsWrapper(hf["llama"]),
            {"input_ids": _token_ids(rng, SEQ)},
            ["input_ids"],
            ["logits"],
            23,
            _cfg_str("LlamaConfig", LLAMA_CFG),
            "same Llama exported with opset_version=23 (RMSNormalization / Attention nodes)",
        )
    )

    for name, module, feeds, ins, outs, opset, cfg, how in jobs:
        path = out / f"{name}.onnx"
        try:
            _export(module, feeds, path, opset, ins, outs)
            _finalize(path)
            ort_out = _save_io(out, name, feeds)
            err = _check_against_torch(module, feeds, ins, ort_out)
        except Exception as exc:  # noqa: BLE001 - record and carry on
            SKIPPED[name] = f"{type(exc).__name__}: {exc}"
            print(f"SKIPPED {name}: {SKIPPED[name]}")
            for p in out.glob(f"{name}.*"):
                p.unlink()
            continue
        feeds_by_name[name] = feeds
        INFO[name] = {
            "config": cfg,
            "how": f"torch.onnx.export(dynamo=True, opset_version={opset}, external_data=False); {how}; "
            f"max |onnxruntime - torch| = {err:.1e}",
        }
        print(f"exported {name} (max abs err vs torch {err:.1e})")
    return feeds_by_name


def _quantize_variant(
    out: Path, name: str, base: str, feeds: dict[str, np.ndarray], how: str, fn
) -> None:
    path = out / f"{name}.onnx"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fn(str(out / f"{base}.onnx"), str(path), Path(tmp))
        _finalize(path)
        _save_io(out, name, feeds)
    except Exception as exc:  # noqa: BLE001 - record and carry on
        SKIPPED[name] = f"{type(exc).__name__}: {exc}"
        print(f"SKIPPED {name}: {SKIPPED[name]}")
        for p in out.glob(f"{name}.*"):
            p.unlink()
        return
    INFO[name] = {"config": INFO[base]["config"], "how": f"from {base}.onnx: {how}"}
    print(f"quantized {name}")


def export_quantized(
    out: Path, feeds_by_name: dict[str, dict[str, np.ndarray]], rng: np.random.Generator
) -> None:
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        matmul_nbits_quantizer,
        quantize_dynamic,
        quantize_static,
    )

    def static(fmt, family):
        batches = _calib_batches(family, rng)

        def run(src, dst, tmp):
            quantize_static(
                src,
                dst,
                _Reader(batches),
                quant_format=fmt,
                op_types_to_quantize=["MatMul", "Gemm"],
                per_channel=False,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
            )

        return run

    def dynamic(src, dst, tmp):
        quantize_dynamic(src, dst, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)

    def int4(src, dst, tmp):
        cfg = matmul_nbits_quantizer.DefaultWeightOnlyQuantConfig(
            block_size=32,
            is_symmetric=True,
            quant_format=QuantFormat.QDQ,
        )
        quant = matmul_nbits_quantizer.MatMulNBitsQuantizer(onnx.load(src), algo_config=cfg)
        quant.process()
        quant.model.save_model_to_file(dst, use_external_data_format=False)

    static_how = (
        "onnxruntime.quantization.quantize_static(QuantFormat.{fmt}, activation_type=QInt8, "
        "weight_type=QInt8, per_channel=False, op_types_to_quantize=['MatMul','Gemm'], MinMax "
        f"calibration on {CALIB_BATCHES} random token batches)"
    )
    variants = [
        ("gpt2_qdq", "gpt2", static(QuantFormat.QDQ, "gpt2"), static_how.format(fmt="QDQ")),
        ("bert_qdq", "bert", static(QuantFormat.QDQ, "bert"), static_how.format(fmt="QDQ")),
        ("llama_qdq", "llama", static(QuantFormat.QDQ, "llama"), static_how.format(fmt="QDQ")),
        (
            "bert_qoperator",
            "bert",
            static(QuantFormat.QOperator, "bert"),
            static_how.format(fmt="QOperator"),
        ),
        (
            "bert_dynamic",
            "bert",
            dynamic,
            "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8, op_types_to_quantize=['MatMul'])",
        ),
        (
            "llama_int4",
            "llama",
            int4,
            "matmul_nbits_quantizer.MatMulNBitsQuantizer(DefaultWeightOnlyQuantConfig(block_size=32, "
            "is_symmetric=True, quant_format=QuantFormat.QDQ)) -> int4 weights, blocked DequantizeLinear",
        ),
    ]
    for name, base, fn, how in variants:
        if base not in feeds_by_name:
            SKIPPED[name] = f"base model {base} was not exported"
            continue
        _quantize_variant(out, name, base, feeds_by_name[base], how, fn)


# ---------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------


def _shape_str(vi: onnx.ValueInfoProto) -> str:
    t = vi.type.tensor_type
    dims = [
        str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim
    ]
    return (
        f"`{vi.name}` {onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name}[{', '.join(dims)}]"
    )


def _op_census(model: onnx.ModelProto) -> collections.Counter:
    counts: collections.Counter = collections.Counter()

    def walk(graph):
        for node in graph.node:
            counts[node.op_type if not node.domain else f"{node.domain}.{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.g.node:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(model.graph)
    return counts


def write_readme(out: Path) -> str:
    lines = [
        "# Test models",
        "",
        "Tiny, randomly initialised transformer models exported to ONNX for importer and",
        "end-to-end tests. Generated by `scripts/export_test_models.py` (run it once by hand",
        "with a separate venv holding torch; see its docstring) -- do not edit by hand.",
        "`micro.py` is not generated: it builds single-op / small-pattern graphs with",
        "onnx.helper (`build_all()` -> {name: ModelProto}, `BAD`, `UNSUPPORTED`,",
        "`random_inputs()`); `tests/test_micro_models.py` checks them.",
        "",
        "Made with torch 2.13.0+cpu, transformers 5.23.0, onnx 1.23.2, onnxscript 0.7.2,",
        "onnxruntime 1.31.1. Quantized variants are made from the float model of the same",
        "family and share its inputs; their outputs are the quantized model's own results.",
        "Nodes keep the exporter's module-scope metadata_props (`namespace`,",
        "`pkg.torch.onnx.name_scopes`, `pkg.torch.onnx.class_hierarchy`,",
        "`pkg.torch.onnx.fx_node`); the stack traces are stripped.",
        "",
        "Every `<name>.onnx` has `<name>.inputs.npz` (keys = graph input names) and",
        "`<name>.outputs.npz` (keys = graph output names, onnxruntime 1.31 CPU results).",
        "Load them with `np.load(path)` (no pickle needed). All models have static shapes,",
        "ir_version <= 10 and pass `onnx.checker.check_model(m, full_check=True)`.",
        f"Weights: `torch.manual_seed({SEED})`; inputs: `numpy.random.default_rng({SEED})`.",
        "",
        "| file | bytes | opset | nodes |",
        "| --- | ---: | --- | ---: |",
    ]
    details = []
    for name in INFO:
        path = out / f"{name}.onnx"
        model = onnx.load(str(path))
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
        census = _op_census(model)
        lines.append(
            f"| `{name}.onnx` | {path.stat().st_size} | {opsets} | {sum(census.values())} |"
        )
        details += [
            f"## `{name}.onnx`",
            "",
            f"- config: `{INFO[name]['config']}`",
            f"- made by: {INFO[name]['how']}",
            f"- ir_version {model.ir_version}, opsets: {opsets}",
            "- inputs: " + ", ".join(_shape_str(v) for v in model.graph.input),
            "- outputs: " + ", ".join(_shape_str(v) for v in model.graph.output),
            f"- files: `{name}.inputs.npz` ({(out / f'{name}.inputs.npz').stat().st_size} B), "
            f"`{name}.outputs.npz` ({(out / f'{name}.outputs.npz').stat().st_size} B)",
            "- op types: " + ", ".join(f"{op} {n}" for op, n in census.most_common()),
            "",
        ]
    lines.append("")
    if SKIPPED:
        lines += ["## Skipped variants", ""]
        lines += [f"- `{name}`: {why}" for name, why in SKIPPED.items()]
        lines.append("")
    text = "\n".join(lines + details).rstrip() + "\n"
    (out / "README.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("onnxruntime.quantization", "onnxruntime.quantization.matmul_nbits_quantizer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    rng = np.random.default_rng(SEED)
    feeds = export_float(out, rng)
    export_quantized(out, feeds, rng)
    write_readme(out)
    for leftover in out.glob("*-inferred.onnx"):
        leftover.unlink()
    print("SKIPPED:", SKIPPED or "none")


if __name__ == "__main__":
    main()
