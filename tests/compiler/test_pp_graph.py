"""compiler.parallel.pp_graph: what each pipeline stage holds, receives and sends."""

from __future__ import annotations

import pytest

from kernbench.compiler.parallel.pp_graph import boundary, stage_graph
from kernbench.errors import InputError
from kernbench.ir.model import Graph, LayerIR, TensorIR


def _graph(blocks: int, skip: bool = False) -> Graph:
    """x → embed → h0; ids → mask (prologue); block b: h_{b+1} = h_b + relu(h_b) · mask;
    → head → y. With `skip`, the last block also reads h1 (block 0's output)."""
    t = {k: TensorIR(id=k, shape=[2, 4], dtype="fp32")
         for k in ["x", "ids", "mask", "y"] + [f"h{b}" for b in range(blocks + 1)]
         + [f"r{b}" for b in range(blocks)]}
    nodes = [LayerIR(id="embed", op_type="RELU", inputs=["x"], outputs=["h0"]),
             LayerIR(id="make_mask", op_type="RELU", inputs=["ids"], outputs=["mask"])]
    for b in range(blocks):
        nodes.append(LayerIR(id=f"act{b}", op_type="MUL", inputs=[f"h{b}", "mask"],
                             outputs=[f"r{b}"], metadata={"block": b}))
        extra = "h1" if skip and b == blocks - 1 else f"r{b}"
        nodes.append(LayerIR(id=f"res{b}", op_type="ADD", inputs=[f"h{b}", extra],
                             outputs=[f"h{b + 1}"], metadata={"block": b}))
    nodes.append(LayerIR(id="head", op_type="RELU", inputs=[f"h{blocks}"], outputs=["y"]))
    g = Graph(nodes=nodes, inputs=["x", "ids"], outputs=["y"], tensors=t)
    g.rebuild_links()
    return g


def test_stages_hold_their_layers_and_pass_the_residual() -> None:
    g = _graph(4)
    s0, s1 = stage_graph(g, 2, 0), stage_graph(g, 2, 1)
    assert [n.id for n in s0.graph.nodes] == ["embed", "make_mask", "act0", "res0", "act1",
                                              "res1"]
    assert s0.send == ["h2"] and s0.graph.outputs == ["h2"] and s0.recv == []
    # stage 1 computes the mask again from the model's input and receives only h2
    assert [n.id for n in s1.graph.nodes] == ["pp.recv.h2", "make_mask", "act2", "res2",
                                              "act3", "res3", "head"]
    assert s1.graph.inputs == ["ids", "h2"] and s1.graph.outputs == ["y"]
    site = s1.recv[0]
    assert (site.op, site.src, site.dst) == ("send_recv", "h2", "h2@recv")
    assert s1.graph.node("act2").inputs == ["h2@recv", "mask"]
    # blocks renumbered per stage (block replay reads a stage as a model of L / N blocks)
    assert [n.metadata["block"] for n in s1.graph.nodes if "block" in n.metadata] == \
        [0, 0, 1, 1]
    assert set(s1.graph.metadata["collective_buffers"]) == {"h2@recv"}
    assert "h2" in s0.graph.metadata["collective_buffers"]
    assert boundary(g, 2, 0) == ["h2"]
    # the input graph is left as it is
    assert g.node("act2").inputs == ["h2", "mask"]


def test_bad_splits_are_one_line() -> None:
    with pytest.raises(InputError, match="--pp 3: 4 decoder layers do not split into 3"):
        stage_graph(_graph(4), 3, 0)
    # a layer output of stage 0 read on stage 2: only the previous stage's outputs cross
    with pytest.raises(InputError, match="stage 2 reads 'h1', made by 'res0' on stage 0"):
        stage_graph(_graph(6, skip=True), 3, 2)
