"""`kernbench run MODEL --generate N` (issue 39 item 7): the figures are one prefill plus
N − 1 decode steps, each equal to the program `run --kv-len K` simulates on its own; between
bucket edges a step is the serving memo's linear interpolation of the two edge programs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.host.serve.buckets import TOLERANCE


def _run(out: Path, *args: str) -> dict:
    assert main(["run", "llama", "--no-report", "--quiet", "--out", str(out), *args]) == 0
    return json.loads((out / "stats.json").read_text())


def test_generation_is_a_prefill_plus_separate_decode_steps(tmp_path, capsys):
    g = _run(tmp_path / "g", "--seq-len", "4", "--generate", "4")["generation"]
    stdout = capsys.readouterr().out
    prefill = _run(tmp_path / "p", "--seq-len", "4")
    steps = [_run(tmp_path / f"d{k}", "--kv-len", str(k)) for k in (4, 5, 6)]
    assert g["ttft_ns"] == prefill["total_ns"]
    assert g["kv_lens"] == [4, 5, 6] and g["decode_steps"] == 3 and g["new_tokens"] == 4
    assert g["tpot_ns"] == [s["total_ns"] for s in steps]
    energies = [prefill["energy"]["total_pj"]] + [s["energy"]["total_pj"] for s in steps]
    assert g["decode_energy_pj"] == energies[1:]
    total = prefill["total_ns"] + sum(s["total_ns"] for s in steps)
    assert g["generation_ns"] == pytest.approx(total, abs=1e-3)
    assert g["tpot_mean_ns"] == pytest.approx((total - prefill["total_ns"]) / 3, abs=1e-3)
    assert g["tokens_per_s"] == pytest.approx(4 * 1e9 / total, rel=1e-6)
    assert g["energy_per_token_pj"] == pytest.approx(sum(energies) / 4, abs=1e-3)
    with open(tmp_path / "g" / "generation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["ns"]) for r in rows] == [prefill["total_ns"], *g["tpot_ns"]]
    # stdout's lines, generation included, are summary.txt's in order (the file also
    # holds the layer table between the summary and the generation)
    lines = (tmp_path / "g" / "summary.txt").read_text().splitlines()
    it = iter(lines)
    assert "TTFT" in stdout and all(any(x == y for y in it) for x in stdout.splitlines())


def test_between_bucket_edges_the_serving_rule_decides_and_exact_steps_simulates(tmp_path):
    # 33 cached tokens lie between the edges 32 and 34 (docs/serving.md, the bucket rule):
    # the midpoint 33 is simulated; on the chord within the past tokens' tolerance the chord
    # is used, else the midpoint's own figure
    g = _run(tmp_path / "g", "--seq-len", "33", "--generate", "2")["generation"]
    lo, mid, hi = (_run(tmp_path / f"d{k}", "--kv-len", str(k)) for k in (32, 33, 34))

    def rule(key):  # noqa: ANN001, ANN202
        a, m, b = (key(s) for s in (lo, mid, hi))
        return (a + b) / 2 if abs(m - (a + b) / 2) <= TOLERANCE[2] * abs(m) else m

    assert g["kv_lens"] == [33] and g["programs_simulated"] == 3
    assert g["tpot_ns"][0] == pytest.approx(rule(lambda s: s["total_ns"]), abs=1e-3)
    assert g["decode_energy_pj"][0] == pytest.approx(
        rule(lambda s: s["energy"]["total_pj"]), abs=1e-3)
    ex = _run(tmp_path / "x", "--seq-len", "33", "--generate", "2", "--exact-steps")
    assert ex["generation"]["tpot_ns"] == [mid["total_ns"]]
    assert ex["generation"]["step_rule"] == "exact" and ex["generation"]["programs_simulated"] == 1


@pytest.mark.parametrize("args, says", [
    (["--generate", "0"], "at least 1"),
    (["--generate", "3", "--kv-len", "8"], "--kv-len does not apply"),
    (["--generate", "3", "--verify"], "--verify"),
])
def test_bad_generation_is_one_line(tmp_path, capsys, args, says):
    assert main(["run", "llama", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert not (tmp_path / "o").exists()


def test_a_fixed_shape_onnx_cannot_generate(tmp_path, capsys):
    model = Path(__file__).resolve().parents[1] / "models" / "llama.onnx"
    assert main(["run", str(model), "--generate", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "symbolic" in err[0], err
