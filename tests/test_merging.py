"""The baselines' merge bookkeeping (``strategies/merging.py``): after every merge the
groups' topological order is valid, and the cycle check, which searches only between
the merged groups' positions, agrees with a search of the whole group graph."""

from __future__ import annotations

import itertools

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.hardware import load_hardware
from partitioner.strategies.merging import Merging

from .random_graphs import small_graphs


def _group_graph(m: Merging) -> nx.DiGraph:
    """The graph between the current groups, from the ops' producer-reader edges."""
    dag = nx.DiGraph()
    dag.add_nodes_from(m.groups())
    for i, gid in m.owner.items():
        for j in m.readers(i):
            if m.owner[j] != gid:
                dag.add_edge(gid, m.owner[j])
    return dag


def _closes_cycle(dag: nx.DiGraph, ids) -> bool:
    merged = nx.contracted_nodes(dag, ids[0], ids[1], self_loops=False)
    for other in ids[2:]:
        merged = nx.contracted_nodes(merged, ids[0], other, self_loops=False)
    return not nx.is_directed_acyclic_graph(merged)


@settings(max_examples=60, deadline=None)
@given(small_graphs(max_ops=10), st.randoms(use_true_random=False))
def test_every_merge_keeps_a_topological_order_and_an_exact_cycle_check(graph, rng):
    m = Merging(graph, load_hardware("h100"), max_ops=64)
    while len(m.groups()) > 1:
        dag = _group_graph(m)
        assert all(m._position[a] < m._position[b] for a, b in dag.edges)
        pairs = list(itertools.combinations(m.groups(), 2)) + list(itertools.combinations(m.groups(), 3))
        for ids in pairs:
            assert m.creates_cycle(list(ids)) == _closes_cycle(dag, list(ids)), ids
        legal = [list(ids) for ids in pairs if not m.creates_cycle(list(ids))]
        if not legal:
            break
        m.merge(rng.choice(legal))
    assert set(m.owner.values()) == set(m.groups())
