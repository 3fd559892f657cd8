"""A shape-only model's tensor-parallel program merged as it streams
(`compiler.parallel.lockstep`): entry for entry the program `merge_programs` makes from the
ranks' programs held whole, split over the same chips, and the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench.cmdq.hw import limits_for
from kernbench.compiler.parallel import shard_graph
from kernbench.compiler.parallel.lockstep import LockstepMerge, RankShape
from kernbench.compiler.parallel.tp_program import merge_programs
from kernbench.compiler.pipeline import load_model
from kernbench.host import parallel
from kernbench.host.chunked_compile import compile_chunks
from kernbench.host.flow import CompileRequest
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.parallel import (
    _high_water,
    _scratch_base,
    _site_buffers,
    chip_topology,
    parallel_chips,
    run_parallel,
)
from kernbench.host.run import RunHooks, RunOptions
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
#: 8 heads and 8 KV heads (splits 2, 4 and 8 ways), 6 layers (4 simulated by block replay)
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama-tp8.json"


def _model(tmp: Path) -> Path:
    return resolve_model(TINY, ShapeOptions(1, None, 16), tmp / "model", None).path


def _rank(tmp: Path, topo, tp: int, all_pes: bool):  # noqa: ANN001, ANN202
    graph, source = load_model(_model(tmp), None)
    tg = shard_graph(graph, tp, 0)
    rank = compile_chunks(tg.graph, source, chip_topology(topo), tmp / "bundle",
                          CompileRequest(write_cmdq=False, all_pes=all_pes))
    return tg, rank


@pytest.mark.parametrize(("tp", "dp", "all_pes"), [(2, 1, False), (4, 2, True),
                                                    (8, 1, True)])
def test_streamed_merge_is_merge_programs_entry_for_entry(tmp_path: Path, tp: int, dp: int,
                                                          all_pes: bool) -> None:
    topo = load_topology("t3k")
    tg, rank = _rank(tmp_path, topo, tp, all_pes)
    program = [e for chunk in rank.chunks for e in chunk]
    assert len(program) == rank.entries
    sites = _site_buffers(tg, rank.state)
    groups = parallel_chips(topo, tp, dp)
    base = _scratch_base(_high_water(rank.state))
    limits = limits_for(topo)
    want = merge_programs([program] * (tp * dp), sites, topo, groups, limits, base)
    merge = LockstepMerge(RankShape(rank.entries, rank.layer_order, rank.layer_entries),
                          sites, topo, groups, limits, base)
    # the rank program in chunks of another size than the compiler's
    pieces = iter([program[i:i + 37] for i in range(0, len(program), 37)])
    got = [e for chunk in merge.chunks(pieces) for e in chunk]
    assert merge.entries == len(want.entries) == len(got)
    assert merge.collective_entries == want.collective_entries
    assert got == want.entries
    layers: dict[str, int] = {}
    for e in want.entries:
        if e["layer_id"]:
            layers[e["layer_id"]] = layers.get(e["layer_id"], 0) + 1
    assert merge.layer_entries == layers
    # every entry's PE as the split reads it: on the chip of the merged entry's own PE
    per_chip = len(topo.pes) // topo.chips
    pes = merge.entry_pes()
    assert pes[-1] == "end" and len(pes) == len(want.entries)
    assert [p // per_chip for p in pes[:-1]] == [topo.pe(e["pe"]).index // per_chip
                                                 for e in want.entries[:-1]]


def _stats(tmp: Path, model: Path, tp: int, held: bool, all_pes: bool,
           monkeypatch: pytest.MonkeyPatch) -> str:
    topo = load_topology("t3k")
    if not held:  # the streamed merge must be what runs
        def refuse(*_a: object, **_k: object) -> None:
            raise AssertionError("the held merge ran")

        monkeypatch.setattr(parallel, "merge_programs", refuse)
    opts = RunOptions(trace=False, report=False, write_cmdq=held, write_weights=held,
                      tp=tp, all_pes=all_pes)
    r = run_parallel(model, topo, tmp / ("held" if held else "streamed"), opts,
                     RunHooks(note=lambda _s: None))
    monkeypatch.undo()
    return json.dumps(r.stats, sort_keys=True)


@pytest.mark.parametrize(("tp", "all_pes"), [(2, False), (8, False), (8, True)])
def test_streamed_merge_runs_byte_identical_to_the_held_merge(
        tmp_path: Path, tp: int, all_pes: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path)
    held = _stats(tmp_path, model, tp, True, all_pes, monkeypatch)
    streamed = _stats(tmp_path, model, tp, False, all_pes, monkeypatch)
    assert streamed == held
    s = json.loads(streamed)
    assert s["parallel"]["tp"] == tp and s["replay"]["blocks"] == 6
    assert s["parallel"]["collective_entries"] > 0


def test_a_rank_program_off_its_layout_is_refused(tmp_path: Path) -> None:
    """The layout comes from the layers' order and counts; a rank program whose site
    entries are not where they say is a compiler bug, never a quietly wrong merge."""
    topo = load_topology("t3k")
    tg, rank = _rank(tmp_path, topo, 2, True)
    program = [e for chunk in rank.chunks for e in chunk]
    sites = _site_buffers(tg, rank.state)
    site = sites[0].site.node
    order = list(rank.layer_order)
    i = order.index(site)
    j = max(k for k in range(i) if rank.layer_entries.get(order[k]))
    order.insert(j, order.pop(i))  # the site before the layer that precedes it
    merge = LockstepMerge(RankShape(rank.entries, order, rank.layer_entries), sites, topo,
                          parallel_chips(topo, 2), limits_for(topo),
                          _scratch_base(_high_water(rank.state)))
    with pytest.raises(RuntimeError, match="lockstep merge"):
        for _ in merge.chunks(iter([program])):
            pass
