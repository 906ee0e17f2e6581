"""Recomputation: an elementwise or layout op two ops read may be computed by every
group that reads it instead of being written once; a value of the graph inputs
alone from the inputs, any other from its operands (``legality.check_covering``,
``partition(..., recompute=True)``)."""

from __future__ import annotations

import json
import shutil

import pytest

from backends.check import run_and_check
from backends.cuda import CudaBackend
from backends.numpy_backend import NumpyBackend
from partitioner import IllegalPlan, evaluate, load_graph, partition
from partitioner.cli import main
from partitioner.cost import flops_once
from partitioner.graph import Graph
from partitioner.strategies import ilp

from .conftest import ROOT, make_graph, op
from .test_attention import best_covering
from .test_optimality import H100, plan_objective


def shared_table():
    """``m = tanh(neg(t))`` of an input ``t``, added in the epilogue of two chained
    matmuls (both sums are outputs, so neither is the other's prologue): a partition
    writes ``m`` once and reads it back; recomputing it in both epilogues reads
    ``t`` twice and writes nothing."""
    ops = [op("a", "neg", ["t"]), op("m", "tanh", ["a"]), op("mm1", "matmul", ["x", "w1"]),
           op("e1", "add", ["mm1", "m"]), op("mm2", "matmul", ["e1", "w2"]), op("e2", "add", ["mm2", "m"])]
    return make_graph({"t": [1024, 256], "x": [1024, 256], "w1": [256, 256], "w2": [256, 256]}, ops, ["e1", "e2"],
                      dtype="float16")


def test_the_ilp_recomputes_a_table_in_both_epilogues_and_saves_its_write():
    g = shared_table()
    assert g.names(g.recomputable_mask) == ["a", "m"]
    plain, recomputing = partition(g, "ilp"), partition(g, "ilp", recompute=True)
    assert sorted(map(sorted, recomputing.groups)) == [["a", "e1", "m", "mm1"], ["a", "e2", "m", "mm2"]]
    assert recomputing.solver.status == "OPTIMAL" and recomputing.solver.details["recomputation_scenarios"] > 1
    assert all("m" not in c.group.writes for c in recomputing.cost.groups)
    saved = sum(c.bytes_read + c.bytes_written for c in plain.cost.groups) - \
        sum(c.bytes_read + c.bytes_written for c in recomputing.cost.groups)
    assert saved == g.tensor("m").nbytes  # the write of m; t is read as often as m was
    assert plan_objective(recomputing.cost, H100, "time") == best_covering(g)["time"]
    assert plan_objective(plain.cost, H100, "time") == best_covering(g, recompute=False)["time"]
    assert plain.cost.modeled_time_us > recomputing.cost.modeled_time_us


def test_scenarios_left_when_the_budget_is_spent_are_reported_and_bound_by_the_structure(monkeypatch):
    """Each scenario of recomputation is charged to the solve's budget: once it is
    spent the scenarios left go unsolved, the plan is the partitions' optimum, and
    the bound (the structural one) stays below every covering's cost."""
    g = shared_table()
    monkeypatch.setattr(ilp, "SCENARIO_WORK_S", 100.0)  # the first scenario spends the whole budget
    plan = partition(g, "ilp", recompute=True)
    d = plan.solver.details
    assert d["recomputation_scenarios"] == 3 and d["recomputation_scenarios_solved"] == 1
    assert plan.solver.status != "OPTIMAL"
    assert any("2 of 3 scenarios of recomputation unsolved" in s for s in d["stopped_by"])
    assert plan_objective(plan.cost, H100, "time") == best_covering(g, recompute=False)["time"]
    assert plan.solver.bound * H100.time_units_per_s / 1e6 <= best_covering(g)["time"]


def test_a_covering_is_judged_by_the_rules_of_recomputation():
    g = shared_table()
    both = [["mm1", "a", "m", "e1"], ["mm2", "a", "m", "e2"]]
    assert evaluate(g, both).bytes_written == g.tensor("e2").nbytes + g.tensor("e1").nbytes
    cases = {
        "partition.duplicate": [["mm1", "a", "m", "e1"], ["mm1", "mm2", "a", "m", "e2"]],  # a matmul twice
        "recompute.reader": [["mm1", "a", "m", "e1"], ["a", "m"], ["mm2", "e2"]],  # e2 reads m, never written
        "recompute.producer": [["mm1", "a", "m", "e1"], ["a"], ["mm2", "m", "e2"]],  # m without its operand a
    }
    for reason, groups in cases.items():
        with pytest.raises(IllegalPlan) as raised:
            evaluate(g, groups)
        assert raised.value.reason == reason


@pytest.mark.parametrize("backend", ["numpy", "emulator"])
@pytest.mark.parametrize("graph", ["table", "activation"])
def test_a_recomputing_plan_computes_what_the_unfused_graph_does(backend, graph):
    if backend == "emulator" and shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH: the emulator needs it")
    plan = partition(shared_table() if graph == "table" else shared_activation(), "ilp", recompute=True)
    assert sum("m" in ops for ops in plan.groups) == 2
    runner = NumpyBackend() if backend == "numpy" else CudaBackend(emulate=True)
    assert all(c.ok for c in run_and_check(plan, runner))


def test_the_cli_recomputes_when_asked(tmp_path, capsys):
    path = tmp_path / "table.json"
    g = shared_table()
    spec = {"format": 1, "name": "table", "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype}
                                                       for n, t in g.inputs.items()],
            "ops": [{"name": o.name, "op": o.kind, "inputs": list(o.inputs)} for o in g.ops.values()],
            "outputs": list(g.outputs)}
    path.write_text(json.dumps(spec))
    assert main([str(path), "--recompute", "--format", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    groups = planned["groups"]
    assert planned["recompute"] is True
    assert sum("m" in group["ops"] for group in groups) == 2
    assert sorted(group["recomputed"] for group in groups if group["recomputed"]) == [["a", "m"], ["a", "m"]]
    assert main([str(path), "--recompute", "--report"]) == 0
    report = capsys.readouterr().out
    assert report.count("recomputed in #") == 2 and "(objective: time, recompute)" in report
    with pytest.raises(SystemExit) as exited:  # the heuristics never recompute
        main([str(path), "--recompute", "--strategy", "greedy"])
    assert exited.value.code == 2


def test_explain_finds_a_recomputed_op_with_each_of_its_readers():
    from partitioner.explain import explain

    plan = partition(shared_table(), "ilp", recompute=True)
    assert explain(plan, "m", "e1").verdict == explain(plan, "m", "e2").verdict == "together"
    assert explain(plan, "mm1", "mm2").verdict != "together"


def test_the_op_view_draws_one_node_per_copy_of_a_recomputed_op():
    from partitioner.draw import to_dot

    source = to_dot(partition(shared_table(), "ilp", recompute=True), "ops").source
    assert source.count("m\ntanh\n(recomputed)") == 2
    assert source.count("a\nneg\n(recomputed)") == 2


@pytest.mark.parametrize("limit", [0.02, None])
def test_recomputation_never_makes_the_plan_worse(limit):
    """The ilp first finds the partitions' optimum and starts from it, so a budget
    that cuts the larger search short still returns a plan at least as cheap."""
    g = load_graph(ROOT / "graphs" / "bert_base_2l_b32_s128_f16.yaml")
    plain, recomputing = partition(g, "ilp", time_limit=limit), partition(g, "ilp", time_limit=limit, recompute=True)
    assert recomputing.cost.modeled_time_us <= plain.cost.modeled_time_us
    if limit is None:  # the mask's comparisons are recomputed in each layer's attention
        assert recomputing.solver.status == "OPTIMAL"
        assert recomputing.cost.modeled_time_us < plain.cost.modeled_time_us


def shared_activation():
    """``m = tanh(t)`` of an activation ``t = x0 @ w0`` (a graph output), the A operand
    of a matmul and summed over its rows (no group holds a GEMM and a reduction): a
    partition writes ``m`` and reads it back twice; recomputing it in both groups
    (the matmul's prologue, the reduction's) reads ``t`` there instead and never
    writes ``m``."""
    ops = [op("t", "matmul", ["x0", "w0"]), op("m", "tanh", ["t"]), op("e1", "matmul", ["m", "w1"]),
           op("e2", "reduce_sum", ["m"], axes=[0], keepdims=True)]
    shapes = {"x0": [1024, 256], "w0": [256, 256], "w1": [256, 256]}
    return make_graph(shapes, ops, ["t", "e1", "e2"], dtype="float16")


def test_the_ilp_recomputes_an_activation_from_its_operand_in_a_prologue_and_a_reduction():
    g = shared_activation()
    assert g.names(g.recomputable_mask) == ["m"] and not g.input_derived_mask
    plain, recomputing = partition(g, "ilp"), partition(g, "ilp", recompute=True)
    assert sorted(map(sorted, recomputing.groups)) == [["e1", "m"], ["e2", "m"], ["t"]]
    assert recomputing.solver.status == "OPTIMAL"
    assert all("m" not in c.group.writes and "t" in c.group.reads for c in recomputing.cost.groups if "m" in c.group.ops)
    saved = plain.cost.bytes_written - recomputing.cost.bytes_written
    assert saved == g.tensor("m").nbytes
    assert plan_objective(recomputing.cost, H100, "time") == best_covering(g)["time"]
    assert plain.cost.modeled_time_us > recomputing.cost.modeled_time_us
    # every FLOP beyond computing each op once is recomputed: m's second copy included
    once = sum(flops_once(g, g.ops[name]) for name in g.names(g.compute_mask))
    for plan in (plain, recomputing):
        assert plan.cost.recomputed_flops == plan.cost.flops - once
    assert recomputing.cost.recomputed_flops >= plain.cost.recomputed_flops + flops_once(g, g.ops["m"]) > 0


def test_recomputed_flops_count_op_by_op_and_a_part_computed_is_no_recomputation():
    """A copy that computes only the slice of a table its reader needs, beside one
    that computes all of it: the recomputation is that slice, not a whole second
    table (the group's shortfall hid half of it, and a whole copy was added); an op
    computed only in part recomputes nothing."""
    g = make_graph({"y": [4, 6], "v": [6]}, [
        op("n", "neg", ["v"]), op("s", "slice", ["n"], starts=[0], ends=[3]), op("r", "reduce_sum", ["s"]),
        op("a", "add", ["y", "n"])], ["r", "a"])
    plan = partition(g, "ilp", recompute=True)
    assert sorted(map(sorted, plan.groups)) == [["a", "n"], ["n", "r", "s"]]
    once = sum(flops_once(g, g.ops[name]) for name in g.names(g.compute_mask))
    held = {name: sum(c.op_flops.get(name, 0) for c in plan.cost.groups) for name in g.ops}
    assert held["n"] == 4 * 6 + 3  # broadcast to each element of y, and the slice's half
    assert plan.cost.recomputed_flops == plan.cost.flops - once == held["n"] - 6
    g = make_graph({"x": [6]}, [op("e", "exp", ["x"]), op("s", "slice", ["e"], starts=[0], ends=[3])], ["s"])
    fused = evaluate(g, [["e", "s"]])
    assert fused.recomputed_flops == 0 and fused.flops == flops_once(g, g.ops["e"]) // 2


def test_a_copy_reads_its_operand_which_its_producer_group_writes():
    """``m`` recomputed in a matmul's prologue and in a reduction group that holds its
    producer ``t``: that group writes ``t`` (the other copy reads it) though no op
    outside reads ``t``; a copy no reader needs is refused."""
    g = make_graph({"x": [256, 256], "w": [256, 256]}, [
        op("top", "reduce_max", ["x"], axes=[-1], keepdims=True), op("t", "sub", ["x", "top"]),
        op("m", "tanh", ["t"]), op("a", "reduce_sum", ["m"], axes=[0], keepdims=True),
        op("mm", "matmul", ["m", "w"])], ["a", "mm"])
    assert g.names(g.recomputable_mask) == ["m"] and not g.input_derived_mask  # t is read once
    cost = evaluate(g, [["top"], ["t", "m", "a"], ["m", "mm"]])
    held = {frozenset(c.group.ops): c.group for c in cost.groups}
    assert set(held[frozenset(["t", "m", "a"])].writes) == {"t", "a"}
    assert set(held[frozenset(["m", "mm"])].reads) == {"t", "w"}
    with pytest.raises(IllegalPlan) as raised:  # the second group holds both readers of m
        evaluate(g, [["top"], ["t", "m", "a", "mm"], ["m"]])
    assert raised.value.reason == "recompute.unread"
    with pytest.raises(IllegalPlan) as raised:
        evaluate(g, [["top"], ["t", "m", "a"], ["m"], ["mm"]])  # mm reads m, which no group writes
    assert raised.value.reason == "recompute.reader"


def test_only_a_value_no_group_can_hold_with_its_readers_is_copied():
    """``m`` read by a matmul and a row-sum over the other axis is recomputable;
    read by two adds (one group can hold all three), or by a matmul and a sum of
    that matmul's result (another op on a path between its readers), it is not."""
    shapes = {"x": [256, 256], "w": [256, 256]}
    apart = make_graph(shapes, [op("t", "matmul", ["x", "w"]), op("m", "tanh", ["t"]), op("p", "matmul", ["m", "w"]),
                                op("s", "reduce_sum", ["m"], axes=[0], keepdims=True)], ["p", "s"])
    together = make_graph(shapes, [op("t", "matmul", ["x", "w"]), op("m", "tanh", ["t"]), op("a", "add", ["m", 1.0]),
                                   op("b", "mul", ["m", 2.0])], ["a", "b", "t"])
    between = make_graph(shapes, [op("t", "matmul", ["x", "w"]), op("m", "tanh", ["t"]),
                                  op("p", "matmul", ["m", "w"]), op("q", "relu", ["p"]),
                                  op("s", "add", ["m", "q"])], ["s", "t"])
    assert apart.names(apart.recomputable_mask) == ["m"] and not apart.input_derived_mask
    assert not together.recomputable_mask and not between.recomputable_mask


def test_a_table_a_gather_reads_is_never_recomputed_nor_what_is_computed_from_it(monkeypatch):
    """Position ids a gather reads (as Llama's RoPE rows are gathered by position):
    a recomputed op is never written, so the gather's group would have to compute
    it, and no group holds a gather with another op; the ids are computed once, and
    so is a table derived from them (recomputing it recomputes the ids). A table
    whose readers are all pointwise stays recomputable. The plans with and without
    the enumeration's shortcut are the brute force's (test_optimality); here, that
    the shortcut holds these ops and no others, and that the plan costs what it
    costs without it."""
    ops = [op("ids", "add", ["pos", 1]), op("rows", "gather", ["emb", "ids"], axis=0),
           op("rows_t", "transpose", ["rows"], perm=[1, 0]), op("real", "cast", ["ids"], dtype="float32"),
           op("scaled", "mul", ["real", 2.0]), op("s1", "add", ["scaled", "x"]), op("s2", "mul", ["scaled", "x"]),
           op("u", "add", ["rows_t", "s1"]), op("half", "mul", ["bias", 0.5]), op("h1", "add", ["u", "half"]),
           op("h2", "mul", ["s2", "half"])]
    g = make_graph({"pos": ([64], "int64"), "emb": [128, 32], "x": [32, 64], "bias": [64]}, ops, ["h1", "h2"])
    assert set(g.names(g.input_derived_mask)) == {"ids", "real", "scaled", "half"}
    assert g.names(g.never_recomputed_mask) == ["ids", "real", "scaled"]
    plan = partition(g, "ilp", recompute=True)
    monkeypatch.setattr(Graph, "never_recomputed_mask", property(lambda graph: 0))
    every_copy = partition(make_graph({"pos": ([64], "int64"), "emb": [128, 32], "x": [32, 64], "bias": [64]}, ops,
                                      ["h1", "h2"]), "ilp", recompute=True)
    assert plan.solver.status == every_copy.solver.status == "OPTIMAL"
    assert plan.cost.modeled_time_us == every_copy.cost.modeled_time_us
    assert plan.solver.details["candidates"] < every_copy.solver.details["candidates"]
