"""What MODEL means on the command line, and the shapes it is built or bound with.

`resolve_model(model, shapes, save_dir)` turns the CLI's MODEL argument into a file the
compiler loads:

- a built-in name (`gpt2`, `llama`, `gpt2-small`): an ONNX model built for the shapes;
- a Hugging Face `config.json` (or a directory holding one): a shape-only IR graph
  (`models.llm_graph`), saved as `<save_dir>/<name>/ir.json` (no weights);
- an ONNX file: as is, or, when `--batch/--seq-len/--kv-len` are given and the model has
  symbolic input dims, with those dims bound (`host.onnx_dims`);
- anything else (ir.json, a bundle) as is; shape options are then refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernbench.errors import InputError, did_you_mean
from kernbench.host.estimate import named_model_bytes, refuse_above_limit
from kernbench.host.onnx_dims import ShapeOptions, bind_onnx_dims
from kernbench.ir.qconfig import load_qconfig
from kernbench.models.builders import MODELS, model_for
from kernbench.models.hf_config import config_path, is_hf_config, load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph, weight_params


@dataclass
class ResolvedModel:
    """The file to compile and what it is."""

    path: Path
    kind: str                     # "builtin" | "hf_config" | "onnx" | "file"
    shape_only: bool = False      # no weight values: timing only
    notes: list[str] = field(default_factory=list)  # what was built / bound, for stderr


def resolve_model(model: Path, shapes: ShapeOptions, save_dir: Path,
                  qconfig: Path | None = None, *, need_values: bool = False) -> ResolvedModel:
    """See the module docstring. Shape options on a model that has none to bind → exit 2;
    `need_values` (--verify) on a shape-only model → exit 2, before anything is built."""

    shapes.check()
    model = Path(model)
    _check_exists(model)
    check_routing(model, shapes)
    if not model.exists() and str(model) in MODELS:
        return _builtin(str(model), shapes, save_dir)
    if model.exists() and is_hf_config(model):
        if need_values:
            raise InputError("--verify needs weight values; a config.json model is "
                             "shape-only (timing only)", file=str(model))
        return _hf(model, shapes, save_dir, qconfig)
    if model.suffix == ".onnx" and model.exists() and shapes.given():

        path, notes = bind_onnx_dims(model, shapes, save_dir)
        return ResolvedModel(path, "onnx", notes=notes)
    if shapes.given():
        raise InputError("--batch/--seq-len/--kv-len apply to the named models "
                         f"({', '.join(MODELS)}), Hugging Face config.json files and ONNX "
                         "models with symbolic input dims", file=str(model))
    return ResolvedModel(model, "onnx" if model.suffix == ".onnx" else "file")


def _check_exists(model: Path) -> None:
    """Refuse, naming `model` as the user gave it, a path that is neither a built-in name
    nor an existing file, and a folder with nothing to load in it."""
    if not model.exists() and str(model) not in MODELS:
        raise InputError(f"no such file or folder, and not a built-in model"
                         f"{did_you_mean(model, list(MODELS))} (built-in models: "
                         f"{', '.join(MODELS)}; `kernbench list` shows them)", file=str(model))
    if model.is_dir() and not (model / "ir.json").exists() and not is_hf_config(model):
        raise InputError("a folder without config.json or ir.json in it (give a model file, "
                         "a Hugging Face config.json or its folder, or a built-in name)",
                         file=str(model))


def _builtin(name: str, shapes: ShapeOptions, save_dir: Path) -> ResolvedModel:
    import onnx


    batch, seq, kv = shapes.resolved()
    if seq >= 1 and kv >= 0:  # estimate before building (bad values: the builder refuses)
        refuse_above_limit(batch * named_model_bytes(MODELS[name], seq, kv),
                           f"{name} --batch {batch} --seq-len {seq} --kv-len {kv}")
    m = model_for(name, seq_len=seq, kv_len=kv, batch=batch)
    save_dir.mkdir(parents=True, exist_ok=True)
    tag = f"_b{batch}" if batch > 1 else ""
    path = save_dir / f"{name}{tag}_seq{seq}_kv{kv}.onnx"
    onnx.save(m, str(path))
    phase = "decode" if kv else "prefill"
    return ResolvedModel(path, "builtin", notes=[
        f"built {name} ({phase}: batch {batch}, seq {seq}, kv {kv})"])


def check_routing(model: Path, shapes: ShapeOptions) -> None:
    """--routing / --routing-seed / --routing-same-layers given for a model they do not
    apply to (anything but an MoE Hugging Face config.json) → InputError."""
    if not (shapes.routing or shapes.routing_seed is not None or shapes.routing_same):
        return
    if not (model.exists() and is_hf_config(model)):
        raise InputError("--routing/--routing-seed apply to MoE Hugging Face config.json "
                         "models (mixtral, qwen3_moe, deepseek_v3)", file=str(model))
    arch = load_hf_config(model)
    if arch.moe is None:
        raise InputError(f"--routing/--routing-seed apply to MoE models; model_type "
                         f"{arch.model_type!r} has no experts", file=str(config_path(model)))


def _hf(model: Path, shapes: ShapeOptions, save_dir: Path,
        qconfig: Path | None) -> ResolvedModel:

    arch = load_hf_config(model)
    batch, seq, kv = shapes.resolved()
    routing = shapes.routing_spec()
    g = build_llm_graph(arch, LlmShape(batch, seq, kv),
                        load_qconfig(qconfig) if qconfig else None, routing)
    out = Path(save_dir) / "model"
    g.save(out / "ir.json", out / "ir_weights.npz")
    phase = "decode" if kv else "prefill"
    moe = (f"; {arch.moe.n_experts} experts, top {arch.moe.top_k}, routing "
           f"{routing.describe()}" if arch.moe else "")
    return ResolvedModel(out / "ir.json", "hf_config", shape_only=True, notes=[
        f"built {arch.model_type} '{arch.name}' from {config_path(model)} (shape-only, "
        f"{weight_params(g) / 1e9:.2f} B parameters, {arch.n_layers} layers; {phase}: "
        f"batch {batch}, seq {seq}, kv {kv}{moe})"])
