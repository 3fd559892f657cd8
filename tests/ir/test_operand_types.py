"""Every IR op declares the element types and ranks of its operands and results, and which
share an element type (`kernbench.ir.ops.defs`: `operand(name, FLOAT, rank=4, like="q")`);
the verifier refuses a node whose tensors break them in one line naming the node, the
operand, what it expected and what it got (exit 2 through `kernbench validate`). The
declarations accept every graph the importers and the model builders produce: every
committed .onnx (fused and not) and every HF config (prefill and decode)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, TensorIR
from kernbench.ir.onnx_import import import_onnx
from kernbench.ir.ops import OPS, OpRuleError, op_class
from kernbench.ir.ops.defs import ANY, FLOAT, INT, NUMBER, Operand, bind, one_of
from kernbench.ir.verify import verify
from kernbench.models.hf_config import load_hf_config
from kernbench.models.llm_graph import LlmShape, build_llm_graph
from kernbench.numerics.dtypes import DTYPES

ROOT = Path(__file__).resolve().parents[2]
ONNX = sorted(subprocess.run(["git", "ls-files", "*.onnx"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split())
HF = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "hf_configs").glob("*.json")) \
    + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "hf_configs").glob("*/config.json"))


def _graph(nodes: list[LayerIR], tensors: dict[str, tuple[list[int], str]],
           inputs: list[str]) -> Graph:
    g = Graph(nodes=nodes, inputs=inputs, outputs=[nodes[-1].outputs[0]])
    for tid, (shape, dt) in tensors.items():
        g.tensors[tid] = TensorIR(id=tid, shape=shape, dtype=dt, role="activation")
    for n in nodes:
        for t in n.outputs:
            g.tensors[t].producer = n.id
        for t in n.inputs:
            if t and n.id not in g.tensors[t].consumers:
                g.tensors[t].consumers.append(n.id)
    return g


def _matmul(a: str = "fp32", b: str = "fp32", y: str = "fp32", ra: int = 2) -> Graph:
    n = LayerIR(id="mm", op_type="MATMUL", inputs=["a", "b"], outputs=["y"])
    return _graph([n], {"a": ([4] * (ra - 1) + [8], a), "b": ([8, 3], b),
                        "y": ([4] * (ra - 1) + [3], y)}, ["a", "b"])


def _refusal(g: Graph) -> InputError:
    with pytest.raises(InputError) as ei:
        verify(g, file="g.json")
    return ei.value


def test_a_well_typed_node_passes():
    verify(_matmul())
    verify(_matmul("fp16", "fp16", "fp16", ra=3))


def test_an_element_type_outside_the_declared_set_is_refused():
    e = _refusal(_matmul(a="int8", b="int8", y="int8"))
    assert str(e) == ("g.json: node mm: field 'inputs.a': MATMUL input a (tensor 'a'): "
                      f"element type int8, expected {FLOAT.label}")


def test_operands_declared_alike_must_share_their_element_type():
    e = _refusal(_matmul(b="fp16"))
    assert str(e) == ("g.json: node mm: field 'inputs.b': MATMUL input b (tensor 'b'): "
                      "element type fp16, expected a's (fp32)")


def test_a_result_of_another_type_is_refused():
    e = _refusal(_matmul(y="bf16"))
    assert (e.field, e.reason) == ("outputs.y", "MATMUL output y (tensor 'y'): element type "
                                               "bf16, expected a's (fp32)")


def test_a_rank_outside_the_declared_one_is_refused():
    n = LayerIR(id="att", op_type="ATTENTION", inputs=["q", "k", "v"], outputs=["y"],
                attributes={"num_heads": 2, "num_kv_heads": 2, "head_dim": 4, "scale": 0.5})
    g = _graph([n], {"q": ([2, 3, 4], "fp32"), "k": ([1, 2, 3, 4], "fp32"),
                     "v": ([1, 2, 3, 4], "fp32"), "y": ([1, 2, 3, 4], "fp32")},
               ["q", "k", "v"])
    e = _refusal(g)
    assert (e.where, e.field, e.reason) == (
        "node att", "inputs.q", "ATTENTION input q (tensor 'q'): rank 3, expected rank 4")


def test_a_variadic_operand_checks_every_tensor_it_takes():
    n = LayerIR(id="cat", op_type="CONCAT", inputs=["a", "b", "c"], outputs=["y"],
                attributes={"axis": 0})
    g = _graph([n], {"a": ([1, 2], "fp32"), "b": ([1, 2], "fp32"), "c": ([1, 2], "int64"),
                     "y": ([3, 2], "fp32")}, ["a", "b", "c"])
    e = _refusal(g)
    assert (e.field, e.reason) == ("inputs.more", "CONCAT input more (tensor 'c'): element "
                                                  "type int64, expected x's (fp32)")


def test_an_elementwise_node_is_held_to_its_kind():
    ew = op_class("ELEMENTWISE")

    def node(kind: str, n_in: int) -> LayerIR:
        return LayerIR(id="e", op_type="ELEMENTWISE", inputs=[f"x{i}" for i in range(n_in)],
                       outputs=["y"], attributes={"op": kind})

    with pytest.raises(OpRuleError) as ei:  # a unary kind with two inputs
        ew.check_node(node("sqrt", 2))
    assert (ei.value.field, str(ei.value)) == ("inputs", "ELEMENTWISE takes 1 inputs (x), got 2")
    ew.check_node(node("sum", 4))  # variadic
    for kind, dts, field, want in [
        ("sqrt", ["int32", "int32"], "inputs.x", FLOAT.label),  # a float function
        ("equal", ["fp32", "fp32", "fp32"], "outputs.y", "bool"),  # a comparison gives bool
        ("and", ["fp32", "fp32", "bool"], "inputs.a", "bool"),
        ("bitwise_and", ["fp32", "fp32", "fp32"], "inputs.a", INT.label),
        ("where", ["fp32", "fp32", "fp32", "fp32"], "inputs.cond", "bool"),
    ]:
        n = node(kind, len(dts) - 1)
        g = _graph([n], {t: ([2], d) for t, d in zip([*n.inputs, "y"], dts, strict=True)},
                   n.inputs)
        e = _refusal(g)
        assert e.field == field and e.reason.endswith(f"expected {want}"), (kind, str(e))
    # pow's exponent has its own type; cast takes and gives any
    for kind, dts in [("pow", ["fp32", "int64", "fp32"]), ("cast", ["int8", "bf16"])]:
        n = node(kind, len(dts) - 1)
        n.attributes.update({"to": "bf16"} if kind == "cast" else {})
        verify(_graph([n], {t: ([2], d) for t, d in zip([*n.inputs, "y"], dts, strict=True)},
                      n.inputs))


def test_reduce_argmax_gives_int64_indices():
    n = LayerIR(id="r", op_type="REDUCE", inputs=["x"], outputs=["y"],
                attributes={"op": "argmax", "axes": [1], "keepdims": False})
    verify(_graph([n], {"x": ([2, 3], "fp32"), "y": ([2], "int64")}, ["x"]))
    e = _refusal(_graph([n], {"x": ([2, 3], "fp32"), "y": ([2], "fp32")}, ["x"]))
    assert e.field == "outputs.y" and e.reason.endswith("expected int64")


def test_the_cli_refuses_an_ill_typed_node_in_one_line(tmp_path, capsys):
    assert main(["import", str(ROOT / "tests/models/gpt2.onnx"), "-o",
                 str(tmp_path / "ir.json")]) == 0
    d = json.loads((tmp_path / "ir.json").read_text())
    n = next(n for n in d["graph"]["nodes"] if n["op_type"] == "LAYER_NORM")
    d["tensors"][n["inputs"][1]]["dtype"] = "fp16"  # the scale of an fp32 norm
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        f"error: {bad}: node {n['id']}: field 'inputs.scale': LAYER_NORM input scale "
        f"(tensor {n['inputs'][1]!r}): element type fp16, expected x's (fp32)"], err


def test_declarations_name_known_types_and_operands():
    assert FLOAT.names and INT.names and not FLOAT.names & INT.names
    assert NUMBER.names == FLOAT.names | INT.names and ANY.names == frozenset(DTYPES)
    assert one_of("fp32", "float32").names == {"float32"}
    for op, cls in OPS.items():
        names = {d.name for d in cls.operands + cls.results}
        for d in cls.operands + cls.results:
            assert d.like is None or d.like in names, (op, d.name)


# -- the declarations accept what the importers and builders produce --------------------

def _typed(g: Graph) -> int:
    """How many (node, tensor) pairs a declaration narrower than any type checked."""
    n = 0
    for node in g.nodes:
        ops, res = OPS[node.op_type].node_signature(node)
        n += sum(1 for d, _ in bind(ops, node.inputs) + bind(res, node.outputs)
                 if d.types != ANY or d.rank is not None or d.like)
    return n


def _refuses_a_wrong_type(g: Graph) -> None:
    """Giving one tensor of each op type a type its declaration excludes is refused, the
    line naming that node and operand (so the check is live on real graphs)."""
    done: set[str] = set()
    for node in g.nodes:
        if node.op_type in done:
            continue
        ops, res = OPS[node.op_type].node_signature(node)
        for d, tid in bind(ops, node.inputs) + bind(res, node.outputs):
            outside = sorted(set(DTYPES) - d.types.names)
            t = g.tensors[tid]
            # this node's output, or a graph input it reads first: no earlier node sees it
            first = t.producer == node.id or t.producer is None and not t.const \
                and t.consumers[:1] == [node.id]
            if not outside or not first:
                continue
            done.add(node.op_type)
            old = g.tensors[tid].dtype
            g.tensors[tid].dtype = "bool" if "bool" in outside else outside[0]
            try:
                e = _refusal(g)
            finally:
                g.tensors[tid].dtype = old
            assert e.where == f"node {node.id}", str(e)
            assert e.field in (f"inputs.{d.name}", f"outputs.{d.name}"), str(e)
            break


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("path", ONNX)
def test_every_committed_onnx_model_is_well_typed(path, fuse, tmp_path):
    model = ROOT / path
    if "hf_decoders" in path:  # exported with dynamic dims: bound as `run` binds them
        from kernbench.host.models import ShapeOptions
        from kernbench.host.onnx_dims import bind_onnx_dims

        model, _ = bind_onnx_dims(model, ShapeOptions(2, 3, 5), tmp_path)
    g = import_onnx(model, fuse=fuse)  # verifies
    assert _typed(g) > 0
    if fuse:
        _refuses_a_wrong_type(g)
        verify(g)


@pytest.mark.parametrize("shape", [LlmShape(2, 8, 0), LlmShape(3, 1, 24)],
                         ids=["prefill", "decode"])
@pytest.mark.parametrize("path", HF)
def test_every_hf_config_builds_a_well_typed_graph(path, shape):
    g = build_llm_graph(load_hf_config(ROOT / path), shape)
    verify(g)
    assert _typed(g) > 0


def test_an_operand_declaration_is_plain_data():
    d = Operand("x")
    assert (d.types, d.rank, d.like, d.rank_problem(7)) == (ANY, None, None, None)
    assert Operand("x", rank=(1, None)).rank_problem(0) == "rank 0, expected rank 1 or more"
    assert Operand("x", rank=(0, 1)).rank_problem(2) == "rank 2, expected rank 0 to 1"


def test_a_quantized_constant_also_stands_for_the_reals_it_encodes():
    """An imported quantized constant (real = (q - zp) * scale) fits an operand of its
    stored integers' type or of its scale's float type: an EMBEDDING over a uint8 table
    with a quant gives fp32 rows; without the quant the uint8 table's rows are uint8."""
    from kernbench.ir.model import QuantParams

    n = LayerIR(id="emb", op_type="EMBEDDING", inputs=["ids", "table"], outputs=["y"])
    g = _graph([n], {"ids": ([1, 2], "int64"), "table": ([5, 4], "uint8"),
                     "y": ([1, 2, 4], "fp32")}, ["ids"])
    g.tensors["table"].const = True
    g.tensors["s"] = TensorIR(id="s", shape=[], dtype="fp32", const=True, role="weight")
    e = _refusal(g)
    assert (e.field, e.reason) == ("outputs.y", "EMBEDDING output y (tensor 'y'): element "
                                                "type fp32, expected table's (uint8)")
    g.tensors["table"].quant = QuantParams(scale="s", dtype="uint8")
    verify(g)
