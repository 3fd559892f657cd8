from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

MODELS = Path(__file__).resolve().parents[1] / "models"
sys.path.insert(0, str(MODELS))

FLOAT_MODELS = ["gpt2", "bert", "llama", "gpt2_decode", "llama_decode", "llama_opset23"]
QUANT_MODELS = ["gpt2_qdq", "bert_qdq", "llama_qdq", "bert_qoperator", "bert_dynamic",
                "llama_int4"]  # fmt: skip


def model_path(name: str) -> Path:
    p = MODELS / f"{name}.onnx"
    if not p.exists():
        pytest.skip(f"{p.name} not committed")
    return p


def io(name: str) -> tuple[dict, dict]:
    ins = dict(np.load(MODELS / f"{name}.inputs.npz"))
    outs = dict(np.load(MODELS / f"{name}.outputs.npz"))
    return ins, outs


def ort_run(path: Path, feeds: dict, optimize: bool = True) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
