"""Expert parallelism on the IR (ADR-1050): the rank graphs of tests/models/moe.onnx,
run by the reference interpreter in lockstep with their all-to-alls done in numpy, give
the one-chip model's outputs; the all-to-all-v moves what its splits say."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from kernbench.cmdq.hw import TcmData, limits_for
from kernbench.cmdq.io import parse_program
from kernbench.compiler.collectives.alltoallv import link_elements, lower_all_to_all_v
from kernbench.compiler.collectives.lower import chip_bases
from kernbench.compiler.parallel.ep_graph import ep_graph
from kernbench.compiler.parallel.ep_onnx import find_gathered, split_experts
from kernbench.compiler.pipeline import load_model
from kernbench.host.simulate import simulate_program
from kernbench.ir.interpreter import Interpreter, run
from kernbench.sim_engine.executor import DataExecutor
from kernbench.sim_engine.memory_store import MemoryStore
from kernbench.sim_engine.op_log import OpLogger
from kernbench.topology import load_topology
from kernbench.topology.chips import chip_route

MODELS = Path(__file__).parent.parent / "models"


def _counts(g, blocks, n, x):  # noqa: ANN001, ANN202
    _, env = run(g, {"x": x}, quantize=False, keep_all=True)
    out = []
    for b in blocks:
        idx = env[b.idx]
        t = idx.shape[0] // n
        out.append([np.bincount(idx[r * t:(r + 1) * t].reshape(-1), minlength=b.n_experts)
                    .tolist() for r in range(n)])
    return out


def _lockstep(egs, x: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Every rank's values, each collective site computed from all ranks' inputs."""
    n = len(egs)
    interps = [Interpreter(eg.graph, quantize=False) for eg in egs]
    envs: list[dict[str, np.ndarray]] = [{"x": x} for _ in range(n)]
    at = [0] * n
    for site in [*egs[0].sites, None]:
        for r, eg in enumerate(egs):
            nodes = eg.graph.nodes
            while at[r] < len(nodes) and (site is None or nodes[at[r]].id != site.node):
                node = nodes[at[r]]
                ins = [envs[r][t] if t in envs[r] else interps[r].const_value(t)
                       for t in node.inputs]
                for t, v in zip(node.outputs, interps[r].call(node, ins), strict=False):
                    envs[r][t] = interps[r].stored(t, v)
                at[r] += 1
            at[r] += 1
        if site is None:
            break
        for d in range(n):
            blocks = []
            for s in range(n):
                src = envs[s][egs[s].sites[egs[0].sites.index(site)].src]
                rows = site.splits[s][d]
                off = 0 if site.op == "all_gather" else sum(site.splits[s][:d])
                blocks.append(src[off:off + rows])
            got = np.concatenate(blocks)
            dst = egs[d].graph.tensors[site.dst].shape
            pad = np.zeros((dst[0] - got.shape[0], *got.shape[1:]), got.dtype)
            envs[d][site.dst] = np.concatenate([got, pad])
    return envs


@pytest.mark.parametrize("n", [2, 4])
def test_rank_graphs_compute_the_one_chip_moe(n: int) -> None:
    g, _ = load_model(MODELS / "moe.onnx")
    x = np.load(MODELS / "moe.inputs.npz")["x"]
    blocks = find_gathered(g)
    assert len(blocks) == 1 and blocks[0].n_experts == 4 and blocks[0].top_k == 2
    counts = _counts(g, blocks, n, x)
    egs = []
    for r in range(n):
        rg = copy.deepcopy(g)
        bs = find_gathered(rg)
        split_experts(rg, bs)
        egs.append(ep_graph(rg, bs, n, r, counts, slice_tokens=True))
        # a rank holds its own experts' weights only
        held = {t.split(".")[2] for t in rg.weights if ".experts." in t}
        assert held == {str(e) for e in range(r * 4 // n, (r + 1) * 4 // n)}
    one = run(g, {"x": x}, quantize=False)["y"]
    ort = np.load(MODELS / "moe.outputs.npz")["y"]
    for env in _lockstep(egs, x):
        np.testing.assert_allclose(env["y"], one, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(env["y"], ort, rtol=1e-5, atol=1e-5)


def test_all_to_all_v_moves_the_blocks_and_its_bytes_follow_the_routes() -> None:
    topo = load_topology("small", ["system.chips=3", "system.arrangement=line"])
    # blocks of whole 64-byte DMA bursts (16 fp32), so the wire carries exactly their bytes
    splits = [[48, 0, 704], [80, 32, 16], [0, 1296, 64]]
    n = 3
    rng = np.random.default_rng(0)
    sends = [rng.integers(-50, 50, sum(splits[s])).astype(np.float32) for s in range(n)]
    bases = chip_bases(topo)
    src, dst = [0, 8192, 4096], [65536, 131072, 98304]   # other offsets on every chip
    entries = lower_all_to_all_v(splits, list(range(n)), topo, limits_for(topo),
                                 src=[bases[i] + a for i, a in enumerate(src)],
                                 dst=[bases[i] + a for i, a in enumerate(dst)],
                                 flags=1 << 20, dtype="fp32", first_id=0, after={},
                                 tile_bytes=2048)
    entries.append({"opcode": "END", "id": len(entries)})
    store = MemoryStore.for_topology(topo)
    for s in range(n):
        store.write("hbm", bases[s] + src[s], sends[s])
    init = store.snapshot()
    log = OpLogger()
    res = simulate_program(parse_program({"cmdq": entries}), topo, op_logger=log,
                           data=TcmData())
    mem = DataExecutor(log, init).run()
    for d in range(n):
        want = np.concatenate([sends[s][sum(splits[s][:d]):sum(splits[s][:d + 1])]
                               for s in range(n)])
        got = mem.read("hbm", bases[d] + dst[d], (want.size,), "float32")
        np.testing.assert_array_equal(got, want)
    # bytes on each chip link: every block over its route, plus the barrier's flag reads
    want_bytes: dict[tuple[int, int], int] = {}

    def carry(a: int, b: int, nbytes: int) -> None:
        for hop in chip_route(topo.config.system, a, b):
            want_bytes[hop] = want_bytes.get(hop, 0) + nbytes

    for s in range(n):
        for d in range(n):
            if s != d and splits[s][d]:
                carry(s, d, splits[s][d] * 4)
    for k in range(2):             # ceil(log2 3) rounds, rank r reads rank r - 2^k
        for r in range(n):
            carry((r - (1 << k)) % n, r, 64)   # a one-element flag is one burst
    got_bytes: dict[tuple[int, int], int] = {}
    for lid, link in topo.links.items():
        if link.kind == "chip_link":
            a, b = (int(x.split(".")[0][3:]) for x in (link.src, link.dst))
            got_bytes[(a, b)] = got_bytes.get((a, b), 0) + res.sim.servers[lid].bytes
    assert {k: v for k, v in got_bytes.items() if v} == want_bytes
    assert link_elements(splits) == 704 + 80 + 16 + 1296
