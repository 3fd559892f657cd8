"""`kernbench run --pp N`: layer stages on their own chips, activations sent between
them, micro-batches that overlap (the pipeline bubble in the simulated times), and the
data pass giving the single-chip run's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.host.pipeline import run_pipeline
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
GPT2 = ROOT / "tests" / "models" / "gpt2.onnx"
BF16 = ROOT / "examples" / "qconfig" / "bf16.yaml"
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama-4l.json"


def _quiet() -> RunHooks:
    return RunHooks(note=lambda _s: None)


def _verified(tmp: Path, name: str, chips: int, **par: int):  # noqa: ANN202
    topo = load_topology("small", [f"system.chips={chips}"])
    opts = RunOptions(qconfig=BF16, verify=True, trace=False, report=False,
                      bundle=tmp / name / "bundle", **par)
    run = run_pipeline if par.get("pp", 1) > 1 else run_model
    res = run(GPT2, topo, tmp / name, opts, _quiet())
    assert res.verdict is not None and res.verdict.ok
    return res, topo


def test_pp2_and_tp2_pp2_equal_the_single_chip_run(tmp_path: Path) -> None:
    one, _ = _verified(tmp_path, "one", 1)
    two, topo = _verified(tmp_path, "pp", 2, pp=2)
    four, _ = _verified(tmp_path, "tppp", 4, pp=2, tp=2)
    a = one.outputs["logits"]
    # the same layers in the same order on other chips: the same bf16 arithmetic
    np.testing.assert_array_equal(two.outputs["logits"], a)
    # tensor-parallel stages add their partial sums in another order: an intermediate may
    # round to the neighbouring bf16 value, by CPU (tests/host/test_tp_run.py)
    np.testing.assert_allclose(four.outputs["logits"], a, rtol=0,
                               atol=2**-8 * float(np.abs(a).max()))
    s = two.stats
    assert s["parallel"]["pp"] == 2 and s["parallel"]["chips"] == [[[0], [1]]]
    # one send of the residual stream [1, 16, 64] (kept in fp32) from stage 0 to stage 1
    assert [(x["from_stage"], x["count"], x["dtype"]) for x in s["parallel"]["sends"]] \
        == [(0, 16 * 64, "fp32")]
    # ... whose bytes, and nothing else, cross the chip link from chip 0 to chip 1
    assert s["links"]["sip0.cube0.r0c0->sip1.cube0.r0c0"]["bytes"] == 16 * 64 * 4
    cmdq = json.loads((tmp_path / "pp" / "bundle" / "cmdq.json").read_text())["cmdq"]
    per_chip = len(topo.pes) // topo.chips
    chip_of: dict[str, set[int]] = {}
    for e in cmdq:
        if e["opcode"] != "END":
            chip_of.setdefault(e["layer_id"], set()).add(e["pe"] // per_chip)
    # the embedding and layer 0 on chip 0; layer 1, the LM head and the receive on chip 1
    assert chip_of["embedding_1"] == {0} and chip_of["attention_15"] == {0}
    assert chip_of["attention_42"] == {1} and chip_of["gemm_59"] == {1}
    assert chip_of["pp.recv.add_7"] == {1}


def _entries(out: Path, *extra: str) -> dict:
    code = main(["run", str(TINY), "-t", "small", "--set", "system.chips=2", "--pp", "2",
                 "--seq-len", "16", "--no-report", "--entries", "--out", str(out),
                 "--quiet", *extra])
    assert code == 0
    return json.loads((out / "stats.json").read_text())


def test_micro_batches_overlap_and_stage_1_waits_for_the_first(tmp_path: Path) -> None:
    s = _entries(tmp_path / "o", "--batch", "2")
    assert s["parallel"]["micro_batches"] == 2  # the prefill default: --pp, dividing 2
    rows = list(s["entries"].values())

    def on(chip: int, mb: int | None = None) -> list[dict]:
        return [r for r in rows if (r["pe"] or "").startswith(f"sip{chip}.")
                and (mb is None or r["layer_id"].endswith(f"@mb{mb}"))]

    stage0_mb0_end = max(r["end_ns"] for r in on(0, 0))
    # the bubble: chip 1 runs nothing until stage 0 has finished the first micro-batch
    assert min(r["start_ns"] for r in on(1)) >= stage0_mb0_end
    # the overlap: stage 0 works on micro-batch 1 while stage 1 works on micro-batch 0
    stage1_mb0 = on(1, 0)
    assert min(r["start_ns"] for r in on(0, 1)) < max(r["end_ns"] for r in stage1_mb0)
    # so the step is shorter than the four stage-micro-batch cells one after another
    cells = [(c, m) for c in (0, 1) for m in (0, 1)]
    spans = [max(r["end_ns"] for r in on(c, m)) - min(r["start_ns"] for r in on(c, m))
             for c, m in cells]
    assert s["total_ns"] < 0.9 * sum(spans)
    # each chip runs its micro-batches one after another
    assert max(r["end_ns"] for r in on(0, 0)) <= min(r["start_ns"] for r in on(0, 1))
    times = {(x["stage"], x["micro_batch"]): x for x in s["parallel"]["stage_times"]}
    assert times[(1, 0)]["start_ns"] >= times[(0, 0)]["end_ns"]
    assert s["llm"]["batch"] == 2


def test_the_trace_shows_the_micro_batches_and_the_bubble(tmp_path: Path) -> None:
    """trace.json of a --pp 2 --batch 2 prefill: a `pipeline` process with a track per
    stage and a span per micro-batch, consistent with the PEs' own command events in the
    same trace: chip 1 issues nothing before stage 0's first micro-batch has ended (the
    bubble), and chip 0 works on micro-batch 1 while chip 1 works on micro-batch 0."""
    out = tmp_path / "t"
    assert main(["run", str(TINY), "-t", "small", "--set", "system.chips=2", "--pp", "2",
                 "--seq-len", "16", "--batch", "2", "--no-report", "--trace", "--out",
                 str(out), "--quiet"]) == 0
    ev = json.loads((out / "trace.json").read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev
             if e["ph"] == "M" and e["name"] == "process_name"}
    (pid,) = [p for p, n in procs.items() if n == "pipeline"]
    threads = {e["tid"]: e["args"]["name"] for e in ev
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}
    assert sorted(threads.values()) == ["stage 0", "stage 1"]
    cell = {(e["args"]["stage"], e["args"]["micro_batch"]): (e["ts"], e["ts"] + e["dur"])
            for e in ev if e["ph"] == "X" and e["pid"] == pid}
    assert sorted(cell) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # the PEs' command events, per chip, from the same trace
    cmds: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    for e in ev:
        if e["ph"] == "X" and e.get("cat") == "command":
            chip = int(procs[e["pid"]].split(".")[0][3:])
            cmds[chip].append((e["args"]["start_ns"] / 1e3, e["args"]["end_ns"] / 1e3))
    first1 = min(s for s, _ in cmds[1])
    # the bubble: chip 1 starts when stage 0's first micro-batch is done, not before
    assert first1 >= cell[(0, 0)][1] - 1e-6
    assert cell[(1, 0)][0] >= cell[(0, 0)][1] - 1e-6
    # the overlap: stage 0's micro-batch 1 runs while stage 1's micro-batch 0 does
    assert cell[(0, 1)][0] < cell[(1, 0)][1] and cell[(1, 0)][0] < cell[(0, 1)][1]
    # each stage's spans cover its chip's commands
    for chip in (0, 1):
        lo = min(cell[(chip, m)][0] for m in (0, 1))
        hi = max(cell[(chip, m)][1] for m in (0, 1))
        assert lo - 1e-3 <= min(s for s, _ in cmds[chip])
        assert max(e for _, e in cmds[chip]) <= hi + 1e-3


def test_decode_runs_the_stages_one_after_another(tmp_path: Path) -> None:
    out = tmp_path / "d"
    assert main(["run", str(TINY), "-t", "small", "--set", "system.chips=2", "--pp", "2",
                 "--batch", "2", "--kv-len", "16", "--no-report", "--out", str(out),
                 "--quiet"]) == 0
    s = json.loads((out / "stats.json").read_text())
    assert s["parallel"]["micro_batches"] == 1
    t = {x["stage"]: x for x in s["parallel"]["stage_times"]}
    assert t[1]["start_ns"] >= t[0]["end_ns"]


def test_replay_of_a_pipeline_matches_exact(tmp_path: Path) -> None:
    """8 layers over 2 stages with 2 micro-batches: 3 simulated of 4 per stage, replayed
    along the pipeline's critical path; --exact simulates every layer."""
    cfg = json.loads(TINY.read_text())
    cfg["num_hidden_layers"] = 8
    model = tmp_path / "tiny-llama-8l.json"
    model.write_text(json.dumps(cfg))
    stats = {}
    for name, extra in (("replay", []), ("exact", ["--exact"])):
        out = tmp_path / name
        assert main(["run", str(model), "-t", "small", "--set", "system.chips=2", "--pp",
                     "2", "--batch", "2", "--seq-len", "16", "--no-report", "--out",
                     str(out), "--quiet", *extra]) == 0
        stats[name] = json.loads((out / "stats.json").read_text())
    r, e = stats["replay"], stats["exact"]
    assert r["replay"]["simulated_blocks_per_stage"] == 3
    assert r["replay"]["critical_path_cells"] == 3 and "replay" not in e
    assert r["total_ns"] == pytest.approx(e["total_ns"], rel=0.02)
    assert r["commands_completed"] == pytest.approx(e["commands_completed"], rel=0.01)


@pytest.mark.parametrize(("args", "needle"), [
    (["--pp", "3", "--set", "system.chips=3"],
     "--pp 3: 4 decoder layers do not split into 3 equal stages"),
    (["--pp", "2"], "--tp 1 × --pp 2 × --dp 1 = 2 chips: the topology 'small' has 1 chip(s)"),
    (["--pp", "2", "--tp", "2", "--set", "system.chips=2"],
     "--tp 2 × --pp 2 × --dp 1 = 4 chips: the topology 'small' has 2 chip(s)"),
    (["--pp", "2", "--batch", "4", "--micro-batches", "3", "--set", "system.chips=2"],
     "--micro-batches 3: batch 4 (per replica) does not split into 3 micro-batches"),
    (["--pp", "2", "--micro-batches", "2", "--set", "system.chips=2"],
     "--micro-batches 2 splits the batch: give --batch"),
    (["--pp", "0"], "--pp 0 must be at least 1"),
    (["--micro-batches", "2", "--batch", "2"], "--micro-batches needs --pp"),
])
def test_bad_pp_is_one_line_exit_2(args: list[str], needle: str, tmp_path: Path,
                                   capsys) -> None:  # noqa: ANN001
    code = main(["run", str(TINY), *args, "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_verify_refuses_micro_batches(tmp_path: Path) -> None:
    """A stage replays its program per micro-batch on the same buffers: no data pass."""
    topo = load_topology("small", ["system.chips=2"])
    opts = RunOptions(qconfig=BF16, verify=True, pp=2, micro_batches=2,
                      bundle=tmp_path / "b")
    with pytest.raises(InputError, match="--verify with --pp needs one replica and one "
                                         "micro-batch"):
        run_pipeline(GPT2, topo, tmp_path / "o", opts, _quiet())


def test_tp_pp_dp_combine(tmp_path: Path) -> None:
    """--tp 2 --pp 2 --dp 2 on 8 chips: two replicas of two stages of two tensor-parallel
    chips; each stage's all-reduces stay on its chips, each rank sends to its peer."""
    out = tmp_path / "o"
    assert main(["run", str(TINY), "-t", "small", "--set", "system.chips=8", "--tp", "2",
                 "--pp", "2", "--dp", "2", "--batch", "4", "--seq-len", "16", "--no-report",
                 "--keep-bundle", "--out", str(out), "--quiet"]) == 0
    s = json.loads((out / "stats.json").read_text())
    p = s["parallel"]
    assert p["chips"] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]] and p["micro_batches"] == 2
    assert s["llm"]["batch"] == 4
    cmdq = json.loads((out / "bundle" / "cmdq.json").read_text())["cmdq"]
    per_chip = 4  # small: 4 PEs per chip
    chips_of: dict[str, set[int]] = {}
    for e in cmdq:
        if e["opcode"] != "END":
            chips_of.setdefault(e["layer_id"], set()).add(e["pe"] // per_chip)
    recv = {c for lid, cs in chips_of.items() if lid.startswith("pp.recv.") for c in cs}
    assert recv == {2, 3, 6, 7}  # every chip of the second stages receives
    # an all-reduce runs on one stage's chips (the replicas share its layer id)
    ars = [cs for lid, cs in chips_of.items() if ".allreduce" in lid]
    assert ars and all(cs in ({0, 1, 4, 5}, {2, 3, 6, 7}) for cs in ars)
