"""Strategies on every graph in graphs/: ilp <= every heuristic <= none, all plans legal,
deterministic results, and time-limited solves."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from partitioner import compare, evaluate, load_graph, load_hardware, partition
from partitioner.cost import flops_once
from partitioner.report import HEURISTICS as ALL_HEURISTICS
from partitioner.report import text_report
from partitioner.strategies.candidates import enumerate_candidates

from .conftest import GRAPHS, ROOT


HEURISTICS = ("greedy", "xla", "tvm", "inductor")


@pytest.mark.parametrize("path", GRAPHS, ids=[p.stem for p in GRAPHS])
def test_ilp_le_every_heuristic_le_none_and_every_plan_is_legal(path):
    graph = load_graph(path)
    plans = {p.strategy: p for p in compare(graph, "h100", ("none", *HEURISTICS, "ilp"))}
    once = sum(flops_once(graph, op) for op in graph.ops.values())
    for plan in plans.values():
        again = evaluate(graph, plan.groups, "h100")  # independent re-validation of the returned groups
        assert again.modeled_time_us == pytest.approx(plan.cost.modeled_time_us, rel=1e-12)
        held = [n for g in plan.groups for n in g]
        twice = {n for n in held if held.count(n) > 1}
        assert set(held) == set(graph.ops)  # each op once, but for recomputed ones
        assert all(graph.recomputable_mask >> graph.base_index[graph.index[n]] & 1 for n in twice)
        # every op's result is computed at least once, and what is beyond once is recomputation
        assert plan.cost.flops - plan.cost.recomputed_flops == once, plan.strategy
    ilp, none = plans["ilp"].cost.modeled_time_us, plans["none"].cost.modeled_time_us
    for name in HEURISTICS:  # merging never adds bytes, so every heuristic beats none too
        assert ilp <= plans[name].cost.modeled_time_us + 1e-9 <= none + 2e-9, name
    assert plans["ilp"].solver.status == "OPTIMAL" and plans["ilp"].solver.gap == 0.0
    assert plans["ilp"].solver.bound == pytest.approx(ilp, rel=1e-9)


def _json_plan(path, seed):
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    out = subprocess.run([sys.executable, "-m", "partitioner.cli", str(path), "--format", "json"], capture_output=True,
                         text=True, env=env, cwd=ROOT, check=True).stdout
    data = json.loads(out)
    return [g["ops"] for g in data["groups"]], data["totals"]


def test_planning_restores_the_collectors_settings(monkeypatch):
    """``partition`` collects less often while it plans (``PLANNING_GC_THRESHOLD``) and
    freezes the graph out of collections; afterwards, or after a failure, or once the
    last of overlapping plans ends, the caller's thresholds and frozen objects are
    as they were."""
    import gc

    from partitioner import strategies

    graph = load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml")
    before = gc.get_threshold(), gc.get_freeze_count()
    seen = []
    plan = strategies.STRATEGIES["greedy"].plan
    monkeypatch.setattr(strategies.STRATEGIES["greedy"], "plan",
                        lambda *a: seen.append((gc.get_threshold()[0], gc.get_freeze_count())) or plan(*a))
    partition(graph, "greedy")
    assert seen[0][0] == max(before[0][0], strategies.PLANNING_GC_THRESHOLD)
    assert seen[0][1] > 0 if before[1] == 0 else seen[0][1] == before[1]  # a caller's freeze is left alone
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    monkeypatch.setattr(strategies, "evaluate", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        partition(graph, "greedy")
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
    # plans overlapping in threads: the first to end leaves the raise to the other
    first, second = strategies._fewer_collections(), strategies._fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == max(before[0][0], strategies.PLANNING_GC_THRESHOLD)
    second.__exit__(None, None, None)
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


@pytest.mark.parametrize("options", [{"max_ops": 0}, {"max_ops": "3"}, {"max_ops": True}, {"time_limit": True},
                                     {"time_limit": float("nan")}, {"time_limit": -1}, {"time_limit": 0},
                                     {"time_limit": 1.8e303}, {"time_limit": 10**400}])  # both were OverflowErrors
def test_bad_options_are_one_clear_value_error(options):
    with pytest.raises(ValueError, match="time_limit must be a number of seconds above 0|max_ops must be an int"):
        partition(load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "ilp", **options)


def test_numpy_scalars_are_options_as_python_numbers_are():
    import numpy as np

    plan = partition(load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "ilp", time_limit=np.float32(1.0),
                     max_ops=np.int64(5))
    assert plan.solver.status == "OPTIMAL"


def test_same_input_gives_same_plan_across_processes():
    path = ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml"
    assert _json_plan(path, 1) == _json_plan(path, 2)


@pytest.mark.parametrize("objective", ["time", "traffic", "energy"])
def test_a_time_limited_solve_is_no_worse_than_any_heuristic_with_a_valid_bound(objective):
    """Every heuristic's plan enters the model and the cheapest warm-starts it, so
    a solve stopped early still returns a plan no costlier than any heuristic's."""
    graph = load_graph(ROOT / "graphs" / "llama7b_2l_b4_s2048_bf16.yaml")
    optimum = partition(graph, "ilp", objective=objective).cost.value(objective)
    heuristics = {name: partition(graph, name).cost.value(objective) for name in ALL_HEURISTICS}
    plan = partition(graph, "ilp", time_limit=0.05, objective=objective)
    assert plan.solver.status in ("FEASIBLE", "WARM_START", "OPTIMAL")
    assert plan.cost.value(objective) <= min(heuristics.values()) * (1 + 1e-12)
    assert plan.solver.details["warm_start"] == min(heuristics, key=heuristics.get)
    assert plan.solver.bound <= optimum * (1 + 1e-12)
    assert 0 <= plan.solver.gap <= 1
    assert plan.solver.details["enumeration_complete"] is False


def test_a_graph_enumerated_before_the_heuristics_falls_back_on_them_when_unproven(monkeypatch):
    """MLP+GELU is enumerated completely before the heuristics are due, so its solve
    starts from one group per op and computes no heuristic. With every CP-SAT solve
    made to find nothing, the first solve ends unproven, the heuristics are computed
    then, and the plan is the cheapest of theirs, as it would be from the start."""
    from partitioner.strategies import ilp

    graph = load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml")
    proven = partition(graph, "ilp")
    assert proven.solver.status == "OPTIMAL" and proven.solver.details["warm_start"] == "none"
    heuristics = {name: partition(graph, name).cost.modeled_time_us for name in ALL_HEURISTICS}
    monkeypatch.setattr(ilp._Solver, "_cp_sat", lambda self, *args: None)
    plan = partition(graph, "ilp")
    assert plan.solver.details["warm_start"] == min(heuristics, key=heuristics.get)
    assert plan.cost.modeled_time_us == pytest.approx(min(heuristics.values()))
    assert plan.solver.status != "OPTIMAL" or plan.solver.bound == pytest.approx(plan.cost.modeled_time_us)


def test_unknown_strategy():
    graph = load_graph(ROOT / "graphs" / "softmax_f16.yaml")
    with pytest.raises(KeyError, match="unknown strategy"):
        partition(graph, "magic")


def test_plan_to_json_round_trips():
    graph = load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml")
    plan = partition(graph, "ilp", hardware="a100")
    data = json.loads(plan.to_json())
    assert data["hardware"] == "a100" and data["strategy"] == "ilp"
    assert [g["ops"] for g in data["groups"]] == plan.groups
    assert data["totals"]["launches"] == plan.cost.launches


def _siblings(n: int, consumer: str) -> dict:
    """x split into ``n`` row slices, each followed by ``consumer`` (2^(2n) connected subsets)."""
    ops = []
    for i in range(n):
        ops.append({"name": f"s{i}", "op": "slice", "inputs": ["x"],
                    "attrs": {"starts": [i * 64], "ends": [(i + 1) * 64], "axes": [0]}})
        attrs = {"axes": [1]} if consumer == "reduce_sum" else {}
        ops.append({"name": f"c{i}", "op": consumer, "inputs": [f"s{i}"], "attrs": attrs})
    return {"name": f"siblings_{n}_{consumer}", "inputs": [{"name": "x", "shape": [64 * n, 1024]}], "ops": ops,
            "outputs": [f"c{i}" for i in range(n)]}


def _fan_in(n: int) -> dict:
    """``n`` multiplies of x summed back into one value."""
    ops = [{"name": f"m{i}", "op": "mul", "inputs": ["x", float(i + 1)]} for i in range(n)]
    ops += [{"name": f"a{i}", "op": "add", "inputs": [f"a{i - 1}" if i > 1 else "m0", f"m{i}"]} for i in range(1, n)]
    return {"name": f"fan_{n}", "inputs": [{"name": "x", "shape": [1024, 1024]}], "ops": ops, "outputs": [f"a{n - 1}"]}


def _concat(n: int) -> dict:
    """``n`` row slices of x, each through ``exp``, concatenated back."""
    spec = _siblings(n, "exp")
    spec["ops"].append({"name": "cat", "op": "concat", "inputs": [f"c{i}" for i in range(n)], "attrs": {"axis": 0}})
    return {**spec, "name": f"concat_{n}", "outputs": ["cat"]}


def _chain(n: int) -> dict:
    ops = [{"name": f"c{i}", "op": "exp" if i % 2 else "neg", "inputs": [f"c{i - 1}" if i else "x"]} for i in range(n)]
    return {"name": f"chain_{n}", "inputs": [{"name": "x", "shape": [1024, 1024]}], "ops": ops,
            "outputs": [f"c{n - 1}"]}


def _inception(modules: int, branches: int) -> dict:
    """``modules`` Inception-style blocks: ``branches`` 1x1 convs of one input, each
    through a batch norm as ONNX imports it (``rsqrt(var + eps)`` of its parameters,
    then ``sub``, ``mul``, ``mul``, ``add``) and a relu, concatenated."""
    inputs = [{"name": "x", "shape": [8, 64, 14, 14]}]
    ops, source, channels = [], "x", 64
    for m in range(modules):
        outs = []
        for b in range(branches):
            p, width = f"m{m}b{b}", 16 * (b + 1)
            inputs += [{"name": f"{p}_w", "shape": [width, channels, 1, 1]}] + [
                {"name": f"{p}_{k}", "shape": [width, 1, 1]} for k in ("mean", "var", "scale", "bias")]
            ops += [{"name": f"{p}_conv", "op": "conv2d", "inputs": [source, f"{p}_w"]},
                    {"name": f"{p}_ve", "op": "add", "inputs": [f"{p}_var", 1e-5]},
                    {"name": f"{p}_inv", "op": "rsqrt", "inputs": [f"{p}_ve"]},
                    {"name": f"{p}_xc", "op": "sub", "inputs": [f"{p}_conv", f"{p}_mean"]},
                    {"name": f"{p}_xn", "op": "mul", "inputs": [f"{p}_xc", f"{p}_inv"]},
                    {"name": f"{p}_sc", "op": "mul", "inputs": [f"{p}_xn", f"{p}_scale"]},
                    {"name": f"{p}_bn", "op": "add", "inputs": [f"{p}_sc", f"{p}_bias"]},
                    {"name": p, "op": "relu", "inputs": [f"{p}_bn"]}]
            outs.append(p)
        ops.append({"name": f"m{m}", "op": "concat", "inputs": outs, "attrs": {"axis": 1}})
        source, channels = f"m{m}", sum(16 * (b + 1) for b in range(branches))
    return {"name": f"inception_{modules}x{branches}", "inputs": inputs, "ops": ops, "outputs": [source]}


def test_batch_norms_as_onnx_imports_them_are_proven_optimal():
    """Three Inception-style blocks of two branches (51 ops), as ONNX Inception-v2
    imports its batch norms: each norm's ``rsqrt(var + eps)`` is an input prologue
    (``cost.input_prologues``), so the groups holding its reader without it are no
    candidates. 2,958 candidates and 150,324 units of search work, proven within a
    2 s limit's share; without the rule 40,376 candidates and 746,380 units,
    unproven there."""
    graph = load_graph(_inception(3, 2))
    plan = partition(graph, "ilp", time_limit=2)
    assert plan.solver.status == "OPTIMAL" and plan.solver.gap == 0
    assert plan.solver.details["candidates"] < 5_000
    for group in plan.groups:  # each norm's parameter chain runs in its reader's kernel
        for name in group:
            if name.endswith("_xn"):
                assert {name[:-3] + "_ve", name[:-3] + "_inv"} <= set(group), group


@pytest.mark.parametrize("spec", [_siblings(12, "reduce_sum"), _siblings(24, "reduce_sum"), _siblings(16, "exp"),
                                  _concat(16), _fan_in(32), _chain(2000), _siblings(40, "reduce_sum"),
                                  _siblings(100, "reduce_sum")], ids=lambda s: s["name"])
def test_stress_graphs_are_proven_optimal(spec):
    """Wide sibling sets, a fan-out summed back, and a chain past the op cap: the
    enumeration cannot finish (2^48 connected sets; 100,000 units of work here), yet every
    anchor gets its share of the work, the one-kernel (or op-cap) plan is found,
    and the structural bound, which counts every launch and crossing tensor the plan
    must make, proves it: OPTIMAL with gap 0. Sibling sets past the op cap (40 and
    100 slices, each reduced: 2 and 4 kernels of up to 32 siblings) are reached by
    the local search on the unproven plan (``local_search``); without it they ended
    FEASIBLE at 6.13 and 17.46 us, 19% and 48% above these optima."""
    graph = load_graph(spec)
    plan = partition(graph, "ilp", time_limit=1)
    assert plan.solver.status == "OPTIMAL" and plan.solver.gap == 0
    assert plan.cost.launches == -(-sum(not op.is_view for op in graph.ops.values()) // 64)
    assert plan.solver.bound == pytest.approx(plan.cost.modeled_time_us)
    if plan.cost.launches == 1:
        assert plan.cost.modeled_time_us == pytest.approx(evaluate(graph, [list(graph.ops)]).modeled_time_us)


def test_a_wide_fan_out_keeps_one_pending_entry_per_state_on_its_stack(monkeypatch):
    """A state of a 200-way concat can branch on hundreds of ops; its children are
    made one at a time, so a search's stack holds at most two entries per level
    (a state and the children it has yet to make), never one per child: every
    anchor waiting to resume keeps its stack (6 GB on a 600-way concat before)."""
    from partitioner.strategies import candidates

    deepest = []
    search = candidates._Search.search

    def recording(self, job):
        stack = job.stack

        class Watched(list):
            def append(self, entry):
                super().append(entry)
                deepest.append(len(self))

        job.stack = Watched(stack)
        try:
            search(self, job)
        finally:
            stack[:] = job.stack
            job.stack = stack

    monkeypatch.setattr(candidates._Search, "search", recording)
    graph = load_graph(_concat(200))
    found = enumerate_candidates(graph, load_hardware("h100"), 64, max_work=200_000)
    assert found.stopped and len(found.masks) > 500
    assert max(deepest) <= 2 * 64 + 1  # one per child: 399 before


def test_a_region_too_large_to_repeat_is_searched_alone_with_the_same_result(monkeypatch):
    """Past ``SHARED_REGION_OPS`` a job's region gets a key of its own (no tuple per
    op, kept per job): with every region past it, GPT-2 2L's repeated layers are
    all searched afresh, and the candidates and costs are the same."""
    from partitioner.strategies import candidates

    graph = load_graph(ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml")
    shared = enumerate_candidates(graph, load_hardware("h100"), 64)
    monkeypatch.setattr(candidates, "SHARED_REGION_OPS", 0)
    alone = enumerate_candidates(graph, load_hardware("h100"), 64)
    assert shared.replayed > 50 and alone.replayed == 0
    assert sorted(zip(alone.masks, alone.recomputed, alone.costs)) == \
        sorted(zip(shared.masks, shared.recomputed, shared.costs))


def test_progress_while_enumerating_shows_the_bound_and_then_the_heuristics_best():
    """The structural bound is known before the search and the heuristics' best plan
    from the checkpoint on, so the enumerating phase's progress shows both (it
    showed neither: "best -  bound -" for 35 of Inception-v2's 40 s)."""
    seen = []
    plan = partition(load_graph(_inception(1, 5)), "ilp", time_limit=1, progress=lambda *a: seen.append(a))
    enumerating = [(best, bound) for phase, best, bound, _ in seen if phase == "enumerating"]
    assert enumerating and all(bound is not None and bound <= plan.solver.bound for _, bound in enumerating)
    assert all(best is not None and best >= plan.cost.modeled_time_us for best, _ in enumerating)


def test_a_heuristic_plan_that_meets_the_bound_is_proven_before_any_solve():
    """With default options, 12 sibling slices each summed: the heuristics are
    computed once the enumeration has done what they cost, and inductor's horizontal
    one-kernel plan meets the structural bound, so it is proven there, with no model
    solved (a warm start from greedy alone spent the whole 60 s budget first)."""
    plan = partition(load_graph(_siblings(12, "reduce_sum")), "ilp")
    assert plan.solver.status == "OPTIMAL" and plan.solver.details["proof"] == "structural bound"
    assert plan.solver.details["candidates"] == 0 and plan.solver.details["warm_start"] == "inductor"


def test_unproven_plans_name_the_budget_that_stopped_them():
    graph = load_graph(ROOT / "graphs" / "llama7b_2l_b4_s2048_bf16.yaml")
    plan = partition(graph, "ilp", time_limit=0.5)
    assert plan.solver.status != "OPTIMAL" and plan.solver.details["stopped_by"]
    assert set(plan.solver.details["stopped_by"]) <= {
        "the search budget (--time-limit)", "an anchor's cap (2,000,000 units of search work)",
        "the candidate cap", "the solver's time limit (--time-limit, deterministic)"}
    assert "unproven  stopped by " in text_report(plan)
    assert "a larger --time-limit searches further" in text_report(plan)


def test_a_plan_stopped_by_a_cap_alone_is_not_told_to_raise_the_time_limit(monkeypatch):
    from partitioner.strategies import ilp

    monkeypatch.setattr(ilp, "MAX_CANDIDATES", 621)
    plan = partition(load_graph(ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml"), "ilp")
    assert plan.solver.details["stopped_by"] == ["the candidate cap"]
    assert "unproven  stopped by the candidate cap\n" in text_report(plan) + "\n"
    assert "--time-limit" not in text_report(plan)


def test_the_candidate_cap_is_kept_and_named_once():
    """Stopped at the cap while a layer's search had not finished, the jobs waiting for
    it once took its candidates too: one past the cap, and the cap named twice in
    ``stopped`` (and so in the report)."""
    graph = load_graph(ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml")
    found = enumerate_candidates(graph, load_hardware("h100"), 64, max_work=26_982, max_candidates=621)
    assert len(found.masks) == 621 and found.stopped == ("candidates",) and found.replayed > 0


def test_a_plan_kept_from_the_warm_start_names_whose_it_is():
    plan = partition(load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "ilp", time_limit=0.001)
    assert plan.solver.status == "WARM_START"
    assert f"WARM_START (the plan of {plan.solver.details['warm_start']})" in text_report(plan)


def test_same_input_and_budget_give_the_same_plan_and_status():
    """Budgets count search work and deterministic time, never seconds: a cut-short solve
    is as repeatable as a proven one."""
    graph = load_graph(ROOT / "graphs" / "llama7b_2l_b4_s2048_bf16.yaml")
    first, second = (partition(graph, "ilp", time_limit=1.0) for _ in range(2))
    assert first.groups == second.groups
    assert (first.solver.status, first.solver.bound, first.solver.details["enumeration_work"]) == \
        (second.solver.status, second.solver.bound, second.solver.details["enumeration_work"])


def test_repeated_independent_parts_are_solved_once():
    """Four identical independent chains: one overlap component each, the three repeats
    reuse the first solve, and the plan costs four times one chain's optimum."""
    def chains(k):
        ops = []
        for i in range(k):
            ops += [{"name": f"m{i}", "op": "reduce_mean", "inputs": [f"x{i}"], "attrs": {"axes": [1], "keepdims": True}},
                    {"name": f"d{i}", "op": "sub", "inputs": [f"x{i}", f"m{i}"]},
                    {"name": f"e{i}", "op": "exp", "inputs": [f"d{i}"]}]
        return load_graph({"inputs": [{"name": f"x{i}", "shape": [512, 256]} for i in range(k)], "ops": ops,
                           "outputs": [f"e{i}" for i in range(k)]})
    plan = partition(chains(4), "ilp")
    assert plan.solver.status == "OPTIMAL"
    assert (plan.solver.details["parts"], plan.solver.details["parts_reused"]) == (4, 3)
    assert plan.cost.modeled_time_us == pytest.approx(4 * partition(chains(1), "ilp").cost.modeled_time_us)
