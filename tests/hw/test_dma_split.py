"""PE_SCHEDULER splits DMA transfers larger than `max_transfer_bytes` (ADR-0014)."""

from __future__ import annotations

import json
from pathlib import Path

from kernbench.cli import main
from kernbench.common.tile_plan import StageType
from kernbench.components.builtin.pe_scheduler import split_transfers

GPT2 = Path(__file__).resolve().parents[1] / "models" / "gpt2.onnx"


def test_split_transfers_pieces():
    data = {"op": "copy"}
    stages = [(StageType.DMA_READ, {"nbytes": 1000, "addr": 4096, "rows": 4, "data": data}),
              (StageType.GEMM, {"m": 4}), (StageType.DMA_WRITE, {"nbytes": 256, "addr": 0})]
    out = split_transfers(stages, 256)
    reads = [p for st, p in out if st == StageType.DMA_READ]
    assert [p["nbytes"] for p in reads] == [256, 256, 256, 232]  # ceil(1000 / 256) pieces
    assert [p["addr"] for p in reads] == [4096, 4352, 4608, 4864]
    assert all(p["rows"] == 1 for p in reads)
    assert [("data" in p) for p in reads] == [False, False, False, True]
    assert out[-2:] == stages[1:]  # within the limit: untouched


def _dma_ops(stats: dict) -> int:
    return sum(e["ops"] for k, e in stats["engines"].items() if k.endswith("pe_dma"))


def test_split_run_still_verifies_and_moves_more_transfers(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(GPT2), "--out", str(a), "--quiet", "--verify"]) == 0
    assert main(["run", str(GPT2), "--out", str(b), "--quiet", "--verify", "--set",
                 "cube.pe_template.pe_scheduler.max_transfer_bytes=256"]) == 0
    sa = json.loads((a / "stats.json").read_text())
    sb = json.loads((b / "stats.json").read_text())
    assert _dma_ops(sb) > _dma_ops(sa) and sb["total_ns"] > sa["total_ns"]
    assert json.loads((b / "verification.json").read_text())["ok"]
