"""tests/ir: make the helper module and tests/models/micro.py importable."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (HERE, HERE.parent / "models"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
