"""Plans and their independent validation: :func:`evaluate` and :class:`Plan`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import networkx as nx

from .cost import DEFAULT_MAX_OPS, UNITS, GroupCost, check_max_ops, group_cost, recomputed_flops
from .graph import Graph
from .group import Group
from .hardware import Hardware, load_hardware
from .legality import check_acyclic, check_group, covering_groups, dependencies


@dataclass(frozen=True)
class PlanCost:
    """Modelled cost of a whole plan: per-group costs and their totals.

    Attributes:
        groups: one :class:`GroupCost` per group, in plan (launch) order.
        bytes_read, bytes_written: global-memory traffic, bytes.
        launches: kernel launches.
        flops, recomputed_flops: FLOP the kernels compute, and the part of it that
            recomputes values (modelled), op by op: what an op's kernels compute
            beyond its result once, within a group (a prologue once per tile) and
            over the groups that compute it (each copy after the first); an op
            computed in part (a slice of it is all its readers need) counts none.
        modeled_time_us: Σ launch overhead + max(bytes / bandwidth, FLOP / peak),
            microseconds (modelled: the roofline, the ``time`` objective).
        traffic_time_us: Σ launch overhead + bytes / bandwidth (modelled, the
            memory-only ``traffic`` objective).
        energy_uj: Σ energy of the HBM bytes, on-chip bytes and FLOP, microjoules
            (modelled, the ``energy`` objective).
    """

    groups: tuple[GroupCost, ...]

    @property
    def bytes_read(self) -> int:
        return sum(g.bytes_read for g in self.groups)

    @property
    def bytes_written(self) -> int:
        return sum(g.bytes_written for g in self.groups)

    @property
    def launches(self) -> int:
        return sum(g.launches for g in self.groups)

    @property
    def flops(self) -> int:
        return sum(g.flops for g in self.groups)

    @property
    def recomputed_flops(self) -> int:
        if not self.groups:
            return 0
        total: dict[str, int] = {}  # an op several groups compute counts once over them all
        for g in self.groups:
            for name, n in g.op_flops.items():
                total[name] = total.get(name, 0) + n
        return recomputed_flops(self.groups[0].group.graph, total)

    @property
    def modeled_time_us(self) -> float:
        return sum(g.modeled_time_us for g in self.groups)

    @property
    def traffic_time_us(self) -> float:
        return sum(g.traffic_time_us for g in self.groups)

    @property
    def energy_uj(self) -> float:
        return sum(g.energy_uj for g in self.groups)

    def value(self, objective: str) -> float:
        """The plan's total under ``objective`` (``cost.OBJECTIVES``), in its display
        unit: modelled microseconds, or microjoules for ``energy``."""
        return sum(g.value(objective) for g in self.groups)


def _launch_order(graph: Graph, groups: list[Group]) -> list[Group]:
    """Groups sorted into a topological order of their dependencies (ties by first op)."""
    order = nx.lexicographical_topological_sort(dependencies(graph, groups),
                                                key=lambda k: graph.index[groups[k].ops[0]])
    return [groups[k] for k in order]


def evaluate(graph: Graph, groups: list[list[str]], hardware: str | Hardware = "h100",
             max_ops: int = DEFAULT_MAX_OPS) -> PlanCost:
    """Check ANY plan of ``graph`` and return its modelled cost.

    The single judge of plans: every strategy's plan passes through it. A plan is a
    partition of the ops into groups, except that a recomputable op may be in
    several groups: then each of them computes it, from operands it reads or
    computes, and none writes it (``legality.check_covering``).

    Parameters
    ----------
    graph : Graph
        A loaded graph.
    groups : list of list of str
        Op names per fusion group; composite ops are named by the primitives they
        expand into (``Graph.composites`` lists them).
    hardware : str or Hardware
        A profile name, a profile file, or a :class:`Hardware`.
    max_ops : int
        The cap on non-view ops per group.

    Returns
    -------
    PlanCost
        Totals (bytes read and written, launches, FLOP, modelled and traffic time in
        microseconds, energy in microjoules) and one :class:`~partitioner.cost.GroupCost` per group, in launch order.

    Raises
    ------
    IllegalPlan
        The first rule broken (partition, group rule, budget, cycle): ``.reason``
        is its code (``docs/legality.md``), ``.ops`` the ops involved.
    TypeError
        ``groups`` is not a list of lists of op names (``None``, or one group's
        names given as the plan).
    ValueError
        ``max_ops`` is not an int of at least 1.
    HardwareError
        ``hardware`` is no profile.

    Examples
    --------
    >>> from partitioner import load_graph
    >>> g = load_graph("graphs/mlp_gelu_f16.yaml")
    >>> cost = evaluate(g, [["h:weight_t", "h:matmul", "h", "a"], ["y:weight_t", "y:matmul", "y"]])
    >>> cost.launches, round(cost.modeled_time_us, 2)
    (2, 142.02)
    >>> evaluate(g, [list(g.ops)])
    Traceback (most recent call last):
    ...
    partitioner.errors.IllegalPlan: [contraction.multiple] 'h:matmul' and 'y:matmul' are both contractions and no softmax lies between them
    """
    check_max_ops(max_ops)
    hw = load_hardware(hardware)
    members = covering_groups(graph, groups)
    for group in members:
        check_group(group, hw, max_ops)
    check_acyclic(graph, members)
    return PlanCost(tuple(group_cost(group, hw, max_ops) for group in _launch_order(graph, members)))


@dataclass(frozen=True)
class SolverInfo:
    """How a plan was found.

    Attributes:
        status: ``OPTIMAL`` (proven), ``FEASIBLE`` (time limit; ``gap`` tells how far
            from proven), ``WARM_START`` (the ILP found nothing better than its
            warm start, the cheapest heuristic plan: ``details["warm_start"]``
            names it), ``HEURISTIC`` for the heuristics, ``UNFUSED`` for none.
        wall_s: planning wall time, seconds (measured on this machine).
        bound: a lower bound on the objective of any legal plan, in its display
            unit (microseconds, or microjoules for ``energy``), or ``None``.
        gap: ``(value - bound) / value``, or ``None`` without a bound.
        details: strategy-specific counters (candidates, cuts, ...).
    """

    status: str
    wall_s: float
    bound: float | None = None
    gap: float | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """A validated partition of a graph into fusion groups.

    Attributes:
        graph, hardware, strategy: what was planned, for which GPU, by which strategy.
        groups: lists of op names in launch order.
        cost: the :class:`PlanCost` from :func:`evaluate`: per group, the built
            :class:`~partitioner.group.Group` with its cost and budgets.
        solver: :class:`SolverInfo`.
        max_ops: the per-group op cap the plan was made and priced under.
    """

    graph: Graph
    hardware: Hardware
    strategy: str
    groups: list[list[str]]
    cost: PlanCost
    solver: SolverInfo
    max_ops: int = DEFAULT_MAX_OPS
    objective: str = "time"
    recompute: bool = False  # the ilp could recompute ops (coverings)

    def to_dict(self) -> dict:
        """The plan as JSON-ready data (the CLI's ``--format json`` object)."""
        return {
            "graph": self.graph.name,
            "hardware": self.hardware.name,
            "strategy": self.strategy,
            "max_ops": self.max_ops,
            "objective": self.objective,
            "recompute": self.recompute,
            "groups": [
                {
                    "ops": list(g.ops),
                    "recomputed": self.graph.names(g.group.recomputed),
                    "kind": g.kind,
                    "bytes_read": g.bytes_read,
                    "bytes_written": g.bytes_written,
                    "launches": g.launches,
                    "flops": g.flops,
                    "recomputed_flops": g.recomputed_flops,
                    "modeled_time_us": g.modeled_time_us,
                    "traffic_time_us": g.traffic_time_us,
                    "compute_time_us": g.compute_time_us,
                    "energy_uj": g.energy_uj,
                    "budgets": {
                        name: {"used": getattr(g.budgets, name), "limit": getattr(g.budgets, name + "_limit")}
                        for name in ("shared_memory", "registers", "kernel_params", "ops")
                    },
                    **({"tiling": g.tiling.to_dict()} if g.tiling is not None else {}),
                }
                for g in self.cost.groups
            ],
            "totals": {
                "bytes_read": self.cost.bytes_read,
                "bytes_written": self.cost.bytes_written,
                "launches": self.cost.launches,
                "flops": self.cost.flops,
                "recomputed_flops": self.cost.recomputed_flops,
                "modeled_time_us": self.cost.modeled_time_us,
                "traffic_time_us": self.cost.traffic_time_us,
                "energy_uj": self.cost.energy_uj,
            },
            "solver": {
                "status": self.solver.status,
                "wall_s": self.solver.wall_s,
                "bound": self.solver.bound,
                "bound_unit": UNITS[self.objective],
                "gap": self.solver.gap,
                **self.solver.details,
            },
            "dead_ops": list(self.graph.dead_ops),
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)
