"""The ``greedy`` strategy: producer->consumer merging, largest bytes saved first.

Start from one group per compute op. Repeatedly merge the producer/consumer pair
of groups whose merge saves the most global-memory bytes (ties: earliest ops in
topological order), skipping merges that ``legality`` rejects or that would close
a cycle between groups, until no merge is left. Every merge saves one launch, and
merging never adds bytes, so the plan's modelled time only goes down.
"""

from __future__ import annotations

import heapq

import networkx as nx

from ..graph import Graph
from ..group import Group
from ..hardware import Hardware
from ..legality import is_legal
from .base import Options, Strategy, assemble, group_of


class _Merger:
    def __init__(self, graph: Graph, hw: Hardware, max_ops: int):
        self.graph, self.hw, self.max_ops = graph, hw, max_ops
        computes = [graph.index[name] for name, op in graph.ops.items() if not op.is_view]
        self.members = {i: 1 << i for i in computes}
        self.owner = {i: i for i in computes}
        self.version = {i: 0 for i in computes}
        self.quotient = nx.DiGraph()
        self.quotient.add_nodes_from(computes)
        for i in computes:
            for j in self._consumers(1 << i):
                self.quotient.add_edge(i, j)
        self.heap: list = []
        self._groups: dict[int, Group | None] = {}
        for a, b in self.quotient.edges:
            self._push(a, b)

    def _consumers(self, mask: int) -> set[int]:
        readers = 0
        for name in self.graph.names(mask):
            readers |= self.graph.storage_readers.get(name, 0)
        readers &= ~mask
        return {self.owner[j] for j in (self.graph.index[n] for n in self.graph.names(readers))}

    def _group(self, mask: int) -> Group | None:
        if mask not in self._groups:
            group = group_of(self.graph, mask)
            self._groups[mask] = group if group is not None and is_legal(group, self.hw, self.max_ops) else None
        return self._groups[mask]

    def _bytes(self, mask: int) -> int:
        group = self._group(mask) if mask.bit_count() > 1 else Group(self.graph, self.graph.convex_hull(mask))
        return group.bytes_read + group.bytes_written

    def _push(self, a: int, b: int) -> None:
        merged = self._group(self.members[a] | self.members[b])
        if merged is None:
            return
        saved = self._bytes(self.members[a]) + self._bytes(self.members[b]) - (merged.bytes_read + merged.bytes_written)
        heapq.heappush(self.heap, (-saved, a, b, self.version[a], self.version[b]))

    def _closes_cycle(self, a: int, b: int) -> bool:
        return any(s != b and nx.has_path(self.quotient, s, b) for s in self.quotient.successors(a))

    def _merge(self, a: int, b: int) -> int:
        keep, gone = min(a, b), max(a, b)
        self.members[keep] |= self.members.pop(gone)
        for i in self.graph.names(self.members[keep]):
            self.owner[self.graph.index[i]] = keep
        for p in list(self.quotient.predecessors(gone)):
            if p != keep:
                self.quotient.add_edge(p, keep)
        for s in list(self.quotient.successors(gone)):
            if s != keep:
                self.quotient.add_edge(keep, s)
        self.quotient.remove_node(gone)
        self.version[keep] += 1
        del self.version[gone]
        return keep

    def run(self) -> list[int]:
        while self.heap:
            _, a, b, va, vb = heapq.heappop(self.heap)
            if self.version.get(a) != va or self.version.get(b) != vb or self._closes_cycle(a, b):
                continue
            m = self._merge(a, b)
            for p in sorted(self.quotient.predecessors(m)):
                self._push(p, m)
            for s in sorted(self.quotient.successors(m)):
                self._push(m, s)
        return [self.members[k] for k in sorted(self.members)]


def greedy_groups(graph: Graph, hw: Hardware, max_ops: int) -> list[int]:
    """The greedy plan as compute-op bitsets (one per group, views left out)."""
    return _Merger(graph, hw, max_ops).run()


class Greedy(Strategy):
    """Producer->consumer merging ordered by bytes saved (see module docstring)."""

    name = "greedy"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        return assemble(graph, greedy_groups(graph, hw, options.max_ops)), {"status": "HEURISTIC"}
