"""Horizontal contraction groups: matmuls of one A operand with no path between them
(q/k/v projections) as one kernel. Legality, cost, the exact optimum against brute
force, the enumeration, the corpus, and the kernels on the emulator."""

from __future__ import annotations

import re
import shutil

import pytest

from backends.cuda.render import render
from partitioner import evaluate, load_graph, load_hardware, partition
from partitioner.cost import contraction_dims, conv_weight_rows, flops_once, group_cost, op_executions
from partitioner.group import Group
from partitioner.legality import decide
from partitioner.plan import Plan, SolverInfo
from partitioner.reference import input_values
from partitioner.strategies.candidates import enumerate_candidates

from .conftest import ROOT, make_graph, op
from .test_cuda_emulated import check
from .test_attention import assert_finds_the_needed_groups, legal_groups, needed_groups
from .test_optimality import assert_ilp_exact

H100 = load_hardware("h100")


def qkv(dtype="float16", m=200, k=72, n=(136, 72, 24)):
    """``xs = x * 0.5`` feeding three projections: a transposed weight, a plain one,
    and one of N below a tile; each with an epilogue or none."""
    inputs = {"x": ([m, k], dtype), "wq": ([n[0], k], dtype), "wk": ([k, n[1]], dtype), "wv": ([k, n[2]], dtype),
              "b": ([n[1]], dtype)}
    ops = [op("xs", "mul", ["x", 0.5]),
           op("wqt", "transpose", ["wq"], perm=[1, 0]), op("q", "matmul", ["xs", "wqt"]), op("qr", "relu", ["q"]),
           op("xv", "reshape", ["xs"], shape=[m, k]), op("kk", "matmul", ["xv", "wk"]), op("kb", "add", ["kk", "b"]),
           op("v", "matmul", ["xs", "wv"])]
    return make_graph(inputs, ops, ["qr", "kb", "v"], dtype=dtype)


def reason(graph, ops):
    return decide(Group.of(graph, ops), H100).reason


def test_siblings_with_their_prologues_and_epilogues_form_one_group():
    g = qkv()
    assert reason(g, ["xs", "wqt", "q", "qr", "xv", "kk", "kb", "v"]) is None
    assert reason(g, ["q", "v"]) is None and reason(g, ["wqt", "q", "kk"]) is None
    assert Group.of(g, ["q", "kk", "v"]).kind == "contraction"
    assert contraction_dims(Group.of(g, ["q", "kk", "v"])) == (1, 200, 136 + 72 + 24, 72)


def test_independent_contractions_of_other_operands_do_not_share_a_group():
    g = make_graph({"x": [8, 16], "y": [8, 16], "w": [16, 4], "img": [1, 2, 4, 4], "cw": [3, 2, 1, 1],
                    "z": [2, 8, 16]}, [
        op("a", "matmul", ["x", "w"]), op("b", "matmul", ["y", "w"]),  # another A
        op("xt", "transpose", ["x"], perm=[1, 0]), op("c", "matmul", ["xt", "x"]),  # a view of x, not x
        op("d", "matmul", ["z", "w"]), op("e", "matmul", ["x", "w"]),  # a batch of 2 against none
        op("f", "conv2d", ["img", "cw"]), op("h", "conv2d", ["img", "cw"])], ["a", "b", "c", "d", "e", "f", "h"])
    assert reason(g, ["a", "b"]) == "contraction.horizontal"
    assert reason(g, ["a", "xt", "c"]) == "contraction.horizontal"
    assert reason(g, ["d", "e"]) == "contraction.horizontal"
    assert reason(g, ["f", "h"]) is None  # convolutions of one input through one window
    assert reason(g, ["a", "e"]) is None


def test_an_op_of_two_products_a_written_side_value_and_a_reduction_are_rejected():
    g = make_graph({"x": [8, 16], "wg": [16, 32], "wu": [16, 32], "s": [8, 32]}, [
        op("gate", "matmul", ["x", "wg"]), op("act", "silu", ["gate"]), op("up", "matmul", ["x", "wu"]),
        op("h", "mul", ["act", "up"]), op("es", "exp", ["s"]), op("y", "add", ["up", "es"]),
        op("r", "reduce_sum", ["x"], axes=[1])], ["h", "es", "y", "r"])
    assert reason(g, ["gate", "act", "up"]) is None
    assert reason(g, ["gate", "act", "up", "h"]) == "contraction.epilogue_mixes"
    assert reason(g, ["gate", "up", "es", "y"]) == "contraction.side_written"
    assert reason(g, ["up", "es", "y"]) is None  # one product writes its side value over its own space
    assert reason(g, ["gate", "up", "r"]) == "contraction.with_reduction"


def test_a_shared_prologue_is_recomputed_by_every_product_and_never_written():
    g = qkv()
    group = Group.of(g, ["xs", "q", "xv", "kk", "v"])
    runs = op_executions(group)
    # xs once per N tile of each product that loads it: 2 + 1 + 1 tiles of 128
    assert runs["xs"] == 200 * 72 * (2 + 1 + 1)
    g2 = make_graph({"x": [8, 16], "w": [16, 4]}, [
        op("xs", "mul", ["x", 0.5]), op("a", "matmul", ["xs", "w"]), op("b", "matmul", ["xs", "w"])], ["a", "b", "xs"])
    assert reason(g2, ["xs", "a", "b"]) == "contraction.prologue_written"


def test_one_kernel_reads_the_shared_operand_once_and_saves_the_launches():
    g = qkv(m=4096, k=1024, n=(1024, 1024, 1024))
    together = group_cost(Group.of(g, ["wqt", "q", "kk", "v"]), H100)
    apart = [group_cost(Group.of(g, ops), H100) for ops in (["wqt", "q"], ["kk"], ["v"])]
    xs = 4096 * 1024 * 2
    assert together.bytes_read == sum(c.bytes_read for c in apart) - 2 * xs
    assert together.flops == sum(c.flops for c in apart)
    assert together.launches == 1 and together.modeled_time_us < sum(c.modeled_time_us for c in apart)
    assert together.budgets.shared_memory == apart[0].budgets.shared_memory


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_the_ilp_equals_the_brute_force_over_plans_with_siblings(dtype):
    g = qkv(dtype=dtype, m=512, k=256, n=(256, 128, 64))
    assert_ilp_exact(g)
    found = enumerate_candidates(g, H100, 64)
    # wqt, a free prologue, prunes the groups of q without it
    assert assert_finds_the_needed_groups(g, found) == needed_groups(g) < legal_groups(g, False)
    plan = partition(g, "ilp")
    assert any(sum(o in ops for o in ("q", "kk", "v")) > 1 for ops in plan.groups), plan.groups


def test_llama_q_k_and_v_projections_share_one_group_in_every_layer():
    g = load_graph(ROOT / "graphs" / "llama7b_2l_b4_s2048_bf16.yaml")
    plan = partition(g, "ilp")
    assert plan.solver.status == "OPTIMAL"
    products = [sorted(o for o in ops if g.ops[o].op_class == "contraction") for ops in plan.groups]
    assert ["mm", "mm_1", "mm_2"] in products and ["mm_7", "mm_8", "mm_9"] in products
    for name in ("greedy", "xla", "tvm", "inductor"):
        assert plan.cost.modeled_time_us <= partition(g, name).cost.modeled_time_us + 1e-9


def test_a_class_over_the_sibling_cap_is_seeded_in_part_and_says_so(monkeypatch):
    from partitioner.strategies import candidates

    monkeypatch.setattr(candidates, "MAX_SIBLINGS", 2)
    found = enumerate_candidates(qkv(), H100, 64)
    assert found.stopped == ("siblings",)
    g = qkv()
    masks = [set(g.names(m)) for m in found.masks]
    assert any({"q", "kk"} <= ops for ops in masks)  # the first two siblings
    assert not any({"q", "v"} <= ops and "kk" not in ops for ops in masks)  # not a prefix of the class


emulated = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")


def emulate(graph, groups):
    """Run the plan of ``groups`` on the emulator; every output must match NumPy.
    Returns its kernels."""
    from backends.check import run_and_check

    from .test_cuda_emulated import EMULATOR

    plan = Plan(graph, H100, "user", groups, evaluate(graph, groups, H100), SolverInfo("USER", 0.0))
    checks = run_and_check(plan, EMULATOR, inputs=input_values(graph, 3))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    return render(plan).kernels


@emulated
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_horizontal_kernels_match_numpy_on_the_emulator(dtype):
    """The three products with the shared prologue in the kernel (each weight, one of
    them transposed, copied 16 bytes at a time on tensor cores; N of 136, 72 and 24:
    partial tiles in each part), then without it, and the ilp plan."""
    g = qkv(dtype)
    (kernel,) = emulate(g, [["xs", "xv", "wqt", "q", "qr", "kk", "kb", "v"]])
    parts = re.findall(r"// (\w+): n tiles (\d+) to (\d+)", kernel.source)
    assert parts == [("q", "0", "1"), ("kk", "2", "2"), ("v", "3", "3")] and kernel.grid == (2 * 4, 1, 1)
    # each weight is read as stored (xs, computed in the kernel, is not)
    assert kernel.source.count("part_cp_async16(") == (3 if dtype != "float32" else 0)
    emulate(g, [["xs"], ["xv"], ["wqt", "q", "qr", "v"], ["kk", "kb"]])
    check(g, strategies=("ilp",))


@emulated
def test_batched_siblings_and_a_looped_grid_match_numpy(monkeypatch):
    from backends.cuda.kernels import common

    monkeypatch.setattr(common, "MAX_GRID_X", 3)  # each block loops over tiles of both parts
    g = make_graph({"x": [3, 130, 40], "w1": [3, 40, 140], "w2": [40, 20], "r": [3, 130, 20]}, [
        op("a", "matmul", ["x", "w1"]), op("b", "matmul", ["x", "w2"]), op("c", "add", ["b", "r"]),
        op("t", "tanh", ["a"])], ["t", "c"], dtype="float16")
    (kernel,) = emulate(g, [["a", "t", "b", "c"]])
    assert kernel.grid == (3, 1, 1) and "gridDim.x" in kernel.source


def test_xla_merges_sibling_dots_as_its_dot_merger_does_under_32_mib():
    """DotMerger merges BERT-base's q, k and v projections (13.8 MB each) and not
    Llama-7B's (160 MB each); priority fusion alone never puts two dots in a kernel."""
    for name, merged in (("bert_base_2l_b32_s128_f16", True), ("llama7b_2l_b4_s2048_bf16", False)):
        g = load_graph(ROOT / "graphs" / f"{name}.yaml")
        for strategy in ("xla", "xla-fmha"):
            groups = partition(g, strategy).groups
            siblings = [ops for ops in groups if Group.of(g, ops).kind == "contraction"
                        and sum(g.ops[o].op_class == "contraction" for o in ops) > 1]
            assert len(siblings) == (2 if merged else 0), (name, strategy, siblings)
    g = qkv(m=4096, k=1024, n=(1024, 1024, 1024))  # each dot 18 MiB (A 8, W 2, out 8)
    assert any({"q", "kk", "v"} <= set(ops) for ops in partition(g, "xla").groups)
    g = qkv(m=8192, k=2048, n=(1024, 1024, 1024))  # each 52 MiB (A 32, W 4, out 16)
    assert not any({"q", "kk"} <= set(ops) for ops in partition(g, "xla").groups)


@emulated
def test_sibling_reductions_and_pointwise_siblings_share_one_row_kernel_on_the_emulator():
    """The other horizontal groups: reductions of one signature over one input, in a
    multi-reduction row kernel that writes each result, with the pointwise siblings
    of the rows' shape that read the same input, written from the same rows."""
    g = make_graph({"x": [37, 130]}, [
        op("s", "reduce_sum", ["x"], axes=[1]), op("m", "reduce_max", ["x"], axes=[1]),
        op("q", "mul", ["x", "x"]), op("ss", "reduce_sum", ["q"], axes=[1]),
        op("e", "exp", ["x"]), op("n", "neg", ["x"])], ["s", "m", "ss", "e", "n"])
    plan = partition(g, "ilp")
    assert [(c.kind, set(c.ops)) for c in plan.cost.groups] == [("reduction", {"s", "m", "q", "ss", "e", "n"})]
    (kernel,) = render(plan).kernels
    assert sum(a["role"] == "out" for a in kernel.args) == 5 and plan.cost.bytes_read == 37 * 130 * 4
    check(g, strategies=("ilp",))


@emulated
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_sibling_convolutions_of_one_input_match_numpy_on_the_emulator(dtype):
    """1x1 convolutions of one input (an Inception block's branches, a bottleneck and
    its projection shortcut) as one implicit GEMM, each with its bias and epilogue;
    a 3x3 window or another stride is no sibling, and a grouped conv has none."""
    g = make_graph({"x": ([2, 16, 9, 11], dtype), "w1": ([24, 16, 1, 1], dtype), "w2": ([136, 16, 1, 1], dtype),
                    "b2": ([136], dtype), "w3": ([8, 16, 3, 3], dtype), "w4": ([8, 16, 1, 1], dtype),
                    "w5": ([16, 4, 1, 1], dtype)}, [
        op("c1", "conv2d", ["x", "w1"]), op("r1", "relu", ["c1"]), op("c2", "conv2d", ["x", "w2", "b2"]),
        op("t2", "tanh", ["c2"]), op("c3", "conv2d", ["x", "w3"], pads=[1, 1, 1, 1]),
        op("c4", "conv2d", ["x", "w4"], strides=[2, 2]), op("c5", "conv2d", ["x", "w5"], groups=4)],
        ["r1", "t2", "c3", "c4", "c5"], dtype=dtype)
    for other in ("c3", "c4", "c5"):
        assert reason(g, ["c1", other]) == "contraction.horizontal"
    (kernel,) = emulate(g, [["c1", "r1", "c2", "t2"], ["c3"], ["c4"], ["c5"]])[:1]
    assert re.findall(r"// (\w+): n tiles (\d+) to (\d+)", kernel.source) == [("c1", "0", "0"), ("c2", "1", "2")]
    assert any({"c1", "c2"} <= set(ops) for ops in partition(g, "ilp").groups)
    check(g, strategies=("ilp",))


@emulated
@pytest.mark.parametrize("channels", [(16, 24), (7, 9, 3)])
def test_sibling_convolutions_stage_each_ones_own_weight_rows(channels):
    """3x3 convs of 8 channels (K = 72, not a whole number of 16-half sectors) stage
    their weight rows (``cost.WeightRows``), each sibling its own: the rows were once
    bounded by the first sibling's weight, so a larger one read zeros past it (error 99x
    the tolerance at O = 16, 24) and a smaller one read past its own end (SIGSEGV at
    O = 7, 9, 3). The buffer holds the largest sibling's rows."""
    stride = 1 if len(channels) == 2 else 2
    x = [2, 8, 9, 10] if len(channels) == 2 else [2, 5, 13, 11]
    inputs = {"x": (x, "float16"), **{f"w{i}": ([o, x[1], 3, 3], "float16") for i, o in enumerate(channels)}}
    ops = [op(f"c{i}", "conv2d", ["x", f"w{i}"], pads=[1, 1, 1, 1], strides=[stride, stride])
           for i in range(len(channels))]
    g = make_graph(inputs, ops, [f"c{i}" for i in range(len(channels))], dtype="float16")
    group = Group.of(g, [f"c{i}" for i in range(len(channels))])
    sizes = [conv_weight_rows(group, o).numel for o in group.compute]
    assert sizes == [o * x[1] * 9 for o in channels]  # each sibling its own weight
    (kernel,) = emulate(g, [[f"c{i}" for i in range(len(channels))]])
    assert kernel.source.count("row_span") >= 2 * len(channels)  # every part stages its weight rows


def test_the_report_names_each_horizontal_group_and_its_grid(tmp_path, capsys):
    import yaml

    from partitioner import cli

    path = tmp_path / "qkv.yaml"
    g = qkv()
    path.write_text(yaml.safe_dump({
        "name": "qkv", "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype} for n, t in g.inputs.items()],
        "ops": [{"name": o.name, "op": o.kind, "inputs": list(o.inputs), **({"attrs": dict(o.attrs)} if o.attrs else {})}
                for o in g.ops.values()], "outputs": list(g.outputs)}))
    assert cli.main([str(path), "--report"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "horizontal #" in out and "3 products (q, kk, v) of one A operand 'xs'" in out
    assert "200x232x72 GEMM grid (N = 136 + 72 + 24)" in out


def test_each_product_computes_the_values_its_part_needs():
    """A side value read by two products' epilogues is computed by each part, and a
    prologue read by both loads and both epilogues four times (the kernel's count)."""
    g = make_graph({"x": [4096, 64], "w1": [64, 4096], "w2": [64, 4096], "s": [4096, 4096]}, [
        op("a", "matmul", ["x", "w1"]), op("b", "matmul", ["x", "w2"]), op("es", "gelu", ["s"]),
        op("c", "add", ["a", "es"]), op("d", "add", ["b", "es"])], ["c", "d"], dtype="float16")
    group = Group.of(g, list(g.ops))
    assert op_executions(group)["es"] == 2 * 4096 * 4096
    assert group_cost(group, H100).recomputed_flops == flops_once(g, g.ops["es"])  # gelu a second time
    g = make_graph({"x": [40, 40], "w1": [40, 40], "w2": [40, 40]}, [
        op("xs", "exp", ["x"]), op("a", "matmul", ["xs", "w1"]), op("b", "matmul", ["xs", "w2"]),
        op("c", "add", ["a", "xs"]), op("d", "add", ["b", "xs"])], ["c", "d"], dtype="float16")
    assert op_executions(Group.of(g, list(g.ops)))["xs"] == 4 * 40 * 40


def test_baselines_never_freeze_an_illegal_union_and_the_ilp_takes_only_legal_plans():
    """An addmm bias is a graph input (a product added to a product is no bias), and a
    frozen group takes the groups its ops are in whole: DotMerger's merge of the
    scores with another product of Q keeps the attention rewrite out."""
    g = make_graph({"x": [1, 16], "w0": [16, 16], "w1": [16, 16]}, [
        op("p0", "matmul", ["x", "w0"]), op("p1", "matmul", ["x", "w1"]), op("e", "add", ["p0", "p1"])], ["e"],
        dtype="float16")
    for strategy in ("inductor", "ilp"):
        evaluate(g, partition(g, strategy).groups)
    g = make_graph({"q": [1, 2, 8, 16], "k": [1, 2, 8, 16], "v": [1, 2, 8, 16], "w": [16, 16]}, [
        op("kt", "transpose", ["k"], perm=[0, 1, 3, 2]), op("s", "matmul", ["q", "kt"]),
        op("p", "softmax", ["s"], axis=-1), op("o", "matmul", ["p", "v"]), op("d", "matmul", ["q", "w"])],
        ["o", "d"], dtype="float16")
    for strategy in ("xla-fmha", "ilp"):
        evaluate(g, partition(g, strategy).groups)
