"""The ILP is exact: on random small graphs its plan costs what the best of ALL
partitions costs, found by enumerating every partition through ``evaluate``."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings

from partitioner import IllegalPlan, evaluate, partition

from .random_graphs import small_graphs


def set_partitions(items):
    """Every partition of ``items`` into non-empty blocks (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [[first], *part]
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1:]]


def brute_force_minimum(graph) -> float:
    best = math.inf
    for groups in set_partitions(list(graph.ops)):
        try:
            best = min(best, evaluate(graph, groups).modeled_time_us)
        except IllegalPlan:
            pass
    return best


def test_set_partitions_counts_bell_numbers():
    assert [sum(1 for _ in set_partitions(list(range(n)))) for n in range(7)] == [1, 1, 2, 5, 15, 52, 203]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs(max_ops=6))
def test_ilp_equals_brute_force_up_to_6_ops(graph):
    plan = partition(graph, "ilp")
    assert plan.solver.status == "OPTIMAL"
    assert math.isclose(plan.cost.modeled_time_us, brute_force_minimum(graph), rel_tol=1e-12)
    assert plan.cost.modeled_time_us <= partition(graph, "greedy").cost.modeled_time_us + 1e-9


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_graphs(max_ops=8))
def test_ilp_equals_brute_force_at_8_ops(graph):
    plan = partition(graph, "ilp")
    assert math.isclose(plan.cost.modeled_time_us, brute_force_minimum(graph), rel_tol=1e-12)
