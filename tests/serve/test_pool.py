"""`ProgramPool`: step programs in worker processes; a failing program simulated ahead
(one of the last `optional`) is None, a failing program asked for is its error line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernbench.errors import InputError
from kernbench.host.serve.model import ServedModel
from kernbench.host.serve.pool import ProgramPool
from kernbench.topology import load_topology

MODEL = Path(__file__).resolve().parents[1] / "hf_configs" / "tiny-llama.json"
TOO_BIG = (64, 1, 1 << 22)  # a KV cache past `small`'s HBM: refused before simulating


def test_a_failing_optional_program_is_none_and_an_asked_one_raises(tmp_path):
    topo = load_topology("small")
    model = ServedModel.open(MODEL, None, tmp_path)
    with ProgramPool(model, topo, 2) as pool:
        ok, dropped = pool.simulate_many([(1, 1, 8), TOO_BIG], optional=1)
        assert dropped is None
        assert ok is not None and ok[0] == model.simulate((1, 1, 8), topo)
        with pytest.raises(InputError, match="does not fit the HBM"):
            pool.simulate_many([(1, 1, 8), TOO_BIG], optional=0)
