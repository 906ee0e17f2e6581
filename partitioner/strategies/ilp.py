"""The ``ilp`` strategy: exact set partitioning over every legal group, with CP-SAT.

Model: one boolean per candidate group (``candidates.py`` enumerates every legal
group); each compute op is covered by exactly one chosen group; minimise the sum
of the chosen groups' exact integer objectives (``cost.objective``, proportional
to modelled time). A group's cost depends only on the group, so the sum is the
plan's cost and the optimum over complete candidates is the optimum over all
legal plans. Convex groups can still form a cycle between groups; such a cycle is
cut lazily (``Σ x ≤ k - 1`` over its groups) and the model re-solved, which keeps
every bound valid.

The solve is warm-started from the greedy plan (a complete hint, and the
incumbent it has to beat), so it never returns anything costlier. CP-SAT runs on one worker with a fixed seed, which is
deterministic: the same input gives the same plan whenever the solve finishes
within its time limit. (On the graphs in ``graphs/`` one worker proves optimality
as fast as two; CP-SAT's deterministic parallel mode, ``interleave_search``, was
4-5x slower there.)
"""

from __future__ import annotations

import math
import time

import networkx as nx
from ortools.sat.python import cp_model

from .. import attention
from ..cost import objective
from ..graph import Graph
from ..group import Group
from ..hardware import Hardware
from ..legality import hereditary_violation
from .base import Options, Progress, Strategy, assemble
from .candidates import enumerate_candidates
from .greedy import greedy_groups

DEFAULT_TIME_LIMIT_S = 60.0
# Share of the time limit the candidate enumeration may use, and the most candidates
# it may produce (the real graphs of graphs/ need at most ~29,000), so that building
# and solving the model keep their time when a pathological graph cuts it short.
ENUMERATION_SHARE = 0.5
MAX_CANDIDATES = 100_000
WORKERS = 1


def _to_us(value: float, hw: Hardware) -> float:
    """Integer objective (``cost.objective`` units) -> modelled microseconds."""
    return value / hw.launch_bytes.denominator / hw.bandwidth * 1e6


def structural_bound(graph: Graph, hw: Hardware, max_ops: int) -> int:
    """A valid lower bound on any legal plan's integer objective, from structure alone.

    Every read graph input is read once, every output written once, and a tensor
    whose producer and a reader can never share a group is written and read once.
    Launches: every gather or custom op is alone; a group holds one contraction, or
    two only as an attention group, whose pairs are disjoint (at most a maximum
    matching of the attention pairs); and a reduction signature class with a
    reduction outside every attention pair's softmax needs a reduction group of its own.
    """
    g = graph
    bytes_ = 0
    for base in g.inputs:
        if g.storage_readers.get(base):
            bytes_ += g.inputs[base].nbytes
    for name in g.names(g.compute_mask):
        size = g.ops[name].out.nbytes
        readers = g.storage_readers.get(name, 0)
        split = any(
            hereditary_violation(g, g.convex_hull((1 << g.index[name]) | (1 << g.index[r])), max_ops)
            for r in g.names(readers)
        )
        bytes_ += size * (int(name in g.output_storages or split) + int(split))
    classes = g.class_masks
    pairs = attention.pairs(g)
    matched = len(nx.max_weight_matching(nx.Graph([(p.c1, p.c2) for p in pairs]), maxcardinality=True))
    groups = (classes.get("gather", 0) | classes.get("opaque", 0)).bit_count()
    groups += classes.get("contraction", 0).bit_count() - matched
    in_softmax = 0
    for p in pairs:
        in_softmax |= p.middle
    groups += sum(1 for mask in g.reduction_classes.values() if mask & ~in_softmax)
    launch = hw.launch_bytes
    return groups * launch.numerator + bytes_ * launch.denominator


class _Progress(cp_model.CpSolverSolutionCallback):
    """Forwards incumbents and bounds to a :data:`Progress` callback, at most twice a second."""

    def __init__(self, report: Progress | None, hw: Hardware, start: float, best: int, phase: str = "solving"):
        super().__init__()
        self.report, self.hw, self.start, self.phase = report, hw, start, phase
        self.best, self.bound, self.last = best, -math.inf, 0.0

    def on_solution_callback(self) -> None:
        self.best = min(self.best, int(self.ObjectiveValue()))
        self.tick()

    def on_bound(self, bound: float) -> None:
        # every candidate costs >= 0, so a negative early bound says nothing
        self.bound = max(self.bound, bound, 0.0)
        self.tick()

    def tick(self) -> None:
        now = time.perf_counter()
        if self.report is not None and now - self.last >= 0.5:
            self.last = now
            bound = _to_us(self.bound, self.hw) if self.bound > -math.inf else None
            self.report(self.phase, _to_us(self.best, self.hw), bound, now - self.start)


def _find_cycle(graph: Graph, chosen: list[int]) -> list[int] | None:
    """Candidate positions (into ``chosen``) forming a cycle between groups, if any."""
    groups = assemble(graph, chosen)
    owner = {name: k for k, ops in enumerate(groups) for name in ops}
    quotient = nx.DiGraph()
    quotient.add_edges_from((owner[u], owner[v]) for u, v in graph.dag.edges if owner[u] != owner[v])
    try:
        cycle = nx.find_cycle(quotient)
    except nx.NetworkXNoCycle:
        return None
    return sorted({k for k, _ in cycle if k < len(chosen)})


class Ilp(Strategy):
    """Exact set partitioning (see module docstring)."""

    name = "ilp"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        start = time.perf_counter()
        limit = DEFAULT_TIME_LIMIT_S if options.time_limit is None else options.time_limit
        deadline = start + limit
        warm = greedy_groups(graph, hw, options.max_ops)
        warm_cost = sum(objective(Group(graph, graph.convex_hull(mask)), hw) for mask in warm)
        enumerating = _Progress(options.progress, hw, start, warm_cost, "enumerating")
        cands = enumerate_candidates(graph, hw, options.max_ops, deadline=start + ENUMERATION_SHARE * limit,
                                     max_candidates=MAX_CANDIDATES, tick=lambda found: enumerating.tick())
        masks = list(cands.masks)
        costs = [objective(group, hw) for group in cands.groups]
        position = {mask: k for k, mask in enumerate(masks)}
        for mask in warm:
            if mask not in position:  # only when the enumeration stopped early
                position[mask] = len(masks)
                masks.append(mask)
                costs.append(objective(Group(graph, graph.convex_hull(mask)), hw))
        best = [position[mask] for mask in warm]
        best_cost = warm_cost
        bound = structural_bound(graph, hw, options.max_ops)

        model = cp_model.CpModel()
        x = [model.NewBoolVar(f"g{k}") for k in range(len(masks))]
        covers: dict[int, list[int]] = {}
        for k, mask in enumerate(masks):
            while mask:
                low = mask & -mask
                covers.setdefault(low.bit_length() - 1, []).append(k)
                mask ^= low
        for i in sorted(covers):
            model.AddExactlyOne(x[k] for k in covers[i])
        model.Minimize(sum(c * v for c, v in zip(costs, x)))

        status, cuts, solves = "FEASIBLE", 0, 0
        while time.perf_counter() < deadline:
            model.ClearHints()
            if cands.complete:
                # a complete hint; over a cut-short candidate list, where greedy's groups were
                # added by hand, the hint slowed CP-SAT down tenfold (measured), so none is given
                chosen_best = set(best)
                for k, var in enumerate(x):
                    model.AddHint(var, k in chosen_best)
            solver = cp_model.CpSolver()
            solver.parameters.max_time_in_seconds = max(0.1, deadline - time.perf_counter())
            solver.parameters.num_workers = WORKERS
            solver.parameters.random_seed = 0
            # Presolve costs 5-8x the search on these pure set-partitioning models
            # (measured on graphs/: Llama 2L 5.3 s -> 0.6 s, GPT-2 12L 1.7 s -> 0.3 s).
            solver.parameters.cp_model_presolve = False
            callback = _Progress(options.progress, hw, start, best_cost)
            solver.best_bound_callback = callback.on_bound
            result = solver.Solve(model, callback)
            solves += 1
            if result == cp_model.MODEL_INVALID:
                raise RuntimeError(f"CP-SAT rejected the model: {model.Validate()}")
            if cands.complete and result != cp_model.INFEASIBLE:
                # valid even without a solution: every legal plan is a solution of this model
                bound = max(bound, math.ceil(solver.BestObjectiveBound() - 1e-6))
            if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                break
            chosen = [k for k in range(len(masks)) if solver.Value(x[k])]
            cycle = _find_cycle(graph, [masks[k] for k in chosen])
            if cycle is not None:
                model.Add(sum(x[chosen[p]] for p in cycle) <= len(cycle) - 1)
                cuts += 1
                continue
            cost = sum(costs[k] for k in chosen)
            if cost < best_cost:
                best, best_cost = chosen, cost
            if result == cp_model.OPTIMAL and cands.complete:
                status = "OPTIMAL"
            break
        if status != "OPTIMAL" and best_cost == warm_cost:
            status = "GREEDY"
        bound = min(bound, best_cost)
        bound_us = _to_us(bound, hw)
        details = {
            "candidates": len(cands.masks),
            "enumeration_complete": cands.complete,
            "enumeration_s": round(cands.seconds, 3),
            "cycle_cuts": cuts,
            "solves": solves,
        }
        groups = assemble(graph, [masks[k] for k in best])
        gap = 0.0 if best_cost == 0 else (best_cost - bound) / best_cost
        return groups, {"status": status, "bound_us": bound_us, "gap": gap, "details": details}
