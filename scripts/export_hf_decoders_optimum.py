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
def randomize(model):
    """As export.py: every parameter random (no zero biases / unit norms to deduplicate)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if ("ln" in name or "norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.1 * r)
            else:
                p.copy_(0.02 * r if p.dim() > 1 else 0.05 * r)


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
