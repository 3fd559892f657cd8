"""One `kernbench run` in a process of its own, measured: wall s, CPU s and peak RSS (MB)
from the child's resource usage, and its stats.json read before the output folder goes.
The benchmarks that time whole runs share it (llm_scale.py, moe.py, report_cost.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def kernbench_cmd() -> list[str]:
    """The console script next to this Python, or the CLI through `-c`."""
    exe = Path(sys.executable).with_name("kernbench")
    return [str(exe)] if exe.exists() else [sys.executable, "-c",
                                            "import sys; from kernbench.cli import main; "
                                            "sys.exit(main(sys.argv[1:]))"]


def measured_run(args: list[str], src: str | None = None) -> dict[str, Any]:
    """`kernbench run ARGS -o TMP`: wall_s, cpu_s, rss_mb, stats (stats.json) and
    stats_bytes. Exits with the run's stderr when it fails. `src`: another tree's `src`
    folder, put first on PYTHONPATH (the run then uses that tree's kernbench)."""
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = kernbench_cmd() + ["run", *args, "-o", tmp]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        err = p.stderr.read().decode() if p.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err}")
        stats_file = Path(tmp) / "stats.json"
        return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                "rss_mb": ru.ru_maxrss / 1024, "stats": json.loads(stats_file.read_text()),
                "stats_bytes": stats_file.stat().st_size}
