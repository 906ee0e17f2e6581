"""``partition --draw``: the picture's clusters are the plan's kernels (read back
from the SVG's geometry), edges crossing kernels carry bytes, and the failure modes
are one clear line."""

from __future__ import annotations

import re
import shutil
import struct
import xml.etree.ElementTree as ET

import pytest

from partitioner import cli, load_graph, partition
from partitioner.draw import OPS_VIEW_LIMIT, draw, to_dot

from .conftest import ROOT, make_graph, op

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (Debian package graphviz)")
SVG = "{http://www.w3.org/2000/svg}"
BLOCK = ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml"


def _points(element) -> list[tuple[float, float]]:
    """Every coordinate of an SVG shape (polygon points, ellipse centre and radii, path)."""
    if element.tag == SVG + "ellipse":
        cx, cy, rx, ry = (float(element.get(k)) for k in ("cx", "cy", "rx", "ry"))
        return [(cx - rx, cy - ry), (cx + rx, cy + ry)]
    text = element.get("points") or element.get("d") or ""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]
    return list(zip(numbers[::2], numbers[1::2]))


def _box(group) -> tuple[float, float, float, float]:
    pts = [p for shape in group if shape.tag in (SVG + "polygon", SVG + "path", SVG + "ellipse")
           for p in _points(shape)]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return min(xs), min(ys), max(xs), max(ys)


def clusters_from_svg(path) -> list[set[str]]:
    """The op ids (``op<index>``) lying inside each cluster of the SVG, by geometry."""
    root = ET.parse(path).getroot()
    groups = list(root.iter(SVG + "g"))
    clusters = [_box(g) for g in groups if g.get("class") == "cluster"]
    inside: list[set[str]] = [set() for _ in clusters]
    for g in groups:
        title = g.find(SVG + "title")
        if g.get("class") != "node" or title is None or not title.text.startswith("op"):
            continue
        x0, y0, x1, y1 = _box(g)
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        hits = [k for k, (a, b, c, d) in enumerate(clusters) if a <= cx <= c and b <= cy <= d]
        assert len(hits) <= 1, f"{title.text} lies in {len(hits)} clusters"
        for k in hits:
            inside[k].add(title.text)
    return inside


@needs_dot
def test_draw_svg_clusters_are_the_plans_kernels(tmp_path):
    graph = load_graph(BLOCK)
    plan = partition(graph, "ilp")
    out = tmp_path / "plan.svg"
    assert cli.main([str(BLOCK), "--strategy", "ilp", "--draw", str(out), "--draw-view", "ops"]) == 0
    assert out.stat().st_size > 10_000
    kernels = [{f"op{graph.index[n]}" for n in g.ops} for g in plan.cost.groups if g.kind != "view"]
    drawn = clusters_from_svg(out)
    assert sorted(map(sorted, drawn)) == sorted(map(sorted, kernels))
    text = out.read_text()
    assert "MB" in text and " us" in text  # crossing edges carry bytes, clusters their modelled time
    for g in plan.cost.groups:
        if g.kind != "view":
            assert f"{g.modeled_time_us:,.2f} us" in text


@needs_dot
def test_draw_png(tmp_path):
    plan = partition(load_graph(ROOT / "graphs" / "softmax_f16.yaml"), "xla")
    out = draw(plan, tmp_path / "plan.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_draw_dot_needs_no_graphviz_program(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("shutil.which", lambda name: None)
    out = tmp_path / "plan.dot"
    assert cli.main([str(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "--strategy", "tvm", "--draw", str(out)]) == 0
    source = out.read_text()
    assert source.startswith("digraph") and source.count("subgraph cluster_") == 4
    assert "drawn" in capsys.readouterr().out


def test_draw_without_dot_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert cli.main([str(ROOT / "graphs" / "softmax_f16.yaml"), "--draw", str(tmp_path / "p.svg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "graphviz" in err and "Traceback" not in err
    assert not (tmp_path / "p.svg").exists()


def test_draw_unknown_suffix_exits_2(tmp_path, capsys):
    assert cli.main([str(ROOT / "graphs" / "softmax_f16.yaml"), "--draw", str(tmp_path / "p.pdf")]) == 2
    assert ".svg, .png or .dot" in capsys.readouterr().err


def test_large_plans_draw_one_node_per_kernel_with_a_legend():
    graph = load_graph(BLOCK)
    assert len(graph.ops) > OPS_VIEW_LIMIT
    plan = partition(graph, "ilp")
    source = to_dot(plan).source
    kernels = [k for k, g in enumerate(plan.cost.groups) if g.kind != "view"]
    assert sorted(int(m) for m in re.findall(r"^\s*k(\d+) \[", source, re.M)) == kernels
    assert "cluster_" not in source and f"one node per kernel ({len(graph.ops)} ops)" in source
    assert "kernel kinds" in source and "attention" in source  # the legend names the kinds drawn
    assert "op0" in to_dot(plan, "ops").source and "kernel kinds" in to_dot(plan, "ops").source


@needs_dot
def test_the_kernel_view_of_gpt2_is_a_picture_a_screen_can_hold(tmp_path):
    out = draw(partition(load_graph(BLOCK), "ilp"), tmp_path / "plan.png")
    width, height = struct.unpack(">II", out.read_bytes()[16:24])
    assert height < 3000 and width < 2000  # the op view was 1145 x 12148 px



def test_free_text_names_draw_and_an_empty_draw_path_is_refused(tmp_path, capsys):
    """A graph named ``abc\\`` gave a .dot file dot could not read (the backslash
    escaped the closing quote), and ``--draw ""`` was ignored without a word."""
    graph = tmp_path / "bs.yaml"
    graph.write_text("format: 1\nname: 'abc\\'\ninputs: [{name: x, shape: [4, 6]}]\n"
                     "ops: [{name: y, op: exp, inputs: [x]}]\noutputs: [y]\n")
    source = to_dot(partition(load_graph(graph), "ilp")).source
    assert source.startswith('digraph "abc\\\\" {') and 'label="abc\\\\: ilp plan' in source
    if shutil.which("dot"):
        assert cli.main([str(graph), "--draw", str(tmp_path / "bs.svg")]) == 0
        ET.parse(tmp_path / "bs.svg")
    with pytest.raises(SystemExit) as info:
        cli.main([str(graph), "--draw", ""])
    assert info.value.code == 2 and "--draw needs a file name" in capsys.readouterr().err


def test_an_edge_carries_what_the_kernel_reads_not_the_tensors_size():
    """A slice's kernel read 1 MiB of a 4 MiB tensor, and a gather 16 rows of a
    200 MB table, but their edges said 4.2 MB and 204.8 MB (found by a new user);
    edges now carry the cost model's bytes, once per tensor and kernel."""
    graph = make_graph({"x": [1024, 1024], "t": [50000, 1024], "i": ([16], "int64")}, [
        op("p", "exp", ["x"]), op("s", "slice", ["p"], starts=[0], ends=[256], axes=[0]), op("q", "neg", ["s"]),
        op("g", "gather", ["t", "i"], axis=0), op("h", "slice", ["t"], starts=[0], ends=[4], axes=[0]),
        op("k", "relu", ["h"]), op("two", "add", ["x", "x"])], ["p", "q", "g", "k", "two"])
    plan = partition(graph, "none")
    edges = dict(re.findall(r"^\s*(\S+ -> \S+) \[label=\"([^\"]*)\"", to_dot(plan, "ops").source, re.M))
    index = {name: f"op{i}" for i, name in enumerate(graph.order)}
    assert edges[f"{index['p']} -> {index['s']}"] == "1.0 MB"  # 256 x 1024 float32
    assert edges[f"in1 -> {index['g']}"] == "65.5 KB"  # 16 rows of 1024
    assert edges[f"in1 -> {index['h']}"] == "16.4 KB" and edges[f"in2 -> {index['g']}"] == "128 B"
    assert edges[f"in0 -> {index['two']}"] == "4.2 MB"  # x + x reads x once
    kernel_edges = re.findall(r"^\s*(k\d+ -> k\d+) \[label=\"([^\"]*)\"", to_dot(plan, "kernels").source, re.M)
    assert sorted(label for _, label in kernel_edges) == ["1.0 MB", "1.0 MB", "16.4 KB"]


def test_a_group_of_no_elements_is_drawn_as_not_launched(tmp_path, capsys):
    """The CLI said 6 kernels where the title said 4 launches: two groups compute
    zero-element results, which launch nothing."""
    graph = tmp_path / "zero.yaml"
    graph.write_text("inputs:\n  - {name: x, shape: [0, 1024]}\n  - {name: w, shape: [512, 1024]}\n"
                     "  - {name: y, shape: [256, 512]}\nops:\n  - {name: wt, op: transpose, inputs: [w]}\n"
                     "  - {name: mm, op: matmul, inputs: [x, wt]}\n  - {name: r, op: relu, inputs: [mm]}\n"
                     "  - {name: s, op: reduce_sum, inputs: [r], attrs: {axes: [0]}}\n"
                     "  - {name: e, op: exp, inputs: [y]}\n  - {name: t, op: add, inputs: [e, s]}\noutputs: [r, t]\n")
    out = tmp_path / "z.dot"
    assert cli.main([str(graph), "--strategy", "none", "--draw", str(out)]) == 0
    assert f"drawn     {out}: 4 kernel(s)" in capsys.readouterr().out
    source = out.read_text()
    assert "4 kernels" in source and source.count("(no elements: not launched)") == 2


def test_a_path_ending_in_a_slash_or_an_unknown_view_is_refused(tmp_path, capsys):
    """``--draw out/sub.dot/`` wrote a file 'sub.dot', and ``to_dot(plan, 'bogus')``
    drew the op view, both without a word."""
    graph = str(ROOT / "graphs" / "softmax_f16.yaml")
    for path in (f"{tmp_path}/sub.dot/", f"{tmp_path}/sub.dot/."):
        assert cli.main([graph, "--draw", path]) == 2
        assert "it names a directory, not a file" in capsys.readouterr().err
        assert not (tmp_path / "sub.dot").exists()
    plan = partition(load_graph(graph), "none")
    for view in ("bogus", "KERNELS"):
        with pytest.raises(ValueError, match="unknown view"):
            to_dot(plan, view)
