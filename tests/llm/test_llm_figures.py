"""The `llm` section: figures checked against closed forms (tokens/s, KV bytes, weight
bytes), stdout / summary / report carry them, and a model that cannot fit in HBM is refused
with one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main

CONFIGS = Path(__file__).parent.parent / "hf_configs"


def _run(tmp_path, capsys, *args):  # noqa: ANN001, ANN002, ANN202
    rc = main(["run", *args, "-o", str(tmp_path), "--no-trace"])
    cap = capsys.readouterr()
    return rc, cap, json.loads((tmp_path / "stats.json").read_text()) if rc in (0, None) \
        else None


def test_decode_figures_match_closed_forms(tmp_path, capsys):
    cfg = CONFIGS / "tiny-llama.json"  # 2 layers, d 64, 4 heads / 2 KV heads, ffn 128
    rc, cap, stats = _run(tmp_path, capsys, str(cfg), "--batch", "4", "--kv-len", "40")
    assert rc in (0, None), cap.err
    s = stats["llm"]
    assert (s["phase"], s["layers"], s["batch"], s["seq_len"], s["kv_len"]) == \
        ("decode", 2, 4, 1, 40)
    # KV cache at int8: batch × layers × (K, V) × kv_heads × tokens × head_dim bytes
    assert s["kv_cache_bytes"] == 4 * 2 * 2 * 2 * 41 * 16
    # weights: int8 GEMM weights, fp32 embedding table and norm vectors
    gemm = 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 64 * 256
    assert s["params"] == gemm + 256 * 64 + (2 * 2 + 1) * 64
    assert s["weight_bytes"] == gemm + 4 * (256 * 64 + 5 * 64)
    assert s["tpot_ns"] == stats["total_ns"] and s["ttft_ns"] is None
    assert abs(s["decode_tokens_per_s"] - 4 / (stats["total_ns"] * 1e-9)) < 1e-3
    assert s["hbm"]["fits"] and not s["hbm"]["warning"]
    assert "time per output token" in cap.out and "tokens/s" in cap.out
    assert "time per output token" in (tmp_path / "summary.txt").read_text()
    assert "<h2>LLM</h2>" in (tmp_path / "report.html").read_text()


def test_prefill_ttft_and_builtin_on_request(tmp_path, capsys):
    rc, cap, stats = _run(tmp_path / "a", capsys, str(CONFIGS / "tiny-gpt2.json"),
                          "--batch", "2", "--seq-len", "8")
    s = stats["llm"]
    assert s["ttft_ns"] == stats["total_ns"] and s["tpot_ns"] is None
    assert abs(s["prefill_tokens_per_s"] - 16 / (stats["total_ns"] * 1e-9)) < 1e-3
    # a built-in model: no llm section unless asked (existing outputs stay the same)
    rc, cap, stats = _run(tmp_path / "b", capsys, "llama", "--kv-len", "8")
    assert "llm" not in stats
    rc, cap, stats = _run(tmp_path / "c", capsys, "llama", "--kv-len", "8", "--llm")
    assert stats["llm"]["kv_len"] == 8 and stats["llm"]["layers"] == 2


def test_model_that_cannot_fit_is_refused(tmp_path, capsys):
    cfg = json.loads((CONFIGS / "llama-3-8b" / "config.json").read_text())
    cfg["num_hidden_layers"] = 80  # a 70B-class body: ~26 GB at int8, small has 16 GiB
    p = tmp_path / "big.json"
    p.write_text(json.dumps(cfg))
    rc = main(["run", str(p), "-o", str(tmp_path / "o"), "--seq-len", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert "do not fit" in err[-1] and "HBM" in err[-1]
    assert not (tmp_path / "o" / "bundle").exists()


def test_progress_watch_reads_entries_and_stops():
    from rich.console import Console

    from kernbench.cli.sim_progress import MIN_ENTRIES, simulation_watch
    from kernbench.host.simulate import SimWatch

    watch = simulation_watch(Console(stderr=True, force_terminal=False))
    polls = []
    watch(SimWatch(1, 1, lambda: polls.append(1) or (0, 0)))()  # below MIN_ENTRIES: no-op
    assert polls == []
    state = {"done": 0}
    stop = watch(SimWatch(MIN_ENTRIES, 2, lambda: (state["done"], 0)))
    state["done"] = MIN_ENTRIES
    stop()
    assert state["done"] == MIN_ENTRIES  # it only reads


def test_hbm_nearly_full_is_a_warning_kept_with_quiet(tmp_path, capsys):
    """Weights + KV cache above 90 % of HBM: one `warning:` line on stderr, which --quiet
    keeps (docs/errors.md: --quiet silences tables and progress, never a warning)."""
    need = 156_928 + 20_992  # tiny-llama, batch 4, kv 40: weights + KV cache (test above)
    cap_gib = need / 0.95 / 2**30
    main(["run", str(CONFIGS / "tiny-llama.json"), "--batch", "4", "--kv-len", "40",
          "--quiet", "-o", str(tmp_path), "--set", f"cube.hbm_ctrl.capacity_gib={cap_gib!r}"])
    err = capsys.readouterr().err
    assert "warning: weights + KV cache use 95% of HBM" in err, err


def test_a_small_model_that_cannot_fit_reads_its_sizes_in_mib():
    from kernbench.errors import InputError
    from kernbench.host.llm import LlmFacts, check_fit
    from kernbench.topology import load_topology

    topo = load_topology("small")
    facts = LlmFacts("tiny", "prefill", 2, 1, 8, 0, 1000, 3 * 2**20, topo.hbm_bytes, 0, 0)
    with pytest.raises(InputError) as e:
        check_fit(facts, topo)
    assert "weights 3.00 MiB + KV cache 16.00 GiB = 16.00 GiB do not fit the 16.00 GiB" \
        in e.value.reason
