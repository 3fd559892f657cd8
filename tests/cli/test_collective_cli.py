"""`kernbench collective`: a verified run prints one line; bad input is one line, exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernbench.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import multichip  # noqa: E402

SMALL4 = ["-t", "small", "--set", "system.chips=4", "--set", "system.arrangement=ring"]


def test_verified_all_reduce_writes_its_program_and_stats(tmp_path, capsys) -> None:  # noqa: ANN001
    code = main(["collective", "all_reduce", *SMALL4, "--bytes", "16KiB", "--dtype", "fp32",
                 "--verify", "--json", "--out", str(tmp_path), "--trace"])
    out = capsys.readouterr().out
    assert code == 0
    s = json.loads(out)
    assert s["verified"] is True and s["chips"] == [0, 1, 2, 3]
    # busbw = bytes · 2(N−1)/N / time
    assert s["busbw_gbs"] == pytest.approx(16384 * 1.5 / (s["time_us"] * 1e3), rel=1e-3)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["collective"]["op"] == "all_reduce"
    assert (tmp_path / "cmdq.json").exists() and (tmp_path / "trace.json").exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["all_reduce", "--chips", "12"], "12 chips requested; 't3k' has 8"),
    (["all_reduce", "--chips", "0,9"], "chip 9 is not in"),
    (["all_reduce", "--bytes", "40GiB"], "bytes of HBM per chip"),
    (["all_reduce", "--bytes", "lots"], "not a positive size"),
    (["broadcast"], "unknown collective"),
    (["all_reduce", "--algorithm", "tree"], "unknown algorithm"),
    (["all_reduce", "-t", "small"], "is one chip"),
    (["all_reduce", "--bytes", "1TiB"], "1099511627776 bytes per chip needs"),
    (["all_reduce", "--links", "3"], "links 3: 't3k' joins each neighbour pair with 2 link(s)"),
    (["all_reduce", "--workers", "0"], "--workers 0 must be at least 1"),
    (["all_reduce", "--workers", "33"], "--workers 33: a chip of 't3k' has 32 PE(s) on the 1"),
])
def test_bad_collective_input_is_one_line_exit_2(args: list[str], needle: str, capsys) -> None:  # noqa: ANN001
    code = main(["collective", *args])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err


def test_benchmark_compare_uses_the_published_fit() -> None:
    # the fit at 1 MiB, 8 chips: 9.07 + 5.25·4 + 1.75 · 1048576 / 18400 µs
    assert multichip.fit_us(1 << 20) == pytest.approx(9.07 + 21.0 + 1.75 * 1048576 / 18400)
    rows = [(1024, multichip.fit_us(1024) * 2.0),          # below the target range: ignored
            (65536, multichip.fit_us(65536) * 1.10),
            (1 << 20, multichip.fit_us(1 << 20) * 0.88)]
    cmp = multichip.compare(rows)
    assert cmp["errors"][1024] == pytest.approx(1.0)
    assert cmp["max_target_error"] == pytest.approx(0.12)
    assert cmp["within"] is True
    assert multichip.compare(rows + [(1 << 22, multichip.fit_us(1 << 22) * 1.2)])["within"] is False


def test_llm_cases_compare_with_the_published_figures() -> None:
    """A decode step of 15.55 ms is 64.3 tokens/s/user; ±25 % decides within/OUTSIDE; a
    prefill compares TTFT; the large-x8 case checks CPU seconds and memory."""
    r = {"reference": {"tokens_per_s_user": 64.3}, "total_ns": 1e9 / 64.3}
    sim, against = multichip.llm_verdict(r)
    assert sim.startswith("64.3 tokens/s/user") and "+0.0%" in against and "within" in against
    r["total_ns"] = 1e9 / (64.3 * 1.3)
    assert "OUTSIDE" in multichip.llm_verdict(r)[1]
    sim, against = multichip.llm_verdict({"reference": {"ttft_ms": 164.0}, "total_ns": 123e6})
    assert sim == "TTFT 123.0 ms" and "-25.0%" in against and "within" in against
    lim = {"reference": {"max_cpu_s": 180.0, "max_rss_mb": 8192.0}, "total_ns": 32e6,
           "cpu_s": 181.0, "rss_mb": 100}
    assert "NOT met" in multichip.llm_verdict(lim)[1]
    lim["cpu_s"] = 56.0
    assert multichip.llm_verdict(lim)[1].endswith(": met")
