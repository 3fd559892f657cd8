#!/usr/bin/env python
"""Regenerate schemas/sweep.schema.json from the sweep spec model (kernbench.host.sweep.spec).

    .venv/bin/python scripts/gen_sweep_schema.py          # write the file
    .venv/bin/python scripts/gen_sweep_schema.py --check  # exit 1 if the file is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from gen_cmdq_schema import generate  # the sibling script: one writer for every schema

from kernbench.host.sweep.spec import schema_text

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "sweep.schema.json"


def main(argv: list[str] | None = None) -> int:
    return generate(argv, schema_text, SCHEMA_PATH, "scripts/gen_sweep_schema.py", __doc__)


if __name__ == "__main__":
    sys.exit(main())
