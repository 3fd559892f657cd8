"""benchmarks/serve_pool.py: the replay of serve's pool calls counts what it claims.

docs/performance.md ("Serving", ADR-1310) quotes its units; these tests pin them on a run
whose programs all take one stand-in time: in one process every program is a unit of wall
and of CPU; with two workers the run's outputs and programs are the same and the pool's
calls take fewer units of wall, but no fewer than the programs over the workers."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import serve_pool  # noqa: E402

from kernbench.host.serve import run as serve_run  # noqa: E402
from kernbench.host.serve.model import ServedModel  # noqa: E402


def test_the_replay_counts_units_of_wall_and_cpu_and_restores_serve(tmp_path):
    cache = tmp_path / "steps.json"
    cache.write_text('{"kind": "kernbench step cache", "caches": {}}')
    before = serve_run.ProgramPool, ServedModel.simulate, serve_run.AUTO_START_CPU_S
    one = serve_pool.emulate(cache, 200, 1e6, 1)
    two = serve_pool.emulate(cache, 200, 1e6, 2)
    assert (serve_run.ProgramPool, ServedModel.simulate, serve_run.AUTO_START_CPU_S) == before
    # one process: every program in the serve process, a unit of wall and of CPU each
    assert one["calls"] == 0 and one["unused"] == 0
    assert one["local"] == one["wall"] == one["cpu"] == one["programs"] > 1
    # two workers: the same run, its programs two at a time at best
    same = ("programs", "tpot_p50_ms", "ttft_p99_ms")
    assert [two[k] for k in same] == [one[k] for k in same]
    assert two["calls"] > 0 and two["cpu"] >= two["programs"]
    assert -(-two["programs"] // 2) <= two["wall"] < one["wall"]
