"""Bookkeeping shared by the heuristic baselines (``xla``, ``tvm``, ``inductor``).

Each baseline starts from one group per compute op and merges groups by its own
rules. :class:`Merging` keeps the current groups (compute-op bitsets), the graph
between groups, and answers the two questions every merge must pass whatever
the heuristic: is the merged group legal (``legality.is_legal`` on
``base.group_of``, which also rejects a non-convex set), and would the merge
close a cycle between groups. It holds no fusion rule and no cost of its own.

The groups are kept in a topological order as they merge (Pearce and Kelly, "A
dynamic topological sort algorithm for directed acyclic graphs", ACM JEA 2006): a
group can reach only groups after it, so the cycle check searches only the groups
between the merged ones, not everything downstream.

Group ids are the topological index of a group's first compute op at creation;
a merged group keeps the smallest id of its parts, so ids are stable and
deterministic. A rewrite that replaces a subgraph by one opaque kernel (an
attention rewrite to a fused-attention call, say) *freezes* its group: it takes
part in no further merge.
"""

from __future__ import annotations

from ..graph import Graph
from ..group import Group
from ..hardware import Hardware
from ..legality import is_legal
from .base import group_of


class Merging:
    """Groups of compute ops being merged (see module docstring).

    Attributes:
        members: group id -> bitset of its compute ops.
        owner: compute op index -> id of the group holding it.
    """

    def __init__(self, graph: Graph, hw: Hardware, max_ops: int):
        self.graph, self.hw, self.max_ops = graph, hw, max_ops
        computes = [graph.index[name] for name, op in graph.ops.items() if not op.is_view]
        self.members: dict[int, int] = {i: 1 << i for i in computes}
        self.owner: dict[int, int] = {i: i for i in computes}
        self._succ: dict[int, set[int]] = {i: set() for i in computes}
        self._pred: dict[int, set[int]] = {i: set() for i in computes}
        self._position: dict[int, int] = {i: i for i in computes}  # a topological order of the groups
        for i in computes:
            for j in self.readers(i):
                self._succ[i].add(j)
                self._pred[j].add(i)
        self._legal: dict[int, Group | None] = {}
        self._decided: dict[tuple, bool] = {}  # Group.signature -> is_legal
        self._groups: dict[int, Group] = {}
        self.frozen: set[int] = set()

    def readers(self, i: int) -> list[int]:
        """Compute ops reading op ``i``'s result (directly or through views), in order."""
        g = self.graph
        return [g.index[n] for n in g.names(g.storage_readers.get(g.order[i], 0))]

    # ------------------------------------------------------------ queries

    def groups(self) -> list[int]:
        """Ids of the current groups, in increasing order."""
        return sorted(self.members)

    def consumers(self, gid: int) -> list[int]:
        """Groups reading a value produced in ``gid``, by id."""
        return sorted(self._succ[gid])

    def producers(self, gid: int) -> list[int]:
        """Groups producing a value read in ``gid``, by id."""
        return sorted(self._pred[gid])

    def group(self, gid: int) -> Group:
        """The :class:`Group` of a current group (its convex hull, views included; cached)."""
        mask = self.members[gid]
        if mask not in self._groups:
            self._groups[mask] = Group(self.graph, self.graph.convex_hull(mask))
        return self._groups[mask]

    def legal_group(self, mask: int) -> Group | None:
        """The group of compute ops ``mask`` if it is convex and ``legality`` accepts
        it, else ``None`` (cached per mask, and decided once per ``Group.signature``)."""
        if mask not in self._legal:
            group = group_of(self.graph, mask)
            ok = False
            if group is not None:  # decided once per signature: a repeated layer's merges are the same
                ok = self._decided.get(group.signature)
                if ok is None:
                    ok = self._decided[group.signature] = is_legal(group, self.hw, self.max_ops)
            self._legal[mask] = group if ok else None
        return self._legal[mask]

    def creates_cycle(self, ids: list[int]) -> bool:
        """Whether merging the groups ``ids`` would make the groups depend on each
        other in a cycle: a path leaves the merged set and comes back to it."""
        inside = set(ids)
        last = max(self._position[i] for i in ids)  # a group after every merged one reaches none
        position = self._position
        frontier = [t for s in ids for t in self._succ[s] if t not in inside and position[t] < last]
        seen = set(frontier)
        while frontier:
            node = frontier.pop()
            for t in self._succ[node]:
                if t in inside:
                    return True
                if t not in seen and position[t] < last:
                    seen.add(t)
                    frontier.append(t)
        return False

    def mergeable(self, ids: list[int]) -> Group | None:
        """The merged group of ``ids`` when none is frozen, it is legal and it closes no
        cycle, else ``None``."""
        if self.frozen.intersection(ids):
            return None
        mask = 0
        for gid in ids:
            mask |= self.members[gid]
        merged = self.legal_group(mask)
        if merged is None or self.creates_cycle(ids):
            return None
        return merged

    # ------------------------------------------------------------ update

    def freeze(self, mask: int) -> int | None:
        """Merge the groups holding the compute ops ``mask`` into one group that no later
        merge touches, when none is frozen, their union is legal and it closes no cycle;
        its id, or ``None`` (nothing changes)."""
        ids = sorted({self.owner[self.graph.index[n]] for n in self.graph.names(mask)})
        union = 0
        for gid in ids:  # the groups that hold those ops come whole (an earlier merge's too)
            union |= self.members[gid]
        if self.frozen.intersection(ids) or self.legal_group(union) is None or self.creates_cycle(ids):
            return None
        gid = self.merge(ids)
        self.frozen.add(gid)
        return gid

    def merge(self, ids: list[int]) -> int:
        """Merge the groups ``ids`` (no checks: call :meth:`mergeable` first); returns
        the merged group's id, the smallest of ``ids``."""
        keep = min(ids)
        gone = [gid for gid in ids if gid != keep]
        edges = []
        for gid in gone:
            self.members[keep] |= self.members.pop(gid)
            del self._position[gid]
            for nxt in self._succ.pop(gid):
                self._pred[nxt].discard(gid)
                edges.append((keep, nxt))
            for prev in self._pred.pop(gid):
                self._succ[prev].discard(gid)
                edges.append((prev, keep))
        merged = set(ids)
        for a, b in edges:  # an edge between two merged groups is no edge
            if a not in merged or b not in merged:
                a, b = keep if a in merged else a, keep if b in merged else b
                if b not in self._succ[a]:
                    self._add_edge(a, b)
        for i in self.graph.names(self.members[keep]):
            self.owner[self.graph.index[i]] = keep
        return keep

    def _add_edge(self, a: int, b: int) -> None:
        """Add the edge ``a -> b`` between groups and restore the topological order
        where it breaks it (Pearce-Kelly): the groups ``b`` reaches that sit before
        ``a``, and those reaching ``a`` that sit after ``b``, swap into an order that
        puts the latter first, on the positions they held."""
        self._succ[a].add(b)
        self._pred[b].add(a)
        position = self._position
        low, high = position[b], position[a]
        if low > high:
            return
        forward = self._reach(b, self._succ, lambda t: position[t] <= high)  # a itself: a cycle
        if a in forward:
            raise ValueError(f"merging groups closes a cycle through groups {a} and {b}: check creates_cycle first")
        backward = self._reach(a, self._pred, lambda t: position[t] > low)
        moved = sorted(backward, key=position.get) + sorted(forward, key=position.get)
        for gid, slot in zip(moved, sorted(position[g] for g in moved)):
            position[gid] = slot

    @staticmethod
    def _reach(start: int, edges: dict[int, set[int]], within) -> set[int]:
        """``start`` and the groups reachable from it along ``edges`` through groups
        ``within`` accepts."""
        seen, frontier = {start}, [start]
        while frontier:
            for t in edges[frontier.pop()]:
                if t not in seen and within(t):
                    seen.add(t)
                    frontier.append(t)
        return seen
