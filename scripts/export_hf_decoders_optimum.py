"""Save tiny random-weight GPT-2 / Llama checkpoints, then export them with Optimum
(`optimum-cli export onnx --task text-generation-with-past`), the most common way users
get a decoder-with-past ONNX. Needs optimum-onnx (transformers 4.57 here), in a venv of
its own: torch is not a kernbench dependency (tests/models/hf_decoders/README.md).

    python scripts/export_hf_decoders_optimum.py OUTDIR
"""
import subprocess
import sys
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_hf_decoders import randomize  # noqa: E402 - the same random weights

out = Path(sys.argv[1] if len(sys.argv) > 1 else "optimum")
torch.manual_seed(0)
models = {
    "gpt2": GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512,
                                       n_positions=256, bos_token_id=0, eos_token_id=0)),
    "llama": LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, vocab_size=512,
                                          max_position_embeddings=256, bos_token_id=0,
                                          eos_token_id=0)),
}
for name, m in models.items():
    randomize(m)
    ck = out / f"{name}_ckpt"
    m.save_pretrained(ck)
    dst = out / f"{name}_optimum"
    cmd = [str(Path(sys.executable).parent / "optimum-cli"), "export", "onnx", "--model", str(ck),
           "--task", "text-generation-with-past", str(dst)] + sys.argv[2:]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd)
    print(name, "rc", r.returncode, flush=True)
