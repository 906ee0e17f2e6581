"""The production-compiler baselines (xla, tvm, inductor): legal plans no better
than the ILP on random graphs, and on small hand-built graphs the decisions
their source compilers are documented to make."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

from partitioner import evaluate, load_graph, load_hardware, partition
from partitioner.group import Group
from partitioner.strategies.inductor import MAX_FUSION_SIZE, PAIRWISE_ATTEMPTS, _Scheduler
from partitioner.strategies.merging import Merging
from partitioner.strategies.xla import xla_time

from .conftest import ROOT, make_graph, op
from .random_graphs import small_graphs

HEURISTICS = ("xla", "xla-fmha", "tvm", "inductor")


def groups_of(plan) -> list[set[str]]:
    """The plan's groups that hold at least one compute op, as sets."""
    views = {n for n, o in plan.graph.ops.items() if o.is_view}
    return [set(g) for g in plan.groups if set(g) - views]


def group_with(plan, name: str) -> set[str]:
    return next(set(g) for g in plan.groups if name in g)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs(max_ops=10))
def test_every_baseline_is_legal_and_no_better_than_the_ilp_on_random_graphs(graph):
    best = partition(graph, "ilp")
    for name in HEURISTICS:
        plan = partition(graph, name)  # partition() has validated it with evaluate()
        assert evaluate(graph, plan.groups).modeled_time_us == pytest.approx(plan.cost.modeled_time_us)
        assert best.cost.modeled_time_us <= plan.cost.modeled_time_us + 1e-9, name


# ---------------------------------------------------------------- XLA


def test_xla_fuses_a_cheap_elementwise_producer_into_its_only_consumer():
    graph = make_graph({"x": [4096, 1024]}, [op("r", "relu", ["x"]), op("e", "exp", ["r"])], ["e"])
    plan = partition(graph, "xla")
    assert groups_of(plan) == [{"r", "e"}]


def _broadcast_chain(length: int):
    """v (4096) -> `length` unary ops -> broadcast to [65536, 4096] -> add x. Fused, the
    chain is recomputed for each of the 65536 rows (XLA's operand utilization)."""
    ops, prev = [], "v"
    for k in range(length):
        ops.append(op(f"c{k}", ("exp", "tanh", "neg", "sigmoid")[k % 4], [prev]))
        prev = f"c{k}"
    ops += [op("b", "broadcast_to", [prev], shape=[65536, 4096]), op("y", "add", ["x", "b"])]
    return make_graph({"v": [4096], "x": [65536, 4096]}, ops, ["y"])


def test_xla_declines_a_fusion_whose_priority_is_negative():
    graph = _broadcast_chain(16)
    hw = load_hardware("h100")
    chain = [f"c{k}" for k in range(16)]
    plan = partition(graph, "xla")
    assert groups_of(plan) == [set(chain), {"b", "y"}]
    # the declined fusion: its priority (time unfused - time fused) is negative ...
    apart = xla_time(Group.of(graph, chain), hw) + xla_time(Group.of(graph, ["b", "y"]), hw)
    together = xla_time(Group.of(graph, [*chain, "b", "y"]), hw)
    assert apart - together < 0
    # ... though it is legal, saves a launch and bytes, and the bytes-only greedy makes it
    assert len(groups_of(partition(graph, "greedy"))) == 1


def test_xla_fuses_a_multi_consumer_producer_only_with_all_its_consumers():
    """x -> e = exp -> (a = e + 1, n = neg e); a and n outputs: e joins both or neither."""
    graph = make_graph({"x": [1024, 1024]},
                       [op("e", "exp", ["x"]), op("a", "add", ["e", 1.0]), op("n", "neg", ["e"])], ["a", "n"])
    assert groups_of(partition(graph, "xla")) == [{"e", "a", "n"}]


# ---------------------------------------------------------------- TVM


def test_tvm_ends_a_group_at_a_reduction():
    """relu -> sum -> exp: relu fuses into the reduction, exp does not join it (greedy,
    under the same legality, does fuse the epilogue)."""
    graph = make_graph({"x": [2048, 1024]},
                       [op("r", "relu", ["x"]), op("s", "reduce_sum", ["r"], axes=[-1], keepdims=True),
                        op("e", "exp", ["s"])], ["e"])
    assert groups_of(partition(graph, "tvm")) == [{"r", "s"}, {"e"}]
    assert groups_of(partition(graph, "greedy")) == [{"r", "s", "e"}]


def test_tvm_fuses_a_matmul_with_its_elementwise_epilogue_through_its_post_dominator():
    """matmul -> (exp, neg) -> add: the diamond closes at add, the matmul's immediate
    post-dominator; every path to it is elementwise, so all four share a kernel."""
    graph = make_graph({"x": [2048, 1024], "w": [1024, 1024]},
                       [op("m", "matmul", ["x", "w"]), op("e", "exp", ["m"]), op("n", "neg", ["m"]),
                        op("a", "add", ["e", "n"])], ["a"])
    assert groups_of(partition(graph, "tvm")) == [{"m", "e", "n", "a"}]


def test_tvm_does_not_fuse_a_prologue_into_a_matmul():
    graph = make_graph({"x": [2048, 1024], "w": [1024, 1024]},
                       [op("r", "relu", ["x"]), op("m", "matmul", ["r", "w"])], ["m"])
    assert groups_of(partition(graph, "tvm")) == [{"r"}, {"m"}]


# ---------------------------------------------------------------- Inductor


def test_inductor_refuses_to_grow_a_group_past_64_nodes():
    n = 70
    ops = [op("o0", "exp", ["x"])] + [op(f"o{k}", ("neg", "exp")[k % 2], [f"o{k - 1}"]) for k in range(1, n)]
    graph = make_graph({"x": [256, 256]}, ops, [f"o{n - 1}"])
    plan = partition(graph, "inductor", max_ops=1000)
    sizes = sorted(len(g) for g in groups_of(plan))
    assert max(sizes) == MAX_FUSION_SIZE == 64 and sum(sizes) == n
    # the cap is Inductor's own: under the same legality, greedy makes one kernel
    assert len(groups_of(partition(graph, "greedy", max_ops=1000))) == 1


def test_xla_multi_output_fusion_joins_sibling_fusions_of_one_input():
    g = make_graph({"x": [256, 512], "s": [1]}, [
        op("e", "exp", ["x"]), op("t", "tanh", ["e"]), op("n", "neg", ["x"]), op("g", "sigmoid", ["n"]),
        op("a", "add", ["s", 1.0]), op("b", "mul", ["s", 2.0])], ["t", "g", "a", "b"])
    groups = groups_of(partition(g, "xla"))
    assert {"e", "t", "n", "g"} in groups  # two fusions reading x
    assert {"a"} in groups and {"b"} in groups  # a one-element parent is no profitable operand


def test_xla_sibling_fusion_refuses_disjoint_slices_of_a_large_parent():
    def plan(second_start):
        g = make_graph({"x": [256, 512]}, [
            op("l", "slice", ["x"], axes=[1], starts=[0], ends=[256]), op("e", "exp", ["l"]), op("t", "tanh", ["e"]),
            op("r", "slice", ["x"], axes=[1], starts=[second_start], ends=[second_start + 256]),
            op("n", "neg", ["r"]), op("g", "sigmoid", ["n"])], ["t", "g"])
        return groups_of(partition(g, "xla"))
    assert {"l", "e", "t"} in plan(256) and {"r", "n", "g"} in plan(256)
    assert {"l", "e", "t", "r", "n", "g"} in plan(128)


def test_xla_fuses_a_producer_into_one_consumer_while_it_still_writes_its_value():
    """Priority fusion cannot take exp into both reductions (rows and columns differ);
    multi-output fusion puts it with the row sum and writes it for the column sum."""
    g = make_graph({"x": [64, 128]}, [
        op("p", "exp", ["x"]), op("r", "reduce_sum", ["p"], axes=[1]), op("c", "reduce_sum", ["p"], axes=[0])],
        ["r", "c"])
    groups = groups_of(partition(g, "xla"))
    assert {"p", "r"} in groups and {"c"} in groups, groups


def test_inductor_calls_extern_matmuls_with_their_views_and_addmm_bias_and_fuses_nothing_else():
    """Default Inductor: Linear is ``addmm(b, x, Wᵀ)`` on cuBLAS, its transpose a
    strided operand; GELU is a kernel of its own, and so is a transpose that another
    op reads too, or a bias that is not a vector along the rows."""
    g = make_graph({"x": [64, 32], "w1": [48, 32], "b1": [48], "w2": [16, 48], "b2": [64, 16]}, [
        op("w1t", "transpose", ["w1"], perm=[1, 0]), op("mm1", "matmul", ["x", "w1t"]), op("a1", "add", ["mm1", "b1"]),
        op("h", "gelu", ["a1"]), op("w2t", "transpose", ["w2"], perm=[1, 0]), op("mm2", "matmul", ["h", "w2t"]),
        op("a2", "add", ["mm2", "b2"]), op("e", "exp", ["w2t"])], ["a2", "e"])
    groups = groups_of(partition(g, "inductor"))
    assert {"w1t", "mm1", "a1"} in groups and {"h"} in groups and {"mm2"} in groups, groups
    assert not any({"w2t", "mm2"} <= ops or {"mm2", "a2"} <= ops for ops in groups)


def test_inductor_fuses_siblings_that_read_one_buffer():
    """Horizontal fusion: two independent reductions of one input share its read."""
    graph = make_graph({"x": [2048, 1024]},
                       [op("s", "reduce_sum", ["x"], axes=[-1]), op("m", "reduce_max", ["x"], axes=[-1])],
                       ["s", "m"])
    assert groups_of(partition(graph, "inductor")) == [{"s", "m"}]



def test_inductor_pairs_each_node_with_the_next_64_of_a_buffers_group(monkeypatch):
    """``get_possible_fusions`` tries each node with at most the 64 nodes after it
    among those using a buffer (``max_fusion_buffer_group_pairwise_attempts``); an
    extern matmul, which never fuses, takes no place there."""
    n = 100
    ops = [op("mm", "matmul", ["x", "x"])] + [op(f"e{k}", "exp", ["x"]) for k in range(n)]
    graph = make_graph({"x": [64, 64]}, ops, ["mm"] + [f"e{k}" for k in range(n)])
    scheduler = _Scheduler(graph, load_hardware("h100"), 64)
    scheduler.state.frozen.add(scheduler.state.owner[graph.index["mm"]])
    tried = []
    monkeypatch.setattr(scheduler, "can_fuse", lambda a, b: tried.append((a, b)) or False)
    scheduler.possible_fusions()
    place = {scheduler.state.owner[graph.index[f"e{k}"]]: k for k in range(n)}
    gaps = [place[b] - place[a] for a, b in tried]
    assert PAIRWISE_ATTEMPTS == 64 and min(gaps) == 1 and max(gaps) == 64
    assert len(tried) == sum(min(64, n - 1 - k) for k in range(n))  # mm in no pair


# ---------------------------------------------------------------- determinism


def test_baselines_give_the_same_plan_across_processes():
    code = ("import json, sys; from partitioner import load_graph, partition; "
            "g = load_graph(sys.argv[1]); "
            "print(json.dumps({s: partition(g, s).groups for s in ('xla', 'tvm', 'inductor')}))")
    path = str(ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml")

    def run(seed):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env,
                             cwd=ROOT, check=True).stdout
        return json.loads(out)

    assert run(1) == run(2)


# ---------------------------------------------------------------- attention rewrites


def _pattern28(mask=False, dtype="float16", tail=False):
    """Inductor's pattern 28 as torch.export writes it: matmul of non-contiguous q, k, v
    (expand, clone, view, bmm), a multiply by a Python float, softmax, matmul."""
    inputs = {"q": [2, 4, 16, 8], "k": [2, 4, 16, 8], "v": [2, 4, 16, 8]}
    ops = [op("qe", "broadcast_to", ["q"], shape=[2, 4, 16, 8]), op("qc", "identity", ["qe"]),
           op("qv", "reshape", ["qc"], shape=[8, 16, 8]), op("kp", "transpose", ["k"], perm=[0, 1, 3, 2]),
           op("ke", "broadcast_to", ["kp"], shape=[2, 4, 8, 16]), op("kc", "identity", ["ke"]),
           op("kv", "reshape", ["kc"], shape=[8, 8, 16]), op("s", "matmul", ["qv", "kv"]),
           op("sv", "reshape", ["s"], shape=[2, 4, 16, 16]), op("m", "mul", ["sv", 0.35])]
    x = "m"
    if mask:
        inputs["mask"] = [2, 1, 16, 16]
        ops.append(op("a", "add", ["m", "mask"]))
        x = "a"
    ops += [op("p", "softmax", [x]), op("pe", "broadcast_to", ["p"], shape=[2, 4, 16, 16]),
            op("pv", "reshape", ["pe"], shape=[8, 16, 16]), op("ve", "broadcast_to", ["v"], shape=[2, 4, 16, 8]),
            op("vc", "identity", ["ve"]), op("vv", "reshape", ["vc"], shape=[8, 16, 8]),
            op("o", "matmul", ["pv", "vv"]), op("ov", "reshape", ["o"], shape=[2, 4, 16, 8])]
    if tail:
        ops.append(op("y", "exp", ["ov"]))
    return make_graph(inputs, ops, ["y" if tail else "ov"], dtype=dtype)


def test_inductor_rewrites_its_own_attention_pattern_to_one_frozen_kernel():
    g = _pattern28()
    plan = partition(g, "inductor")
    assert plan.solver.details["sdpa_rewrites"] == ["_sfdp_pattern_28_half_inference"]
    kinds = [c.kind for c in plan.cost.groups if c.kind != "view"]
    assert kinds == ["attention"]


@pytest.mark.parametrize("graph", [_pattern28(mask=True), _pattern28(dtype="float32")], ids=["mul_then_mask", "f32"])
def test_inductor_leaves_what_its_patterns_do_not_match(graph):
    # no pattern multiplies by a scale and then adds a mask; float32 needs TF32 matmuls on CUDA
    assert partition(graph, "inductor").solver.details["sdpa_rewrites"] == []


def test_neither_compiler_rewrites_attention_by_default_on_the_corpus():
    for name in ("gpt2_2l_b8_s1024_f16", "bert_base_2l_b32_s128_f16", "llama7b_2l_b4_s2048_bf16"):
        g = load_graph(ROOT / "graphs" / f"{name}.yaml")
        assert partition(g, "inductor").solver.details["sdpa_rewrites"] == [], name
        assert "attention" not in [c.kind for c in partition(g, "xla").cost.groups], name
        fmha = partition(g, "xla-fmha")
        assert [c.kind for c in fmha.cost.groups].count("attention") == fmha.solver.details["fmha_rewrites"] == 2


@pytest.mark.parametrize("spec,fires", [
    (dict(mask="additive"), True),
    (dict(mask="additive", softmax="primitives", dtype="bfloat16"), True),
    (dict(mask="causal"), False),  # a select on the scores, not an added bias
    (dict(d=256, dtype="bfloat16"), False),  # head dim over 128
    (dict(d=36), False),  # not a multiple of 8
    (dict(dtype="float32"), False),
    (dict(heads=4, kv_heads=2), False),  # grouped-query K/V
])
def test_xla_fmha_matches_what_cudnn_fused_mha_rewriter_matches(spec, fires):
    from .attention_graphs import attention

    g = attention(sq=32, sk=32, **spec)
    plan = partition(g, "xla-fmha")
    assert plan.solver.details["fmha_rewrites"] == int(fires)
    assert ("attention" in [c.kind for c in plan.cost.groups]) == fires


def test_a_frozen_group_takes_part_in_no_merge():
    g = _pattern28(tail=True)
    merging = Merging(g, load_hardware("h100"), 64)
    tail = merging.owner[g.index["y"]]
    assert merging.mergeable([merging.owner[g.index["o"]], tail]) is not None  # an epilogue, before freezing
    gid = merging.freeze(g.mask(n for n in g.ops if n != "y") & g.compute_mask)
    assert gid is not None and merging.mergeable([gid, tail]) is None


def test_inductor_patterns_are_what_the_script_writes():
    torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")
    if torch.__version__.split("+")[0] != "2.13.0":
        pytest.skip("the patterns were written from torch 2.13.0")
    spec = importlib.util.spec_from_file_location("export_sdpa_patterns", ROOT / "graphs" / "export_sdpa_patterns.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--check"]) == 0
