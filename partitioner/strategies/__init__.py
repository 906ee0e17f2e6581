"""Strategies behind one interface, and :func:`partition`, which runs one and
validates its plan with :func:`partitioner.evaluate`."""

from __future__ import annotations

import time

from ..cost import DEFAULT_MAX_OPS
from ..graph import Graph
from ..hardware import Hardware, load_hardware
from ..plan import Plan, SolverInfo, evaluate
from .base import Options, Progress, Strategy
from .greedy import Greedy
from .ilp import Ilp
from .inductor import Inductor
from .none import NoFusion
from .tvm import Tvm
from .xla import Xla, XlaFmha

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (NoFusion(), Greedy(), Xla(), XlaFmha(), Tvm(), Inductor(),
                                                      Ilp())}


def partition(graph: Graph, strategy: str = "ilp", hardware: str | Hardware = "h100",
              time_limit: float | None = None, max_ops: int = DEFAULT_MAX_OPS,
              progress: Progress | None = None) -> Plan:
    """Partition ``graph`` into fusion groups with ``strategy`` (a name of :data:`STRATEGIES`:
    ``none``, ``greedy``, ``xla``, ``xla-fmha``, ``tvm``, ``inductor`` or ``ilp``).

    Args:
        graph: from :func:`partitioner.load_graph`.
        strategy: strategy name.
        hardware: profile name (``h100``, ``h200``, ``a100``), profile file, or :class:`Hardware`.
        time_limit: ILP wall-clock limit in seconds (``None``: its default); the best
            plan found, its lower bound and gap are returned when it expires.
        max_ops: cap on non-view ops per group.
        progress: called as ``progress(phase, best_us, bound_us, elapsed_s)`` during long solves.

    Returns:
        A :class:`Plan` that has passed :func:`partitioner.evaluate`.

    Raises:
        KeyError: unknown strategy. HardwareError: unknown hardware.
    """
    if strategy not in STRATEGIES:
        raise KeyError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    hw = load_hardware(hardware)
    start = time.perf_counter()
    groups, info = STRATEGIES[strategy].plan(graph, hw, Options(time_limit, max_ops, progress))
    wall = time.perf_counter() - start
    cost = evaluate(graph, groups, hw, max_ops)
    bound = info.get("bound_us")
    if bound is not None:  # the bound is exact in integers; keep float rounding from showing it above the cost
        bound = min(bound, cost.modeled_time_us)
    solver = SolverInfo(info["status"], wall, bound, info.get("gap"), info.get("details", {}))
    return Plan(graph, hw, strategy, [list(g.ops) for g in cost.groups], cost, solver, max_ops)


def compare(graph: Graph, hardware: str | Hardware = "h100", strategies: tuple[str, ...] = ("none", "greedy", "ilp"),
            time_limit: float | None = None, max_ops: int = DEFAULT_MAX_OPS,
            progress: Progress | None = None) -> list[Plan]:
    """:func:`partition` with each of ``strategies``, run one after another on this
    machine so that their planning wall times are comparable."""
    return [partition(graph, name, hardware, time_limit, max_ops, progress) for name in strategies]
