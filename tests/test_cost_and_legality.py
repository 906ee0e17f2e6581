"""The cost model and the fusion rules, each with its own small graph."""

from __future__ import annotations

import dataclasses

import pytest

from partitioner import IllegalPlan, PROFILES, evaluate, partition
from partitioner.cost import op_executions
from partitioner.group import Group

from .conftest import make_graph, op

H100 = PROFILES["h100"]
N = 4 * 8 * 4  # bytes of a float32 [4, 8] tensor


def chain():
    """x -> exp -> a (output) -> neg -> b (output)."""
    return make_graph({"x": [4, 8]}, [op("a", "exp", ["x"]), op("b", "neg", ["a"])], ["a", "b"])


# ---------------------------------------------------------------- cost


def test_intermediate_that_is_an_output_is_written_and_counted():
    g = chain()
    fused = evaluate(g, [["a", "b"]])
    assert (fused.bytes_read, fused.bytes_written, fused.launches) == (N, 2 * N, 1)
    split = evaluate(g, [["a"], ["b"]])
    assert (split.bytes_read, split.bytes_written, split.launches) == (2 * N, 2 * N, 2)
    assert split.modeled_time_us == pytest.approx(2 * 1.0 + 4 * N / 3.35e12 * 1e6)


def test_each_distinct_tensor_is_read_once_and_literals_are_free():
    g = make_graph({"x": [4, 8]}, [op("sq", "mul", ["x", "x"]), op("e", "exp", ["x"]),
                                   op("s", "add", ["sq", "e"]), op("t", "mul", ["s", 0.5])], ["t"])
    cost = evaluate(g, [["sq", "e", "s", "t"]])
    assert (cost.bytes_read, cost.bytes_written) == (N, N)


def test_views_are_free_and_share_their_input_bytes():
    g = make_graph({"x": [4, 8]}, [op("e", "exp", ["x"]), op("r", "reshape", ["e"], shape=[32]),
                                   op("n", "neg", ["r"]), op("xr", "reshape", ["x"], shape=[32]),
                                   op("s", "add", ["n", "xr"])], ["s"])
    alone = evaluate(g, [["e"], ["r"], ["n", "xr", "s"]])
    view_group = next(c for c in alone.groups if c.ops == ("r",))
    assert (view_group.launches, view_group.bytes_read, view_group.bytes_written) == (0, 0, 0)
    fused = evaluate(g, [["e", "r", "n", "xr", "s"]])
    # x and its view xr are the same memory: read once
    assert (fused.bytes_read, fused.bytes_written, fused.launches) == (N, N, 1)


def test_modelled_time_is_the_roofline_and_traffic_time_leaves_compute_out():
    g = make_graph({"a": ([1024, 1024], "float16"), "b": ([1024, 1024], "float16")},
                   [op("mm", "matmul", ["a", "b"])], ["mm"])
    cost = evaluate(g, [["mm"]]).groups[0]
    flops = 2 * 1024**3
    assert cost.flops == flops and cost.recomputed_flops == 0
    memory = 3 * 1024 * 1024 * 2 / 3.35e12
    assert cost.modeled_time_us == pytest.approx((1e-6 + max(memory, flops / 989.5e12)) * 1e6)
    assert cost.traffic_time_us == pytest.approx((1e-6 + memory) * 1e6)
    assert cost.compute_time_us == pytest.approx(flops / 989.5e12 * 1e6)
    # energy: HBM bytes at 31.2 pJ, the operand tiles read on chip (A once per N tile,
    # B once per M tile, 8 tiles each way) at 1.25 pJ, less the HBM bytes, FLOP at 0.75 pJ
    on_chip = 2 * 1024 * 1024 * 2 * 8 - 2 * 1024 * 1024 * 2
    assert cost.energy_uj == pytest.approx((3 * 1024 * 1024 * 2 * 31.2 + on_chip * 1.25 + flops * 0.75) * 1e-6)


def test_a_prologue_is_recomputed_per_tile_and_a_broadcast_value_per_element():
    """A pointwise prologue of a contraction's A operand runs once per N tile; a value
    computed before a broadcast runs once per element it is broadcast to. Both are
    charged, and the report says how much of the FLOP is recomputation."""
    g = make_graph({"x": ([256, 512], "float16"), "w": ([512, 1024], "float16")},
                   [op("t", "tanh", ["x"]), op("mm", "matmul", ["t", "w"])], ["mm"])
    fused = evaluate(g, [["t", "mm"]]).groups[0]
    n_tiles = 1024 // 128
    assert fused.flops == 2 * 256 * 512 * 1024 + 256 * 512 * n_tiles
    assert fused.recomputed_flops == 256 * 512 * (n_tiles - 1)
    g = make_graph({"v": ([64], "float32"), "y": ([4096, 64], "float32")},
                   [op("e", "exp", ["v"]), op("b", "broadcast_to", ["e"], shape=[4096, 64]),
                    op("s", "add", ["y", "b"])], ["s"])
    fused = evaluate(g, [["e", "b", "s"]]).groups[0]
    assert fused.flops == 4096 * 64 * 2 and fused.recomputed_flops == 4096 * 64 - 64
    assert evaluate(g, [["e"], ["b", "s"]]).recomputed_flops == 0


def test_readers_at_other_indices_each_compute_what_they_read():
    """A fused kernel memoises a value per index, so readers share a computation only
    where they read it at the same index: three slices of ``t`` compute all of it
    (not the largest slice's third), ``t`` read directly and transposed is computed
    twice per element, and two equal slices or a reshape read it where it is."""
    g = make_graph({"x": [4, 96]}, [op("t", "tanh", ["x"])]
                   + [op(f"s{k}", "slice", ["t"], starts=[32 * k], ends=[32 * k + 32], axes=[1]) for k in range(3)]
                   + [op(f"e{k}", "exp", [f"s{k}"]) for k in range(3)], ["e0", "e1", "e2"])
    assert op_executions(Group.of(g, list(g.ops)))["t"] == 4 * 96
    assert evaluate(g, [list(g.ops)]).recomputed_flops == 0
    g = make_graph({"y": [64, 64]}, [op("t", "tanh", ["y"]), op("tt", "transpose", ["t"], perm=[1, 0]),
                                     op("s", "add", ["t", "tt"])], ["s"])
    assert op_executions(Group.of(g, list(g.ops)))["t"] == 2 * 64 * 64
    g = make_graph({"x": [4, 96]}, [
        op("t", "tanh", ["x"]), op("a", "slice", ["t"], starts=[0], ends=[32], axes=[1]),
        op("b", "slice", ["t"], starts=[0], ends=[32], axes=[1]), op("r", "reshape", ["t"], shape=[4, 3, 32]),
        op("r2", "slice", ["r"], starts=[0], ends=[1], axes=[1]), op("rr", "reshape", ["r2"], shape=[4, 32]),
        op("ea", "exp", ["a"]), op("nb", "neg", ["b"]), op("s", "add", ["ea", "nb"]), op("o", "add", ["s", "rr"])],
        ["o"])
    runs = op_executions(Group.of(g, list(g.ops)))
    assert runs["a"] == runs["b"] == 4 * 32
    assert runs["t"] == 2 * 4 * 32  # the equal slices share; the reshape's slice is another index map


def test_group_costs_sum_to_plan_totals():
    g = chain()
    cost = evaluate(g, [["a"], ["b"]])
    assert cost.bytes_read == sum(c.bytes_read for c in cost.groups)
    assert cost.modeled_time_us == pytest.approx(sum(c.modeled_time_us for c in cost.groups))


# ---------------------------------------------------------------- partitions and plans


@pytest.mark.parametrize("groups,reason", [
    ([["a", "b", "zz"]], "partition.unknown_op"),
    ([["a", "b"], ["b"]], "partition.duplicate"),
    ([["a"]], "partition.missing"),
    ([["a", "b"], []], "partition.empty_group"),
])
def test_partition_errors(groups, reason):
    with pytest.raises(IllegalPlan) as info:
        evaluate(chain(), groups)
    assert info.value.reason == reason and reason in str(info.value)


@pytest.mark.parametrize("groups,message", [
    (None, "a plan is a list of groups, each a list of op names; got NoneType"),
    (["a", "b"], "group 0 is str 'a', not a list of op names"),
    ([["a"], 7], "group 1 is int 7, not a list of op names"),
])
def test_a_plan_that_is_no_list_of_groups_is_a_type_error_that_says_so(groups, message):
    with pytest.raises(TypeError) as info:
        evaluate(chain(), groups)
    assert str(info.value) == message


def test_a_group_given_as_a_generator_is_refused_not_read_twice_into_an_empty_group():
    with pytest.raises(TypeError, match=r"^group 1 is generator <generator object .*>, not a list of op names$"):
        evaluate(chain(), [["a"], (n for n in ["b"])])


def test_composites_are_named_by_primitives():
    g = make_graph({"x": [4, 8]}, [op("s", "softmax", ["x"])], ["s"])
    assert g.composites["s"] == ["s:max", "s:shift", "s:exp", "s:sum", "s"]
    assert evaluate(g, [g.composites["s"]]).launches == 1
    assert evaluate(g, [["s:max"], ["s:shift", "s:exp"], ["s:sum", "s"]]).launches == 3


def test_cycle_between_convex_groups_is_rejected():
    g = make_graph({"x": [4], "y": [4]}, [
        op("a1", "exp", ["x"]), op("b2", "exp", ["y"]), op("a2", "add", ["x", "b2"]), op("b1", "add", ["a1", "y"])],
        ["a2", "b1"])
    with pytest.raises(IllegalPlan) as info:
        evaluate(g, [["a1", "a2"], ["b1", "b2"]])
    assert info.value.reason == "plan.cycle"


# ---------------------------------------------------------------- group rules


def reason_of(g, groups, hw=H100, max_ops=64):
    with pytest.raises(IllegalPlan) as info:
        evaluate(g, groups, hw, max_ops)
    return info.value.reason


def test_disconnected_and_not_convex():
    g = make_graph({"x": [4], "y": [4]}, [op("a", "exp", ["x"]), op("b", "neg", ["y"]), op("c", "neg", ["a"]),
                                          op("d", "add", ["c", "a"])], ["b", "d"])
    assert reason_of(g, [["a", "b"], ["c", "d"]]) == "group.disconnected"
    assert reason_of(g, [["a", "d"], ["b"], ["c"]]) == "group.not_convex"


def test_gather_and_custom_never_fuse():
    g = make_graph({"t": [10, 4], "i": ([6], "int64")}, [
        op("g", "gather", ["t", "i"], axis=0), op("e", "exp", ["g"]),
        {"name": "c", "op": "custom", "inputs": ["e"], "attrs": {"kind": "k"}, "shape": [6, 4], "dtype": "float32"},
        op("n", "neg", ["c"])], ["n"])
    assert reason_of(g, [["g", "e"], ["c"], ["n"]]) == "op.never_fuses"
    assert reason_of(g, [["g"], ["e"], ["c", "n"]]) == "op.never_fuses"
    assert evaluate(g, [["g"], ["e"], ["c"], ["n"]]).launches == 4


MM = {"x": [4, 8], "w": [8, 16], "w2": [16, 16]}


def test_contraction_rules():
    g = make_graph(MM | {"bias": [3, 4, 16], "v": [16]}, [
        op("p", "exp", ["x"]), op("mm", "matmul", ["p", "w"]), op("big", "add", ["mm", "bias"]),
        op("mm2", "matmul", ["mm", "w2"]), op("t", "transpose", ["mm"]), op("s", "reduce_sum", ["mm"], axes=[1]),
        op("sv", "exp", ["v"]), op("e", "add", ["mm", "sv"])],
        ["p", "big", "mm2", "t", "s", "e", "sv"])
    rest = lambda used: [[n] for n in g.ops if n not in used]  # noqa: E731
    assert reason_of(g, [["mm", "mm2"]] + rest({"mm", "mm2"})) == "contraction.multiple"
    assert reason_of(g, [["mm", "s"]] + rest({"mm", "s"})) == "contraction.with_reduction"
    assert reason_of(g, [["p", "mm"]] + rest({"p", "mm"})) == "contraction.prologue_written"
    assert reason_of(g, [["mm", "t"]] + rest({"mm", "t"})) == "contraction.epilogue_op"
    assert reason_of(g, [["mm", "big"]] + rest({"mm", "big"})) == "contraction.epilogue_shape"
    assert reason_of(g, [["mm", "sv", "e"]] + rest({"mm", "sv", "e"})) == "contraction.side_written"


def test_matmul_bias_that_broadcasts_the_product_to_a_larger_shape_is_not_fused():
    g = make_graph({"x": [4, 8], "w": [8, 16], "bias": [3, 4, 16], "b16": [16]},
                   [op("mm", "matmul", ["x", "w"]), op("big", "add", ["mm", "bias"]),
                    op("mm2", "matmul", ["x", "w"]), op("ok", "add", ["mm2", "b16"])], ["big", "ok"])
    with pytest.raises(IllegalPlan) as info:
        evaluate(g, [["mm", "big"], ["mm2", "ok"]])
    assert info.value.reason == "contraction.epilogue_shape" and "big" in info.value.ops
    for strategy in ("greedy", "ilp"):
        groups = partition(g, strategy).groups
        # mm2's epilogue fuses, beside mm as a horizontal sibling or alone; big never does
        assert not any({"mm", "big"} <= set(ops) for ops in groups)
        assert any({"mm2", "ok"} <= set(ops) for ops in groups)


def test_reduction_rules():
    g = make_graph({"x": [4, 8], "v": [8]}, [
        op("r0", "reduce_sum", ["x"], axes=[0]), op("r1", "reduce_sum", ["x"], axes=[1], keepdims=True),
        op("tr", "transpose", ["r1"]), op("m2", "reduce_mean", ["x"], axes=[1]), op("mix", "add", ["r1", "m2"]),
        op("e", "exp", ["v"]), op("xe", "add", ["x", "e"]), op("s", "reduce_sum", ["xe"], axes=[1])],
        ["r0", "tr", "mix", "e", "s"])
    rest = lambda used: [[n] for n in g.ops if n not in used]  # noqa: E731
    assert reason_of(g, [["r0", "r1"]] + rest({"r0", "r1"})) == "reduction.signature_mismatch"
    assert reason_of(g, [["r1", "tr"]] + rest({"r1", "tr"})) == "reduction.reorders_rows"
    assert reason_of(g, [["r1", "m2", "mix"]] + rest({"r1", "m2", "mix"})) == "reduction.row_mismatch"
    assert reason_of(g, [["e", "xe", "s"]] + rest({"e", "xe", "s"})) == "reduction.written_layout"
    # two reductions over the same rows do share a kernel
    assert evaluate(g, [["r1", "m2"]] + rest({"r1", "m2"})).launches == len(g.ops) - 1


def test_pointwise_iteration_space():
    g = make_graph({"v": [8]}, [op("e", "exp", ["v"]), op("b", "broadcast_to", ["e"], shape=[4, 8]),
                                op("n", "neg", ["b"])], ["e", "n"])
    assert reason_of(g, [["e", "b", "n"]]) == "pointwise.iteration_space"
    g2 = make_graph({"v": [8]}, [op("e", "exp", ["v"]), op("b", "broadcast_to", ["e"], shape=[4, 8]),
                                 op("n", "neg", ["b"])], ["n"])
    assert evaluate(g2, [["e", "b", "n"]]).launches == 1  # e is recomputed per element, never written


def test_budgets():
    g = make_graph({"x": [4, 8]}, [op("a", "exp", ["x"]), op("b", "neg", ["a"]), op("c", "abs", ["b"])], ["c"])
    assert reason_of(g, [["a", "b", "c"]], max_ops=2) == "budget.ops"
    assert reason_of(g, [["a", "b", "c"]], dataclasses.replace(H100, name="tight", registers_per_thread=16)) == "budget.registers"
    assert reason_of(g, [["a", "b", "c"]], dataclasses.replace(H100, name="tight", kernel_param_bytes=16)) == "budget.kernel_params"
    assert evaluate(g, [["a", "b", "c"]]).launches == 1


def test_softmax_over_axis_0_is_one_group_when_its_column_fits():
    fits = make_graph({"x": [1024, 64]}, [op("s", "softmax", ["x"], axis=0)], ["s"])
    for strategy in ("greedy", "ilp"):
        plan = partition(fits, strategy)
        assert [g.kind for g in plan.cost.groups] == ["reduction"]
        assert plan.cost.groups[0].budgets.shared_memory >= 2 * 1024 * 4  # x and exp(x) rows buffered
    too_long = make_graph({"x": [100_000, 2]}, [op("s", "softmax", ["x"], axis=0)], ["s"])
    with pytest.raises(IllegalPlan) as info:
        evaluate(too_long, [too_long.composites["s"]])
    assert info.value.reason == "budget.shared_memory"
    assert len(partition(too_long, "ilp").groups) > 1


def relu_custom_graph(extra_consumer: bool):
    """x->relu->a0, a0->custom->b0->exp->b1->custom->xb, add(a0, xb) (the issue's example);
    with ``extra_consumer``, exp's result goes through an elementwise op first."""
    custom = {"op": "custom", "attrs": {"kind": "opaque"}, "shape": [4, 8], "dtype": "float32"}
    ops = [op("a0", "relu", ["x"]), {"name": "b0", "inputs": ["a0"], **custom}, op("b1", "exp", ["b0"])]
    last = "b1"
    if extra_consumer:
        ops.append(op("b2", "neg", ["b1"]))
        last = "b2"
    ops += [{"name": "xb", "inputs": [last], **custom}, op("y", "add", ["a0", "xb"])]
    return make_graph({"x": [4, 8]}, ops, ["y"])


@pytest.mark.parametrize("extra_consumer", [False, True])
def test_relu_and_add_around_custom_ops_never_share_a_group(extra_consumer):
    g = relu_custom_graph(extra_consumer)
    others = [[n] for n in g.ops if n not in ("a0", "y")]
    with pytest.raises(IllegalPlan) as info:
        evaluate(g, [["a0", "y"]] + others)
    assert info.value.reason == "group.not_convex"
    for strategy in ("greedy", "ilp"):
        groups = partition(g, strategy).groups
        assert not any("a0" in grp and "y" in grp for grp in groups)
        if extra_consumer:
            assert ["b1", "b2"] in groups  # exp and its elementwise consumer do fuse


def test_a_reshape_that_converts_its_dtype_is_a_real_op():
    g = make_graph({"x": [4, 8]}, [{"name": "r", "op": "reshape", "inputs": ["x"], "attrs": {"shape": [32]},
                                    "dtype": "float16"}], ["r"])
    cost = evaluate(g, [["r"]])
    assert (cost.launches, cost.bytes_read, cost.bytes_written) == (1, N, N // 2)


def test_a_view_outside_a_group_between_its_ops_breaks_convexity():
    g = make_graph({"x": [4, 8]}, [op("a", "exp", ["x"]), op("r", "reshape", ["a"], shape=[32]),
                                   op("b", "neg", ["r"])], ["b"])
    with pytest.raises(IllegalPlan) as info:
        evaluate(g, [["a", "b"], ["r"]])
    assert info.value.reason == "group.not_convex" and "'r'" in str(info.value)


def test_a_single_op_over_a_budget_is_still_a_legal_group():
    many = [f"x{k}" for k in range(100)]
    g = make_graph({name: [4] for name in many}, [op("c", "concat", many, axis=0)], ["c"])
    cost = evaluate(g, [["c"]])
    assert cost.groups[0].budgets.registers > H100.registers_per_thread and cost.launches == 1
    assert partition(g, "ilp").cost.launches == 1


def test_a_slice_charges_the_bytes_it_touches_and_a_gather_the_rows_it_can_read():
    """A 256-row slice of a 4096-wide float16 tensor of a million rows was charged the
    whole 8.2 GB (2,937 us modelled for 2 MB of reads); a gather was charged its table."""
    g = make_graph({"x": ([1_000_000, 4096], "float16")},
                   [op("s", "slice", ["x"], starts=[0], ends=[256], axes=[0]), op("n", "neg", ["s"])], ["n"])
    fused = evaluate(g, [["s", "n"]]).groups[0]
    assert fused.bytes_read == 256 * 4096 * 2 and fused.bytes_written == 256 * 4096 * 2
    # two slices of one storage in a group: their sum, never above the storage
    for (a, b), read in [(((0, 16), (32, 48)), 2 * 16 * 32 * 4), (((0, 48), (16, 64)), 64 * 32 * 4)]:
        g = make_graph({"x": ([64, 32], "float32")},
                       [op("a", "slice", ["x"], starts=[a[0]], ends=[a[1]], axes=[0]),
                        op("b", "slice", ["x"], starts=[b[0]], ends=[b[1]], axes=[0]), op("c", "add", ["a", "b"])],
                       ["c"])
        assert evaluate(g, [["a", "b", "c"]]).groups[0].bytes_read == read
    g = make_graph({"table": ([50_000, 768], "float16"), "ids": ([8, 128], "int64")},
                   [op("rows", "gather", ["table", "ids"])], ["rows"])
    gather = evaluate(g, [["rows"]]).groups[0]
    assert gather.bytes_read == 8 * 128 * 768 * 2 + 8 * 128 * 8  # at most one row per index, and the indices


def test_the_legality_api_takes_a_profile_by_name_as_partition_and_evaluate_do():
    """``decide(group, "h100")`` raised AttributeError ('str' has no registers_per_thread)."""
    from partitioner import HardwareError
    from partitioner.legality import decide, is_legal

    g = make_graph({"x": [4096, 4096]}, [op("a", "exp", ["x"]), op("b", "neg", ["a"])], ["b"])
    group = Group.of(g, ["a", "b"])
    assert decide(group, "h100") == decide(group, PROFILES["h100"]) and is_legal(group, "H100")
    with pytest.raises(HardwareError, match="unknown hardware 'v100'"):
        decide(group, "v100")


def test_evaluate_checks_its_options_as_partition_does(tmp_path):
    """``evaluate(..., max_ops="2")`` and ``hardware=None`` raised TypeError and
    AttributeError; ``max_ops=0`` called every group over a cap of 0."""
    from pathlib import Path

    from partitioner import HardwareError, load_hardware

    g = make_graph({"x": [4, 8]}, [op("a", "exp", ["x"]), op("b", "neg", ["a"])], ["b"])
    for max_ops in ("2", 0, True):
        with pytest.raises(ValueError, match="max_ops must be an int of at least 1"):
            evaluate(g, [["a", "b"]], max_ops=max_ops)
    with pytest.raises(HardwareError, match="hardware must be a profile name, a profile file or a Hardware"):
        evaluate(g, [["a", "b"]], None)
    profile = tmp_path / "p.yaml"
    profile.write_text("name: p\nbase: h100\n")
    assert load_hardware(Path(profile)).name == "p" and evaluate(g, [["a", "b"]], Path(profile)).launches == 1
