"""Strategies behind one interface, and :func:`partition`, which runs one and
validates its plan with :func:`partitioner.evaluate`."""

from __future__ import annotations

import gc
import numbers
import threading
import time
from contextlib import contextmanager

from ..cost import DEFAULT_MAX_OPS, OBJECTIVES, check_max_ops
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


#: The largest time limit, nominal seconds (about 32 years): the budget is counted
#: in whole units of work, and near 1e303 seconds their number overflowed a float.
MAX_TIME_LIMIT = 1e9


def time_limit_problem(time_limit) -> str | None:
    """What keeps ``time_limit`` from being a budget, as a phrase ("must be ..."), or
    ``None`` for a number of seconds above 0 and at most :data:`MAX_TIME_LIMIT` (or
    ``None``, no limit)."""
    if time_limit is None:
        return None
    if (isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real)
            or not 0 < time_limit <= MAX_TIME_LIMIT):  # (compares NaN false, and an int past a float's range exactly)
        return f"must be a number of seconds above 0 and at most {MAX_TIME_LIMIT:.0e}"
    return None


def partition(graph: Graph, strategy: str = "ilp", hardware: str | Hardware = "h100",
              time_limit: float | None = None, max_ops: int = DEFAULT_MAX_OPS,
              progress: Progress | None = None, objective: str = "time", recompute: bool = False) -> Plan:
    """Partition ``graph`` into fusion groups with one strategy.

    Parameters
    ----------
    graph : Graph
        From :func:`partitioner.load_graph`.
    strategy : str
        A name of :data:`STRATEGIES`: ``none``, ``greedy``, ``xla``, ``xla-fmha``,
        ``tvm``, ``inductor`` or ``ilp`` (``docs/strategies.md``, ``docs/baselines.md``).
    hardware : str or Hardware
        A profile name (``h100``, ``h200``, ``a100``), a profile file, or a :class:`Hardware`.
    time_limit : float or None
        The ILP's work budget in nominal seconds (``None``: its default, 60): the
        candidate enumeration may do 100,000 units of search work (a state, a hull
        checked, 30 for a legal group) per second of it and
        CP-SAT may spend it in deterministic time, so the same input gives the same
        plan on any machine. When it runs out the best plan found is returned with
        its lower bound, gap and ``details["stopped_by"]``.
    max_ops : int
        The cap on non-view ops per fusion group.
    progress : callable or None
        Called as ``progress(phase, best, bound, elapsed_s)`` during long solves.
    objective : str
        What the ILP minimises (``cost.OBJECTIVES``): ``time``, the modelled
        roofline time (default); ``traffic``, launches and bytes only; or
        ``energy``, modelled joules. Heuristics ignore it; every plan is priced
        under all three.
    recompute : bool
        Let the ILP compute a recomputable op (``Graph.recomputable_mask``: an
        elementwise or layout op two ops read, such as a mask, a RoPE table, or an
        activation a GEMM and a reduction read) in every group that reads it
        instead of writing it once; the plan is then the optimum over coverings as
        well as partitions (``docs/strategies.md``). Off by default: the enumeration grows with every
        group that may take such ops in (Llama 2L: 13,000 candidates to 101,000).

    Returns
    -------
    Plan
        Groups in launch order, each built, checked and priced once
        (``plan.cost.groups``, modelled microseconds and bytes), and the solver's
        status, bound and gap (``plan.solver``); it has passed :func:`partitioner.evaluate`.

    Raises
    ------
    KeyError
        An unknown strategy.
    ValueError
        An unknown objective, a ``time_limit`` that is not a number of seconds in
        (0, :data:`MAX_TIME_LIMIT`], or a ``max_ops`` below 1.
    HardwareError
        An unknown or malformed hardware profile.

    Examples
    --------
    >>> import partitioner
    >>> g = partitioner.load_graph("graphs/mlp_gelu_f16.yaml")
    >>> plan = partition(g, "ilp", "h100")
    >>> plan.groups
    [['h:weight_t', 'h:matmul', 'h', 'a'], ['y:weight_t', 'y:matmul', 'y']]
    >>> plan.solver.status, round(plan.cost.modeled_time_us, 2)
    ('OPTIMAL', 142.02)
    >>> plan.cost.groups[0].kind, plan.cost.groups[0].bytes_written
    ('contraction', 67108864)
    """
    if strategy not in STRATEGIES:
        raise KeyError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    problem = time_limit_problem(time_limit)
    if problem:
        raise ValueError(f"time_limit {problem} or None; got {time_limit!r}")
    check_max_ops(max_ops)
    hw = load_hardware(hardware)
    with _fewer_collections():
        start = time.perf_counter()
        groups, info = STRATEGIES[strategy].plan(graph, hw, Options(time_limit, max_ops, progress, objective,
                                                                    recompute))
        wall = time.perf_counter() - start
        cost = evaluate(graph, groups, hw, max_ops)
    bound = info.get("bound")
    if bound is not None:  # the bound is exact in integers; keep float rounding from showing it above the cost
        bound = min(bound, cost.value(objective))
    solver = SolverInfo(info["status"], wall, bound, info.get("gap"), info.get("details", {}))
    return Plan(graph, hw, strategy, [list(g.ops) for g in cost.groups], cost, solver, max_ops, objective,
                recompute)


#: Allocations between collections of the youngest generation while planning (CPython's
#: default is 700).
PLANNING_GC_THRESHOLD = 100_000


class _FewerCollections:
    """Planning allocates millions of small objects (groups, keys, memo entries) and
    leaves few reference cycles, so CPython's collector, at its default thresholds,
    mostly re-scans the graph and the growing caches: 8-30% of the CPU time of
    planning GPT-2 48L and Phi-2 2L (measured on the 2-core development machine).
    While any thread plans, what existed before the first began (the graph) is frozen
    out of collections, unless the caller froze objects already, and the youngest
    generation is collected every :data:`PLANNING_GC_THRESHOLD` allocations; when the
    last one ends, both are restored (the collector's settings are the process's, so
    overlapping plans share one raise)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.planning = 0
        self.saved: tuple[tuple[int, ...], bool] | None = None

    @contextmanager
    def __call__(self):
        with self.lock:
            if not self.planning:
                thresholds, freeze = gc.get_threshold(), gc.get_freeze_count() == 0
                self.saved = thresholds, freeze
                if freeze:
                    gc.freeze()
                gc.set_threshold(max(thresholds[0], PLANNING_GC_THRESHOLD), *thresholds[1:])
            self.planning += 1
        try:
            yield
        finally:
            with self.lock:
                self.planning -= 1
                if not self.planning:
                    thresholds, freeze = self.saved
                    gc.set_threshold(*thresholds)
                    if freeze:
                        gc.unfreeze()


_fewer_collections = _FewerCollections()


def compare(graph: Graph, hardware: str | Hardware = "h100", strategies: tuple[str, ...] = ("none", "greedy", "ilp"),
            time_limit: float | None = None, max_ops: int = DEFAULT_MAX_OPS,
            progress: Progress | None = None, objective: str = "time", recompute: bool = False) -> list[Plan]:
    """Run :func:`partition` with each of ``strategies``, one after another.

    One after another on this machine, so that their planning wall times compare.

    Parameters
    ----------
    graph : Graph
        From :func:`partitioner.load_graph`.
    hardware : str or Hardware
        As for :func:`partition`.
    strategies : tuple of str
        Names of :data:`STRATEGIES`, in the order to run them.
    time_limit : float or None
        The ILP's wall-clock limit in seconds, as for :func:`partition`.
    max_ops : int
        The cap on non-view ops per fusion group.
    progress : callable or None
        As for :func:`partition`.
    objective : str
        As for :func:`partition`.
    recompute : bool
        As for :func:`partition`.

    Returns
    -------
    list of Plan
        One plan per strategy, in the order given.

    Raises
    ------
    KeyError
        An unknown strategy.
    HardwareError
        An unknown or malformed hardware profile.

    Examples
    --------
    >>> import partitioner
    >>> g = partitioner.load_graph("graphs/mlp_gelu_f16.yaml")
    >>> [(p.strategy, p.cost.launches, round(p.cost.modeled_time_us, 2)) for p in compare(g)]
    [('none', 7, 246.06), ('greedy', 2, 142.02), ('ilp', 2, 142.02)]
    """
    return [partition(graph, name, hardware, time_limit, max_ops, progress, objective, recompute)
            for name in strategies]
