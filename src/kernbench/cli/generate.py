"""`kernbench run MODEL --generate N`: the command-line side of host.generate (checks,
files, the summary lines); `run` calls it around its ordinary prefill run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kernbench.errors import InputError

if TYPE_CHECKING:  # the host is imported when the command runs (`--help` stays fast)
    from kernbench.host.flow import SimResult
    from kernbench.host.serve.model import ServedModel
    from kernbench.topology.model import Topology


def check_generate(n: int, model: Path, kv_len: int | None, verify: bool,
                   qconfig: Path | None, workdir: Path) -> ServedModel:
    """Refuse what a generation cannot be (one line, exit 2) and open the model for its
    decode steps (host.serve.model.ServedModel: any batch and length)."""
    from kernbench.host.serve.model import ServedModel

    if n < 1:
        raise InputError("must be at least 1", field="--generate")
    if kv_len:
        raise InputError("a generation starts from the prompt: --kv-len does not apply "
                         "(the decode steps' caches grow from --seq-len)", field="--generate")
    if verify:
        raise InputError("--verify checks one program; the decode steps of a generation "
                         "are timing runs", field="--generate")
    return ServedModel.open(model, qconfig, workdir)


def add_generation(res: SimResult, served: ServedModel, topo: Topology, out: Path, n: int, batch: int | None,
                   seq_len: int | None, exact: bool) -> list[str]:
    """Simulate the decode steps, add `generation` to the prefill's stats (stats.json
    rewritten), write generation.csv, append the lines to summary.txt; returns the lines."""
    from kernbench.cli.common import err
    from kernbench.host.generate import generation_csv, generation_memo, generation_section
    from kernbench.report.generation import generation_lines
    from kernbench.report.stats import set_section, write_json

    llm = res.stats.get("llm") or {}
    b, prompt = llm.get("batch", batch or 1), llm.get("seq_len", seq_len or 16)
    gen = generation_section(res.stats, generation_memo(served, topo, exact), b, prompt, n,
                             note=err.print)
    set_section(res.stats, "generation", gen)
    write_json(res.stats, out / "stats.json")
    (out / "generation.csv").write_text(generation_csv(gen), encoding="utf-8")
    lines = generation_lines(gen)
    with open(out / "summary.txt", "a", encoding="utf-8") as f:
        f.write("\n" + "\n".join(lines) + "\n")
    return lines
