"""`kernbench serve` end to end on a tiny model (real simulated steps) and its bad input."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernbench.cli import main
from kernbench.host.models import ShapeOptions, resolve_model
from kernbench.host.run import RunHooks, RunOptions, run_model
from kernbench.host.serve import ServeOptions, serve
from kernbench.host.serve.chips import simulated_send
from kernbench.host.serve.run import AUTO_START_CPU_S as AUTO_START
from kernbench.topology import load_topology

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "hf_configs" / "tiny-llama.json"


def _serve(tmp: Path, name: str, *args: str) -> int:
    return main(["serve", str(TINY), "-t", "small", "--out", str(tmp / name), "--quiet",
                 *args])


def _csv(path: Path) -> list[dict[str, str]]:
    head, *rows = path.read_text().splitlines()
    return [dict(zip(head.split(","), r.split(","), strict=True)) for r in rows]


def _run_ns(b: int, s: int, k: int, tmp: Path) -> int:
    """A program as `kernbench run --batch b --seq-len s --kv-len k` simulates it."""
    d = tmp / f"ref_{b}_{s}_{k}"
    res = resolve_model(TINY, ShapeOptions(b, s, k), d / "m")
    r = run_model(res.path, load_topology("small"), d / "o",
                  RunOptions(trace=False, report=False, write_cmdq=False, bundle=d / "b"),
                  RunHooks(note=lambda *a: None))
    return round(r.stats["total_ns"])


def test_one_at_a_time_equals_the_simulated_prefill_and_decodes(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,24,4\n1.0,40,3\n")
    assert _serve(tmp_path, "o", "--trace", str(trace), "--exact-steps") == 0
    rows = _csv(tmp_path / "o" / "requests.csv")
    for row in rows:
        P, n_out = int(row["prompt_tokens"]), int(row["output_tokens"])
        ttft = round(float(row["ttft_s"]) * 1e9)
        decode = round((float(row["finish_s"]) - float(row["first_token_s"])) * 1e9)
        assert ttft == _run_ns(1, P, 0, tmp_path)
        assert decode == sum(_run_ns(1, 1, P + j - 1, tmp_path) for j in range(1, n_out))


def test_same_seed_same_bytes(tmp_path):
    args = ("--requests", "12", "--rate", "100000", "--prompt-len", "16:48",
            "--output-len", "lognormal:6:0.5:12", "--seed", "7", "--slo", "ttft=40us")
    assert _serve(tmp_path, "a", *args) == 0
    assert _serve(tmp_path, "b", *args) == 0
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert {"requests.csv", "occupancy.csv", "stats.json", "trace.json",
            "report.html"} <= set(files)
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    stats = json.loads((tmp_path / "a" / "stats.json").read_text())["serve"]["results"]
    assert 0 <= stats["goodput"]["fraction"] <= 1
    trace = json.loads((tmp_path / "a" / "trace.json").read_text())["traceEvents"]
    tracks = {e["tid"] for e in trace if e.get("pid") == 1 and e["ph"] == "X"}
    assert len(tracks) == 12  # one track per request


def test_programs_simulated_side_by_side_give_the_same_bytes(tmp_path):
    # --workers 2 simulates the programs each new shape needs in two processes: the
    # same programs, the same times, the same files (the step caches too)
    args = ("--requests", "10", "--rate", "100000", "--prompt-len", "20:60",
            "--output-len", "3:8", "--seed", "3", "--policy", "chunked",
            "--max-batch-tokens", "48")
    assert _serve(tmp_path, "one", *args, "--step-cache", str(tmp_path / "c1.json")) == 0
    assert _serve(tmp_path, "two", *args, "--step-cache", str(tmp_path / "c2.json"),
                  "--workers", "2") == 0
    for f in sorted(p.name for p in (tmp_path / "one").iterdir()):
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "two" / f).read_bytes(), f
    assert (tmp_path / "c1.json").read_bytes() == (tmp_path / "c2.json").read_bytes()
    steps = json.loads((tmp_path / "two" / "stats.json").read_text())["serve"]["steps"]
    assert steps["programs_simulated"] == steps["programs"] > 1


def test_default_workers_start_once_programs_are_costly(tmp_path, monkeypatch, capsys):
    # without --workers the run starts a pool of CPU-count processes once the programs
    # simulated in the serve process have taken AUTO_START_CPU_S (a short run's never
    # do); the files are those of one process whenever it starts
    import kernbench.host.serve.run as serve_run

    def loud(name: str, *more: str) -> str:
        assert main(["serve", str(TINY), "-t", "small", "--out", str(tmp_path / name),
                     "--requests", "8", "--rate", "100000", "--prompt-len", "20:60",
                     "--output-len", "3:8", "--seed", "5", *more]) == 0
        return " ".join(capsys.readouterr().err.split())

    monkeypatch.setattr(serve_run.os, "cpu_count", lambda: 2)
    started = "simulating step programs on 2 processes from here on"
    assert started not in loud("one", "--workers", "1")
    monkeypatch.setattr(serve_run, "AUTO_START_CPU_S", 0.0)
    assert started in loud("auto")
    for f in sorted(p.name for p in (tmp_path / "one").iterdir()):
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "auto" / f).read_bytes(), f
    monkeypatch.setattr(serve_run, "AUTO_START_CPU_S", float("inf"))
    assert "processes from here on" not in loud("never")
    assert main(["serve", "--help"]) == 0
    words = capsys.readouterr().out.replace("│", " ").split()
    assert f"have taken {AUTO_START:g} CPU s" in " ".join(words)


@pytest.mark.parametrize(("content", "args", "needle"), [
    ("arrival_s,prompt_tokens,output_tokens\n-1,8,2\n", (), "line 2: field 'arrival_s'"),
    ("arrival_s,prompt_tokens,output_tokens\n1,8,2\n0.5,8,2\n", (), "earlier than"),
    ("arrival_s,prompt_tokens,output_tokens\n0,8,2\n", ("--slo", "ttft=fast"), "--slo"),
    ("arrival_s,prompt_tokens,output_tokens\n0,300,2\n", ("--kv-blocks", "4"),
     "too small for one request"),
    ("arrival,prompt,output\n0,8,2\n", (), "header"),
    ("arrival_s,prompt_tokens,output_tokens\n0,8,2\n", ("--rate", "5"), "--rate"),
    ("arrival_s,prompt_tokens,output_tokens\n0,8,2\n", ("--workers", "0"), "--workers"),
    ("arrival_s,prompt_tokens,output_tokens\n0,8,2\n", ("--replay-blocks", "2"),
     "--replay-blocks"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, content, args, needle):
    trace = tmp_path / "t.csv"
    trace.write_text(content)
    # an --out whose folders do not exist yet: a refused run makes none of them
    assert _serve(tmp_path, "new/deeper/o", "--trace", str(trace), *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "new").exists()  # nothing half-written, no folder made


def test_prompt_beyond_the_context_is_refused(tmp_path, capsys):
    cfg = json.loads(TINY.read_text()) | {"max_position_embeddings": 64}
    model = tmp_path / "config.json"
    model.write_text(json.dumps(cfg))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n0.1,80,2\n")
    assert main(["serve", str(model), "--trace", str(trace), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 3" in err[0] and "context of 64" in err[0], err
    assert "field 'prompt_tokens'" in err[0]
    # a prompt the context holds, with an output that runs past it: the output is blamed
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n0.1,60,6\n")
    assert main(["serve", str(model), "--trace", str(trace), "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'output_tokens'" in err[0], err
    assert "60 prompt + 6 output tokens need 65 positions" in err[0]
    assert main(["serve", str(model), "--requests", "2", "--rate", "10", "--prompt-len", "60",
                 "--output-len", "6", "--out", str(tmp_path / "o")]) == 2
    assert "field '--output-len'" in capsys.readouterr().err


def test_disaggregated_on_two_chips_is_one_chip_programs_plus_the_kv_transfer(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,24,3\n")
    assert _serve(tmp_path, "o", "--trace", str(trace), "--exact-steps", "--set",
                  "system.chips=2", "--policy", "disaggregated") == 0
    (row,) = _csv(tmp_path / "o" / "requests.csv")
    doc = json.loads((tmp_path / "o" / "stats.json").read_text())["serve"]
    per_token = doc["kv_cache"]["bytes_per_token"]
    assert (doc["chips"]["prefill"], doc["chips"]["decode"]) == (1, 1)
    system = load_topology("small", ["system.chips=2"])
    sent = round(simulated_send(system, 0, 1, 24 * per_token))  # exact: 24 tokens simulated
    ttft = round(float(row["ttft_s"]) * 1e9)
    rest = round((float(row["finish_s"]) - float(row["first_token_s"])) * 1e9)
    assert ttft == _run_ns(1, 24, 0, tmp_path)  # each chip runs `small`'s programs
    assert rest == sent + _run_ns(1, 1, 24, tmp_path) + _run_ns(1, 1, 25, tmp_path)
    # the sizing's inputs are one chip's, and the send is reported as simulated
    assert doc["kv_cache"]["hbm_bytes"] == load_topology("small").hbm_bytes
    assert doc["kv_cache"]["blocks"] == 2 * doc["kv_cache"]["blocks_per_chip"]
    (send,) = doc["chips"]["kv_transfer"]["sends"]
    assert (send["tokens"], send["bytes"], round(send["ns"])) == (24, 24 * per_token, sent)
    assert "1 prefill + 1 decode" in (tmp_path / "o" / "report.html").read_text()


@pytest.mark.parametrize(("args", "needle"), [
    (("--policy", "disaggregated"), "at least 2 chips"),
    (("--prefill-chips", "1"), "only the disaggregated policy"),
    (("--policy", "disaggregated", "--set", "system.chips=2", "--prefill-chips", "2"),
     "--prefill-chips"),
    # the prefill budget holds on the prefill chips too (as `continuous` refuses it)
    (("--policy", "disaggregated", "--set", "system.chips=2", "--max-batch-tokens", "50",
      "--prompt-len", "100"), "request 0: field '--max-batch-tokens'"),
])
def test_disaggregated_bad_input_is_one_line_exit_2(tmp_path, capsys, args, needle):
    assert _serve(tmp_path, "o", "--rate", "10", "-n", "2", *args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "o").exists()


def test_the_loop_tells_its_phase_how_many_requests_finished(tmp_path):
    # what `kernbench serve`'s progress bar polls: requests finished, of all of them
    seen: list[tuple[str, int | None, int]] = []

    @contextmanager
    def phase(name, total, poll):
        seen.append((name, total, poll()))
        yield
        seen.append((name, total, poll()))

    opts = ServeOptions(requests=5, rate=1e5, prompt_len="16:32", output_len="2:4", seed=3)
    serve(TINY, load_topology("small"), tmp_path / "o", opts, tmp_path / "w",
          note=lambda *_: None, phase=phase)
    assert seen == [("serve", 5, 0), ("serve", 5, 5)]


def test_more_replayed_blocks_are_other_programs(tmp_path):
    """`--replay-blocks 5` on an 8-block model: each step program simulates five blocks
    (stats.json says so), its times are those `kernbench run --replay-blocks 5` gives,
    and a step cache written with the default four is not reused for them."""
    cfg = tmp_path / "llama-8l.json"
    cfg.write_text(json.dumps(json.loads(TINY.read_text()) | {"num_hidden_layers": 8}))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,3\n")
    cache = tmp_path / "steps.json"
    stats = {}
    for name, extra in (("four", []), ("five", ["--replay-blocks", "5"])):
        assert main(["serve", str(cfg), "-t", "small", "--trace", str(trace),
                     "--exact-steps", "--step-cache", str(cache), "--quiet",
                     "--out", str(tmp_path / name), *extra]) == 0
        stats[name] = json.loads((tmp_path / name / "stats.json").read_text())["serve"]
    assert stats["four"]["steps"]["replay_blocks"] == 4
    assert stats["five"]["steps"]["replay_blocks"] == 5
    assert stats["five"]["steps"]["programs_simulated"] == stats["five"]["steps"]["programs"]
    # the one request's prefill, as `run` simulates it with five blocks
    d = tmp_path / "ref"
    res = resolve_model(cfg, ShapeOptions(1, 8, 0), d / "m")
    r = run_model(res.path, load_topology("small"), d / "o",
                  RunOptions(trace=False, report=False, write_cmdq=False, bundle=d / "b",
                             replay_blocks=5),
                  RunHooks(note=lambda *a: None))
    rows = _csv(tmp_path / "five" / "requests.csv")
    assert round(float(rows[0]["ttft_s"]) * 1e9) == round(r.stats["total_ns"])


def _serve_with_context(tmp_path, capsys, context: object, rows: str) -> list[str]:
    """The error lines of serving the trace `rows` on tiny-llama whose config.json says
    `max_position_embeddings: context` (exit 2 asserted)."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps(json.loads(TINY.read_text())
                                | {"max_position_embeddings": context}))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    assert main(["serve", str(model), "-t", "small", "--trace", str(trace), "--quiet",
                 "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("context", [64, 64.0, "64"])
def test_the_context_counts_the_positions_fed_and_is_read_as_exporters_write_it(
        tmp_path, capsys, context):
    # 64 + 1 - 1 = 64 positions: fits; 63 + 3 - 1 = 65: one beyond
    err = _serve_with_context(tmp_path, capsys, context, "0,64,1\n0.1,63,3\n")
    assert len(err) == 1 and "line 3" in err[0] and "65 positions" in err[0], err


@pytest.mark.parametrize("context", [0, -1, 64.5, "abc", "64.0", True, [64]])
def test_a_context_that_is_not_a_whole_number_is_refused_not_ignored(tmp_path, capsys, context):
    # ignored, it would let requests run beyond the model's positions
    err = _serve_with_context(tmp_path, capsys, context, "0,250,8\n")
    assert len(err) == 1 and "field 'max_position_embeddings'" in err[0], err
    assert str(tmp_path / "config.json") in err[0] and "whole number >= 1" in err[0], err


@pytest.mark.parametrize("option", ["--prompt-len", "--output-len"])
def test_an_empty_length_is_refused_not_taken_as_the_default(tmp_path, capsys, option):
    assert main(["serve", str(TINY), "-t", "small", "--requests", "2", "--rate", "1000",
                 option, "", "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"field '{option}'" in err[0] and "is not a length" in err[0]
    assert not (tmp_path / "o").exists()


def test_a_length_is_recorded_as_it_was_parsed(tmp_path):
    assert main(["serve", str(TINY), "-t", "small", "--requests", "2", "--rate", "1000",
                 "--prompt-len", " 12 ", "--output-len", "2", "--quiet",
                 "--out", str(tmp_path / "o")]) == 0
    workload = json.loads((tmp_path / "o" / "stats.json").read_text())["serve"]["workload"]
    assert (workload["prompt_len"], workload["output_len"]) == ("12", "2")


def test_kv_blocks_beyond_the_hbm_are_refused_before_anything_runs(tmp_path, capsys):
    # tiny-llama on `small`: the weights leave room for millions of 16-token blocks
    assert main(["serve", str(TINY), "-t", "small", "--requests", "2", "--rate", "1000",
                 "--prompt-len", "8", "--output-len", "2", "--kv-blocks", "100000000000",
                 "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kv-blocks" in err[0] and "at most" in err[0], err
    assert not (tmp_path / "o").exists()


def test_a_step_program_with_no_room_beside_the_cache_names_the_cache_option(tmp_path, capsys):
    # a deep, narrow llama whose KV cache takes the whole HBM the weights leave: the bucket
    # rule's corner program (past tokens rounded up) cannot fit beside it
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 32,
           "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128,
           "vocab_size": 256, "rms_norm_eps": 1e-05, "hidden_act": "silu",
           "tie_word_embeddings": False}
    model = tmp_path / "config.json"
    model.write_text(json.dumps(cfg))
    assert main(["serve", str(model), "-t", "small", "--set", "cube.hbm_ctrl.capacity_gib=0.04",
                 "--kv-fraction", "1", "--requests", "10", "--rate", "1e7", "--prompt-len",
                 "980", "--output-len", "24", "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == err[-1], err
    assert "field '--kv-fraction': the step program of batch" in err[-1]
    assert "does not fit the HBM beside the KV cache" in err[-1]
    assert not (tmp_path / "o").exists()


def test_a_model_too_large_for_the_topology_is_blamed_on_it_not_on_the_cache(tmp_path, capsys):
    # one 16-token prompt with nothing cached is the least any request needs: with a cache
    # of two blocks the model itself does not fit this HBM (its compiled layout is larger
    # than its raw weight bytes, which the sizing before the run used)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,16,2\n")
    assert main(["serve", str(TINY), "-t", "small", "--set",
                 "cube.hbm_ctrl.capacity_gib=0.0002", "--kv-blocks", "2", "--trace", str(trace),
                 "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == err[-1], err
    assert "field '--topology': the step program of batch 1, 16 new and 0 past" in err[-1]
    assert "the model and one prompt of 16 tokens, nothing cached, do not fit" in err[-1]
    assert "--kv-fraction" not in err[-1]
    assert not (tmp_path / "o").exists()
