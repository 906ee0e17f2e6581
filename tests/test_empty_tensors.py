"""Zero-size tensors through every strategy and backend: a group of empty results
launches nothing and costs nothing, every strategy plans, the ilp stays exact, and
the plans compute what the reference computes."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, assume, given, settings

from backends.base import load_backend
from backends.check import run_and_check
from backends.cuda.render import render
from partitioner import load_hardware, partition
from partitioner.strategies import STRATEGIES
from partitioner.strategies.conflicts import exclusive_ops
from partitioner.strategies.ilp import structural_bound

from .attention_graphs import attention
from .conftest import make_graph, op
from .random_graphs import small_graphs
from .test_optimality import brute_force_minima, plan_objective

H100 = load_hardware("h100")


def _check_plan(plan) -> None:
    for priced in plan.cost.groups:
        if priced.group.empty:
            assert (priced.launches, priced.bytes_read, priced.bytes_written) == (0, 0, 0)
            assert priced.modeled_time_us == 0
        else:
            assert priced.launches == (priced.group.kind != "view")


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs(max_ops=6, empty=True))
def test_every_strategy_plans_empty_tensors_and_the_ilp_stays_exact(graph):
    plans = {name: partition(graph, name) for name in sorted(STRATEGIES)}
    for plan in plans.values():
        _check_plan(plan)
    best = brute_force_minima(graph)["time"]
    ilp = plans["ilp"]
    assert ilp.solver.status == "OPTIMAL"
    assert plan_objective(ilp.cost, H100, "time") == best
    assert all(ilp.cost.modeled_time_us <= p.cost.modeled_time_us + 1e-9 for p in plans.values())
    assert structural_bound(graph, H100, 64) <= best
    assert structural_bound(graph, H100, 64, exclusive=exclusive_ops(graph, 64)) <= best


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs(max_ops=6, empty=True))
def test_numpy_backend_computes_the_reference_on_empty_tensors(graph):
    assume(not any(o.kind == "custom" for o in graph.ops.values()))
    for name in ("none", "ilp", "xla"):
        checks = run_and_check(partition(graph, name), load_backend("numpy"))
        assert checks and all(c.ok for c in checks), checks


EMPTY = {
    # an empty slice whose sum is a non-empty row of zeros, fused with a real consumer
    "sum_of_empty_slice": make_graph(
        {"x": [8, 64]},
        [op("s", "slice", ["x"], starts=[0], ends=[0], axes=[-1]), op("e", "exp", ["s"]),
         op("r", "reduce_sum", ["e"], axes=[-1], keepdims=True), op("y", "add", ["x", "r"])], ["y", "e"]),
    # a matmul over K = 0 writes zeros; its empty operands need no kernel
    "matmul_over_empty_k": make_graph(
        {"a": [16, 0], "b": [0, 16]},
        [op("an", "neg", ["a"]), op("m", "matmul", ["an", "b"]), op("y", "relu", ["m"])], ["y"]),
    # nothing to compute at all
    "all_empty": make_graph({"x": [4, 0]}, [op("a", "add", ["x", 1.0]), op("b", "mul", ["a", 2.0])], ["b"]),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_groups_get_no_kernel_and_launch_nothing(name):
    graph = EMPTY[name]
    plan = partition(graph, "ilp")
    _check_plan(plan)
    rendered = render(plan)
    launched = [i for i, g in enumerate(plan.cost.groups) if g.launches]
    assert [k.index for k in rendered.kernels] == launched
    assert plan.cost.launches == len(launched)


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_cuda_emulator_computes_the_reference_on_empty_tensors(name):
    for strategy in ("none", "ilp"):
        checks = run_and_check(partition(EMPTY[name], strategy), load_backend("cuda", emulate=True))
        assert checks and all(c.ok for c in checks), checks


#: Contractions that fuse a layout op with a non-empty result (the transposed
#: weight, K^T) into a group whose written results are all empty: the group
#: launches nothing (its kernel once divided by zero tiles).
EMPTY_CONTRACTIONS = {
    "matmul_of_transposed_weight": make_graph(
        {"x": [0, 4], "w": [3, 4]}, [op("wt", "transpose", ["w"]), op("y", "matmul", ["x", "wt"])], ["y"]),
    "linear_of_no_rows": make_graph(
        {"x": [0, 4], "w": [3, 4], "b": [3]},
        [op("wt", "transpose", ["w"]), op("m", "matmul", ["x", "wt"]), op("y", "add", ["m", "b"])], ["y"]),
    "attention_of_no_queries": attention(sq=0, sk=5, d=8, dtype="float32"),
}


@pytest.mark.parametrize("name", sorted(EMPTY_CONTRACTIONS))
def test_groups_writing_only_empty_results_launch_nothing_whatever_they_fuse(name):
    graph = EMPTY_CONTRACTIONS[name]
    for strategy in ("none", "greedy", "xla", "ilp"):
        plan = partition(graph, strategy)
        _check_plan(plan)
        for priced in plan.cost.groups:
            written = [graph.tensor(w).numel for w in priced.group.writes]
            if priced.group.compute and written and not any(written):
                assert priced.group.empty and priced.flops == 0 and priced.energy_uj == 0, (strategy, priced.ops)
        rendered = render(plan)
        assert [k.index for k in rendered.kernels] == [i for i, g in enumerate(plan.cost.groups) if g.launches]
    fused = partition(graph, "ilp")
    assert fused.cost.launches == 0 and fused.cost.modeled_time_us == 0
    assert structural_bound(graph, H100, 64) == 0
    assert structural_bound(graph, H100, 64, exclusive=exclusive_ops(graph, 64)) == 0


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
@pytest.mark.parametrize("name", sorted(EMPTY_CONTRACTIONS))
def test_cuda_emulator_runs_contractions_of_empty_results(name):
    for strategy in ("none", "greedy", "ilp"):
        checks = run_and_check(partition(EMPTY_CONTRACTIONS[name], strategy), load_backend("cuda", emulate=True))
        assert checks and all(c.ok for c in checks), (strategy, checks)


def test_a_convolution_of_no_output_channel_plans_and_runs():
    """A [0, 3, 3, 3] weight divided by its zero channels: in the cost model's weight
    rows under every strategy, and in --run's memory estimate (exit 1 each)."""
    g = make_graph({"x": [1, 3, 8, 8], "w": [0, 3, 3, 3]}, [op("c", "conv2d", ["x", "w"]), op("r", "relu", ["c"])],
                   ["r"])
    for strategy in ("none", "greedy", "xla", "tvm", "inductor", "ilp"):
        assert partition(g, strategy).cost.launches == 0
    assert [c.ok for c in run_and_check(partition(g, "ilp"), load_backend("numpy"))] == [True]
