"""tl tests: every test starts from an empty simulated device; benches/ is importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True)
def _fresh_device():
    from kernbench.triton_emu.runtime import DEVICE

    DEVICE.reset()
    yield
