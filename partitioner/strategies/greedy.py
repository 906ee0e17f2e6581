"""The ``greedy`` strategy: producer->consumer merging, largest bytes saved first.

Start from one group per compute op. Repeatedly merge the producer/consumer pair
of groups whose merge saves the most global-memory bytes (ties: earliest ops in
topological order), skipping merges that ``legality`` rejects or that would close
a cycle between groups, until no merge is left. Every merge saves one launch, and
merging never adds bytes, so the plan's traffic time only goes down; its modelled
time can rise where a merge makes a kernel recompute values (a prologue once per
tile), which greedy does not weigh.
"""

from __future__ import annotations

import heapq

from ..graph import Graph
from ..group import Group
from ..hardware import Hardware
from .base import Options, Strategy, assemble
from .merging import Merging


class _Greedy:
    def __init__(self, graph: Graph, hw: Hardware, max_ops: int):
        self.merging = Merging(graph, hw, max_ops)
        self.version = {gid: 0 for gid in self.merging.groups()}
        self.heap: list = []
        self._moved: dict[tuple, int] = {}  # Group.signature -> bytes read and written
        for a in self.merging.groups():
            for b in self.merging.consumers(a):
                self._push(a, b)

    def _push(self, a: int, b: int) -> None:
        m = self.merging
        merged = m.legal_group(m.members[a] | m.members[b])
        if merged is None:
            return
        saved = self._bytes(m.group(a)) + self._bytes(m.group(b)) - self._bytes(merged)
        heapq.heappush(self.heap, (-saved, a, b, self.version[a], self.version[b]))

    def _bytes(self, group: Group) -> int:
        """Global-memory bytes ``group`` moves, computed once per ``Group.signature``."""
        key = group.signature
        if key not in self._moved:
            self._moved[key] = group.bytes_read + group.bytes_written
        return self._moved[key]

    def run(self) -> list[int]:
        m = self.merging
        while self.heap:
            _, a, b, va, vb = heapq.heappop(self.heap)
            if self.version.get(a) != va or self.version.get(b) != vb or m.creates_cycle([a, b]):
                continue
            keep = m.merge([a, b])
            del self.version[b if keep == a else a]
            self.version[keep] += 1
            for p in m.producers(keep):
                self._push(p, keep)
            for s in m.consumers(keep):
                self._push(keep, s)
        return [m.members[gid] for gid in m.groups()]


def greedy_groups(graph: Graph, hw: Hardware, max_ops: int) -> list[int]:
    """The greedy plan as compute-op bitsets (one per group, views left out)."""
    return _Greedy(graph, hw, max_ops).run()


class Greedy(Strategy):
    """Producer->consumer merging ordered by bytes saved (see module docstring)."""

    name = "greedy"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        return assemble(graph, greedy_groups(graph, hw, options.max_ops)), {"status": "HEURISTIC"}
