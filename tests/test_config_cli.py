"""Topology configuration: presets, overlays, overrides, and one-line errors (exit 2)."""

from __future__ import annotations

import pytest

from kernbench.cli import main
from kernbench.config import load_topology_config, preset_names
from kernbench.topology import load_topology


def test_presets_small_and_base():
    assert {"small", "base"} <= set(preset_names())
    small = load_topology("small")
    assert len(small.cubes) == 1 and len(small.pes) == 4
    assert small.config.cube.mesh.rows == small.config.cube.mesh.cols == 2
    base = load_topology("base")
    assert len(base.cubes) == 4 and len(base.pes) == 64
    assert base.config.cube.mesh.rows == base.config.cube.mesh.cols == 4
    # base is an overlay: what it does not change comes from small
    assert base.config.cube.pe_template == small.config.cube.pe_template
    assert sum(link.kind == "ucie" for link in base.links.values()) == 8  # 4 pairs × 2 ways


def test_set_overrides_address_pe_template_components():
    cfg = load_topology_config("small", ["cube.pe_template.pe_gemm.rows=64",
                                         "cube.pe_template.pe_gemm.dataflow=os"])
    assert cfg.cube.pe_template.pe_gemm.rows == 64
    assert cfg.cube.pe_template.pe_gemm.dataflow == "os"


def test_user_file_extends_a_preset(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("extends: base\nname: mine\ncube:\n  pe_template:\n    pe_gemm: {rows: 8}\n")
    cfg = load_topology_config(str(f))
    assert cfg.name == "mine" and cfg.cube.pe_template.pe_gemm.rows == 8
    assert cfg.sip.cubes.rows == 2  # from base


def test_folders_named_like_presets_do_not_shadow_them(tmp_path, monkeypatch):
    # `large` extends `base`, which extends `small`: folders of those names in the working
    # directory are not topology files
    for name in ("base", "small", "large"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_topology_config("large").name == "large"
    assert load_topology_config("base").sip.cubes.rows == 2


def test_a_file_named_like_a_preset_wins_but_not_inside_a_presets_extends(tmp_path,
                                                                          monkeypatch):
    (tmp_path / "base").write_text("extends: small\nname: mine\n")
    monkeypatch.chdir(tmp_path)
    assert load_topology_config("base").name == "mine"  # the user's own file
    assert load_topology_config("large").sip.cubes.rows == 2  # large's base is the preset


def test_xy_route_and_hops():
    topo = load_topology("base")
    path = topo.route("sip0.cube0.r0c0", "sip0.cube0.r2c3")
    assert path == ("sip0.cube0.r0c0->sip0.cube0.r0c1", "sip0.cube0.r0c1->sip0.cube0.r0c2",
                    "sip0.cube0.r0c2->sip0.cube0.r0c3", "sip0.cube0.r0c3->sip0.cube0.r1c3",
                    "sip0.cube0.r1c3->sip0.cube0.r2c3")
    cross = topo.route("sip0.cube0.r0c0", "sip0.cube1.r0c0")
    assert sum(topo.links[link].kind == "ucie" for link in cross) == 1


BAD = [
    (["--set", "cube.router.foo=1"], "field 'cube.router.foo': unknown key"),
    (["--set", "cube.router.link_bw_gbs=-5"], "field 'cube.router.link_bw_gbs'"),
    (["--set", "cube.pe_layout=[r0c0,r7c0]"], "router 'r7c0' is not in the 2x2 mesh"),
    (["--set", "cube.router.hop_latency_ns=0"], "field 'cube.router.hop_latency_ns'"),
    (["--set", "cube.m_cpu.router=r3c3"], "m_cpu.router: router 'r3c3'"),
    (["--set", "cube.pe_template.pe_gemm.dataflow=xs"], "field 'cube.pe_template.pe_gemm.dataflow'"),
    (["--set", "nonsense"], "expected PATH=VALUE"),
]


@pytest.mark.parametrize(("args", "expected"), BAD)
def test_invalid_config_one_line_exit_2(capsys, args, expected):
    code = main(["topology", "show", "small", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_dangling_extends_and_missing_file(tmp_path, capsys):
    f = tmp_path / "bad.yaml"
    f.write_text("extends: does_not_exist.yaml\n")
    assert main(["topology", "show", str(f)]) == 2
    assert "does_not_exist.yaml" in capsys.readouterr().err
    assert main(["topology", "show", "no_such_preset"]) == 2
    assert "no such preset or file" in capsys.readouterr().err
    g = tmp_path / "broken.yaml"
    g.write_text("cube: [unclosed\n")
    assert main(["topology", "show", str(g)]) == 2
    assert "malformed YAML" in capsys.readouterr().err


def test_topology_show_and_svg(tmp_path, capsys):
    svg = tmp_path / "mesh.svg"
    assert main(["topology", "show", "base", "--svg", str(svg)]) == 0
    out = capsys.readouterr().out
    assert "64 PEs" in out and "pe_gemm" in out
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<circle") == 64
