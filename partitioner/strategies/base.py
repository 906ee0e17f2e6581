"""The interface every strategy implements, and the plan assembly they share.

Strategies decide which *compute* ops (every op but views) share a group. A group
is the convex hull of its compute ops, which adds exactly the views that lie
between them; every other view is a free group of its own. This is what
``assemble`` does, so no strategy places views itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

from ..cost import DEFAULT_MAX_OPS
from ..graph import Graph
from ..group import Group
from ..hardware import Hardware

#: progress(phase, best or None, bound or None, elapsed_s) during long solves; best and
#: bound in the objective's display unit (``cost.UNITS``: microseconds, or microjoules).
Progress = Callable[[str, float | None, float | None, float], None]


@dataclass(frozen=True)
class Options:
    """Planning options: the ``time_limit`` work budget in nominal seconds (``None``:
    the strategy's default), the per-group op cap, an optional progress callback,
    the objective the ILP minimises (``cost.OBJECTIVES``), and whether the ILP may
    recompute ops in several groups (``recompute``: plans are then coverings,
    ``legality.check_covering``; partitions otherwise)."""

    time_limit: float | None = None
    max_ops: int = DEFAULT_MAX_OPS
    progress: Progress | None = None
    objective: str = "time"
    recompute: bool = False


class Strategy(ABC):
    """A partitioning strategy. ``plan`` returns groups of op names (compute ops and
    views) and solver information; :func:`partitioner.partition` validates them."""

    name: str

    @abstractmethod
    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        """Groups of op names, plus a dict of ``SolverInfo`` fields (``status``,
        ``bound``, ``gap``, ``details``)."""


def group_of(graph: Graph, compute: int) -> Group | None:
    """The group whose compute ops are ``compute``: their convex hull, or ``None``
    when the hull would take in another compute op (the set is not convex)."""
    hull = graph.convex_hull(compute)
    if (hull ^ compute) & graph.compute_mask:
        return None
    return Group(graph, hull)


def assemble(graph: Graph, computes: list[int], recomputed: list[int] | None = None) -> list[list[str]]:
    """Groups of op names from compute-op bitsets: each hull (less the paths that
    leave the members each recomputes, ``recomputed``: one bitset per group, none
    by default), then each left-over view alone."""
    hulls = [graph.convex_hull(mask, r) for mask, r in zip(computes, recomputed or [0] * len(computes))]
    groups = [graph.names(hull) for hull in hulls]
    covered = 0
    for hull in hulls:
        covered |= hull
    groups += [[name] for name in graph.names(((1 << len(graph.ops)) - 1) & ~covered)]
    return groups
