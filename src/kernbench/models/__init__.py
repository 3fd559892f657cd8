"""Bundled models: `gpt2_tiny.onnx` (2 layers, d=64, 4 heads, vocab 256, 16 tokens; a
randomly initialised GPT-2 exported by scripts/export_test_models.py) for `kernbench demo`."""

from pathlib import Path

MODELS = Path(__file__).parent
DEMO_MODEL = MODELS / "gpt2_tiny.onnx"
