"""A load sweep of an MoE model takes serve's routing options (`routing`, `routing_seed`,
`routing_same_layers` in the `serve:` section): each point serves with them, as `kernbench
serve --routing ...` does; a sweep without them keeps its point ids and options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.host.sweep import plan_sweep, run_points

ROOT = Path(__file__).resolve().parents[2]
MOE = ROOT / "tests" / "hf_configs" / "tiny-qwen3-moe.json"
SERVE = "serve:\n  rate: [20000]\n  requests: 3\n  prompt_len: '16:48'\n  output_len: 3\n"


def _serve_cli(tmp_path: Path, *routing: str) -> dict:
    out = tmp_path / "cli"
    assert main(["serve", str(MOE), "-t", "small", "--requests", "3", "--rate", "20000",
                 "--prompt-len", "16:48", "--output-len", "3", "--max-batch", "64",
                 "--quiet", "--out", str(out), *routing]) == 0
    return json.loads((out / "stats.json").read_text())["serve"]


def test_a_point_serves_with_the_sweeps_routing(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {MOE}\n{SERVE}  routing: zipf:2\n  routing_seed: 3\n")
    plan = plan_sweep(spec)
    (point,) = plan.points
    assert (point.serve["routing"], point.serve["routing_seed"]) == ("zipf:2", 3)
    run_points(plan.points, tmp_path / "out", workers=1)
    stats = json.loads((tmp_path / "out" / "points" / point.id / "stats.json").read_text())
    cli = _serve_cli(tmp_path, "--routing", "zipf:2", "--routing-seed", "3")
    assert stats["serve"]["routing"] == cli["routing"]
    assert stats["serve"]["results"] == cli["results"]


def test_without_routing_a_sweep_keeps_its_point_ids(tmp_path):
    plain, same = tmp_path / "a.yaml", tmp_path / "b.yaml"
    plain.write_text(f"model: {MOE}\n{SERVE}")
    same.write_text(f"model: {MOE}\n{SERVE}  routing_same_layers: true\n")
    (p,), (q,) = plan_sweep(plain).points, plan_sweep(same).points
    assert not any(k.startswith("routing") for k in p.serve)
    assert q.serve["routing_same_layers"] is True and q.id != p.id


@pytest.mark.parametrize("model, extra, key, reason", [
    ("tiny-llama.json", "routing: zipf", "serve.routing", "model_type 'llama' has no experts"),
    ("tiny-llama.json", "routing_same_layers: true", "serve.routing_same_layers",
     "has no experts"),
    ("tiny-qwen3-moe.json", "routing: zipf:9", "serve.routing", "zipf"),
])
def test_routing_a_serve_run_refuses_is_refused_before_any_point(tmp_path, model, extra,
                                                                   key, reason):
    (tmp_path / model).write_bytes((ROOT / "tests" / "hf_configs" / model).read_bytes())
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {model}\n{SERVE}  {extra}\n")
    with pytest.raises(InputError) as e:
        plan_sweep(spec)
    assert e.value.field == key and reason in e.value.reason, e.value
