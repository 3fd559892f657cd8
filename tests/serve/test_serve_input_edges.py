"""`kernbench serve` at the edges of its inputs: trace files the csv module cannot split
(one line, exit 2) or with lone-CR line endings (read), and the numbers a trace cell
takes (ASCII, integral decimals for the token counts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.host.serve.workload import read_trace

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
