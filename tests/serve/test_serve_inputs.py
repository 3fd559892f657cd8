"""`kernbench serve`'s inputs: the step cache file (`--step-cache`: a file that is not
kernbench's is never overwritten, bad contents are one line and exit 2, two runs sharing a
file keep each other's programs), traces and drawn workloads out of range (one line, exit
2, checked before any program is simulated), and what a run prints (a model's warning
once, `--json`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kernbench
from kernbench.cli import main
from kernbench.errors import InputError
from kernbench.host.serve.step_cache import StepCache

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama.json"
TRACE = "arrival_s,prompt_tokens,output_tokens\n0,8,2\n"
IDENT = "a" * 64


def _serve(tmp: Path, *args: str) -> int:
    trace = tmp / "t.csv"
    if not trace.exists():
        trace.write_text(TRACE)
    return main(["serve", str(TINY), "-t", "small", "--out", str(tmp / "o"), "--quiet",
                 "--trace", str(trace), *args])


def _one_line(capsys, needle: str) -> None:  # noqa: ANN001
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.parametrize(("text", "why"), [
    ('{"a": 1}', "its top level is not"), ("[1, 2, 3]", "its top level is not"),
    ('{"_name_or_path": "x"}', "its top level is not"),
    ("{", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ('{"kind": "kernbench step cache", "caches": []}', "its top level is not"),
    ('{"kind": "kernbench step cache", "caches": {"a": {"kernbench": 5, "programs": []}}}',
     'section a: not {"kernbench": VERSION, "programs": [...]}')])
def test_a_file_that_is_not_a_step_cache_is_refused_and_left_as_it_was(tmp_path, capsys,
                                                                       text, why):
    f = tmp_path / "cfg.json"
    f.write_text(text)
    assert _serve(tmp_path, "--step-cache", str(f)) == 2
    _one_line(capsys, f"not a kernbench step cache: {why}")
    assert f.read_text() == text and not (tmp_path / "o").exists()


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_file_is_a_new_step_cache(tmp_path, text):
    f = tmp_path / "steps.json"  # as `touch` or `mktemp` leave it
    f.write_text(text)
    cache = StepCache(f, IDENT)
    assert cache.loaded == 0
    cache.put((1, 1, 8), 100.0)
    assert StepCache(f, IDENT).get((1, 1, 8)) == 100.0


TIME = "its time must be a number of ns in [1, 1e+15)"
LENGTHS = "batch and new tokens must be integers >= 1, past tokens >= 0"


@pytest.mark.parametrize(("row", "why"), [
    ([1, 1, 64, -5.0], TIME), ([1, 1, 64, float("nan")], TIME), ([1, 1, 64, 1e300], TIME),
    ([0, 1, 64, 10.0], LENGTHS), ([1, 1, -1, 10.0], LENGTHS), ([1.5, 1, 64, 10.0], LENGTHS),
    ([1, 1, 64, True], TIME), ([1, 1, 64], "is not [batch, new tokens, past tokens, ns]"),
    ([1, 1, 64, 1e-300], TIME), ([1, 1, 8, 90.0], "its shape is given twice"),
    ("x", "is not [batch, new tokens, past tokens, ns]")])
def test_bad_programs_in_a_step_cache_are_refused_saying_why(tmp_path, row, why):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"identity": IDENT, "programs": [[1, 1, 8, 100.0], row]}))
    with pytest.raises(InputError) as e:
        StepCache(f, IDENT)
    assert e.value.reason.startswith(f"not a kernbench step cache: program {json.dumps(row)}")
    assert why in e.value.reason


def test_each_identity_keeps_its_own_section_of_one_file(tmp_path, capsys):
    f = tmp_path / "c.json"
    other = "b" * 64
    StepCache(f, other).put((1, 1, 8), 100.0)
    c = StepCache(f, IDENT)
    assert c.loaded == 0
    c.put((1, 1, 4), 50.0)
    assert StepCache(f, other).programs == {(1, 1, 8): 100.0}  # kept beside ours
    assert StepCache(f, IDENT).programs == {(1, 1, 4): 50.0}
    assert capsys.readouterr().err == ""


def test_an_earlier_layouts_file_is_read_and_its_other_identities_dropped(tmp_path,
                                                                          capsys):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"identity": IDENT, "programs": [[1, 1, 8, 100.0]]}))
    c = StepCache(f, IDENT)  # read, not refused as a foreign file
    assert c.programs == {(1, 1, 8): 100.0}
    c.put((1, 1, 4), 50.0)  # ours: rewritten in the sectioned layout, no note
    doc = json.loads(f.read_text())
    assert doc["caches"] == {IDENT: {"kernbench": kernbench.__version__,
                                     "programs": [[1, 1, 4, 50.0], [1, 1, 8, 100.0]]}}
    assert capsys.readouterr().err == ""
    f.write_text(json.dumps({"identity": "b" * 64, "programs": [[1, 1, 8, 100.0]]}))
    StepCache(f, IDENT).put((1, 1, 4), 50.0)  # another's, of an unknown version: dropped
    assert list(json.loads(f.read_text())["caches"]) == [IDENT]
    assert "other kernbench version" in capsys.readouterr().err


def test_sections_of_another_kernbench_version_are_dropped_with_a_note(tmp_path, capsys):
    f = tmp_path / "c.json"
    old = {"kernbench": "0.0.1", "programs": [[1, 1, 8, 100.0]]}
    f.write_text(json.dumps({"kind": "kernbench step cache", "caches": {"b" * 64: old}}))
    StepCache(f, IDENT).put((1, 1, 4), 50.0)
    assert list(json.loads(f.read_text())["caches"]) == [IDENT]
    assert "other kernbench version" in capsys.readouterr().err


def test_two_runs_sharing_a_file_keep_each_others_programs(tmp_path):
    f = tmp_path / "c.json"
    a, b = StepCache(f, IDENT), StepCache(f, IDENT)
    a.put((1, 1, 8), 100.0)
    b.put((2, 1, 8), 200.0)  # b started before a wrote: it merges what a wrote
    a.put((4, 1, 8), 400.0)
    assert StepCache(f, IDENT).programs == {(1, 1, 8): 100.0, (2, 1, 8): 200.0,
                                            (4, 1, 8): 400.0}


@pytest.mark.parametrize(("where", "needle"), [("folder", "is a folder"),
                                               ("missing/c.json", "does not exist")])
def test_a_step_cache_path_that_cannot_be_written_is_refused_first(tmp_path, capsys, where,
                                                                    needle):
    (tmp_path / "folder").mkdir()
    assert _serve(tmp_path, "--step-cache", str(tmp_path / where)) == 2
    _one_line(capsys, needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("trace", "args", "needle"), [
    ("arrival_s,prompt_tokens,output_tokens\n0,8,2\n1e10,8,2\n", (), "beyond 1e+09 s"),
    (None, ("--block-tokens", "0"), "--block-tokens"),
])
def test_times_beyond_a_run_and_empty_blocks_are_one_line(tmp_path, capsys, trace, args,
                                                           needle):
    if trace is not None:
        (tmp_path / "t.csv").write_text(trace)
    assert _serve(tmp_path, *args) == 2
    _one_line(capsys, needle)


def test_a_rate_whose_arrivals_leave_a_run_is_one_line(tmp_path, capsys):
    assert main(["serve", str(TINY), "-t", "small", "--out", str(tmp_path / "o"), "--quiet",
                 "--requests", "3", "--rate", "1e-12", "--prompt-len", "8",
                 "--output-len", "2"]) == 2
    _one_line(capsys, "--rate")


def test_a_trace_with_a_byte_order_mark_is_read(tmp_path):
    (tmp_path / "t.csv").write_text("\ufeff" + TRACE, encoding="utf-8")
    assert _serve(tmp_path) == 0
    assert (tmp_path / "o" / "requests.csv").read_text().count("\n") == 2


def test_a_length_is_a_whole_number_written_as_a_trace_cell_may_be():
    from kernbench.host.serve.workload import LengthSpec

    # what `int` reads, and an integral decimal as a trace's token count may be
    assert LengthSpec.parse("12.0", "--prompt-len").lo == 12
    assert LengthSpec.parse("5.12e2", "--prompt-len").lo == 512
    assert (LengthSpec.parse("16:64.0", "--prompt-len").hi,
            LengthSpec.parse("lognormal:100:1:200.0", "--prompt-len").hi) == (64, 200)


def test_a_models_warning_is_given_once_per_run(tmp_path, capsys):
    """Every step program of a MoE model has layers that run whole: said once, not once a
    program."""
    moe = ROOT / "tests" / "hf_configs" / "tiny-mixtral.json"
    (tmp_path / "t.csv").write_text(TRACE + "0.001,16,3\n")
    assert main(["serve", str(moe), "-t", "small", "--out", str(tmp_path / "o"),
                 "--trace", str(tmp_path / "t.csv")]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "whole-layer ops" in ln]
    assert len(lines) == 1, lines


def test_json_prints_the_stats_json_written(tmp_path, capsys):
    assert _serve(tmp_path, "--json") == 0
    assert capsys.readouterr().out == (tmp_path / "o" / "stats.json").read_text()


@pytest.mark.parametrize(("args", "needle"), [
    (("--prompt-len", "lognormal:100:1:0"), "MAX >= MEDIAN"),
    (("--prompt-len", "lognormal:100:1:5"), "MAX >= MEDIAN"),
    (("--output-len", "lognormal:100:12"), "0 <= SIGMA < 10"),
    (("--output-len", "lognormal:0.5:1"), "1 <= MEDIAN"),
    (("--output-len", "lognormal:nan:1"), "1 <= MEDIAN"),
    (("--output-len", "uniform:9:3"), "is not a length"),
    (("--output-len", "12.5"), "(whole numbers, 1 <= LO <= HI)"),
    (("--prompt-len", "lognormal:100:1:200.5"), "(MAX whole)"),
    (("--requests", "1000001"), "--requests"),
])
def test_drawn_workloads_out_of_range_are_one_line(tmp_path, capsys, args, needle):
    assert main(["serve", str(TINY), "-t", "small", "--out", str(tmp_path / "o"),
                 "--rate", "10", *args]) == 2
    _one_line(capsys, needle)


def test_a_prompt_beyond_the_step_budget_names_its_line(tmp_path, capsys):
    # a long output is not refused (a recompute beyond the budget runs alone in its step)
    (tmp_path / "t.csv").write_text(TRACE + "0.1,9000,2\n")
    assert _serve(tmp_path) == 2
    _one_line(capsys, "line 3: field '--max-batch-tokens': a prompt of 9000 tokens")


@pytest.mark.parametrize(("args", "needle"), [
    (("--policy", "static", "--max-batch-tokens", "8"), "field '--max-batch-tokens'"),
    (("--kv-blocks", "100", "--kv-fraction", "0.5"), "field '--kv-fraction'"),
])
def test_an_option_the_run_would_ignore_is_refused(tmp_path, capsys, args, needle):
    assert _serve(tmp_path, *args) == 2
    _one_line(capsys, needle)
    assert not (tmp_path / "o").exists()


def test_a_static_run_reports_no_token_budget(tmp_path):
    assert _serve(tmp_path, "--policy", "static") == 0
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["serve"]["limits"] == {"max_batch": 64, "max_batch_tokens": None}


def test_a_bad_step_cache_is_found_before_the_run_says_anything(tmp_path, capsys):
    """Not even the `serving N requests ...` line: the error is the only one."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "t.csv").write_text(TRACE)
    assert main(["serve", str(TINY), "-t", "small", "--out", str(tmp_path / "o"),
                 "--trace", str(tmp_path / "t.csv"), "--step-cache",
                 str(tmp_path / "folder")]) == 2
    _one_line(capsys, "is a folder")


@pytest.mark.parametrize(("args", "needle"), [
    (("--block-tokens", "10000000000"), "field '--block-tokens': the KV cache (0 blocks"),
    (("--kv-blocks", "1", "--block-tokens", "4"),
     "field '--kv-blocks': the KV cache (1 block of"),
    (("--max-batch-tokens", "4"), "a prompt of 8 tokens does not fit one step of 4"),
    (("--kv-fraction", "1e-12"), "field '--kv-fraction': the KV cache (0 blocks"),
])
def test_the_error_names_the_option_at_fault(tmp_path, capsys, args, needle):
    assert _serve(tmp_path, *args) == 2
    _one_line(capsys, needle)


def test_slo_units_as_printed_and_an_empty_slo():
    from kernbench.host.serve.slo import parse_slo

    # the tool prints µs; the micro sign and the Greek mu both read as us
    assert parse_slo("ttft=2\u00b5s,tpot=3\u03bcs,e2e=4us") == {"ttft": 2e3, "tpot": 3e3,
                                                               "e2e": 4e3}
    assert parse_slo(None) == {}
    # keys in any case, spaces around `=` and before the unit, as people type them
    assert parse_slo(" TTFT = 1 s , Tpot=50 ms") == {"ttft": 1e9, "tpot": 5e7}
    # a number written as a trace's cell may be: a trailing or a leading point
    assert parse_slo("ttft=5.ms,tpot=.5ms") == {"ttft": 5e6, "tpot": 5e5}
    with pytest.raises(InputError, match="positive, finite"):
        parse_slo("ttft=1e400s")
    for text in ("", " "):
        with pytest.raises(InputError, match="--slo.*is empty"):
            parse_slo(text)


@pytest.mark.parametrize(("text", "needle"), [
    ("ttft=-1ms", "'ttft=-1ms' must be a positive, finite time"),  # not "not KEY=VALUEUNIT"
    ("tpot=-0s", "must be a positive, finite time"),
    ("ttft=1s,", "an empty item in 'ttft=1s,'"),
    ("ttft=1s,,tpot=5ms", "an empty item"),
    ("ttft=1e-12s", "'ttft=1e-12s' is under one nanosecond"),
    ("tpot=0.5ns", "is under one nanosecond"),
])
def test_slo_values_a_user_mistypes_get_their_own_reason(text, needle):
    from kernbench.host.serve.slo import parse_slo

    with pytest.raises(InputError, match="--slo") as e:
        parse_slo(text)
    assert needle in str(e.value)


def test_slo_limits_from_one_nanosecond_on_are_kept():
    from kernbench.host.serve.slo import parse_slo

    assert parse_slo("tpot=1ns,ttft=+2ms") == {"tpot": 1.0, "ttft": 2e6}


def test_an_onnx_model_is_named_by_its_file_and_warned_about_once(tmp_path, capsys):
    """A model with symbolic dims is built at each step's shape: its name stays the file's,
    and what runs whole is said once even though each shape names its nodes anew."""
    import importlib.util

    import onnx

    spec = importlib.util.spec_from_file_location(
        "dynamic_decode", ROOT / "tests" / "ir" / "dynamic_decode.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    onnx.save(mod.build(), tmp_path / "dyn.onnx")
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,8,3\n0,5,2\n")
    assert main(["serve", str(tmp_path / "dyn.onnx"), "-t", "small", "--out",
                 str(tmp_path / "o"), "--trace", str(tmp_path / "t.csv")]) == 0
    err = capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "stats.json").read_text())["serve"]["model"] == "dyn"
    assert "requests of dyn on" in err
    assert sum("whole-layer ops" in ln for ln in err.splitlines()) == 1


def test_a_step_cache_identity_is_the_hardware_not_its_name():
    from kernbench.host.serve.chips import one_chip
    from kernbench.host.serve.step_cache import identity
    from kernbench.topology import load_topology

    one = one_chip(load_topology("large-x8"))  # a disaggregated run's chip
    assert identity(TINY, None, one) == identity(TINY, None, load_topology("large"))
    assert identity(TINY, None, one) != identity(TINY, None, load_topology("base"))


def test_weights_that_fill_the_hbm_name_the_memory_and_the_way_out():
    from kernbench.host.serve.kv_cache import capacity_blocks

    with pytest.raises(InputError, match="HBM of one chip.*disaggregated"):
        capacity_blocks(2**30, 2**31, 1024, 16, 0.9, "one chip")


def test_length_syntax_variants_draw_what_they_say():
    """`uniform:LO:HI` is `LO:HI`; a lognormal median may be any real from 1, and an
    integer one draws what it drew before the median could be a real."""
    import math
    import random

    from kernbench.host.serve.workload import LengthSpec

    a, b = LengthSpec.parse("uniform:8:16", "--prompt-len"), LengthSpec.parse("8:16", "x")
    assert (a.kind, a.lo, a.hi) == (b.kind, b.lo, b.hi) == ("uniform", 8, 16)
    half = LengthSpec.parse("lognormal:300.5:0.6", "--output-len")
    whole = LengthSpec.parse("lognormal:300:0.6:2000", "--output-len")
    r1, r2, ref = random.Random(5), random.Random(5), random.Random(5)
    for _ in range(200):
        z = ref.gauss(0.0, 1.0)
        assert half.draw(r1) == max(1, round(300.5 * math.exp(0.6 * z)))
        assert whole.draw(r2) == max(1, min(2000, round(300 * math.exp(0.6 * z))))
