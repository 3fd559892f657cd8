#!/usr/bin/env python
"""Regenerate schemas/sweep.schema.json from the sweep spec model (kernbench.host.sweep.spec).

    .venv/bin/python scripts/gen_sweep_schema.py          # write the file
    .venv/bin/python scripts/gen_sweep_schema.py --check  # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernbench.host.sweep.spec import schema_text

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "sweep.schema.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    parser.add_argument("--output", type=Path, default=SCHEMA_PATH, help="where to write")
    args = parser.parse_args(argv)
    text = schema_text()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
        if current != text:
            print(f"{args.output} is out of date; run: .venv/bin/python "
                  "scripts/gen_sweep_schema.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
