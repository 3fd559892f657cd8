"""A load sweep through `kernbench sweep`: a `serve:` section swept over rates."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kernbench.errors import InputError
from kernbench.host.sweep import finish_sweep, plan_sweep, run_points

ROOT = Path(__file__).resolve().parents[2]


def test_load_sweep_gives_latency_against_throughput(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "serve:\n  rate: [5000, 200000]\n  requests: 12\n  prompt_len: '16:64'\n"
                    "  output_len: 4\n  slo: ttft=1ms\n")
    plan = plan_sweep(spec)
    assert [p.serve["rate"] for p in plan.points] == [5000.0, 200000.0]
    assert plan.points[0].id != plan.points[1].id
    run_points(plan.points, tmp_path / "out", workers=1)
    table, csv_path, html_path = finish_sweep(plan, tmp_path / "out")
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    slow, fast = rows
    # more load: more requests per second served, and they wait longer for a first token
    assert float(fast["requests_per_s"]) > float(slow["requests_per_s"])
    assert float(fast["ttft_p99_s"]) > float(slow["ttft_p99_s"])
    assert "Latency against throughput" in html_path.read_text()


def test_points_sharing_a_step_cache_simulate_each_program_once(tmp_path):
    text = (f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
            "serve:\n  rate: [5000, 200000]\n  requests: 6\n  prompt_len: '16:48'\n"
            "  output_len: 3\n")
    alone, shared = tmp_path / "a.yaml", tmp_path / "s.yaml"
    alone.write_text(text)
    shared.write_text(text + "  step_cache: steps.json\n")
    ids = [p.id for p in plan_sweep(alone).points]
    plan = plan_sweep(shared)
    assert [p.id for p in plan.points] == ids  # the cache decides no result
    assert all(p.step_cache == str((tmp_path / "steps.json").resolve()) for p in plan.points)

    def simulated(out: Path) -> list[tuple[int, dict]]:
        run_points(plan.points, out, workers=1)
        stats = [json.loads((out / "points" / i / "stats.json").read_text())["serve"]
                 for i in ids]
        return [(s["steps"]["programs_simulated"], s["results"]) for s in stats]

    first, again = simulated(tmp_path / "o1"), simulated(tmp_path / "o2")
    assert first[0][0] > 0 and sum(n for n, _ in again) == 0  # all from the shared file
    assert [r for _, r in again] == [r for _, r in first]
    # the second point reused the first one's programs: fewer than it needs alone
    run_points(plan_sweep(alone).points, tmp_path / "o3", workers=1)
    own = json.loads((tmp_path / "o3" / "points" / ids[1] / "stats.json").read_text())
    assert first[1][0] < own["serve"]["steps"]["programs_simulated"]


def test_a_step_cache_in_a_missing_folder_is_a_spec_error(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "serve:\n  rate: [5000]\n  step_cache: nowhere/steps.json\n")
    with pytest.raises(InputError, match="serve.step_cache"):
        plan_sweep(spec)


def test_a_file_that_is_not_a_step_cache_is_a_spec_error(tmp_path):
    # refused once, before any point runs (each point would fail on it), and left as it is
    (tmp_path / "steps.json").write_text('{"kind": "kernbench step cache", "caches": []}')
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "serve:\n  rate: [5000, 6000]\n  step_cache: steps.json\n")
    with pytest.raises(InputError) as e:
        plan_sweep(spec)
    assert e.value.field == "serve.step_cache"
    assert "steps.json: not a kernbench step cache: its top level is not" in e.value.reason
    assert (tmp_path / "steps.json").read_text().endswith('"caches": []}')


def test_a_disaggregated_point_on_one_chip_fails_before_it_runs(tmp_path):
    # a grid over the chip count: only the points that can split their chips run
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "topology: small\ngrid:\n  system.chips: [1, 2]\n"
                    "serve:\n  rate: [5000]\n  policy: [continuous, disaggregated]\n"
                    "  prefill_chips: 2\n  requests: 3\n")
    plan = plan_sweep(spec)
    errors = {(p.serve["policy"], dict(p.params)["system.chips"]): p.error
              for p in plan.points}
    assert errors[("continuous", 1)] is None and errors[("continuous", 2)] is None
    # worded as the spec's own errors: the key in the spec's words, then why
    assert errors[("disaggregated", 1)].startswith(
        "field 'serve.policy': the disaggregated policy needs")
    assert "at least 2 chips" in errors[("disaggregated", 1)]
    # two chips, both asked to prefill: none would decode
    assert errors[("disaggregated", 2)].startswith("field 'serve.prefill_chips': ")
    assert "got 2" in errors[("disaggregated", 2)]


def test_the_load_sweep_legend_covers_no_plot():
    from kernbench.host.sweep.report import latency_throughput_figure

    # three policies whose curves fill both plots' corners
    rows = [{"status": "ok", "model": "m.json", "qconfig": "default", "policy": pol,
             "rate": rate, "output_tokens_per_s": 1000.0 * (i + 1) * (1 + 0.1 * j),
             "ttft_p99_s": 1e-3 * 2**i, "tpot_p99_s": 1e-4 * (4 - i)}
            for j, pol in enumerate(("continuous", "chunked", "static"))
            for i, rate in enumerate((1000, 2000, 4000, 8000))]
    fig = latency_throughput_figure(rows)
    fig.canvas.draw()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert len(legends) == 1 and len(legends[0].get_texts()) == 3
    box = legends[0].get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent())


def test_a_topology_grid_shares_one_step_cache(tmp_path):
    """Each topology's programs have their own section of the one file: a second sweep
    simulates nothing."""
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "grid:\n  cube.hbm_ctrl.channel_bw_gbs: [16.0, 32.0]\n"
                    "serve:\n  rate: [5000]\n  requests: 4\n  prompt_len: '16:32'\n"
                    "  output_len: 2\n  step_cache: steps.json\n")
    plan = plan_sweep(spec)

    def simulated(out: Path) -> list[int]:
        run_points(plan.points, out, workers=1)
        return [json.loads((out / "points" / p.id / "stats.json").read_text())
                ["serve"]["steps"]["programs_simulated"] for p in plan.points]

    first = simulated(tmp_path / "o1")
    assert min(first) > 0 and simulated(tmp_path / "o2") == [0, 0]
    assert len(json.loads((tmp_path / "steps.json").read_text())["caches"]) == 2


def test_replay_blocks_is_an_option_of_the_point_only_when_given(tmp_path):
    text = (f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
            "serve:\n  rate: [5000]\n  requests: 6\n")
    plain, more, few = tmp_path / "p.yaml", tmp_path / "m.yaml", tmp_path / "f.yaml"
    plain.write_text(text)
    more.write_text(text + "  replay_blocks: 6\n")
    few.write_text(text + "  replay_blocks: 2\n")
    (p,), (m,) = plan_sweep(plain).points, plan_sweep(more).points
    assert "replay_blocks" not in p.serve  # earlier sweeps' points keep their ids
    assert m.serve["replay_blocks"] == 6 and m.id != p.id
    with pytest.raises(InputError, match="replay_blocks"):
        plan_sweep(few)


def test_a_load_sweep_sizes_the_kv_cache_by_blocks(tmp_path):
    text = (f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
            "serve:\n  rate: [5000]\n  requests: 4\n  prompt_len: 16\n  output_len: 3\n")
    plain, sized = tmp_path / "p.yaml", tmp_path / "s.yaml"
    plain.write_text(text)
    sized.write_text(text + "  kv_blocks: 40\n")
    (point,) = plan_sweep(sized).points
    assert point.id != plan_sweep(plain).points[0].id  # another cache: another point
    run_points([point], tmp_path / "out", workers=1)
    stats = json.loads((tmp_path / "out" / "points" / point.id / "stats.json").read_text())
    assert stats["serve"]["kv_cache"]["blocks"] == 40
    both = tmp_path / "b.yaml"
    both.write_text(text + "  kv_blocks: 40\n  kv_fraction: 0.5\n")
    with pytest.raises(InputError, match="kv_blocks or kv_fraction"):
        plan_sweep(both)


def _tiny_llama_spec(tmp_path: Path, serve_keys: str) -> Path:
    """A load sweep of the tiny Llama at one rate, with `serve_keys` (YAML lines) added."""
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\n"
                    "serve:\n  rate: [5000]\n" + serve_keys)
    return spec


@pytest.mark.parametrize(("extra", "field", "needle"), [
    # options no point of the sweep uses: refused as `kernbench serve` refuses them
    ("  policy: static\n  max_batch_tokens: 100\n", "serve.max_batch_tokens",
     "no point uses another policy"),
    ("  policy: [continuous, chunked]\n  prefill_chips: 1\n", "serve.prefill_chips",
     "no point uses it"),
    # serve's --trace has no place in a load sweep: said, not hidden behind `rate`
    ("  trace: t.csv\n", "serve.trace", "kernbench serve --trace"),
])
def test_a_load_sweep_refuses_what_none_of_its_points_would_use(tmp_path, extra, field,
                                                                needle):
    spec = _tiny_llama_spec(tmp_path, extra)
    with pytest.raises(InputError) as e:
        plan_sweep(spec)
    assert e.value.field == field and needle in e.value.reason, str(e.value)


def test_options_some_point_uses_are_kept(tmp_path):
    spec = _tiny_llama_spec(tmp_path, "  policy: [static, continuous]\n"
                                      "  max_batch_tokens: 100\n")
    tokens = {p.serve["policy"]: p.serve["max_batch_tokens"] for p in plan_sweep(spec).points}
    assert tokens == {"static": None, "continuous": 100}


def test_a_failed_point_names_the_spec_key_not_the_serve_option(tmp_path):
    plan = plan_sweep(_tiny_llama_spec(tmp_path, "  requests: 3\n  prompt_len: 64\n"
                                                 "  kv_blocks: 1\n"))
    run_points(plan.points, tmp_path / "out", workers=1)
    (row,) = csv.DictReader(finish_sweep(plan, tmp_path / "out")[1].open())
    assert row["status"] == "error"
    assert "field 'serve.kv_blocks': the KV cache (1 block of 16 tokens" in row["error"]
    assert "--kv-blocks" not in row["error"]


@pytest.mark.parametrize(("serve_keys", "field", "needle"), [
    # what each point's own serve run would refuse is found before any point runs
    ("  rate: [5000]\n  requests: 5000000\n", "serve.requests", "must be 1..1,000,000"),
    ("  rate: [5000, .inf]\n", "serve.rate", "must be a positive number, got inf"),
    # the draw's horizon, in the spec's words, not serve's options
    ("  rate: [5000, 1.0e-12]\n", "serve.rate", "(raise serve.rate or lower serve.requests)"),
])
def test_a_load_sweep_finds_a_point_serve_would_refuse_before_any_runs(tmp_path, serve_keys,
                                                                       field, needle):
    spec = tmp_path / "s.yaml"
    spec.write_text(f"model: {ROOT / 'tests/hf_configs/tiny-llama.json'}\nserve:\n"
                    + serve_keys)
    with pytest.raises(InputError) as e:
        plan_sweep(spec)
    assert e.value.field == field and needle in e.value.reason, str(e.value)
    assert "--" not in e.value.reason
