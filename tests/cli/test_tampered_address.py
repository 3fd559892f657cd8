"""A bundle whose entry reads HBM nothing wrote (an in-bounds address that points at no
tensor) is bad input: exit 2 with one line naming the entry, not an internal error."""

from __future__ import annotations

import json

from kernbench.cli import main


def test_read_of_never_written_hbm_names_the_entry(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["compile", "gpt2", "--seq-len", "8", "--out", str(out)]) == 0
    cmdq = json.loads((out / "cmdq.json").read_text())
    mem = json.loads((out / "memory.json").read_text())
    end = max(t["address"] + t["nbytes"] for t in mem["tensors"].values())
    free = (end + 0xFFFF) // 0x10000 * 0x10000  # aligned, in bounds, past every tensor
    victim = next(e for e in cmdq["cmdq"] if e["opcode"] == "DMA_LOAD_TILE")
    victim["dram_addr"] = free
    (out / "cmdq.json").write_text(json.dumps(cmdq))
    capsys.readouterr()
    code = main(["simulate", str(out), "--verify", "--out", str(tmp_path / "o")])
    lines = capsys.readouterr().err.strip().splitlines()
    err = [x for x in lines if x.startswith("error:")]
    assert code == 2, lines
    assert len(err) == 1 and lines[-1] == err[0], lines  # one error line, no traceback
    assert "Traceback" not in "\n".join(lines)
    assert f"entry {victim['id']} (DMA_LOAD_TILE, layer '{victim['layer_id']}')" in err[0]
    assert f"hbm:{free:#x}" in err[0] and "never written" in err[0]
    assert not (tmp_path / "o").exists()
