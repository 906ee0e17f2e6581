"""A local search on an unproven ILP plan: merge its groups or move ops between them while that is cheaper.

When a budget stops the candidate enumeration, the ILP's plan is the best exact
cover of the candidates found (and the heuristics' groups); a group the search did
not reach is missing from it. Wide sibling sets past the op cap are the common case:
40 slices of one tensor, each reduced, need two kernels of 32 and 8 siblings, a set
among 2^40 that no anchor's share of the work reaches. Merging the plan's groups
and moving single ops between neighbouring ones, the most saving move first, finds
such sets from the plan itself (100 such slices: 8 kernels and 16.46 us before the
pass, the optimal 4 and 11.83 us after 7 moves, modelled).

Every merged group is checked as any candidate is (convex, ``legality.is_legal``)
and priced by ``cost.objective``; the pass only lowers the plan's objective, and
its work is counted in groups checked, so the result is the same on any machine.
"""

from __future__ import annotations

from typing import Callable

from ..cost import objective
from ..graph import Graph, bits
from ..group import Group
from ..hardware import Hardware
from ..legality import is_legal
from .candidates import neighbours

#: Groups checked (convexity, legality and cost) before the pass stops: about 0.1 to
#: 0.5 ms each on the 2-core development machine, so at most a few seconds.
MAX_CHECKS = 5_000


def local_search(graph: Graph, hw: Hardware, kind: str, max_ops: int, plan: list[tuple[int, int]],
                 cyclic: Callable[[list[int]], bool]) -> tuple[list[tuple[int, int]], int]:
    """``plan`` (groups as (compute-op bitset, integer objective of ``kind``)) after
    local moves, while one lowers the objective: merging two neighbouring groups (a
    producer and its consumer, or two readers of one storage), or moving one op into
    a group holding a neighbour of it, where every group left is convex and legal
    and the groups depend on each other in no cycle (``cyclic`` of their bitsets:
    convex groups can still form one, through a third); the move saving most first
    (the earliest on a tie). At most :data:`MAX_CHECKS` groups are checked. Returns
    the plan and the number of moves made."""
    adj = neighbours(graph)
    refused: set[tuple[int, int]] = set()  # moves that close a cycle between groups
    priced: dict[int, int | None] = {0: 0}  # the empty group a move may leave costs nothing

    def price(mask: int) -> int | None:
        if mask not in priced:
            if len(priced) > MAX_CHECKS:
                raise _Spent
            priced[mask] = _price(graph, hw, kind, max_ops, mask)
        return priced[mask]

    moves = 0
    try:
        while True:
            best = _best_move(adj, plan, price, refused)
            if best is None:
                break
            _, a, b, new_a, new_b = best
            moved = [plan[k] for k in range(len(plan)) if k not in (a, b)] + \
                [(mask, priced[mask]) for mask in (new_a, new_b) if mask]
            if cyclic([mask for mask, _ in moved]):
                refused.add((new_a, new_b))
                continue
            plan = moved
            moves += 1
    except _Spent:
        pass
    return plan, moves


class _Spent(Exception):
    """The pass has checked :data:`MAX_CHECKS` groups."""


def _best_move(adj: dict[int, int], plan: list[tuple[int, int]], price: Callable[[int], int | None],
               refused: set[tuple[int, int]]) -> tuple | None:
    """(saving, a, b, new group a, new group b) of the most saving merge of groups
    ``a`` and ``b`` (new group a empty) or move of one op of ``a`` into ``b``, but
    for the ``refused`` (new group a, new group b)."""
    best = None
    for a, (mask_a, cost_a) in enumerate(plan):
        for b, (mask_b, cost_b) in enumerate(plan):
            near = [i for i in bits(mask_a) if adj.get(i, 0) & mask_b] if a != b else []
            changes = [(0, mask_a | mask_b)] if near and a < b else []  # the merge, once per pair
            if mask_a & (mask_a - 1):  # a group of one op moves whole: the merge
                changes += [(mask_a ^ 1 << i, mask_b | 1 << i) for i in near]
            for new_a, new_b in changes:
                new_cost_b = price(new_b)
                new_cost_a = price(new_a) if new_cost_b is not None else None
                if new_cost_a is None or new_cost_b is None or (new_a, new_b) in refused:
                    continue
                saved = cost_a + cost_b - new_cost_a - new_cost_b
                if saved > 0 and (best is None or saved > best[0]):
                    best = (saved, a, b, new_a, new_b)
    return best


def _price(graph: Graph, hw: Hardware, kind: str, max_ops: int, mask: int) -> int | None:
    """The objective of the group of compute ops ``mask``, or ``None`` where it is not
    convex or not legal."""
    hull = graph.convex_hull(mask)
    if (hull ^ mask) & graph.compute_mask:
        return None
    group = Group(graph, hull)
    return objective(group, hw, kind) if is_legal(group, hw, max_ops) else None
