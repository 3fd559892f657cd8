"""`--dump-intermediates` (ADR-0020 D11 debug mode): every layer output is compared with
the IR reference interpreter at the op boundary where it is complete, not in the final
memory, and the rows go to verification.json."""

from __future__ import annotations

import json
from pathlib import Path

from kernbench.cli import main
from kernbench.host.bundle import Bundle, layer_divergence, run_with_data
from kernbench.host.flow import load_inputs
from kernbench.host.intermediates import BoundaryCapture, layer_ends
from kernbench.ir.interpreter import Interpreter
from kernbench.sim_engine.op_log import OpRecord
from kernbench.topology import load_topology


def _run(out: Path, *extra: str) -> int:
    return main(["run", "gpt2", "--seq-len", "8", "--verify", "--keep-bundle", "--no-trace",
                 "--out", str(out), *extra])


def test_rows_are_written_to_verification_json(tmp_path):
    assert _run(tmp_path / "o", "--dump-intermediates") == 0
    v = json.loads((tmp_path / "o" / "verification.json").read_text())
    rows = v["intermediates"]
    bundle = Bundle.load(tmp_path / "o" / "bundle")
    with_view = [t for n in bundle.graph.nodes for t in n.outputs
                 if t and t in bundle.memory["views"]]
    assert {r["tensor"] for r in rows} == set(with_view)
    assert all(r["ok"] and r["max_abs_err"] == 0.0 for r in rows), rows
    assert all(isinstance(r["op"], int) and r["op_end_ns"] > 0 for r in rows)
    # without the flag: no rows
    assert _run(tmp_path / "p") == 0
    assert "intermediates" not in json.loads((tmp_path / "p" / "verification.json").read_text())


def test_a_tensor_is_read_at_its_boundary_not_from_the_final_memory(tmp_path):
    """A later op that overwrites an intermediate's region (as a reused buffer would)
    spoils the final memory but not the comparison at the op boundary."""
    assert _run(tmp_path / "o") == 0
    bundle = Bundle.load(tmp_path / "o" / "bundle")
    from kernbench.cmdq.io import load_program

    prog = load_program(tmp_path / "o" / "bundle" / "cmdq.json")
    topo = load_topology("small")
    feeds = load_inputs(None, bundle.graph)
    views = bundle.memory["views"]
    victim = next(t for n in bundle.graph.nodes for t in n.outputs
                  if t in views and n.op_type not in ("EMBEDDING",) and t not in
                  bundle.graph.outputs)
    src = views[next(t for t in bundle.graph.inputs if t in views)]
    captured: list[BoundaryCapture] = []

    def watch(records, run, init):  # noqa: ANN001, ANN202
        cap = BoundaryCapture(bundle, records, layer_ends(bundle, run), init)
        captured.append(cap)
        end = max(r.t_end for r in records) + 1.0
        # the graph input's first bytes copied over the victim, after everything else
        records.append(OpRecord(end, end + 1.0, "test.clobber", "memory", "dma",
                                {"src_space": "hbm", "src_addr": src["address"],
                                 "dst_space": "hbm", "dst_addr": views[victim]["address"],
                                 "nbytes": 16}))
        return cap

    _, _, final = run_with_data(bundle, prog, topo, feeds, trace=False, watch_ops=watch)
    _, values = Interpreter(bundle.graph).run(feeds, keep_all=True)
    at_boundary = {r["tensor"]: r for r in captured[0].rows(bundle, values)}
    at_end = {r["tensor"]: r for r in layer_divergence(bundle, final, values)}
    assert at_boundary[victim]["ok"] and at_boundary[victim]["max_abs_err"] == 0.0
    assert not at_end[victim]["ok"]
