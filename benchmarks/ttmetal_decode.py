"""tt-metal's Llama decode step on a kernbench preset, op by op as tt-metal publishes it.

Run:
  .venv/bin/python benchmarks/ttmetal_decode.py [tests/hf_configs/llama-3.1-8b] [--kv-len 128]

What it models (ADR-1030; docs/fidelity.md, "LLM figures"):

* The ops tt-metal's tt_transformers runs per decoder layer in decode on one chip, in the
  order its source issues them (`LAYER_OPS`): the two norms with the reshard before each,
  the DRAM-sharded QKV / WO / FF1 / FF3 / FF2 matmuls, the head split, two rotary
  embeddings, two KV-cache updates, decode attention, the concat, the SiLU multiply, the
  residual adds and the memory-config changes between them; plus the ops of the step
  outside the layers (`step_ops`: embedding, the rotary matrices, the final norm, the LM
  head in as many DRAM-sharded matmuls as its column cap per core makes, their concat).
* Each op costs the fitted per-op launch of tt-metal's trace rows (`launch_ns`, the
  GEMM_FLOPS n150 fit) plus its device time. A DRAM-sharded matmul's device time is the
  longer of its weight read and its math: the weight is width-sharded over the DRAM banks
  (N padded to a multiple of the bank count), one reader core next to each bank streams
  its shard at the bank's share of the published DRAM-sharded-matmul bandwidth, and the
  same core computes its 1 × N/banks tile columns at the op's math fidelity with the
  fitted per-tile overhead and unpack rate (tile_fpu_v1 cycles). The other ops move one
  token's activations (tens of KiB) or, for decode attention, the cached K and V of every
  position; their device time is those bytes at the DRAM-sharded rate, next to nothing
  beside the launch.

Nothing here is fitted to the Llama figure: the per-op launch, tile overhead and unpack
rate are the n150 GEMM fit (benchmarks/data/silicon_params.json), the DRAM rate is the
published range of tt-metal's DRAM-sharded decode matmuls, and the op list and formats
are tt-metal's published source.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from ttmetal_matmul import TILE_BYTES, Chip  # noqa: E402

from kernbench.topology import load_topology  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "benchmarks" / "data" / "silicon_params.json"
CONFIG = ROOT / "tests" / "hf_configs" / "llama-3.1-8b"

#: achieved DRAM bandwidth of tt-metal's DRAM-sharded matmuls in a Llama decode on Wormhole
#: with GDDR6 at 12 GT/s (tech_reports/Saturating_DRAM_bandwidth, table row "Llama3-70
#: decode": 239-260 GB/s of 288); the n150's banks run at that speed. Per preset: no
#: other card's DRAM-sharded matmul bandwidth was read.
DRAM_SHARDED_GBS = {"n150": (239.0, 260.0)}

#: per decoder layer, tt_transformers' decode ops in issue order (decoder.py forward,
#: distributed_norm.py, attention.py forward_decode, mlp.py forward; one chip, so the
#: collectives return their input and issue nothing): (op, weight, activation width,
#: activation tensors read + written). weight "kv" is the cached K and V.
LAYER_OPS = (
    ("to_memory_config (norm input reshard)", None, "hidden", 2),
    ("rms_norm (attention norm)", None, "hidden", 2),
    ("linear QKV (DRAM-sharded)", "wqkv", "qkv", 0),
    ("sharded_to_interleaved (QKV)", None, "qkv", 2),
    ("nlp_create_qkv_heads_decode", None, "qkv", 2),
    ("rotary_embedding_llama (Q)", None, "hidden", 2),
    ("rotary_embedding_llama (K)", None, "kv", 2),
    ("paged_update_cache (K)", None, "kv", 1),
    ("paged_update_cache (V)", None, "kv", 1),
    ("scaled_dot_product_attention_decode", "kv", "hidden", 2),
    ("to_memory_config (attention output)", None, "hidden", 2),
    ("nlp_concat_heads_decode", None, "hidden", 2),
    ("matmul WO (DRAM-sharded)", "wo", "hidden", 0),
    ("to_memory_config (residual config)", None, "hidden", 2),
    ("add (attention residual)", None, "hidden", 3),
    ("to_memory_config (norm input reshard)", None, "hidden", 2),
    ("rms_norm (MLP norm)", None, "hidden", 2),
    ("linear FF1 (DRAM-sharded)", "w1", "ffn", 0),
    ("linear FF3 (DRAM-sharded)", "w3", "ffn", 0),
    ("mul (SiLU(FF1) x FF3)", None, "ffn", 3),
    ("to_memory_config (FF2 input)", None, "ffn", 2),
    ("linear FF2 (DRAM-sharded)", "w2", "hidden", 0),
    ("to_memory_config (MLP output)", None, "hidden", 2),
    ("add (MLP residual)", None, "hidden", 3),
)

#: columns of the LM head one DRAM-sharded matmul takes, per core of the LM head's grid
#: (model_config.py: 128256 / 4 columns "was experimentally the maximum columns that
#: worked per device" on 48 cores, "668 columns per core"); wider vocabularies split
LM_HEAD_COLS_PER_CORE = 668


def lm_head_splits(vocab: int, hidden: int, grid: tuple[int, int]) -> list[int]:
    """Columns of each LM-head matmul: tt_transformers' LM head grid is the largest
    rows x cols (rows counted down from the grid's, then cols) whose cores divide the
    hidden size's tiles; each split takes at most 668 columns per core of it."""
    rows, cols = grid
    while hidden % (32 * rows * cols):
        rows -= 1
        if rows == 0:
            rows, cols = grid[0], cols - 1
    cap = LM_HEAD_COLS_PER_CORE * rows * cols
    n = _cdiv(vocab, cap)
    return [cap] * (n - 1) + [vocab - cap * (n - 1)]


def step_ops(m: Llama, grid: tuple[int, int]) -> tuple:
    """The step's ops outside the layers (model.py, rope.py, lm_head.py in decode): the
    embedding, the rotary matrices' lookups, the final norm, and per LM-head split a
    DRAM-sharded matmul and its output's memory-config change, then the logits' concat."""
    ops = [("embedding", None, "hidden", 1),
           ("embedding (rotary cos)", None, "head", 1),
           ("embedding (rotary sin)", None, "head", 1),
           ("to_memory_config (norm input reshard)", None, "hidden", 2),
           ("rms_norm (final norm)", None, "hidden", 2)]
    for i, n in enumerate(lm_head_splits(m.vocab, m.hidden, grid)):
        ops += [(f"linear LM head split {i} (DRAM-sharded)", f"lm_head:{n}", n, 0),
                (f"to_memory_config (LM head split {i})", None, n, 2)]
    return (*ops, ("concat (logits)", None, "vocab", 2))


#: tt_transformers' performance configuration for Llama-3.1-8B (model_config.py: "All
#: models use bfp4 in FF1 and FF3 MLPs", LoFi for them; FF2, QKV, WO at the bfp8 default
#: with HiFi2; the 32nd decoder's FF1 / FF3 back to bfp8 with HiFi2; KV cache bfp8):
#: weight -> (dtype, math fidelity)
FORMATS = {"wqkv": ("BFLOAT8_B", "HiFi2"), "wo": ("BFLOAT8_B", "HiFi2"),
           "w1": ("BFLOAT4_B", "LoFi"), "w3": ("BFLOAT4_B", "LoFi"),
           "w2": ("BFLOAT8_B", "HiFi2"), "lm_head": ("BFLOAT8_B", "HiFi2"),
           "kv": ("BFLOAT8_B", "HiFi2")}
LAST_LAYER_FF13 = ("BFLOAT8_B", "HiFi2")


@dataclass(frozen=True)
class Llama:
    """The shape facts of a Llama config.json the decode step needs."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, path: Path) -> Llama:
        """Read `path` (config.json or its folder); ValueError names the file and field."""
        f = path / "config.json" if path.is_dir() else path
        try:
            c = json.loads(f.read_text(encoding="utf-8"))
        except OSError as e:
            raise ValueError(f"{f}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not JSON ({e.msg})") from None
        keys = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "vocab_size")
        for k in keys:
            if not isinstance(c.get(k), int) or c[k] < 1:
                raise ValueError(f"{f}: field '{k}' is not a positive integer")
        return cls(c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"],
                   c["num_attention_heads"], int(c.get("num_key_value_heads",
                                                       c["num_attention_heads"])),
                   c["vocab_size"])

    def width(self, name: str | int) -> int:
        """Elements per token of the activation `name` (an int is its own width)."""
        if isinstance(name, int):
            return name
        return {"hidden": self.hidden, "ffn": self.ffn, "head": self.head_dim,
                "qkv": (self.heads + 2 * self.kv_heads) * self.head_dim,
                "kv": self.kv_heads * self.head_dim, "vocab": self.vocab}[name]

    def weight_kn(self, w: str) -> tuple[int, int]:
        """(K, N) of weight `w` ("lm_head:N" is an LM-head split of N columns)."""
        if w.startswith("lm_head:"):
            return self.hidden, int(w.split(":")[1])
        return {"wqkv": (self.hidden, (self.heads + 2 * self.kv_heads) * self.head_dim),
                "wo": (self.hidden, self.hidden), "w1": (self.hidden, self.ffn),
                "w3": (self.hidden, self.ffn), "w2": (self.ffn, self.hidden),
                "lm_head": (self.hidden, self.vocab)}[w]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def dram_sharded_matmul_ns(k: int, n: int, dtype: str, fidelity: str, chip: Chip,
                           banks: int, p: dict[str, float], dram_gbs: float) -> float:
    """Device time (ns) of a one-tile-row DRAM-sharded matmul: each bank's reader core
    streams its K × ceil(N / banks) tile shard at the bank's share of `dram_gbs` and
    computes it; the longer of the two (double-buffered)."""
    kt, nt_bank = _cdiv(k, 32), _cdiv(_cdiv(n, 32), banks)
    t = TILE_BYTES[dtype]
    read = kt * nt_bank * t / (dram_gbs / banks)
    word = chip.noc_gbs / chip.clock_ghz
    per_product = max(chip.tile_cycles[fidelity], t / (p["unpack_words"] * word)) \
        + p["tile_overhead_cycles"]
    return max(read, kt * nt_bank * per_product / chip.clock_ghz)


def op_device_ns(op: tuple, m: Llama, layer: int, kv_len: int, chip: Chip,
                 banks: int, p: dict[str, float], dram_gbs: float, batch: int = 1) -> float:
    """Device time (ns) of one op of the step (module docstring); `batch` users (at most
    32: their activations fill one tile row) each with `kv_len` cached tokens."""
    _name, weight, width, tensors = op
    if weight is None:  # one token's bf16 activations, padded to a 32-row tile
        return tensors * 32 * m.width(width) * 2 / dram_gbs
    if weight == "kv":  # decode attention reads every cached K and V row once
        rows = batch * 2 * m.kv_heads * _cdiv(kv_len + 1, 32)
        return rows * _cdiv(m.head_dim, 32) * TILE_BYTES[FORMATS["kv"][0]] / dram_gbs
    dtype, fid = FORMATS[weight.split(":")[0]]
    if weight in ("w1", "w3") and layer == m.layers - 1:
        dtype, fid = LAST_LAYER_FF13
    k, n = m.weight_kn(weight)
    return dram_sharded_matmul_ns(k, n, dtype, fid, chip, banks, p, dram_gbs)


def decode_step(m: Llama, kv_len: int, chip: Chip, banks: int, grid: tuple[int, int],
                p: dict[str, float], dram_gbs: float, batch: int = 1) -> dict:
    """The step's time (ns) and where it goes: launches, DRAM-sharded matmuls, the rest."""
    launch = mm = other = 0.0
    n_ops = 0
    ops = [(layer, op) for layer in range(m.layers) for op in LAYER_OPS]
    ops += [(m.layers, op) for op in step_ops(m, grid)]
    for layer, op in ops:
        w = op[1]
        t = op_device_ns(op, m, layer, kv_len, chip, banks, p, dram_gbs, batch)
        launch += p["launch_ns"]
        n_ops += 1
        if w is None or w == "kv":
            other += t
        else:
            mm += t
    total = launch + mm + other
    return {"ops": n_ops, "launch_ns": launch, "matmul_ns": mm, "other_ns": other,
            "step_ns": total, "tokens_per_s": 1e9 / total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?", type=Path, default=CONFIG,
                    help="Llama config.json or its folder")
    ap.add_argument("--kv-len", type=int, default=128, help="cached tokens (the prompt)")
    ap.add_argument("--batch", type=int, default=1, help="users, 1..32 (one tile row)")
    ap.add_argument("--topology", default="n150", help="preset")
    ap.add_argument("--params", type=Path, default=PARAMS,
                    help="the n150 fit (launch_ns, tile_overhead_cycles, unpack_words)")
    ap.add_argument("--ops", action="store_true",
                    help="also list one layer's and the step's own ops with their device time")
    a = ap.parse_args(argv)
    try:
        if a.kv_len < 0:
            raise ValueError(f"--kv-len {a.kv_len}: not a non-negative integer")
        if not 1 <= a.batch <= 32:
            raise ValueError(f"--batch {a.batch}: not in 1..32 (one tile row of users)")
        if a.topology not in DRAM_SHARDED_GBS:
            raise ValueError(f"--topology {a.topology}: no published DRAM-sharded matmul "
                             f"bandwidth for it (known: {', '.join(DRAM_SHARDED_GBS)})")
        m = Llama.from_config(a.config)
        p = json.loads(a.params.read_text(encoding="utf-8"))
        topo = load_topology(a.topology, [])
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    chip = Chip.from_topology(topo)
    banks = topo.config.cube.hbm_ctrl.channels
    grid = (topo.config.cube.mesh.rows, topo.config.cube.mesh.cols)
    print(f"tt-metal Llama decode step on {a.topology} ({m.layers} layers, batch {a.batch}, "
          f"kv_len {a.kv_len}, "
          f"{banks} DRAM banks, launch {p['launch_ns']:.0f} ns per op)")
    print("| DRAM-sharded GB/s | ops | launches ms | matmuls ms | other ms | step ms | "
          "tokens/s/user |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    band = DRAM_SHARDED_GBS[a.topology]
    for gbs in (*band, sum(band) / 2):
        r = decode_step(m, a.kv_len, chip, banks, grid, p, gbs, a.batch)
        print(f"| {gbs:.1f} | {r['ops']} | {r['launch_ns'] / 1e6:.2f} | {r['matmul_ns'] / 1e6:.2f} | "
              f"{r['other_ns'] / 1e6:.2f} | {r['step_ns'] / 1e6:.2f} | {r['tokens_per_s']:.1f} |")
    if a.ops:
        gbs = sum(band) / 2
        print(f"\n| op (layer 0, then the step's own; {gbs:.1f} GB/s) | device us | with launch us |")
        print("| --- | ---: | ---: |")
        for layer, ops in ((0, LAYER_OPS), (m.layers, step_ops(m, grid))):
            for op in ops:
                t = op_device_ns(op, m, layer, a.kv_len, chip, banks, p, gbs, a.batch)
                print(f"| {op[0]} | {t / 1e3:.1f} | {(t + p['launch_ns']) / 1e3:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
