"""`kernbench run --tp N`: every chip runs its rank's program, the all-reduces are real
chip-link traffic, and the data pass gives the single-chip run's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.host.parallel import run_parallel
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"
BF16 = ROOT / "examples" / "qconfig" / "bf16.yaml"
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama-4l.json"


def _quiet() -> RunHooks:
    return RunHooks(note=lambda _s: None)


def _run(tmp: Path, name: str, tp: int, chips: int = 2):  # noqa: ANN202
    topo = load_topology("small", [f"system.chips={chips}"])
    opts = RunOptions(qconfig=BF16, verify=True, trace=False, report=False, tp=tp,
                      bundle=tmp / name / "bundle")
    if tp == 1:
        return run_model(GPT2, topo, tmp / name, opts, _quiet()), topo
    return run_parallel(GPT2, topo, tmp / name, opts, _quiet()), topo


def test_tp2_verifies_and_equals_the_single_chip_run(tmp_path: Path) -> None:
    one, _ = _run(tmp_path, "one", 1)
    two, topo = _run(tmp_path, "two", 2)
    assert one.verdict is not None and one.verdict.ok
    assert two.verdict is not None and two.verdict.ok
    a, b = one.outputs["logits"], two.outputs["logits"]
    # the same bf16 math; only the order the ranks' partial sums are added in differs, so
    # an intermediate may round to the neighbouring bf16 value: OpenBLAS picks its float32
    # kernels by CPU (docs/verification.md), hence half a bf16 step of the largest logit
    # (2**-8); a missing or doubled partial sum is off by a whole term
    np.testing.assert_allclose(b, a, rtol=0, atol=2**-8 * float(np.abs(a).max()))
    s = two.stats
    assert s["parallel"]["tp"] == 2 and s["parallel"]["chips"] == [[0, 1]]
    # 2 layers × 2 all-reduces + the LM head's all-gather, as DMA traffic over the chip link
    assert s["parallel"]["collectives_per_rank"] == 5
    assert s["energy"]["actions"]["chip_link_byte"] > 0
    # ... and in the link table: both directions of the chip link carried collective bytes
    for link in ("sip0.cube0.r0c0->sip1.cube0.r0c0", "sip1.cube0.r0c0->sip0.cube0.r0c0"):
        assert s["links"][link]["bytes"] > 0
    cmdq = json.loads((tmp_path / "two" / "bundle" / "cmdq.json").read_text())["cmdq"]
    per_chip = len(topo.pes) // topo.chips
    chips_of = {}
    for e in cmdq:
        if e["opcode"] != "END":
            chips_of.setdefault(e["layer_id"], set()).add(e["pe"] // per_chip)
    # every layer runs on both chips: each chip runs its own rank's program
    assert all(c == {0, 1} for c in chips_of.values()), chips_of
    assert "gemm_18.allreduce" in chips_of


def test_shape_only_tp_replays_blocks_and_reports_the_collectives(tmp_path: Path) -> None:
    out = tmp_path / "o"
    code = main(["run", str(TINY), "-t", "small", "--set", "system.chips=2", "--tp", "2",
                 "--batch", "2", "--kv-len", "16", "--no-report", "--keep-bundle",
                 "--out", str(out), "--quiet"])
    assert code == 0
    s = json.loads((out / "stats.json").read_text())
    assert s["parallel"]["tp"] == 2 and s["replay"]["blocks"] == 4
    n = len(json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"])
    assert n == (s["entry_count"] if "entry_count" in s else len(s["entries"]))
    assert s["llm"]["tpot_ns"] == pytest.approx(s["total_ns"])


def test_dp_runs_replicas_on_their_own_chips(tmp_path: Path) -> None:
    """--dp 2 --batch 4: two replicas of batch 2, each on its own chip, no collective;
    the LLM figures count the whole batch."""
    runs = {}
    for name, extra in (("one", ["--batch", "2"]), ("dp", ["--dp", "2", "--batch", "4"])):
        out = tmp_path / name
        code = main(["run", str(TINY), "-t", "small", "--set", "system.chips=2",
                     "--kv-len", "16", "--no-report", "--keep-bundle", "--out", str(out),
                     "--quiet", *extra])
        assert code == 0
        runs[name] = json.loads((out / "stats.json").read_text())
    dp, one = runs["dp"], runs["one"]
    assert dp["parallel"]["dp"] == 2 and dp["parallel"]["chips"] == [[0], [1]]
    assert dp["parallel"]["collective_entries"] == 0
    assert dp["llm"]["batch"] == 4
    # the replicas run side by side: a step takes about one replica's time
    assert dp["total_ns"] == pytest.approx(one["total_ns"], rel=0.05)
    assert dp["llm"]["decode_tokens_per_s"] == pytest.approx(
        2 * one["llm"]["decode_tokens_per_s"], rel=0.05)
    cmdq = json.loads((tmp_path / "dp" / "bundle" / "cmdq.json").read_text())["cmdq"]
    per_chip = 4  # small: 4 PEs per chip
    pes = [e["pe"] // per_chip for e in cmdq if e["opcode"] != "END"]
    assert pes.count(0) == pes.count(1) > 0


@pytest.mark.parametrize(("args", "needle"), [
    (["--dp", "2", "--batch", "3", "--set", "system.chips=2"],
     "--dp 2: batch 3 does not split into 2 replicas"),
    (["--dp", "2", "--set", "system.chips=2"], "--dp 2 splits the batch between replicas"),
    (["--dp", "2", "--tp", "2", "--batch", "2", "--set", "system.chips=2"],
     "--tp 2 × --dp 2 = 4 chips: the topology 'small' has 2 chip(s)"),
    (["--tp", "3", "--set", "system.chips=4"], "--tp 3: attention heads 4 does not split into 3"),
    (["--tp", "4", "--set", "system.chips=4"], "--tp 4: KV heads 2 does not split into 4"),
    (["--tp", "2"], "--tp 2: the topology 'small' has 1 chip(s)"),
    (["--tp", "0"], "--tp 0 must be at least 1"),
    (["--tp", "2", "--replay-blocks", "2", "--set", "system.chips=2"],
     "--replay-blocks 2: the replay check needs at least 3 simulated blocks"),
])
def test_bad_tp_is_one_line_exit_2(args: list[str], needle: str, tmp_path: Path,
                                   capsys) -> None:  # noqa: ANN001
    model = TINY if "--dp" in args else ROOT / "tests" / "models" / "llama.onnx"
    code = main(["run", str(model), *args,
                 "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize(("args", "needle"), [
    (["tests/hf_configs/tiny-mixtral.json", "--tp", "2"],
     "--tp 2: mixture-of-experts models are not split by --tp (split its experts with --ep)"),
    (["tests/hf_configs/tiny-llama-4l.json", "--tp", "2", "--batch", "4096", "--seq-len", "4096"],
     "model does not fit in cube 0's HBM (17179869184 B): tensor 'l0.ln_attn.y' of "
     "8589934592 B would end at byte"),
])
def test_a_tp_model_that_cannot_be_split_or_held_is_one_line(
        args: list[str], needle: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The line names the value: the flag for a model --tp does not split, the tensor and
    its bytes for one that does not fit; nothing is left in --out."""
    code = main(["run", str(ROOT / args[0]), *args[1:], "-t", "small", "--set",
                 "system.chips=2", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


def test_tp_and_dp_combine(tmp_path: Path) -> None:
    """--tp 2 --dp 2 on 4 chips: two replicas of two tensor-parallel chips, each replica
    with its own all-reduces; a step takes about one replica's time."""
    stats = {}
    for name, extra in (("tp", ["--batch", "2"]), ("tpdp", ["--dp", "2", "--batch", "4"])):
        out = tmp_path / name
        assert main(["run", str(TINY), "-t", "small", "--set", "system.chips=4", "--tp", "2",
                     "--kv-len", "16", "--no-report", "--out", str(out), "--quiet",
                     *extra]) == 0
        stats[name] = json.loads((out / "stats.json").read_text())
    tp, both = stats["tp"]["parallel"], stats["tpdp"]["parallel"]
    assert both["chips"] == [[0, 1], [2, 3]] and tp["chips"] == [[0, 1]]
    assert both["collective_entries"] == 2 * tp["collective_entries"]
    assert stats["tpdp"]["total_ns"] == pytest.approx(stats["tp"]["total_ns"], rel=0.05)
