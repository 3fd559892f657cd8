"""IR spec §12 (versioning / extensibility): fields this version does not know, the
spec's `graph.edges` and `metadata.subgraph` survive a load → save round trip."""

from __future__ import annotations

import json
from pathlib import Path

from kernbench.cli import main
from kernbench.ir.model import Graph
from kernbench.ir.verify import validate_ir_file

MODELS = Path(__file__).resolve().parents[1] / "models"


def test_unknown_fields_edges_and_subgraph_round_trip(tmp_path, capsys):
    assert main(["import", str(MODELS / "gpt2.onnx"), "-o", str(tmp_path / "ir.json")]) == 0
    d = json.loads((tmp_path / "ir.json").read_text())
    d["vendor_notes"] = {"tool": "x", "rev": 3}
    d["graph"]["edges"] = [{"from": n["id"], "tensor": t} for n in d["graph"]["nodes"][:2]
                           for t in n["outputs"]]
    d["graph"]["schedule_hint"] = "seq-major"
    node = d["graph"]["nodes"][0]
    node["metadata"]["subgraph"] = {"nodes": ["a", "b"], "kind": "fused"}
    node["future_field"] = [1, 2]
    first_tensor = sorted(d["tensors"])[0]
    d["tensors"][first_tensor]["sparsity"] = 0.5
    (tmp_path / "ext.json").write_text(json.dumps(d))

    g = validate_ir_file(tmp_path / "ext.json", tmp_path / "weights.npz")  # verifies too
    again = json.loads(g.to_json())
    assert again == d  # nothing dropped, nothing added
    g.save(tmp_path / "again.json", tmp_path / "w2.npz")
    assert json.loads((tmp_path / "again.json").read_text()) == d
    assert Graph.load(tmp_path / "again.json").nodes[0].metadata["subgraph"]["kind"] == "fused"


def test_a_plain_ir_is_written_as_before(tmp_path, capsys):
    # no extension keys appear in a file that had none (golden ir.json stays identical)
    assert main(["import", str(MODELS / "gpt2.onnx"), "-o", str(tmp_path / "ir.json")]) == 0
    d = json.loads((tmp_path / "ir.json").read_text())
    assert set(d) == {"ir_version", "spec_version", "created_by", "created_at", "graph",
                      "tensors", "qconfig"}
    assert set(d["graph"]) == {"nodes", "inputs", "outputs", "metadata"}
