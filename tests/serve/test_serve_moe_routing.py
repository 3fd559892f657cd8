"""An MoE config.json model is served with the routing `run` would give it (--routing,
--routing-seed, --routing-same-layers): each step program is built with it, and the step
cache keeps the programs of each routing apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.host.serve.model import ServedModel
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
MOE = ROOT / "tests" / "hf_configs" / "tiny-qwen3-moe.json"


def _run_ns(tmp_path: Path, *routing: str) -> float:
    out = tmp_path / ("run" + "-".join(routing).replace(":", ""))
    assert main(["run", str(MOE), "-t", "small", "--seq-len", "16", "--no-report",
                 "--quiet", "--out", str(out), *routing]) == 0
    return json.loads((out / "stats.json").read_text())["total_ns"]


@pytest.mark.parametrize("routing", [("zipf:2", 3, False), (None, None, True)])
def test_a_step_program_is_the_run_of_that_routing(tmp_path, routing):
    m = ServedModel.open(MOE, None, tmp_path, routing=routing)
    flags = ([f"--routing={routing[0]}", f"--routing-seed={routing[1]}"] if routing[0]
             else ["--routing-same-layers"])
    ns = m.simulate((1, 16, 0), load_topology("small"))
    assert ns == pytest.approx(_run_ns(tmp_path, *flags), abs=1e-3)
    if routing[0]:  # another draw of the experts: another program
        assert ns != pytest.approx(_run_ns(tmp_path), abs=1e-3)


def test_the_step_cache_keeps_each_routing_apart(tmp_path):
    cache = tmp_path / "steps.json"

    def serve(name: str, *routing: str) -> dict:
        out = tmp_path / name
        assert main(["serve", str(MOE), "-t", "small", "--requests", "3", "--rate", "20000",
                     "--prompt-len", "16:48", "--output-len", "3", "--quiet",
                     "--step-cache", str(cache), "--out", str(out), *routing]) == 0
        return json.loads((out / "stats.json").read_text())["serve"]

    plain = serve("a")
    zipf = serve("b", "--routing", "zipf:2", "--routing-seed", "3")
    assert "routing" not in plain  # a run without the options writes what it always wrote
    assert zipf["routing"] == {"routing": "zipf:2", "seed": 3, "same_layers": False}
    assert zipf["steps"]["programs_simulated"] == zipf["steps"]["programs"]  # none reused
    assert zipf["results"] != plain["results"]
    again = serve("c", "--routing", "zipf:2", "--routing-seed", "3")
    assert again["steps"]["programs_simulated"] == 0 and again["results"] == zipf["results"]


def test_routing_given_to_a_dense_model_is_refused_as_run_refuses_it(tmp_path, capsys):
    assert main(["serve", str(ROOT / "tests" / "hf_configs" / "tiny-llama.json"), "-t",
                 "small", "--rate", "100", "--routing", "zipf", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--routing/--routing-seed apply to MoE models" in err[0], err
    assert not (tmp_path / "o").exists()
