"""`kernbench serve` at the edges of its inputs and outputs: trace files the csv module
cannot split (one line, exit 2) or with lone-CR line endings (read), the numbers a trace
cell takes (ASCII, integral decimals for the token counts), absolute times late in a
run's range written to the exact ns, and throughput figures at very low rates that keep
their significant digits instead of rounding to 0."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from serve_helpers import run as serve_run

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.host.serve.results import occupancy_csv, requests_csv, serve_stats
from kernbench.host.serve.workload import Request, read_trace
from kernbench.report.serving import serve_lines

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama.json"
HEADER = "arrival_s,prompt_tokens,output_tokens"


def _trace(tmp: Path, text: str) -> Path:
    f = tmp / "t.csv"
    f.write_bytes(text.encode("utf-8"))
    return f


def test_a_field_beyond_the_csv_limit_is_one_line_exit_2(tmp_path, capsys):
    f = _trace(tmp_path, f"{HEADER}\n0,8,2\n0,{'1' * 200_000},2\n")
    assert main(["serve", str(TINY), "-t", "small", "--out", str(tmp_path / "o"), "--quiet",
                 "--trace", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{f}: line 3: " in err[0] and "field limit" in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_lines_may_end_in_cr_crlf_or_lf(tmp_path, eol):
    reqs = read_trace(_trace(tmp_path, eol.join([HEADER, "0,10,3", "0.5,20,5", ""])))
    assert [(r.arrival_ns, r.prompt, r.output, r.where) for r in reqs] == [
        (0, 10, 3, "line 2"), (500_000_000, 20, 5, "line 3")]


def test_blank_lines_before_and_after_the_header_are_skipped(tmp_path):
    # empty, spaces only, or only commas (a spreadsheet's empty row); a header that is
    # wrong is named at its own line, and a file of blank lines has no header at all
    reqs = read_trace(_trace(tmp_path, f"\n  \n{HEADER}\n,,\n0,10,3\n \n0.5,20,5\n"))
    assert [(r.prompt, r.where) for r in reqs] == [(10, "line 5"), (20, "line 7")]
    with pytest.raises(InputError) as e:
        read_trace(_trace(tmp_path, "\n,,\narrival,prompt\n0,10\n"))
    assert e.value.where == "line 3" and "(got arrival,prompt)" in e.value.reason
    with pytest.raises(InputError) as e:
        read_trace(_trace(tmp_path, "\n \n"))
    assert e.value.where == "line 1" and "(got an empty file)" in e.value.reason


@pytest.mark.parametrize("cell", ["12", " 12 ", "12.0", "12.", "1.2e1", "1.20E1", "120e-1",
                                  "+12"])
def test_token_counts_take_integral_decimals_as_spreadsheets_write_them(tmp_path, cell):
    (r,) = read_trace(_trace(tmp_path, f"{HEADER}\n0,{cell},{cell}\n"))
    assert (r.prompt, r.output) == (12, 12)


@pytest.mark.parametrize(("row", "field", "reason"), [
    ("0,1_000,3", "prompt_tokens", "'1_000' is not an integer"),
    ("0,\u0663,3", "prompt_tokens", "is not an integer"),  # an Arabic-Indic 3
    ("0,8,\uff13", "output_tokens", "is not an integer"),  # a fullwidth 3
    ("0,10.5,3", "prompt_tokens", "'10.5' is not an integer"),
    ("0,8,nan", "output_tokens", "'nan' is not an integer"),
    ("0,8,inf", "output_tokens", "'inf' is not an integer"),
    ("0,1e99999,3", "prompt_tokens", "is not an integer"),
    ("1_0.5,8,3", "arrival_s", "'1_0.5' is not a number"),
    ("\u0663.5,8,3", "arrival_s", "is not a number"),
    ("nan,8,3", "arrival_s", "'nan' is not a number"),
    ("inf,8,3", "arrival_s", "'inf' is not a number"),
    ("1e999,8,3", "arrival_s", "beyond 1e+09 s"),
])
def test_other_numbers_are_refused_naming_line_and_field(tmp_path, row, field, reason):
    f = _trace(tmp_path, f"{HEADER}\n0,8,2\n{row}\n")
    with pytest.raises(InputError) as e:
        read_trace(f)
    assert (e.value.file, e.value.where, e.value.field) == (str(f), "line 3", field)
    assert reason in e.value.reason


def _ns(text: str) -> int:
    return int(Decimal(text) * 10**9)  # exact: the text has 9 decimals


def test_late_absolute_times_are_written_to_the_exact_ns():
    late = 10**18  # a trace's latest arrival, 1e9 s
    run = serve_run([Request(0, 1_234_567, 10, 3), Request(1, late, 10, 3)])
    rows = [dict(zip(requests_csv(run).splitlines()[0].split(","), line.split(","),
                     strict=True)) for line in requests_csv(run).splitlines()[1:]]
    for s, row in zip(run.seqs, rows, strict=True):
        assert _ns(row["arrival_s"]) == s.req.arrival_ns
        assert _ns(row["first_token_s"]) == s.first_token_ns
        assert _ns(row["finish_s"]) == s.finish_ns
        assert _ns(row["first_token_s"]) - _ns(row["arrival_s"]) == _ns(row["ttft_s"])
    # an early run's text is what the float formatting gave, to the byte
    assert rows[0]["first_token_s"] == f"{run.seqs[0].first_token_ns / 1e9:.9f}"
    assert rows[1]["arrival_s"] == "1000000000.000000000"
    occ = [line.split(",") for line in occupancy_csv(run).splitlines()[1:]]
    assert [_ns(b) for _, b, *_ in occ] == run.timeline.end_ns


def test_throughput_at_a_very_low_rate_keeps_its_significant_digits():
    gap = 267_000_000_000_000  # 2.67e5 s between arrivals: 3.7e-6 requests/s
    run = serve_run([Request(i, i * gap, 8, 3) for i in range(5)])
    st = serve_stats(run, {}, 10_000)
    span_s = (run.end_ns - 0) / 1e9
    th = st["throughput"]
    assert th["requests_per_s"] == pytest.approx(5 / span_s, rel=1e-5)
    assert th["output_tokens_per_s"] == pytest.approx(15 / span_s, rel=1e-5)
    assert st["little"]["L"] == pytest.approx(st["little"]["lambda_W"], rel=1e-5)
    assert st["little"]["L"] > 0 and st["busy_fraction"] > 0
    assert st["kv_occupancy"]["peak_fraction"] == pytest.approx(1 / 10_000, rel=1e-5)
    line = next(x for x in serve_lines(st) if x.startswith("throughput:"))
    shown = float(line.split()[1])
    assert shown == pytest.approx(5 / span_s, rel=1e-3), line
    # a usual figure keeps its old text: 6 decimals in stats.json, one on stdout
    usual = serve_stats(serve_run([Request(i, i * 1000, 8, 3) for i in range(5)]), {},
                        10_000)
    rps = usual["throughput"]["requests_per_s"]
    assert rps == round(rps, 6) and f"{rps:,.1f} requests/s" in serve_lines(usual)[3]


def test_a_late_arrival_keeps_every_nanosecond_of_its_text(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0.000000001,8,2\n"
                 "987654321.123456789,8,2\n")
    assert [r.arrival_ns for r in read_trace(f)] == [1, 987654321123456789]


@pytest.mark.parametrize("text", [
    f"id,{HEADER},user\nr0,0,10,3,a\nr1,0.5,20,5,b\n",  # a producer's extra columns
    "output_tokens,arrival_s,prompt_tokens\n3,0,10\n5,0.5,20\n",  # another order
    "Arrival_S, PROMPT_TOKENS ,Output_Tokens\n0,10,3\n0.5,20,5\n",  # another case, spaces
])
def test_trace_columns_are_found_by_name(tmp_path, text):
    reqs = read_trace(_trace(tmp_path, text))
    assert [(r.arrival_ns, r.prompt, r.output) for r in reqs] == [
        (0, 10, 3), (500_000_000, 20, 5)]


@pytest.mark.parametrize(("text", "where", "reason"), [
    ("arrival,prompt,output\n0,8,2\n", "line 1", "no column arrival_s, prompt_tokens"),
    (f"{HEADER},arrival_s\n0,8,2,1\n", "line 1", "column arrival_s appears twice"),
    (f"id,{HEADER}\n0,8,2\n", "line 2", "3 fields, expected 4"),
])
def test_a_header_without_the_columns_or_a_short_line_is_refused(tmp_path, text, where,
                                                                 reason):
    f = _trace(tmp_path, text)
    with pytest.raises(InputError) as e:
        read_trace(f)
    assert (e.value.file, e.value.where) == (str(f), where)
    assert reason in e.value.reason


def test_an_slo_is_shown_as_given():
    # objectives one nanosecond apart are told apart on stdout and in the report's card,
    # and each request is counted against its own
    from kernbench.host.serve.slo import parse_slo
    from kernbench.report.serving import serving_html

    run = serve_run([Request(i, i * 10**9, 8, 3) for i in range(3)])
    for text, shown in (("ttft=10502ns", "ttft ≤ 10.502 µs"), ("ttft=10501ns", "ttft ≤ 10.501 µs"),
                        ("tpot=50ms", "tpot ≤ 50 ms"), ("e2e=1s", "e2e ≤ 1 s")):
        st = serve_stats(run, parse_slo(text), 10_000)
        line = next(x for x in serve_lines(st) if x.startswith("goodput:"))
        assert shown in line, line
        html = serving_html("t", {"results": st, "model": "m", "topology": "t",
                                  "policy": "p", "workload": {"describe": "d"},
                                  "steps": {"count": 1, "programs": 1, "exact": True}},
                            {"TTFT": [1e-5]}, ([0.0], [0.0]))
        assert shown in html
