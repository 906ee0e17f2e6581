"""The ``ilp`` strategy: exact set partitioning over every legal group, with CP-SAT.

Model: one boolean per candidate group (``candidates.py`` enumerates every legal
group, but those a free prologue dominates, which no optimal plan needs); each
compute op is covered by exactly one chosen group; minimise the sum
of the chosen groups' exact integer objectives (``cost.objective``: modelled time
by default, or traffic time, or energy). A group's cost depends only on the group, so the sum is the
plan's cost and the optimum over complete candidates is the optimum over all
legal plans. Convex groups can still form a cycle between groups; such a cycle is
cut lazily (``Σ x ≤ k - 1`` over its groups) and the model re-solved, which keeps
every bound valid.

Recomputation (``Options.recompute``): a candidate may recompute members that other
groups compute too (``Candidates.recomputed``). Which ops of the graph inputs alone
(``Graph.input_derived_mask``) a plan recomputes is one of a few sets
(:func:`scenarios`); for each the model is the exact cover above, of the other
ops, by the candidates that set allows (:func:`allows`), and the plan is the
cheapest over them. Any other recomputable op ``i`` is decided inside the model,
by a boolean ``r_i`` (no group writes it): the candidates that compute it once
cover it exactly when ``r_i`` is false (``Σ x + r_i = 1``), those that recompute
it need ``r_i``, and those that read it from memory need ``not r_i``
(``docs/strategies.md`` proves it exact over every legal covering).

Decomposition: the candidates fall into the connected components of their overlap
(two are linked when they share an op). No candidate spans two components, so each
is covered on its own, its optimum and bound add up to the plan's, and components
with the same structure and costs (repeated layers, after relabelling their ops)
are solved once. A cycle cut that runs through several components merges them.

Every heuristic's plan (greedy, xla, xla-fmha, tvm, inductor) enters the model: its
groups are candidates even when the enumeration stopped before finding them, and
the cheapest plan under the objective warm-starts each solve (a complete hint, and
the incumbent it has to beat), so the plan is never costlier than any heuristic's.
They are computed only once the enumeration has done about the work they cost
(:data:`HEURISTIC_WORK_PER_OP`), or stopped unfinished; a graph enumerated sooner
holds the groups an optimal plan needs among its candidates already, starts from
one group per op, and falls back on them only if a solve ends unproven. Every
budget counts work, not seconds: search states in the enumeration, CP-SAT's
deterministic time in the solve, on one worker with a fixed seed. The same input
and options give the same plan, status and bound on any machine under any load.
(On the graphs in ``graphs/`` one worker proves optimality as fast as two;
CP-SAT's deterministic parallel mode, ``interleave_search``, was 4-5x slower there.)
"""

from __future__ import annotations

import functools
import math
import operator
import time
from dataclasses import dataclass, field, replace

import networkx as nx
from networkx.utils import UnionFind
from ortools.sat.python import cp_model

from .. import attention, horizontal
from ..cost import display_value, flop_unit, flops_once, objective
from ..errors import SizeError
from ..graph import Graph, bits
from ..group import Group
from ..hardware import Hardware
from ..legality import covering_groups, dependencies, is_legal
from ..ops import ALONE_CLASSES
from .base import Options, Progress, Strategy, assemble
from .candidates import STOPPED_BY, enumerate_candidates
from .conflicts import Conflicts, Exclusive, exclusive_ops
from .greedy import greedy_groups
from .inductor import Inductor
from .local_search import local_search
from .tvm import Tvm
from .xla import Xla, XlaFmha

DEFAULT_TIME_LIMIT_S = 60.0
# The time limit is a work budget, never read off a clock, so that the same input gives
# the same plan and status on any machine under any load: the enumeration may do
# WORK_PER_S units of search work (``candidates.CANDIDATE_WORK``) per second of it, and
# CP-SAT may spend the whole limit in its deterministic time (its own
# machine-independent work measure, about a second each on this project's machine).
# WORK_PER_S is about this machine's rate (2-core development machine: 75,000-165,000
# units a second on the corpus, the ladder and 14 sibling slices).
WORK_PER_S = 100_000
# The most candidates the enumeration may produce (the real graphs of graphs/ need at
# most ~29,000; a full 32-layer Llama 202,100, ONNX Inception-v2 68,262), so that a
# pathological graph stays under 2 GB: where the candidates form one part of the model
# CP-SAT holds about 4 kB of each (an unrolled 2-layer LSTM, measured peak: 2.63 GB at
# 490,616 candidates, 1.67 GB at this cap, the same plan).
MAX_CANDIDATES = 300_000
WORKERS = 1
# The heuristics' plans cost about this much search work per op of the graph (GPT-2 48L:
# 5.7 CPU s for its 4,290 ops, at about 10 us a unit). The enumeration runs that far
# before computing them, ski-rental style: a graph it finishes sooner never pays for
# them (one group per op is then a complete warm start), one it does not pays at most
# twice, and there they may prove the plan at once (the structural bound).
HEURISTIC_WORK_PER_OP = 130
# Solving one scenario of recomputation costs about this much CPU time per candidate
# it allows besides CP-SAT's own (building its parts, keys and models: 1.7 us on Llama
# 2L, this machine), charged to the solve's deterministic budget so that a graph with
# many scenarios stops at its --time-limit like any other solve. (A scenario whose
# candidates leave an op uncovered is dropped for the price of a pass over the classes
# of candidates, too little to charge.)
SCENARIO_WORK_S = 2e-6
#: CP-SAT rejects a linear objective whose terms could sum past 2^63.
OBJECTIVE_LIMIT = 1 << 62


def structural_bound(graph: Graph, hw: Hardware, max_ops: int, kind: str = "time", recompute: bool = False,
                     exclusive: Exclusive | None = None) -> int:
    """A valid lower bound on any legal plan's integer objective of ``kind``, from
    structure alone: launches and bytes (below) for ``traffic``; for ``time``, the
    launches plus the larger of those bytes and the FLOP of every contraction at
    peak (each computes its result once, whatever its group; a plan's sum of
    per-group maxima is at least the maximum of the sums); for ``energy``, those
    bytes at the HBM energy plus the contractions' FLOP at theirs.

    Launches, counted over the ops with a non-empty result (a group of empty results
    launches nothing): every gather, cumsum or custom op is alone; a group holds one
    contraction, or horizontal siblings of one class (``horizontal.sibling_classes``:
    each class counts as one), or two only as an attention group, whose pairs are
    disjoint and each cover at most two classes (so they save at most a maximum
    matching of the attention pairs); a reduction signature class with a reduction
    outside every attention pair's softmax needs a reduction group of its own; and a
    group holds at most ``max_ops`` compute ops. Call the larger count ``k``.

    Bytes: every graph input is read, at least the bytes its readers with a
    non-empty result touch together (``Graph.all_touched``), every
    output written once, plus the
    larger of two counts of what crosses between groups. (a) A tensor whose producer
    and a reader can never share a group (``conflicts.Conflicts.conflict``) is
    written and read once (the read as above), where both results are non-empty
    (each group launches and moves its bytes) and, with ``recompute``, the producer
    is not recomputable (the reader's group could recompute it). (b) Link the
    groups producer to reader: the groups meeting one component of the compute ops
    (linked producer to reader, :func:`_components`) are linked, so the groups form
    at most ``components`` linked sets (a group may join components: siblings of
    one input), and a linked set of ``k_s`` groups has at least ``k_s - 1``
    producer-to-consumer pairs, each a read of a distinct (tensor, group) pair. So
    there are at least ``k - components`` reads of at least the least-touched read tensor, of at
    least ``ceil((k - components) / most readers)`` distinct tensors, each written
    once (less those already counted as outputs).
    With ``recompute`` a plan may be a covering: groups that both recompute an op
    pass nothing between them, so such an op links nothing in the components (a
    link from an op computed once still joins its group to every group holding a
    reader, each of which reads it); and where an op may be recomputed from what
    other groups write (not ``Graph.input_derived_mask``), its copies read those
    tensors, so a tensor may be read by more groups than it has readers, and the
    distinct tensors are not counted.

    With ``exclusive`` (``conflicts.exclusive_ops``: ops no two of which share a
    group), the launches are at least its size, and the bytes at least what its
    members' groups move (``conflicts.member_bytes``: operand reads, each of a
    storage of its ``chained``, and the members' results they write) plus every
    graph input off those storages read and every other output written, once;
    under ``time``, those bytes and the contractions' FLOP bound each member's
    group's larger term (:func:`_exclusive_time`).
    """
    g = graph
    # an input only empty results read may be read by no launched group
    reads = sum(g.all_touched(base, g.nonempty_mask) for base in g.inputs)
    split_bytes = outputs = 0
    recomputable = g.recomputable_mask if recompute else 0
    tests = Conflicts(g, max_ops, recompute)
    # a reader of an empty result may sit in a group that reads nothing, and a
    # reader's group may recompute a recomputable value instead of reading it
    able = set(bits(g.nonempty_mask & ~recomputable))  # a set: a graph-wide shift per op is quadratic
    for name in g.names(g.compute_mask):
        i, size = g.index[name], g.ops[name].out.nbytes
        readers = g.storage_readers.get(name, 0) & g.nonempty_mask if i in able else 0
        split = any(tests.conflict(i, g.index[r]) for r in g.names(readers))
        outputs += size * (name in g.output_storages)
        split_bytes += size * int(name in g.output_storages or split) + g.least_touched(name, readers) * int(split)
    launches = _launch_bound(g, max_ops)
    if exclusive is not None:
        launches = max(launches, len(exclusive.ops))
    crossing = launches - _components(g, recomputable)
    # copies of a recomputed op read its operands, so a tensor may be read by more
    # groups than it has readers: the count of distinct tensors no longer holds
    copies = recompute and g.recomputable_mask & ~g.input_derived_mask
    chain_bytes = outputs
    if crossing > 0:
        read = [name for name in g.names(g.compute_mask) if g.storage_readers.get(name)]
        smallest = min(g.ops[name].out.nbytes for name in read)
        least_read = min(g.least_touched(name) for name in read)
        most_readers = max(g.storage_readers[name].bit_count() for name in read)
        counted = sum(1 for name in read if name in g.output_storages)
        written = 0 if copies else max(0, -(-crossing // most_readers) - counted)
        chain_bytes += crossing * least_read + written * smallest
    moved = reads + max(split_bytes, chain_bytes)
    rest = 0  # with exclusive: the bytes its members' groups need not move (inputs off their reads, other outputs)
    if exclusive is not None:
        rest = sum(g.all_touched(base, g.nonempty_mask) for base in g.inputs if base not in exclusive.chained)
        rest += sum(g.ops[name].out.nbytes for name in g.output_storages
                    if name in g.ops and name not in exclusive.written)
        moved = max(moved, exclusive.bytes + rest)
    contractions = [g.ops[n] for n in g.names(g.class_masks.get("contraction", 0))]
    flops = [(op, flops_once(g, op)) for op in contractions]
    if kind == "energy":
        return moved * hw.hbm_energy_fj + sum(f * hw.flop_energy_fj(*flop_unit(op)) for op, f in flops)
    launch = hw.launch_bytes
    memory = moved * launch.denominator
    if kind == "time":  # floor: each group's FLOP term is rounded up, never down
        memory = max(memory, math.floor(sum(f * hw.flop_units(*flop_unit(op)) for op, f in flops)))
        if exclusive is not None:
            memory = max(memory, _exclusive_time(g, hw, exclusive, rest))
    return launches * launch.numerator + memory


def _exclusive_time(g: Graph, hw: Hardware, exclusive: Exclusive, rest: int) -> int:
    """A lower bound on the sum of every group's larger term (bytes or FLOP, in time
    units) from the groups of ``exclusive``'s members, one each. A member's group's
    term is at least ``a = max(r, f)``: the bytes ``r`` it must move and, for a
    contraction, its FLOP ``f`` (computed at least once; rounded up, as the group's
    FLOP term is, which holds them). The FLOP of the others are rounded down, as
    several may share a group. What else
    the plan moves or computes lands in some group: the ``rest`` bytes (read or
    written once each) and the FLOP of the contractions that are not members. In a
    member's group, bytes ``e`` and FLOP ``x`` on top add ``max(r + e, f + x) - a >=
    max(e - (a - r), x - (a - f))``, and in any other group all of them, so the sum
    is at least ``Σa`` plus the larger of the bytes less ``Σ(a - r)`` and the FLOP
    less ``Σ(a - f)``; the latter over the members whose groups can hold a
    contraction at all (not a reduction outside every attention softmax, nor an op
    that fuses with no contraction: ``legality.hereditary_violation``)."""
    denominator = hw.launch_bytes.denominator
    members = dict(exclusive.moved)
    in_softmax = 0
    for pair in attention.pairs(g):
        in_softmax |= pair.middle
    larger = extra = byte_room = flop_room = 0
    for c in g.names(g.class_masks.get("contraction", 0)):
        op = g.ops[c]
        flops = math.floor(flops_once(g, op) * hw.flop_units(*flop_unit(op)))
        if g.index[c] not in members:
            extra += flops
    for u, read in exclusive.moved:
        op = g.ops[g.order[u]]
        f = math.ceil(flops_once(g, op) * hw.flop_units(*flop_unit(op))) if op.op_class == "contraction" else 0
        r = read * denominator
        larger += max(r, f)
        byte_room += max(r, f) - r
        if op.op_class in ("contraction", "elementwise", "broadcast", "injective") or in_softmax >> u & 1:
            flop_room += max(r, f) - f
    return larger + max(0, rest * denominator - byte_room, extra - flop_room)


def _launch_bound(g: Graph, max_ops: int) -> int:
    """Launches every legal plan makes (see :func:`structural_bound`)."""
    launching = g.nonempty_mask  # a group of empty results only launches nothing
    classes = {name: mask & launching for name, mask in g.class_masks.items()}
    pairs = [p for p in attention.pairs(g) if (1 << g.index[p.c1] | 1 << g.index[p.c2]) & launching]
    matched = len(nx.max_weight_matching(nx.Graph([(p.c1, p.c2) for p in pairs]), maxcardinality=True))
    groups = sum(classes.get(c, 0) for c in ALONE_CLASSES).bit_count()
    # horizontal siblings may share a group: count each class once (a matching's pairs
    # still save at most one launch each: each covers at most two classes)
    contractions = classes.get("contraction", 0)
    for siblings in horizontal.sibling_classes(g):
        if siblings & contractions:
            contractions &= ~siblings
            contractions |= siblings & -siblings
    groups += contractions.bit_count() - matched
    in_softmax = 0
    for p in pairs:
        in_softmax |= p.middle
    groups += sum(1 for mask in g.reduction_classes.values() if mask & launching & ~in_softmax)
    return max(groups, -(-launching.bit_count() // max_ops))


def _components(g: Graph, recomputable: int) -> int:
    """Connected components of the compute ops, linked producer to reader (through
    views): groups in different components pass nothing between them. Ops that only
    read one graph input, or a view of it, are not linked: nothing crosses there. Nor
    is an op of ``recomputable`` to its readers: groups that share it by recomputing
    it pass nothing between them."""
    links = nx.Graph()
    links.add_nodes_from(g.names(g.compute_mask))
    for name in g.names(g.compute_mask & ~recomputable):
        links.add_edges_from((name, reader) for reader in g.names(g.storage_readers.get(name, 0)))
    return nx.number_connected_components(links)


def heuristic_plans(graph: Graph, hw: Hardware, options: Options) -> dict[str, list[int]]:
    """Each heuristic strategy's plan as compute-op bitsets, one per group that
    launches or holds a compute op (views alone are placed by ``assemble``); a plan
    with a group that is not convex or not legal is left out (a baseline's fault must
    never become the ILP's plan; ``partition`` of that baseline reports it)."""
    plans = {"greedy": greedy_groups(graph, hw, options.max_ops)}
    for strategy in (Xla(), XlaFmha(), Tvm(), Inductor()):
        plans[strategy.name] = _compute_masks(graph, strategy.plan(graph, hw, options)[0])
    decided: dict[tuple, bool] = {}  # Group.signature -> legal (convex groups: the signature decides)

    def legal(mask: int) -> bool:
        hull = graph.convex_hull(mask)
        if (hull ^ mask) & graph.compute_mask:
            return False
        group = Group(graph, hull)
        if group.signature not in decided:
            decided[group.signature] = is_legal(group, hw, options.max_ops)
        return decided[group.signature]

    return {name: masks for name, masks in plans.items() if all(legal(m) for m in masks)}


def _compute_masks(graph: Graph, groups: list[list[str]]) -> list[int]:
    """A plan's groups as compute-op bitsets, less those of views alone (``assemble``
    places views)."""
    masks = [graph.mask(n for n in ops if not graph.ops[n].is_view) for ops in groups]
    return [m for m in masks if m]


def _objective_unit(graph: Graph, hw: Hardware, costs: list[int]) -> int:
    """The largest whole number every cost of one model is a multiple of, which CP-SAT
    sums costs in (exact: the same argmin, the bound times it). Energies are in
    femtojoules, and the built-in profiles' are multiples of 50 (h100: 31,200 a HBM
    byte, 750 a tensor-core FLOP), which brings Phi-2 2L's part of 82,744 candidates
    from 2^64 under 2^59.

    Raises
    ------
    SizeError
        CP-SAT cannot sum the costs in that unit in 64 bits (it rejects a model whose
        objective could overflow).
    """
    unit = math.gcd(*costs) or 1
    total = sum(costs) // unit
    if total >= OBJECTIVE_LIMIT:
        raise SizeError(f"{graph.path or graph.name}: the exact integer objective over {len(costs):,} candidate "
                        f"groups sums to at least 2^{total.bit_length() - 1}, past the solver's limit of 2^62: the "
                        f"tensor bytes and the launch cost of hardware profile '{hw.name}' (or its energies, under "
                        "--objective energy) are too large for the exact ilp; plan with a heuristic alone (--strategy "
                        "greedy, also with --explain; --report and --compare run the ilp too)")
    return unit


class _Progress(cp_model.CpSolverSolutionCallback):
    """Forwards incumbents and bounds to a :data:`Progress` callback, at most twice a
    second. One part's objective is shown on top of ``offset`` (the other parts'
    best plans) and its bound on top of ``bound_offset``."""

    def __init__(self, report: Progress | None, hw: Hardware, kind: str, start: float, best: int | None, phase: str,
                 offset: int = 0, bound_offset: int = 0, unit: int = 1):
        super().__init__()
        self.report, self.hw, self.kind, self.start, self.phase = report, hw, kind, start, phase
        self.unit = unit  # the model's objective is in this many of the objective's units
        self.best, self.bound, self.last = best, -math.inf, 0.0
        self.offset, self.bound_offset = offset, bound_offset

    def on_solution_callback(self) -> None:
        found = round(self.ObjectiveValue()) * self.unit
        self.best = found if self.best is None else min(self.best, found)
        self.tick()

    def on_bound(self, bound: float) -> None:
        # every candidate costs >= 0, so a negative early bound says nothing
        self.bound = max(self.bound, bound * self.unit, 0.0)
        self.tick()

    def tick(self) -> None:
        now = time.perf_counter()
        if self.report is not None and now - self.last >= 0.5:
            self.last = now
            shown = self.bound + self.bound_offset
            bound = display_value(shown, self.hw, self.kind) if self.bound > -math.inf else None
            best = None if self.best is None else display_value(self.best + self.offset, self.hw, self.kind)
            self.report(self.phase, best, bound, now - self.start)


def _find_cycle(graph: Graph, chosen: list[int], recomputed: list[int]) -> list[int] | None:
    """Candidate positions (into ``chosen``, whose members ``recomputed`` are
    recomputed) forming a cycle between groups, if any."""
    members = covering_groups(graph, assemble(graph, chosen, recomputed))
    try:
        cycle = nx.find_cycle(dependencies(graph, members))
    except nx.NetworkXNoCycle:
        return None
    return sorted({k for k, _ in cycle if k < len(chosen)})


def overlap_components(masks: list[int]) -> list[list[int]]:
    """Candidate positions grouped by the connected components of the candidates'
    overlap (two candidates are linked when they share an op), in order of each
    component's first op. No candidate spans two components, so each component's
    exact cover can be chosen on its own and the plan's cost is their sum."""
    ops = UnionFind()
    firsts = [(mask & -mask).bit_length() - 1 for mask in masks]
    spans: dict[int, int] = {}  # first op -> the ops of every candidate starting there, all linked through it
    for mask, first in zip(masks, firsts):
        spans[first] = spans.get(first, 0) | mask
    for first, span in spans.items():
        ops.union(first, *bits(span ^ (1 << first)))
    roots = {first: ops[first] for first in spans}
    parts: dict[int, list[int]] = {}
    for k, first in enumerate(firsts):
        parts.setdefault(roots[first], []).append(k)
    # a part's first op is the first op of one of its candidates
    return sorted(parts.values(), key=lambda part: min(firsts[k] for k in part))


@dataclass
class _Part:
    """One overlap component: its candidates (positions, sorted by their ops), the
    cycle cuts it carries, and its last solve."""

    members: list[int]
    cuts: list[list[int]] = field(default_factory=list)
    chosen: list[int] | None = None
    cost: int = 0
    bound: int = 0
    optimal: bool = False
    first: int | None = None  # the lowest op position its candidates hold (_Solver.first)


@dataclass
class _Reusable:
    """A solved part (of ``solver``'s candidates) that a part of the same key may
    reuse: its solution as positions into its members, its bound, whether proven;
    and its :meth:`_Solver.key`, computed when first compared."""

    solver: "_Solver"
    part: _Part
    solved: tuple[list[int], int, bool]
    key: tuple | None = None


class _Solver:
    """Exact cover of each part with CP-SAT (see the module docstring), parts with the
    same structure and costs solved once, under one deterministic-time budget.
    ``copies`` are, per candidate, the members it recomputes from their operands
    (not ``Graph.input_derived_mask``), and ``reads`` the ops some candidate so
    recomputes that it reads from memory."""

    def __init__(self, graph: Graph, hw: Hardware, kind: str, masks: list[int], costs: list[int], hint: set[int],
                 use_hint: bool, limit: float, progress: Progress | None, start: float, memo: dict,
                 copies: list[int], reads: list[int]):
        self.graph, self.hw, self.kind, self.masks, self.costs = graph, hw, kind, masks, costs
        self.copies, self.reads = copies, reads
        self.hint, self.use_hint, self.progress, self.start = hint, use_hint, progress, start
        self.budget = limit  # deterministic seconds left
        self.solves = self.reused = 0
        # costs_key -> the parts solved with those costs, each reusable by a part of the
        # same key; shared by the scenarios of a solve
        self.memo: dict[tuple, list[_Reusable]] = memo
        self.stopped = False

    def key(self, part: _Part) -> tuple:
        """The part's structure relabelled to local op positions, with its costs: two
        parts with the same key have the same exact covers at the same costs (a part
        without cuts)."""
        union = 0
        for k in part.members:
            union |= self.masks[k]
        local = {i: 1 << n for n, i in enumerate(bits(union))}
        return tuple((sum(local[i] for i in bits(self.masks[k])), self.costs[k],
                      sum(local[i] for i in bits(self.copies[k])), sum(local[i] for i in bits(self.reads[k])))
                     for k in part.members)

    def solve(self, part: _Part, offset: int, bound_offset: int, phase: str) -> None:
        """Sets ``part.chosen``/``cost``/``bound``/``optimal``; never worse than the hint."""
        costs = None if part.cuts else self.costs_key(part)
        reused = self.reuse(part, costs)
        if reused is not None:
            local, bound, optimal = reused
            part.chosen = [part.members[p] for p in local]
            part.cost, part.bound, part.optimal = sum(self.costs[k] for k in part.chosen), bound, optimal
            self.reused += 1
            return
        hinted = [k for k in part.members if k in self.hint]
        hint_cost = sum(self.costs[k] for k in hinted) if hinted else None
        # a part the hint does not cover (a scenario of recomputation) has no plan yet
        part.chosen, part.cost, part.bound, part.optimal = (hinted, hint_cost, 0, False) if hinted else \
            (None, math.inf, 0, False)
        if self.budget > 0:
            self._cp_sat(part, hint_cost, offset, bound_offset, phase)
        if costs is not None and part.chosen is not None:
            position = {k: p for p, k in enumerate(part.members)}
            solved = ([position[k] for k in part.chosen], part.bound, part.optimal)
            self.memo.setdefault(costs, []).append(_Reusable(self, part, solved))

    def costs_key(self, part: _Part) -> tuple:
        """A projection of :meth:`key` (the part's size and costs), cheap to compute."""
        return len(part.members), tuple([self.costs[k] for k in part.members])

    def reuse(self, part: _Part, costs: tuple | None) -> tuple[list[int], int, bool] | None:
        """The solution of an earlier part of the same key, as positions into its
        members with its bound and whether it is optimal; None if there is none or
        the part has cuts (``costs`` None; else its :meth:`costs_key`). Only parts of
        the same costs are compared: first whether this one is a translate of one of
        them (a repeated layer's part usually is: one pass of shifts), then by
        :meth:`key`, which costs a pass over every member's ops (3.4 of Llama 32L's
        15.6 s of planning, profiled, when every part was keyed)."""
        earlier = self.memo.get(costs, []) if costs is not None else []
        for other in earlier:
            if self.translates(part, other):
                return other.solved
        if not earlier:
            return None
        key = self.key(part)
        for other in earlier:
            if other.key is None:
                other.key = other.solver.key(other.part)
            if other.key == key:
                return other.solved
        return None

    def translates(self, part: _Part, other: _Reusable) -> bool:
        """Whether ``part`` is ``other``'s part with every op moved by one shift of
        op positions, member by member (ops, copies, reads): then their keys are
        equal, since the shift keeps the order the key relabels by."""
        theirs, solver = other.part.members, other.solver
        mine, low = self.first(part), solver.first(other.part)
        shift = mine - low
        if shift < 0:
            return solver.translates(other.part, _Reusable(self, part, other.solved))
        # masks compared shifted down to their part's first op: no member holds an op
        # below it, and a small result costs a shift, where shifting up costs the graph's
        # width per candidate (copies and reads are mostly empty; reads may lie below)
        return all(self.masks[k] >> mine == solver.masks[j] >> low and self.copies[k] == solver.copies[j] << shift
                   and self.reads[k] == solver.reads[j] << shift for k, j in zip(part.members, theirs))

    def first(self, part: _Part) -> int:
        """The lowest op position the part's candidates hold, computed once per part
        (finding a bitset's lowest bit costs the graph's width)."""
        if part.first is None:
            part.first = min((self.masks[k] & -self.masks[k]).bit_length() for k in part.members) - 1
        return part.first

    def _cp_sat(self, part: _Part, hint_cost: int | None, offset: int, bound_offset: int, phase: str) -> None:
        # Built through the model's proto: the Python wrappers cost 2-3 us a variable, a
        # literal, a hint or an objective term, which on a part of 51,596 candidates and
        # 991,213 literals (Phi-2 2L) came to 0.4 s, a third as much as CP-SAT's solve.
        model = cp_model.CpModel()
        proto = model.proto
        n = len(part.members)
        for _ in range(n):  # candidate part.members[v] is variable v
            proto.variables.add().domain.extend((0, 1))
        covers: dict[int, list[int]] = {}  # op -> the candidates that compute it once (or write it)
        copies: dict[int, list[int]] = {}  # op -> the candidates that recompute it
        reads: dict[int, list[int]] = {}  # op -> the candidates that read it from memory
        for v, k in enumerate(part.members):
            for i in bits(self.masks[k] & ~self.copies[k]):
                covers.setdefault(i, []).append(v)
            for i in bits(self.copies[k]):
                copies.setdefault(i, []).append(v)
            for i in bits(self.reads[k]):
                reads.setdefault(i, []).append(v)
        recomputed = []  # per op some candidate recomputes, the variable "no group writes it"
        for i in sorted(covers.keys() | copies.keys()):
            literals = covers.get(i, [])
            if i in copies:  # computed once, or in copies only
                f = len(proto.variables)
                proto.variables.add().domain.extend((0, 1))
                recomputed.append(f)
                literals = literals + [f]
                var = model.get_bool_var_from_proto_index(f)
                for v in copies[i]:
                    model.add_implication(model.get_bool_var_from_proto_index(v), var)
                for v in reads.get(i, ()):  # a value no group writes cannot be read
                    model.add_implication(model.get_bool_var_from_proto_index(v), var.Not())
            proto.constraints.add().exactly_one.literals.extend(literals)
        position = {k: v for v, k in enumerate(part.members)}
        for cut in part.cuts:
            model.add(sum(model.get_bool_var_from_proto_index(position[k]) for k in cut) <= len(cut) - 1)
        costs = [self.costs[k] for k in part.members]
        unit = _objective_unit(self.graph, self.hw, costs)
        proto.objective.vars.extend(range(n))
        proto.objective.coeffs.extend(c // unit for c in costs)
        if self.use_hint:
            # a complete hint; over a cut-short candidate list, where greedy's groups were
            # added by hand, the hint slowed CP-SAT down tenfold (measured), so none is given
            proto.solution_hint.vars.extend(range(n))
            proto.solution_hint.values.extend(int(k in self.hint) for k in part.members)
            proto.solution_hint.vars.extend(recomputed)  # a heuristic plan recomputes nothing
            proto.solution_hint.values.extend([0] * len(recomputed))
        solver = cp_model.CpSolver()
        solver.parameters.max_deterministic_time = self.budget
        solver.parameters.num_workers = WORKERS
        solver.parameters.random_seed = 0
        # Presolve costs 5-8x the search on these pure set-partitioning models
        # (measured on graphs/: Llama 2L 5.3 s -> 0.6 s, GPT-2 12L 1.7 s -> 0.3 s).
        solver.parameters.cp_model_presolve = False
        # Probing likewise: 0.85 s -> 0.04 s on a ResNet-50 stage of 3,857 candidates,
        # proving the same optimum.
        solver.parameters.cp_model_probing_level = 0
        callback = _Progress(self.progress, self.hw, self.kind, self.start, hint_cost, phase, offset, bound_offset, unit)
        solver.best_bound_callback = callback.on_bound
        result = solver.solve(model, callback)
        self.solves += 1
        self.budget -= solver.deterministic_time
        if result == cp_model.MODEL_INVALID:
            raise RuntimeError(f"CP-SAT rejected the model: {model.validate()}")
        if result == cp_model.INFEASIBLE:
            return  # only the cuts can do this; the hint stands and proves nothing
        response = solver.response_proto
        # the integer bound: the float one rounds above 2^53, a hair under a proven optimum
        part.bound = max(0, response.inner_objective_lower_bound) * unit
        part.optimal = result == cp_model.OPTIMAL
        self.stopped |= not part.optimal
        if result in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            solution = response.solution
            chosen = [k for v, k in enumerate(part.members) if solution[v]]
            cost = sum(self.costs[k] for k in chosen)
            if cost < part.cost:
                part.chosen, part.cost = chosen, cost


class _Proven(Exception):
    """The warm start meets the structural bound: nothing is left to search."""


class _WarmStart:
    """The plan each solve starts from: the cheapest heuristic plan under the objective
    (greedy on a tie), computed once, when first needed (:func:`heuristic_plans`);
    or, when the enumeration finished before needing them, one group per compute op
    (``name`` ``"none"``), whose groups are all candidates then. With recomputation,
    the ilp's own plan without it competes with the heuristics (``extra``)."""

    def __init__(self, graph: Graph, hw: Hardware, options: Options):
        self.graph, self.hw, self.options = graph, hw, options
        self.name: str | None = None
        self.masks: list[int] = []
        self.cost = 0
        self.priced: dict[int, int] = {}  # every heuristic group -> its objective
        self.extra: dict[str, list[int]] = {}  # plans to start from besides the heuristics
        self.seconds = 0.0  # wall time of the heuristics, for reports only

    def heuristics(self) -> None:
        """Starts from the cheapest heuristic plan (computed once)."""
        if self.name not in (None, "none"):
            return
        begin = time.perf_counter()
        g, hw, kind = self.graph, self.hw, self.options.objective
        plans = {**heuristic_plans(g, hw, self.options), **self.extra}
        self.priced = {mask: objective(Group(g, g.convex_hull(mask)), hw, kind)
                       for plan in plans.values() for mask in plan}
        self.name = min(plans, key=lambda name: sum(self.priced[m] for m in plans[name]))  # greedy first on a tie
        self.masks = plans[self.name]
        self.cost = sum(self.priced[m] for m in self.masks)
        self.seconds = time.perf_counter() - begin

    def singletons(self, masks: list[int], costs: list[int], recomputed: list[int]) -> bool:
        """Starts from one group per compute op, if each is a candidate of ``masks``
        (that recomputes nothing)."""
        cost = {m: c for m, c, r in zip(masks, costs, recomputed) if m.bit_count() == 1 and not r}
        alone = [1 << i for i in bits(self.graph.compute_mask)]
        if not all(m in cost for m in alone):
            return False
        self.name, self.masks, self.cost = "none", alone, sum(cost[m] for m in alone)
        return True


class Ilp(Strategy):
    """Exact set partitioning (see module docstring)."""

    name = "ilp"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        start = time.perf_counter()
        limit = DEFAULT_TIME_LIMIT_S if options.time_limit is None else options.time_limit
        kind = options.objective
        bound = structural_bound(graph, hw, options.max_ops, kind, options.recompute)
        warm = _WarmStart(graph, hw, options)
        if options.recompute:  # the partitions' optimum first: never worse with recomputation allowed
            groups, _ = self.plan(graph, hw, replace(options, recompute=False, progress=None))
            warm.extra = {"ilp without recomputation": _compute_masks(graph, groups)}

        def heuristics() -> None:
            warm.heuristics()
            enumerating.best = warm.cost  # the incumbent the progress line shows from now on
            if bound >= warm.cost:
                raise _Proven

        enumerating = _Progress(options.progress, hw, kind, start, None, "enumerating")
        enumerating.bound = bound  # known before any search: the line shows it from the start
        try:
            cands = enumerate_candidates(graph, hw, options.max_ops, max_work=max(1, int(WORK_PER_S * limit)),
                                         max_candidates=MAX_CANDIDATES, tick=lambda found: enumerating.tick(),
                                         kind=kind, checkpoint=(HEURISTIC_WORK_PER_OP * len(graph.ops), heuristics),
                                         recompute=options.recompute)
            during = warm.seconds  # the heuristics' time inside the enumeration's, if they ran there
            if not (cands.complete and (warm.name or warm.singletons(cands.masks, cands.costs, cands.recomputed))):
                heuristics()
        except _Proven:  # the warm start meets a lower bound: proven, nothing more to search
            return assemble(graph, warm.masks), {"status": "OPTIMAL", "bound": display_value(warm.cost, hw, kind),
                                                 "gap": 0.0, "details": {"warm_start": warm.name, "candidates": 0,
                                                                         "proof": "structural bound"}}
        masks, costs, recomputed = list(cands.masks), list(cands.costs), list(cands.recomputed)
        solved = _solve(graph, hw, kind, masks, costs, recomputed, warm, cands.complete, limit, options.progress,
                        start)
        if solved.status != "OPTIMAL" and warm.name == "none":  # unproven: start again from the heuristics
            first = solved
            warm.heuristics()
            solved = _solve(graph, hw, kind, masks, costs, recomputed, warm, cands.complete, first.budget,
                            options.progress, start)
            if first.cost < solved.cost:  # the first solve's plan beat the heuristics, unproven
                solved = replace(first, status="FEASIBLE", budget=solved.budget, stopped=True)
            solved.bound = max(first.bound, solved.bound)
        moves = 0
        if not cands.complete and not options.recompute and solved.status != "OPTIMAL" and solved.chosen:
            # groups no anchor's share reached (a wide sibling set past the op cap) may be
            # near the plan's own: merge them and move ops between them while that is cheaper
            plan, moves = local_search(graph, hw, kind, options.max_ops, [(masks[k], costs[k]) for k in solved.chosen],
                                       lambda computes: _find_cycle(graph, computes, [0] * len(computes)) is not None)
            if moves:
                solved.chosen = list(range(len(masks), len(masks) + len(plan)))
                masks += [mask for mask, _ in plan]
                costs += [cost for _, cost in plan]
                recomputed += [0] * len(plan)
                solved.cost, solved.status = sum(costs[k] for k in solved.chosen), "FEASIBLE"
        bound = max(bound, solved.bound) if cands.complete else bound
        exclusive = None
        if bound < solved.cost:  # unproven: the launches and reads of ops that never share a group may prove it
            exclusive = exclusive_ops(graph, options.max_ops, options.recompute)
            bound = max(bound, structural_bound(graph, hw, options.max_ops, kind, options.recompute, exclusive))
        bound = min(bound, solved.cost)
        status = solved.status if solved.status == "OPTIMAL" or bound < solved.cost else "OPTIMAL"
        stopped = [STOPPED_BY[s] for s in cands.stopped]
        if solved.stopped or solved.budget <= 0 and status != "OPTIMAL":
            left = (f", with {solved.scenarios - solved.scenarios_solved:,} of {solved.scenarios:,} scenarios of "
                    "recomputation unsolved") if solved.scenarios_solved < solved.scenarios else ""
            stopped.append(f"the solver's time limit (--time-limit, deterministic){left}")
        details = {
            "warm_start": warm.name,
            "candidates": len(cands.masks),
            "enumeration_complete": cands.complete,
            "enumeration_states": cands.states,
            "enumeration_work": cands.work,
            "enumeration_replayed": cands.replayed,
            "enumeration_dominated": cands.dominated,
            "enumeration_stranded": cands.stranded,
            "movable_copies_kept": cands.kept.bit_count(),
            "enumeration_s": round(cands.seconds - during, 3),
            "heuristics_s": round(warm.seconds, 3),
            "parts": solved.parts,
            "parts_reused": solved.reused,
            "cycle_cuts": solved.cuts,
            "solves": solved.solves,
            "recomputation_scenarios": solved.scenarios,
            "recomputation_scenarios_solved": solved.scenarios_solved,
            "local_search_moves": moves,
        }
        if exclusive is not None:
            details["bound_exclusive_ops"] = len(exclusive.ops)
            if status == "OPTIMAL" and solved.status != "OPTIMAL":
                details["proof"] = "exclusive ops bound"
        if status != "OPTIMAL":
            details["stopped_by"] = stopped
        groups = assemble(graph, [masks[k] for k in solved.chosen], [recomputed[k] for k in solved.chosen])
        gap = 0.0 if solved.cost == 0 else (solved.cost - bound) / solved.cost
        return groups, {"status": status, "bound": display_value(bound, hw, kind), "gap": gap, "details": details}


@dataclass
class _Solved:
    """One solve's plan (candidate positions) and what the report says of it."""

    chosen: list[int]
    cost: int | float  # math.inf while no plan is found
    bound: int  # the parts' bounds summed (valid over the candidates)
    status: str  # OPTIMAL (every part proven, no cycle left), FEASIBLE or WARM_START
    stopped: bool  # a part's solve stopped at the budget
    budget: float  # deterministic seconds left
    parts: int
    reused: int
    solves: int
    cuts: int
    scenarios: int = 1
    scenarios_solved: int = 1


def _solve(graph: Graph, hw: Hardware, kind: str, masks: list[int], costs: list[int], recomputed: list[int],
           warm: _WarmStart, complete: bool, limit: float, progress: Progress | None, start: float) -> _Solved:
    """The cheapest plan over the candidates ``masks`` (extended in place with the warm
    start's groups that are missing: only when the enumeration stopped early), over
    every scenario of recomputation (:func:`scenarios`): in each, the exact cover of
    the ops it does not recompute by the candidates it allows, from the warm start
    (scenario none) or from nothing, with cycle cuts (module docstring)."""
    # only the warm start's groups are looked up: a candidate whose last op ends none
    # of them is passed over before its bitset, as wide as the graph, is hashed
    ends = {mask.bit_length() for mask in (*warm.priced, *warm.masks)}
    position = {mask: k for k, (mask, r) in enumerate(zip(masks, recomputed)) if mask.bit_length() in ends and not r}
    for mask, cost in warm.priced.items():
        if mask not in position:
            position[mask] = len(masks)
            masks.append(mask)
            costs.append(cost)
            recomputed.append(0)
    hint = {position[mask] for mask in warm.masks}
    memo: dict[tuple, list[_Reusable]] = {}
    best: _Solved | None = None
    budget, bound, proven, stopped, totals = limit, math.inf, complete, False, [0, 0, 0, 0]
    free_sets = scenarios(graph, masks, recomputed)
    # a candidate recomputing an op no scenario frees is dropped even where the only
    # scenario is none (it would be taken as the op's one write)
    derived = graph.input_derived_mask
    classes = _Allowed(graph, masks, recomputed) if any(r & derived for r in recomputed) else None
    solved_sets = 0
    for free in free_sets:
        if classes is None:  # nothing is recomputed: every candidate
            keep, covered = list(range(len(masks))), functools.reduce(operator.or_, masks, 0)
        else:
            keep, covered = classes.allowed(free)
        if graph.compute_mask & ~free & ~covered:
            solved_sets += 1
            continue  # an op no allowed candidate holds: no plan recomputes this set
        if classes is not None:
            budget -= SCENARIO_WORK_S * len(keep)
            if budget <= 0 and best is not None:
                bound, proven, stopped = 0, False, True  # it and those left are unsolved: no bound but the structure's
                break
        solved_sets += 1
        covers = [masks[k] & ~free for k in keep] if free else [masks[k] for k in keep]
        solved = _solve_scenario(graph, hw, kind, keep, covers, costs, masks, recomputed,
                                 hint if not free else set(), complete, budget, progress, start, memo)
        budget, bound, stopped = solved.budget, min(bound, solved.bound), stopped or solved.stopped
        proven &= solved.status == "OPTIMAL"
        for n, value in enumerate((solved.parts, solved.reused, solved.solves, solved.cuts)):
            totals[n] += value
        if best is None or solved.cost < best.cost:
            best = solved
    status = "OPTIMAL" if proven else "FEASIBLE" if best.cost < warm.cost else "WARM_START"
    return _Solved(best.chosen, best.cost, int(min(bound, best.cost)), status, stopped, budget, *totals,
                   scenarios=len(free_sets), scenarios_solved=solved_sets)


def scenarios(graph: Graph, masks: list[int], recomputed: list[int]) -> list[int]:
    """Every set of ops of the graph inputs alone (``Graph.input_derived_mask``) a
    plan over the candidates ``masks`` (recomputing ``recomputed``) may recompute,
    as bitsets, none first: sets of ops some
    candidate recomputes, each holding its members' recomputable producers (a
    recomputed op's producers are recomputed too: ``legality.check_covering``), and
    of ops whose every reader shares a candidate with them (its group must recompute
    them). A plan recomputes exactly one of these sets, so the cheapest plan over all
    of them is the optimum."""
    g = graph
    able = 0
    for r in recomputed:
        able |= r
    able &= g.input_derived_mask  # ops recomputed from their operands are decided in the model
    together = dict.fromkeys(bits(able), 0)  # op -> the ops some candidate holds with it
    for mask in masks:
        for i in bits(mask & able):
            together[i] |= mask
    for i in bits(able):
        if able >> i & 1 and g.readers_of[i] & ~together[i]:
            able &= ~(1 << i | g.descendants_mask[i])  # a reader never recomputes it, nor what needs it
    found = [0]
    for i in bits(able):  # topological: a member's producers come first
        need = g.ancestors_mask[i] & g.input_derived_mask
        found += [f | 1 << i for f in found if not need & ~f]
    return found


def allows(key: tuple[int, int, int], free: int) -> bool:
    """Whether a plan that recomputes exactly the ops ``free`` of the graph inputs
    alone may hold a candidate whose :func:`allows_key` is ``key``: of those ops it
    recomputes only ops of ``free``, writes none of them (each of its members read
    outside it is recomputed by it), reads none of them (it holds every member of
    ``free`` it reads), and holds an op that is not recomputed (else it adds
    nothing)."""
    need, forbid, inside = key
    return not need & ~free and not forbid & free and not (inside and not inside & ~free)


def allows_key(graph: Graph, mask: int, recomputed: int) -> tuple[int, int, int]:
    """What :func:`allows` reads of the candidate ``mask`` recomputing ``recomputed``,
    as bitsets of ops of the graph inputs alone (``Graph.input_derived_mask``): those
    it recomputes, those it writes (read outside it or by a member it recomputes) or
    reads from memory, and its members when it holds only such ops, else 0."""
    g = graph
    derived = g.input_derived_mask
    forbid = 0
    for i in bits(mask & derived & ~recomputed):
        if g.readers_of[i] & (~mask | recomputed):
            forbid |= 1 << i
    near = g.cache.get("input_derived_readers")
    if near is None:
        near = g.cache["input_derived_readers"] = functools.reduce(
            operator.or_, (g.readers_of[i] for i in bits(derived)), 0)
    if mask & near:  # (most candidates read no such op)
        for i in bits(derived & ~mask):
            if g.readers_of[i] & mask:
                forbid |= 1 << i
    return recomputed & derived, forbid, mask if not mask & ~derived else 0


class _Allowed:
    """The candidates each scenario allows, found per class of candidates with the
    same :func:`allows_key` (Llama 2L: 1,746 scenarios, and few classes against its
    100,000 candidates)."""

    def __init__(self, graph: Graph, masks: list[int], recomputed: list[int]):
        self.classes: dict[tuple[int, int, int], list[int]] = {}
        self.covers: dict[tuple[int, int, int], int] = {}  # per class, the ops its candidates hold
        for k, (mask, r) in enumerate(zip(masks, recomputed)):
            key = allows_key(graph, mask, r)
            self.classes.setdefault(key, []).append(k)
            self.covers[key] = self.covers.get(key, 0) | mask

    def allowed(self, free: int) -> tuple[list[int], int]:
        """Positions of the candidates scenario ``free`` allows, ascending, and the
        ops they hold."""
        keep, covered = [], 0
        for key, members in self.classes.items():
            if allows(key, free):
                keep += members
                covered |= self.covers[key]
        keep.sort()
        return keep, covered


def _solve_scenario(graph: Graph, hw: Hardware, kind: str, keep: list[int], covers: list[int], costs: list[int],
                    masks: list[int], recomputed: list[int], hint: set[int], complete: bool, limit: float,
                    progress: Progress | None, start: float, memo: dict) -> _Solved:
    """The exact cover of one scenario: the candidates ``keep`` (positions), whose ops
    to cover are ``covers``, from the warm start's groups ``hint`` (a complete hint
    given to CP-SAT only over ``complete`` candidates); the plan in positions into
    ``masks``."""
    sub_costs = [costs[k] for k in keep]
    sub_hint = {n for n, k in enumerate(keep) if k in hint}
    copies, reads = _copies(graph, [masks[k] for k in keep], [recomputed[k] for k in keep])
    solver = _Solver(graph, hw, kind, covers, sub_costs, sub_hint, complete and bool(sub_hint), limit, progress,
                     start, memo, copies, reads)
    # a candidate that reads a recomputable op joins the part of its copies: one
    # decision (whether the op is written) binds them
    linked = [c | r for c, r in zip(covers, reads)] if any(reads) else covers
    parts = [_Part(sorted(members, key=lambda k: covers[k])) for members in overlap_components(linked)]
    best = sorted(sub_hint)
    best_cost = sum(sub_costs[k] for k in best) if sub_hint else math.inf
    cuts = 0
    chosen: list[int] = []
    while True:
        # the other parts' best costs (or warm start, before their solve) frame one part's progress
        estimate = [p.cost if p.chosen is not None else _hint_cost(p, sub_costs, sub_hint) for p in parts]
        later, done_cost, done_bound = sum(estimate), 0, 0
        for n, part in enumerate(parts):
            later -= estimate[n]
            if part.chosen is None:
                solver.solve(part, done_cost + later, done_bound, f"solving part {n + 1}/{len(parts)}")
            done_cost += part.cost
            done_bound += part.bound
        if any(part.chosen is None for part in parts):
            break  # the budget ran out before a part had a plan
        chosen = [k for part in parts for k in part.chosen]
        cycle = _find_cycle(graph, [masks[keep[k]] for k in chosen], [recomputed[keep[k]] for k in chosen])
        if cycle is None:
            if done_cost < best_cost:
                best, best_cost = chosen, done_cost
            break
        if solver.budget <= 0:
            break
        parts = _cut(parts, [chosen[p] for p in cycle])
        cuts += 1
    proven = complete and all(p.optimal for p in parts) and best == chosen
    status = "OPTIMAL" if proven else "FEASIBLE"
    return _Solved([keep[k] for k in best], best_cost, sum(p.bound for p in parts), status, solver.stopped,
                   solver.budget, len(parts), solver.reused, solver.solves, cuts)


def _copies(graph: Graph, masks: list[int], recomputed: list[int]) -> tuple[list[int], list[int]]:
    """Per candidate, the members it recomputes from their operands (not
    ``Graph.input_derived_mask``: a scenario decides those), and the ops some
    candidate so recomputes that it reads from memory (it holds a reader, not
    the op)."""
    g = graph
    copies = [r & ~g.input_derived_mask for r in recomputed]
    copyable = 0
    for c in copies:
        copyable |= c
    if not copyable:
        return copies, [0] * len(masks)
    readers = [(i, g.readers_of[i]) for i in bits(copyable)]
    reads = [sum(1 << i for i, r in readers if r & mask and not mask >> i & 1) for mask in masks]
    return copies, reads


def _hint_cost(part: _Part, costs: list[int], hint: set[int]) -> int:
    """The warm start's cost over one part."""
    return sum(costs[k] for k in part.members if k in hint)


def _cut(parts: list[_Part], cycle: list[int]) -> list[_Part]:
    """``parts`` with a cut forbidding the candidates of ``cycle`` together: added to
    its part, or to one part merged from the parts the cycle runs through."""
    touched = [p for p in parts if set(p.members) & set(cycle)]
    merged = _Part(sorted(k for p in touched for k in p.members), [c for p in touched for c in p.cuts] + [cycle])
    return sorted([p for p in parts if p not in touched] + [merged], key=lambda p: min(p.members))
