#!/usr/bin/env python
"""Regenerate schemas/cmdq.schema.json from the pydantic models in kernbench.cmdq.schema.

    .venv/bin/python scripts/gen_cmdq_schema.py          # write the file
    .venv/bin/python scripts/gen_cmdq_schema.py --check  # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernbench.cmdq.schema import cmdq_json_schema_text

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "cmdq.schema.json"


def main(argv: list[str] | None = None) -> int:
    return generate(argv, cmdq_json_schema_text, SCHEMA_PATH, "scripts/gen_cmdq_schema.py",
                    __doc__)


def generate(argv: list[str] | None, make_text, default_path: Path, script: str,
             doc: str) -> int:  # noqa: ANN001
    """Write (or `--check`) a generated schema file; shared by the schema scripts."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    parser.add_argument("--output", type=Path, default=default_path, help="where to write")
    args = parser.parse_args(argv)
    text = make_text()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
        if current != text:
            print(f"{args.output} is out of date; run: .venv/bin/python {script}",
                  file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
