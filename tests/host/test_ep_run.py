"""`kernbench run --ep N` (ADR-1050): a shape-only Mixtral-style model on a small 4-chip
system reports the per-expert and per-chip load of the whole batch's routing, its chip
links carry exactly the all-to-alls' rows, and bad requests are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernbench.cli import main
from kernbench.models.hf_config import load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph
from kernbench.topology import load_topology
from kernbench.topology.chips import chip_route

ROOT = Path(__file__).resolve().parents[2]
MIXTRAL = ROOT / "tests" / "hf_configs" / "tiny-mixtral.json"
BF16 = ROOT / "examples" / "qconfig" / "bf16.yaml"
RING4 = ["--set", "system.chips=4", "--set", "system.arrangement=ring"]


@pytest.fixture(scope="module")
def ep4(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("ep4") / "o"
    rc = main(["run", str(MIXTRAL), "-t", "small", *RING4, "--ep", "4", "--batch", "8",
               "--kv-len", "16", "--routing", "zipf:1.5", "-q", str(BF16), "-o", str(out),
               "--no-report", "--quiet"])
    assert rc == 0
    return json.loads((out / "stats.json").read_text())


def _one_chip_counts(routing: str = "zipf:1.5") -> list[np.ndarray]:
    """Per layer, the tokens of every expert in the one-chip model at the full batch."""
    from kernbench.models.moe_routing import parse_routing

    g = build_llm_graph(load_hf_config(MIXTRAL), LlmShape(8, 1, 16), None,
                        parse_routing(routing))
    return [np.asarray(ly["tokens_per_expert"]) for ly in g.metadata["llm"]["moe"]["layers"]]


def _rank_counts(layer: int) -> np.ndarray:
    """[rank, expert]: the pairs each chip's 2 tokens route to each expert."""
    from kernbench.models.moe_routing import expert_choice, parse_routing

    ch = expert_choice(parse_routing("zipf:1.5"), 8, 4, 2, layer)
    return np.stack([np.bincount(ch[2 * r:2 * r + 2].reshape(-1), minlength=4)
                     for r in range(4)])


def test_ep4_reports_the_whole_batch_load_per_expert_and_per_chip(ep4: dict) -> None:
    m, par = ep4["moe"], ep4["parallel"]
    assert (par["ep"], par["dp"], par["chips"], par["collectives_per_rank"]) == \
        (4, 1, [[0, 1, 2, 3]], 4)   # dispatch + combine in each of 2 layers
    assert m["ep"] == 4 and m["experts_per_chip"] == 1
    one = _one_chip_counts()
    for ly, want in zip(m["layers"], one, strict=True):
        assert ly["tokens_per_expert"] == want.tolist()     # the one-chip routing
        assert ly["per_chip"] == want.tolist()              # one expert per chip
        assert ly["chip_imbalance"] == pytest.approx(want.max() / want.mean(), abs=1e-6)
    assert m["total"]["per_chip"] == sum(one).tolist()
    assert ep4["llm"]["batch"] == 8


def test_ep4_chip_links_carry_the_routed_rows(ep4: dict) -> None:
    """Σ over the layers' dispatch and combine: rows × hidden × 4 bytes (fp32 rows) over
    each (sender, receiver) chip route, plus each all-to-all's barrier flags (2 rounds,
    one 64-byte burst per flag read)."""
    topo = load_topology("small", ["system.chips=4", "system.arrangement=ring"])
    sysc = topo.config.system
    want: dict[tuple[int, int], int] = {}

    def carry(a: int, b: int, nbytes: int) -> None:
        for hop in chip_route(sysc, a, b):
            want[hop] = want.get(hop, 0) + nbytes

    row = 64 * 4
    rows = 0
    for layer in range(2):
        c = _rank_counts(layer)
        for s in range(4):
            for d in range(4):
                if s != d and c[s, d]:
                    carry(s, d, int(c[s, d]) * row)   # dispatch: s's tokens to d's expert
                    carry(d, s, int(c[s, d]) * row)   # combine: back
                    rows += 2 * int(c[s, d])
        for _site in range(2):
            for k in range(2):
                for r in range(4):
                    carry((r - (1 << k)) % 4, r, 64)
    got: dict[tuple[int, int], int] = {}
    for lid, v in ep4["links"].items():
        a, _, b = lid.partition("->")
        ca, cb = int(a.split(".")[0][3:]), int(b.split(".")[0][3:])
        if ca != cb and v["bytes"]:
            got[(ca, cb)] = got.get((ca, cb), 0) + v["bytes"]
    assert got == want
    a2a = ep4["moe"]["all_to_all"]
    assert (a2a["cross_chip_rows"], a2a["row_bytes"]) == (rows, row)
    assert a2a["cross_chip_bytes"] == rows * row


@pytest.mark.parametrize(("args", "needle"), [
    ([str(MIXTRAL), "--ep", "3", "--batch", "6", "--set", "system.chips=4"],
     "4 experts do not split into 3"),
    ([str(ROOT / "tests" / "hf_configs" / "tiny-llama.json"), "--ep", "2", "--batch", "2",
      "--set", "system.chips=2"], "no mixture-of-experts layer"),
    ([str(MIXTRAL), "--ep", "8", "--batch", "8", "--set", "system.chips=4"],
     "has 4 chip(s)"),
    ([str(MIXTRAL), "--ep", "4", "--batch", "6", "--set", "system.chips=4"],
     "multiple of 4"),
    ([str(MIXTRAL), "--ep", "2", "--tp", "2", "--batch", "2", "--set", "system.chips=4"],
     "not built"),
])
def test_bad_ep_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                   args: list[str], needle: str) -> None:
    rc = main(["run", *args, "-t", "small", "-q", str(BF16), "-o", str(tmp_path / "o"),
               "--no-report", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


MOE = ROOT / "tests" / "models" / "moe.onnx"
MOE_IN = ROOT / "tests" / "models" / "moe.inputs.npz"


def _numpy_moe(x: np.ndarray, w: dict[str, np.ndarray], k: int) -> np.ndarray:
    """Token by token in float64: the top-k router logits, softmax over them, the
    weighted sum of those experts' SiLU-gated MLPs, plus the residual."""
    x = x.astype(np.float64)
    y = x.copy()
    for t in range(x.shape[0]):
        logits = x[t] @ w["router"]
        top = np.argsort(-logits, kind="stable")[:k]
        p = np.exp(logits[top] - logits[top].max())
        p /= p.sum()
        for e, pe in zip(top, p, strict=True):
            g, u = x[t] @ w["w1"][e], x[t] @ w["w3"][e]
            y[t] += pe * ((g / (1 + np.exp(-g)) * u) @ w["w2"][e])
    return y


def _onnx_run(tmp: Path, name: str, qconfig: Path, ep: int | None) -> tuple[dict, np.ndarray]:
    chips = ["--set", f"system.chips={ep}", "--ep", str(ep)] if ep else []
    rc = main(["run", str(MOE), "-t", "small", *chips, "-q", str(qconfig), "--verify",
               "--inputs", str(MOE_IN), "-o", str(tmp / name), "--no-report", "--quiet"])
    assert rc == 0
    v = json.loads((tmp / name / "verification.json").read_text())
    return v, np.load(tmp / name / "outputs.npz")["y"]


def test_ep2_onnx_moe_verifies_and_equals_the_single_chip_run(tmp_path: Path) -> None:
    """tests/models/moe.onnx (TopK, gathered experts) on 2 chips, fp32: the data pass
    through both chips' programs and the all-to-alls passes --verify, and its outputs are
    the one-chip run's to fp32 rounding and numpy's float64 forward's."""
    fp32 = tmp_path / "fp32.yaml"
    fp32.write_text("default:\n  weight: fp32\n  activation: fp32\n  kv: fp32\n")
    v1, one = _onnx_run(tmp_path, "one", fp32, None)
    v2, two = _onnx_run(tmp_path, "two", fp32, 2)
    assert v1["ok"] and v2["ok"]
    stats = json.loads((tmp_path / "two" / "stats.json").read_text())
    assert stats["parallel"]["token_slices"] and stats["moe"]["experts_per_chip"] == 2
    assert sum(stats["moe"]["total"]["per_chip"]) == 8 * 2    # T tokens × top-2
    np.testing.assert_allclose(two, one, rtol=1e-6, atol=1e-6)
    import onnx
    from onnx import numpy_helper

    w = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in onnx.load(str(MOE)).graph.initializer}
    ref = _numpy_moe(np.load(MOE_IN)["x"], w, 2)
    np.testing.assert_allclose(two, ref, rtol=1e-5, atol=1e-5)


def test_ep_onnx_bf16_outputs_do_not_depend_on_the_chip_count(tmp_path: Path) -> None:
    """bf16: EP=2 and EP=4 compute every expert's rows with the same kernels in the same
    order, so their outputs are bit-identical, and both verify."""
    v2, two = _onnx_run(tmp_path, "two", BF16, 2)
    v4, four = _onnx_run(tmp_path, "four", BF16, 4)
    assert v2["ok"] and v4["ok"]
    np.testing.assert_array_equal(two, four)


def test_ep_replays_identical_blocks_within_1_percent_of_exact(tmp_path: Path) -> None:
    """--routing-same-layers makes the layers' routings, so the ranks' blocks, identical:
    4 of 6 blocks simulated and the rest replayed, within 1 % of simulating all 6; the
    moe section still covers all 6 layers."""
    cfg = json.loads(MIXTRAL.read_text())
    cfg["num_hidden_layers"] = 6
    model = tmp_path / "mixtral6.json"
    model.write_text(json.dumps(cfg))
    got = {}
    for name, extra in (("replay", []), ("exact", ["--exact"])):
        rc = main(["run", str(model), "-t", "small", *RING4, "--ep", "4", "--batch", "8",
                   "--kv-len", "16", "--routing-same-layers", "-q", str(BF16), *extra,
                   "-o", str(tmp_path / name), "--no-report", "--quiet"])
        assert rc == 0
        got[name] = json.loads((tmp_path / name / "stats.json").read_text())
    assert got["replay"]["replay"]["simulated_blocks"] == 4
    assert "replay" not in got["exact"]
    assert got["replay"]["total_ns"] == pytest.approx(got["exact"]["total_ns"], rel=0.01)
    assert got["replay"]["moe"]["moe_layers"] == 6


def test_ep2_dp2_runs_two_groups_of_two_chips(tmp_path: Path) -> None:
    """--ep 2 --dp 2 on 4 chips: two expert-parallel groups, 2 sequences per chip; the
    per-chip loads cover all 4 chips and add up to the whole batch's pairs."""
    rc = main(["run", str(MIXTRAL), "-t", "small", *RING4, "--ep", "2", "--dp", "2",
               "--batch", "8", "--kv-len", "16", "-q", str(BF16), "-o", str(tmp_path / "o"),
               "--no-report", "--quiet"])
    assert rc == 0
    st = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert (st["parallel"]["ep"], st["parallel"]["dp"]) == (2, 2)
    assert [len(g) for g in st["parallel"]["chips"]] == [2, 2]
    for ly, want in zip(st["moe"]["layers"], _one_chip_counts("uniform"), strict=True):
        assert len(ly["per_chip"]) == 4 and sum(ly["per_chip"]) == 8 * 2
        assert ly["tokens_per_expert"] == want.tolist()
