"""Exhaustive enumeration of candidate fusion groups for the ILP.

A candidate is a set of compute ops whose group (their convex hull, which adds the
views between them) ``legality`` accepts. Every legal group is produced exactly once,
but for groups a free prologue dominates (below), so a set-partitioning model over the
candidates has the optimum of the problem over all legal plans.

Legal groups are connected, so they are enumerated as connected sets with ESU
(Wernicke, "Efficient detection of network motifs", IEEE/ACM TCBB 2006): a set is
grown from its first member ``v`` by adding neighbours that come after ``v`` and are
not adjacent to the set grown so far; every connected set is reached once. Each
group kind is enumerated from its own anchor over its own universe of ops:

* pointwise groups: from each pointwise op, over pointwise ops (elementwise,
  broadcast, injective and window ops);
* contraction groups: from each contraction, over it and pointwise ops;
* reduction groups: from each reduction, over the reductions of the same
  signature that come after it and pointwise ops;
* horizontal contraction groups: from each set of two or more independent
  horizontal siblings (``horizontal.py``) as one seed, over pointwise ops;
* attention groups: from each attention pair of contractions (``attention.pairs``)
  with the ops between them, which every convex group holding both holds, as one
  seed, over pointwise ops (ESU with the seed as its anchor vertex: every
  connected superset of the seed is reached once; no other anchor's groups hold
  these contractions, nor any two);
* gather and custom ops: alone.

A branch of the search is cut only when no set in it can be legal:

* the convex hull of the set breaks a hereditary rule
  (``legality.hereditary_violation``); every convex superset contains the hull;
* the convex hull of the set holds a compute op the branch can no longer add (one
  ESU has excluded from it, or outside the anchor's universe): every set of the
  branch has that op in its hull and not as a member, so none is convex. (Only
  those: a set that is not convex yet may still grow into one, so a branch is never
  cut for that alone; the GELU prologue of a matmul has groups reached only so.)
* the values the set produces that every set of the branch writes (*must-write*:
  a graph output, or read by an op the branch can no longer add) already break a
  rule of its kind that only grows with the group (``legality.written_violation``:
  a pointwise group's one iteration space; a contraction's epilogue, written
  prologue and side values; an attention group's epilogue and written feeders);
* in a pointwise set, the must-write values leave at one element count and a
  member *leaks* another: every pointwise group holding it has a value of another
  count leave (it must be written, or one of its readers leaks). So a small table
  every layer reads (RoPE's cos and sin) is not grown into each layer's prologue.

Under the ``time`` and ``traffic`` objectives, without ``recompute``, a set of two or
more ops that holds every reader of a *free prologue* of its search's region
(``cost.free_prologues``: a weight's transpose that only a matmul reads) but not the
prologue is no candidate when the set with all such prologues is a legal group
(:meth:`_Search.dominated`): that group costs no more, and the prologue left out
would be a kernel of its own, so some optimal plan never needs the smaller set
(``docs/strategies.md``). Likewise for *input prologues* (``cost.input_prologues``: ops
of graph inputs only they read, as a batch norm's ``rsqrt(var + eps)``): a set of two or
more ops that holds every reader of some but not them (:meth:`_Search.left_out`) is no
candidate when the set with them is a legal group and taking them in costs at most
the launch they need apart (``cost.prologue_excess``). A search's region holds the
input prologues whose every reader it can hold, so its structure records them.
Under the same objectives, a pointwise or contraction set of two or more ops and no
pool that holds a *movable copy* (``cost.movable_copies``: a transpose, slice or
cast read by one op) but neither its reader nor its operand's producer is no candidate
(:meth:`_Search.stranded`), and a branch whose every set would hold one is cut: such
a copy taken out leaves the group legal and no costlier, and once the search is
complete each copy's move into every candidate holding its reader is checked
(:func:`_unverified_moves`); a copy whose move fails is kept, searched again.

With ``recompute``, a set holding recomputable ops (``Graph.recomputable_mask``) is a
candidate once per choice of the members it recomputes that changes what it writes
(:meth:`_Search.variants`);
the branch's hull leaves out the paths out of recomputable members (their outside
readers may recompute them), which every variant's own hull holds, so the cuts
above stay sound; the must-write and leak cuts leave recomputable members out.

An op whose convex hull with the anchor alone breaks a hereditary rule leaves that
anchor's universe the first time it is met (``_Search.reachable``): no state of the
anchor can take it, so testing it once per anchor instead of once per state finds
the same sets. So does an op a contraction or attention anchor would have to write
where its kind may not (``_Search.unwritable``), with what only it reaches. Each
emitted group is decided (legality, then its objective) once per
``Group.signature``: the repeated layers of a network have the same groups up to
names, and legality and cost read nothing else. A signature is computed only for a
group whose members' op keys an earlier group had (``_Search.decide``).

Each anchor's search is a resumable job; the state budget is shared out in passes
(``enumerate_candidates``).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import horizontal
from ..attention import Pair, pairs
from ..cost import (FREE_PROLOGUE_OBJECTIVES, free_prologues, input_prologues, movable_copies, objective,
                    prologue_excess, unit_flops)
from ..graph import Graph, bits
from ..group import Group
from ..hardware import Hardware
from ..legality import breaks_hereditary, is_legal, written_violation


class _Stop(Exception):
    """The enumeration reached its candidate or state budget."""


class _AnchorFull(Exception):
    """One anchor's search reached its share of the work (the rest of the search goes on)."""


@dataclass
class _Job:
    """One anchor's search, resumable: its DFS ``stack`` of states left to visit, and
    the ``work`` it has done so far. Kind ``alone`` emits its one op."""

    kind: str
    anchor: "int | Pair"
    stack: list
    universe: int
    later: int
    work: int = 0
    seed: tuple[int, int, int] = (0, 0, 0)  # the anchor's ops, their descendants, their ancestors
    tried: int = 0  # ops already tested against the seed (see _Search.reachable)
    key: tuple | None = None  # its search's structure up to names (_Search.structure)
    region: list[int] = field(default_factory=list)  # the ops that key describes, in order
    found: list[int] = field(default_factory=list)  # positions of the candidates it emitted
    dominated: int = 0  # the sets it left out for a free prologue
    stranded: int = 0  # the sets it left out for a stranded copy
    followers: list["_Job"] = field(default_factory=list)  # jobs of the same key, waiting for its result


# The search's work, in units of about the same CPU time each (2-core development
# machine: 6-13 us a unit on the corpus, the ladder and 14 sibling slices, where a state
# alone costs 60-430 us): a state visited, a hull checked, and, weighted by what each
# costs, a group of a new signature decided (checked and priced) and a legal group
# emitted (about 35 us on GPT-2 48L, when its signature was computed).
CANDIDATE_WORK = 30
SIGNATURE_WORK = 3
# Work one anchor may do (the real graphs of graphs/ need at most ~500,000), so that a
# pathological fan-out cannot starve the other anchors; past it the enumeration is
# incomplete and the ILP says so.
MAX_WORK_PER_ANCHOR = 2_000_000
# Horizontal siblings (``horizontal.py``) seed every subset of two or more of their
# class: up to 2^10 - 11 = 1,013 seeds for a class of 10 (Llama has classes of 3 and 2).
MAX_SIBLINGS = 10
# Job kinds whose sets holding a stranded copy are left out (:meth:`_Search.stranded`):
# their groups' rules only grow with the group and what it writes, so taking the copy
# out keeps them legal (``docs/strategies.md``, *Movable copies*).
STRANDING_KINDS = frozenset({"pointwise", "contraction"})
# A job whose region holds more ops than this is searched without looking for an
# equal structure: its key would cost a tuple per op of the region, kept per job, and
# such regions (every branch of a 600-way concat reaches all the others) do not
# repeat. On the corpus and the ladder no region passes 58 ops.
SHARED_REGION_OPS = 512

#: Why an enumeration stopped short (``Candidates.stopped``), as the report words it.
STOPPED_BY = {
    "work": "the search budget (--time-limit)",
    "candidates": "the candidate cap",
    "anchor": f"an anchor's cap ({MAX_WORK_PER_ANCHOR:,} units of search work)",
    "siblings": f"the cap of {MAX_SIBLINGS} horizontal siblings whose every subset is a candidate",
}


@dataclass
class Candidates:
    """Legal candidate groups (compute-op bitsets), the members each recomputes (a
    bitset: ``Group.recomputed``; one set of ops may be a candidate once per choice
    of them) and their integer objectives (``cost.objective``), in a fixed order.

    ``complete`` is False when the search stopped at a budget, each named in ``stopped``
    (keys of :data:`STOPPED_BY`, in the order they were hit): then the list holds
    only the candidates found so far and no optimality claim can rest on it.
    ``states`` counts the search states visited and ``work`` the search's work
    (:data:`CANDIDATE_WORK`); ``seconds`` is measured wall time, for reports only (no
    budget reads it). ``dominated`` counts the legal sets left out for a free prologue
    (:meth:`_Search.dominated`), a replayed search's as many as its leader's;
    ``stranded`` the sets left out for a stranded copy when emitted
    (:meth:`_Search.stranded`; a branch of them is cut unvisited, uncounted); and
    ``kept`` (a bitset) the movable copies whose moves the candidates of a first
    search did not bear out, searched again with their sets kept
    (:func:`_unverified_moves`).
    """

    masks: list[int]
    costs: list[int]
    recomputed: list[int]
    states: int
    work: int
    seconds: float
    stopped: tuple[str, ...]
    replayed: int = 0
    dominated: int = 0
    stranded: int = 0
    kept: int = 0

    @property
    def complete(self) -> bool:
        return not self.stopped


def neighbours(graph: Graph) -> dict[int, int]:
    """Compute op index -> bitset of compute ops it can share a group with directly:
    its producers and consumers (through views) and the other readers of a tensor it reads."""
    out: dict[int, int] = {}
    for name, op in graph.ops.items():
        if op.is_view:
            continue
        i = graph.index[name]
        mask = graph.storage_readers.get(name, 0)
        for base in graph.storage_reads[name]:
            mask |= graph.storage_readers.get(base, 0)
            if base in graph.ops:
                mask |= 1 << graph.index[base]
        out[i] = mask & ~(1 << i)
    return out


class _Search:
    """One exhaustive enumeration; see the module docstring."""

    def __init__(self, graph: Graph, hw: Hardware, max_ops: int, max_work: int, max_candidates: int, kind: str,
                 tick: Callable[[int], None] | None, checkpoint: tuple[int, Callable[[], None]] | None,
                 recompute: bool, kept: int = 0):
        self.graph, self.hw, self.max_ops, self.kind = graph, hw, max_ops, kind
        self.max_work, self.max_candidates, self.tick = max_work, max_candidates, tick
        self.checkpoint = checkpoint
        self.adj = neighbours(graph)
        classes = graph.class_masks
        # a window op (a pool) fuses as a pointwise kernel's op; the hereditary rules keep
        # it out of contraction and reduction groups
        self.pointwise = (classes.get("elementwise", 0) | classes.get("broadcast", 0) | classes.get("injective", 0)
                          | classes.get("window", 0)) & graph.compute_mask
        self.hull_ok: dict[int, bool] = {}
        self.decided: dict[tuple, tuple[bool, int]] = {}  # Group.signature -> (legal, objective)
        # members' op keys -> the first group of those keys and its decision, until a
        # second group has them too (then None): only then are signatures computed (one
        # costs about a fifth of a decision, and most groups of a searched layer have
        # keys no other group has: 62% on Phi-2 2L)
        self.first: dict[tuple, tuple[int, int, tuple[bool, int]] | None] = {}
        self.leaking: dict[tuple[int, int], bool] = {}
        self.leak_masks: dict[int, tuple[int, int]] = {}  # element count -> ops that leak it, ops that do not
        # copies of an op no legal covering recomputes would only be pruned one by one
        self.recomputable = graph.recomputable_mask & ~graph.never_recomputed_mask if recompute else 0
        # the same as sets of op positions: a job's structure asks per op of its region,
        # and shifting a bitset as wide as the graph per op made that quadratic
        self.recomputable_ops = frozenset(bits(self.recomputable))
        self.recomputed_with_producers = frozenset(bits(self.recomputable & graph.input_derived_mask))
        # a member's descendants as a branch's hull counts them: a recomputable one's
        # outside readers may recompute it, so only its views (Graph.convex_hull);
        # each variant that writes it is checked against its full hull (emit)
        self.below = tuple(graph.view_closure[i] if self.recomputable >> i & 1 else d
                           for i, d in enumerate(graph.descendants_mask))
        # ops a group holding all their readers takes in at no cost (cost.free_prologues):
        # a group that leaves them out is not a candidate when the group with them is one
        self.free = free_prologues(graph) if kind in FREE_PROLOGUE_OBJECTIVES and not recompute else {}
        self.free_read: dict[int, list[int]] = {}  # reader -> the free prologues it reads
        for t, readers in self.free.items():
            for r in bits(readers):
                self.free_read.setdefault(r, []).append(t)
        # input prologues (cost.input_prologues), under the same objectives: per op, those
        # that feed it through input prologues alone; a set holding every reader of such
        # a closure but not it is not a candidate when taking it in costs less than a
        # launch (cost.prologue_excess) and is legal (_Search.dominated)
        self.prologues = input_prologues(graph) if kind in FREE_PROLOGUE_OBJECTIVES and not recompute else 0
        self.prologue_ops = frozenset(bits(self.prologues))
        self.launch = hw.launch_bytes.numerator  # one launch, in objective units
        self.within_launch: dict[tuple, bool] = {}  # (input prologues, their FLOP) -> their excess <= a launch
        self.feeding: dict[int, int] = {}
        for i in bits(self.prologues):
            self.feeding[i] = 0
            for base in graph.storage_reads[graph.order[i]]:
                if base in graph.ops:
                    j = graph.index[base]
                    self.feeding[i] |= 1 << j | self.feeding[j]
        self.fed: dict[int, int] = {}  # an op no input prologue -> the input prologues that feed it
        for t in bits(self.prologues):
            for r in bits(graph.readers_of[t] & ~self.prologues):
                self.fed[r] = self.fed.get(r, 0) | 1 << t | self.feeding[t]
        self.final: dict[int, int] = {}  # an input prologue -> the ops no prologue that read it, or through them
        for t in reversed(bits(self.prologues)):
            readers = graph.readers_of[t]
            self.final[t] = readers & ~self.prologues
            for r in bits(readers & self.prologues):
                self.final[t] |= self.final[r]
        self.absorbing = sum(1 << r for r in self.free_read) | sum(1 << r for r in self.fed)
        # copies (cost.movable_copies) a pointwise or contraction group of two or more ops
        # holds without their reader or their operand's producer (stranded): such a group
        # is no candidate; ``kept`` are copies whose moves a first search did not bear out
        self.movable = {} if kind not in FREE_PROLOGUE_OBJECTIVES or recompute else {
            i: move for i, move in movable_copies(graph).items() if not kept >> i & 1}
        self.movable_mask = sum(1 << i for i in self.movable)
        # a pool's staged input rows (cost.window_rows) turn on when a copy leaves its group
        # (a transpose of the innermost axis, another reader of its input, a value written
        # in another shape turn them off), so a set that holds a pool keeps its copies
        self.windows = classes.get("window", 0) & graph.compute_mask
        # a set with the prologues it leaves out -> whether its group is legal, the group, and
        # its ops' FLOP (cost.unit_flops) where input prologues are among them
        self.taken_in: dict[int, tuple[bool, Group, dict | None]] = {}
        self.region = 0  # the running job's region (_Search.structure), as a bitset
        self.running: _Job | None = None  # the job being searched
        self.dominated_sets = 0  # sets left out for a free prologue, replayed ones included
        self.stranded_sets = 0  # sets left out for a stranded copy, replayed ones included
        self.masks: list[int] = []
        self.costs: list[int] = []
        self.recomputed: list[int] = []
        self.states = self.work = 0
        self.anchor_budget = max_work  # set for each anchor by _searches
        self.stopped: list[str] = []
        self.found: list[int] = []  # the running job's candidates (positions in ``masks``)
        self.leaders: dict[tuple, _Job] = {}  # structure -> the job that searches it for all of its jobs
        self.replayed = 0  # jobs whose candidates were mapped from an equal structure's
        self.unshared = 0  # jobs of a region past SHARED_REGION_OPS, each its own structure

    def viable(self, hull: int) -> bool:
        """Whether the convex hull ``hull`` breaks no hereditary rule (memoised)."""
        self.work += 1
        ok = self.hull_ok.get(hull)
        if ok is None:
            ok = self.hull_ok[hull] = not breaks_hereditary(self.graph, hull, self.max_ops)
        return ok

    def hull_with(self, mask: int, below: int, above: int, i: int) -> int:
        """Convex hull of ``mask`` plus op ``i``, from the set's descendant and ancestor
        masks (:attr:`below`: recomputable members' outside paths left out)."""
        g = self.graph
        return mask | (1 << i) | ((below | self.below[i]) & (above | g.ancestors_mask[i]))

    def must_writes(self, mask: int, below: int, above: int, addable: int, known: int) -> int:
        """Members (a bitset) whose value every set of this branch writes: a graph
        output, or one read by an op the branch can no longer add, or whose hull with
        the set breaks a hereditary rule; never a recomputable one that a set of the
        branch may recompute, which the groups of its outside readers may recompute
        too (one of the graph inputs alone is recomputed only with its compute
        ancestors: ``variants``). ``known`` are members already found so in an
        enclosing branch: they stay so, since a sub-branch can add fewer ops and its
        hulls are larger. (``a ^ (a & b)`` is ``a & ~b`` without complementing a
        bitset as wide as the graph.)"""
        g = self.graph
        readers_of, output = g.readers_of, g.writes_out
        keep = mask | addable
        out = known
        copied = 0  # the members a set of this branch may recompute
        for i in bits((mask ^ known) & self.recomputable):
            if not g.input_derived_mask >> i & 1 or not g.ancestors_mask[i] & g.compute_mask & ~keep:
                copied |= 1 << i
        for i in bits((mask ^ known) & ~copied):
            readers = readers_of[i]
            if output[i] or readers ^ (readers & keep):
                out |= 1 << i
                continue
            readers ^= readers & mask
            for r in bits(readers) if readers else ():
                if not self.viable(self.hull_with(mask, below, above, r)):
                    out |= 1 << i
                    break
        return out

    def conflict(self, kind: str, anchor, mask: int, below: int, above: int, addable: int,
                 known: int) -> tuple[bool, int]:
        """Whether no set of this branch can be legal: the values it must write
        (:meth:`must_writes`, returned too) already break a rule of its kind
        (``legality.written_violation``), or, for a pointwise set, they leave with one
        element count and a member is bound to make another leave (:meth:`leaks`)."""
        g = self.graph
        writes = self.must_writes(mask, below, above, addable, known)
        must = set(g.names(writes))
        if written_violation(g, kind, anchor, mask, must) is not None:
            return True, writes
        if kind != "pointwise" or not must:
            return False, writes
        numel = g.tensor(next(iter(must))).numel
        leaking, sealed = self.leak_masks.get(numel, (0, 0))  # members known to leak, not to leak
        if mask & leaking:
            return True, writes
        unknown = mask ^ (mask & sealed)
        for i in bits(unknown):
            if self.leaks(i, numel):
                leaking |= 1 << i
                break
            sealed |= 1 << i
        self.leak_masks[numel] = (leaking, sealed)
        return bool(mask & leaking), writes

    def leaks(self, i: int, numel: int) -> bool:
        """Whether every pointwise group holding op ``i`` has a value of other than
        ``numel`` elements leave it (written, or a sink). So it is when op ``i``'s own
        count differs and it must be written (a graph output, unread, or read by an op
        no pointwise group holds), or one of its readers leaks: a group that does not
        write op ``i`` holds all its readers. Memoised; iterative, for long chains."""
        g, memo = self.graph, self.leaking
        stack = [i]
        while stack:
            j = stack[-1]
            if (j, numel) in memo:
                stack.pop()
                continue
            name = g.order[j]
            readers = g.storage_readers.get(name, 0)
            if g.tensor(name).numel == numel or self.recomputable >> j & 1:  # its readers may recompute it
                memo[j, numel] = False
            elif name in g.output_storages or not readers or readers & ~self.pointwise:
                memo[j, numel] = True
            else:
                pending = [r for r in bits(readers) if (r, numel) not in memo]
                if pending:
                    stack.extend(pending)
                    continue
                memo[j, numel] = any(memo[r, numel] for r in bits(readers))
            stack.pop()
        return memo[i, numel]

    def check(self) -> None:
        """Calls the checkpoint's function once the work reaches its mark (once)."""
        if self.checkpoint is not None and self.work >= self.checkpoint[0]:
            call, self.checkpoint = self.checkpoint[1], None
            call()

    def emit(self, mask: int, hull: int) -> None:
        """Adds the legal groups of the compute ops ``mask`` (convex hull ``hull``, with
        recomputable members' outside paths left out): one per choice of the members
        it recomputes (:meth:`variants`) whose own hull takes in no other compute op."""
        g = self.graph
        if (hull ^ mask) & g.compute_mask:
            return  # not convex: the hull takes in another compute op
        if mask & self.movable_mask and mask & (mask - 1) and self.running.kind in STRANDING_KINDS \
                and not mask & self.windows and self.stranded(mask, mask):
            self.running.stranded += 1
            self.stranded_sets += 1
            return  # (an op alone is kept: the ilp starts from one group per op)
        if mask & self.absorbing and mask & (mask - 1) and self.dominated(mask):
            self.running.dominated += 1
            self.dominated_sets += 1
            return  # (an op alone is kept: the ilp starts from one group per op)
        if not mask & self.recomputable:
            self.add(mask, hull, 0)
            return
        for recomputed in self.variants(mask):
            real = g.convex_hull(mask, recomputed)
            if not (real ^ mask) & g.compute_mask:
                self.add(mask, real, recomputed)

    def stranded(self, mask: int, keep: int) -> bool:
        """Whether a movable copy among ``mask`` has neither its reader nor its
        operand's producer in ``keep`` (a bitset): then a group of two or more ops of
        ``mask`` that holds only ``keep``'s ops is no candidate, since the plan that
        moves the copy into its reader's group is legal and no costlier
        (``docs/strategies.md``, *Movable copies*; :func:`_unverified_moves`)."""
        for t in bits(mask & self.movable_mask):
            reader, producer = self.movable[t]
            if not (reader | producer) & keep:
                return True
        return False

    def dominated(self, mask: int) -> bool:
        """Whether ``mask`` leaves out prologues of the running job's region whose
        readers it all holds, and its group with them is legal and costs no more
        than it and one launch: free prologues (``cost.free_prologues``), which cost
        nothing taken in, and input prologues (:meth:`left_out`), which cost at most
        ``cost.prologue_excess``, at most a launch. In a plan holding this set, the
        prologues left out are kernels of their own: moving them in gives a plan no
        worse, so this set is not needed. (The larger group is connected and convex,
        so the enumeration finds it. Only the region's prologues count: its structure
        records them, so a job that takes this one's candidates mapped over drops the
        same.)"""
        absent = 0
        for r in bits(mask & self.absorbing):
            for t in self.free_read.get(r, ()):
                if self.region >> t & 1 and not mask >> t & 1 and self.free[t] & mask == self.free[t]:
                    absent |= 1 << t
        cheap = self.left_out(mask)
        if not absent | cheap:
            return False
        full = mask | absent | cheap
        taken = self.taken_in.get(full)
        if taken is None:
            group = Group(self.graph, self.graph.convex_hull(full))
            taken = self.taken_in[full] = (self.decide(group)[0], group, None)
        legal, group, compute = taken
        if not legal or not cheap:
            return legal
        if compute is None:
            compute = unit_flops(group)
            self.work += CANDIDATE_WORK  # about a decision's pricing
            self.taken_in[full] = (legal, group, compute)
        if group.empty or not group.writes:  # priced whole (cost.prologue_excess): rare
            return prologue_excess(group, cheap, self.hw, self.kind, compute) <= self.launch
        order = self.graph.order
        key = (cheap, tuple([compute[order[i]] for i in bits(cheap)]))  # all the bound reads here
        within = self.within_launch.get(key)
        if within is None:
            within = self.within_launch[key] = prologue_excess(group, cheap, self.hw, self.kind, compute) <= self.launch
        return within

    def left_out(self, mask: int) -> int:
        """The input prologues of the running job's region (``cost.input_prologues``)
        that ``mask`` leaves out but holds every reader of, with the prologues that
        feed them: the largest such set closed under producers. Every group of a plan
        holding ``mask`` that computes one of them computes only them (it reads only
        inputs no other group reads), so the plan launches a kernel for them."""
        g = self.graph
        out = 0
        for r in bits(mask & self.absorbing):
            out |= self.fed.get(r, 0)
        out &= self.region & ~mask
        while out:
            keep = mask | out
            drop = 0
            for t in bits(out):
                if g.readers_of[t] & ~keep or self.feeding[t] & ~out:
                    drop |= 1 << t
            if not drop:
                break
            out &= ~drop
        return out

    def variants(self, mask: int) -> list[int]:
        """The choices of members a group of ``mask`` recomputes, as bitsets, none
        first. Any recomputable member read outside it may be recomputed alone, from
        operands the group reads or computes; one of the graph inputs alone
        (``Graph.input_derived_mask``) is recomputed with its ancestors, which the
        group must all hold, so the set is closed under those (one written would be
        read by groups that recompute it). Such a member is recomputed also where a
        member recomputed from its operands reads it: the other copies of that one
        may recompute it instead of reading it. Choices that write the same values
        are one group: the first is kept."""
        g = self.graph
        derived = g.input_derived_mask
        copyable = sum(1 << i for i in bits(mask & self.recomputable & ~derived) if g.readers_of[i] & ~mask)
        able = [i for i in bits(mask & derived & self.recomputable) if g.readers_of[i] & (~mask | copyable)
                and not g.ancestors_mask[i] & g.compute_mask & ~mask]
        out = [0]
        for r in range(1, len(able) + 1):
            for chosen in itertools.combinations(able, r):
                closure = 0
                for i in chosen:
                    closure |= 1 << i | g.ancestors_mask[i] & g.compute_mask
                if all(closure >> i & 1 == (i in chosen) for i in able):
                    out.append(closure)
        for i in bits(copyable):
            out += [r | 1 << i for r in out]
        if not copyable:
            return out
        seen: set[tuple[str, ...]] = set()
        kept = []
        for r in out:
            writes = Group(g, mask, r).writes
            if writes not in seen:
                seen.add(writes)
                kept.append(r)
        return kept

    def add(self, mask: int, hull: int, recomputed: int) -> None:
        """Decides the group ``hull`` recomputing ``recomputed`` (legality, then its
        objective, once per ``Group.signature``) and adds it if legal."""
        group = Group(self.graph, hull, recomputed)
        decided = self.decide(group)
        if decided[0]:
            self.found.append(len(self.masks))
            self.masks.append(mask)
            self.costs.append(decided[1])
            self.recomputed.append(recomputed)
            self.work += SIGNATURE_WORK
            if len(self.masks) >= self.max_candidates:
                self.full()

    def full(self) -> None:
        """Stops the search at the candidate cap (named once in ``stopped``, however
        many waiting jobs then reach it: ``_replay_waiting``)."""
        if "candidates" not in self.stopped:
            self.stopped.append("candidates")
        raise _Stop

    def decide(self, group: Group) -> tuple[bool, int]:
        """(legal, objective) of ``group``, memoised per ``Group.signature``. Equal
        signatures have equal op keys member by member, so a group whose members'
        keys no earlier group had is decided without its signature; the first
        group of some keys has its signature computed when a second one comes."""
        g = self.graph
        keys = tuple([g.op_keys[i] for i in group.indices])
        if keys not in self.first:
            decided = self.decision(group)
            self.first[keys] = (group.mask, group.recomputed, decided)
            return decided
        earlier = self.first[keys]
        if earlier is not None:
            mask, recomputed, decided = earlier
            self.decided[Group(g, mask, recomputed).signature] = decided
            self.first[keys] = None
        decided = self.decided.get(group.signature)
        if decided is None:
            decided = self.decided[group.signature] = self.decision(group)
        return decided

    def decision(self, group: Group) -> tuple[bool, int]:
        """(legal, objective) of ``group``, computed."""
        legal = is_legal(group, self.hw, self.max_ops)
        self.work += CANDIDATE_WORK
        return legal, objective(group, self.hw, self.kind) if legal else 0

    def reachable(self, job: _Job, ops: int) -> int:
        """``ops`` less those no set holding the job's anchor can take: the convex hull
        of the anchor with the op breaks a hereditary rule, so every state's would.
        They leave the job's universe for good (tested once per op and job, not per
        state: a tensor every layer reads has readers in every layer, of which only
        the nearest can share a group). Without recomputation, the hull of the seed
        with a descendant of both the seed and ``w`` holds the hull with ``w`` (and
        so with an ancestor of both), so when ``w`` below (above) the seed fails, its
        descendants (ancestors) leave untested: the far layers' readers then cost a
        test or two per job, not one each."""
        untried = ops & job.universe & ~job.tried
        if untried:
            job.tried |= untried
            seed, below, above = job.seed
            up = untried & above  # nearest first: from the seed up, then down from it
            untried ^= up
            while up or untried:
                w = up.bit_length() - 1 if up else (untried & -untried).bit_length() - 1
                if not self.viable(self.hull_with(seed, below, above, w)):
                    dead = 1 << w
                    if not self.recomputable:
                        dead |= self.graph.ancestors_mask[w] if up else self.below[w] if below >> w & 1 else 0
                    job.universe &= ~dead
                    up ^= up & dead
                    untried ^= untried & dead
                elif up:
                    up ^= 1 << w
                else:
                    untried ^= 1 << w
        return ops & job.universe

    def reach(self, job: _Job) -> int:
        """Every op a set of the job can hold besides its seed, as a bitset: the closure
        of the seed under adjacency within the job's universe, less the ops
        :meth:`reachable` and :meth:`unwritable` drop (the universe shrinks until
        the closure holds no op :meth:`unwritable` drops). Each set the search emits
        is connected and holds the seed, so it lies within the seed and this reach."""
        seed = job.seed[0]
        while True:
            found, frontier = 0, seed
            while frontier:
                near = 0
                for i in bits(frontier):
                    near |= self.adj[i]
                frontier = self.reachable(job, near & job.later & ~(found | seed))
                found |= frontier
            unwritable = self.unwritable(job, found)
            if not unwritable:
                return found
            job.universe &= ~unwritable  # and what only they connect to the seed

    def unwritable(self, job: _Job, reach: int) -> int:
        """Ops of ``reach`` (a bitset) that no candidate of a contraction or attention
        job can hold: every group of the job that holds one writes it (a graph output,
        or read by an op outside the seed and ``reach``, which no group of the job
        holds), and the job's kind may not write it (``legality.written_violation``
        with the seed: a prologue or a feeder, a side value off the product's
        iteration space, an epilogue op that moves elements). Those rules hold for
        every group of the same contractions that writes the op, as the must-write
        cut uses them, so the ops leave the job's universe; so does the rest of a
        layer's region that only they reach (the first layer of a network can reach
        the inputs' tables and masks that every layer reads, and must write them)."""
        if job.kind not in ("contraction", "attention"):
            return 0
        g = self.graph
        inside = job.seed[0] | reach
        out = 0
        for w in bits(reach & ~self.recomputable):
            readers = g.readers_of[w]
            if (g.writes_out[w] or readers ^ (readers & inside)) and \
                    written_violation(g, job.kind, job.anchor, job.seed[0] | 1 << w, {g.order[w]}) is not None:
                out |= 1 << w
        return out

    def structure(self, job: _Job) -> tuple[tuple, list[int]]:
        """The job's search up to names, and the ops it names in order: the region
        ``H``, the convex hull of the seed and :meth:`reach`, with per op its
        ``Graph.op_keys``, each operand (a literal, or the tensor's position in ``H``
        and its storage's, or a number for a storage produced outside ``H``, with
        ``Graph.operand_keys``' read key), its readers in ``H``, whether it has any
        outside ``H`` or is a graph output, whether it is in the seed or the reach,
        its neighbours there, whether a group recomputing it recomputes its producers
        too (``Graph.input_derived_mask``: which decides :meth:`variants`), and
        whether it is a free prologue (which decides what :meth:`dominated` drops) or a
        movable copy (which decides what :meth:`stranded` drops).

        Two jobs of one kind with equal structures emit the same candidates up to the
        order-preserving map between their regions, at the same costs: a candidate is
        a connected set of seed and reach that holds the seed, is convex and is legal.
        Convexity is decided inside ``H`` (a convex set, so every path between its
        members stays in it), and legality and cost by ``Group.signature``, which the
        structure determines for every convex subset of ``H``. The pruning rules
        only skip sets that are not candidates, so they change the work, never the
        result. A region of more than :data:`SHARED_REGION_OPS` ops gets a key of its
        own instead, equal to no other: the job searches for itself, which changes
        the work, never the result."""
        g = self.graph
        seed = job.seed[0]
        reach = self.reach(job)
        held = seed | reach
        hull = g.convex_hull(held, self.recomputable)
        for i in bits(held & self.absorbing):  # the input prologues a set of it may hold all readers of
            for t in bits(self.fed.get(i, 0) & ~hull):
                if not self.final[t] & ~held:
                    hull |= 1 << t
        region = bits(hull)
        if len(region) > SHARED_REGION_OPS:
            self.unshared += 1
            return (job.kind, "unshared", self.unshared), region
        position = {i: k for k, i in enumerate(region)}
        seeds, reached = set(bits(seed)), set(bits(reach))  # sets: shifting a graph-wide bitset per op costs
        outside: dict[str, int] = {}
        ops = []
        for i in region:
            operands = tuple(key if storage is None else
                             (position.get(producer, -1), self._storage(storage, position, outside), key)
                             for producer, storage, key in g.operand_keys[i])
            readers = g.readers_of[i]
            # masked first: a tensor every layer reads has readers (and neighbours) in all
            inside = tuple(position[r] for r in bits(readers & hull))
            role = (i in seeds) + 2 * (i in reached)
            near = tuple(position[j] for j in bits(self.adj[i] & held)) if role else ()
            ops.append((g.op_keys[i], operands, inside, len(inside) != readers.bit_count(), g.writes_out[i], role,
                        near, self._reentry(i, hull, position), i in self.recomputed_with_producers,
                        i in self.free, i in self.prologue_ops, i in self.movable))
        self.work += len(region)
        return (job.kind, tuple(ops)), region

    def _reentry(self, i: int, hull: int, position: dict[int, int]) -> tuple[int, ...] | None:
        """For a recomputable op ``i`` of a region ``hull``, the region's ops that a
        path leaving the region at ``i`` reaches (a group that writes ``i`` cannot
        hold them); ``None`` for another op: every path that leaves the region
        leaves it at a recomputable op (the region is convex but for their paths)."""
        if i not in self.recomputable_ops:
            return None
        g = self.graph
        reached = 0
        for name in g.dag.successors(g.order[i]):
            j = g.index[name]
            if not hull >> j & 1:
                reached |= g.descendants_mask[j]
        return tuple(position[j] for j in bits(reached & hull))

    def _storage(self, storage: str, position: dict[int, int], outside: dict[str, int]) -> int:
        """A storage's position in a region, or for one produced outside it (or a
        graph input), ``~n`` for the ``n``-th such storage the region reads."""
        k = position.get(self.graph.index.get(storage, -1))
        return ~outside.setdefault(storage, len(outside)) if k is None else k

    def replay(self, job: _Job, leader: _Job) -> None:
        """Emits for ``job`` the candidates ``leader`` (a job of the same structure)
        emitted, mapped from its region onto the job's, at the same costs."""
        region = job.region
        shift = region[0] - leader.region[0]
        if shift < 0 or any(b - a != shift for a, b in zip(leader.region, region)):
            shift = None  # not a translate (a repeated layer's region usually is: one shift maps a mask)
            position = {i: k for k, i in enumerate(leader.region)}
        for k in leader.found:
            if len(self.masks) >= self.max_candidates:  # (the search may have stopped there already)
                self.full()
            if shift is None:
                mask = recomputed = 0
                for i in bits(self.masks[k]):
                    mask |= 1 << region[position[i]]
                for i in bits(self.recomputed[k]):
                    recomputed |= 1 << region[position[i]]
            else:
                mask, recomputed = self.masks[k] << shift, self.recomputed[k] << shift
            self.masks.append(mask)
            self.costs.append(self.costs[k])
            self.recomputed.append(recomputed)
            self.work += 1
        job.dominated, job.stranded = leader.dominated, leader.stranded
        self.dominated_sets += leader.dominated
        self.stranded_sets += leader.stranded
        self.replayed += 1

    def job(self, kind: str, anchor: int, universe: int, later: int) -> _Job:
        """ESU from ``anchor`` over ``universe``, adding only ops in ``later``."""
        g = self.graph
        seed = (1 << anchor, self.below[anchor], g.ancestors_mask[anchor])
        job = _Job(kind, anchor, [], universe, later, seed=seed, tried=1 << anchor)
        start = self.reachable(job, self.adj[anchor])
        job.stack.append((1 << anchor, start & later, start | (1 << anchor), seed[1], seed[2], 0))
        return job

    def seeded_job(self, kind: str, anchor, seed: int, universe: int) -> _Job:
        """ESU from the compute ops ``seed`` as one anchor vertex, over ``universe``:
        an attention pair's two contractions and every compute op between them
        (``anchor``: the :class:`Pair`), or horizontal siblings (``anchor``: their
        indices)."""
        g = self.graph
        near = below = above = 0
        for name in g.names(seed):
            i = g.index[name]
            near |= self.adj[i]
            below |= self.below[i]
            above |= g.ancestors_mask[i]
        job = _Job(kind, anchor, [], universe, -1, seed=(seed, below, above), tried=seed)
        start = self.reachable(job, near & ~seed)
        job.stack.append((seed, start, start | seed, below, above, 0))
        return job

    def search(self, job: _Job) -> None:
        """The ESU loop over ``job.stack`` (states: mask, extension, closed, below,
        above, the members known to be written) for groups of ``job.kind`` around
        ``job.anchor`` (an op index, or an attention :class:`Pair`). Stops with
        :class:`_AnchorFull` before a state past the anchor's share, leaving the job
        resumable. A state's children are made one at a time, from an entry that
        holds the extension not yet branched on (a seventh field, ``None``): a state
        of a wide fan-out has hundreds, each of six graph-wide bitsets, and a stack
        of them all, kept by every anchor waiting to resume, took 6 GB on a
        600-branch concat."""
        kind, anchor, stack, later = job.kind, job.anchor, job.stack, job.later
        g = self.graph
        while stack:
            if self.work >= self.anchor_budget:
                raise _AnchorFull
            if self.work >= self.max_work:
                self.stopped.append("work")
                raise _Stop
            entry = stack.pop()
            if len(entry) == 7:
                self.branch(job, stack, entry)
                continue
            mask, ext, closed, below, above, must = entry
            self.states += 1
            self.work += 1
            if self.states % 2048 == 0 and self.tick is not None:
                self.tick(len(self.masks))
            self.check()
            universe = job.universe  # shrinks as ops are found out of the anchor's reach
            addable = ext | (universe & later & ~closed)
            hull = mask | (below & above)
            outside = (hull ^ mask) & g.compute_mask
            if outside ^ (outside & addable):
                continue  # the hull holds a compute op this branch cannot add: no set of it is convex
            if kind != "reduction":
                doomed, must = self.conflict(kind, anchor, mask, below, above, addable, must)
                if doomed:
                    continue
            self.emit(mask, hull)
            if mask & self.movable_mask and kind in STRANDING_KINDS and not (mask | addable) & self.windows \
                    and self.stranded(mask, mask | addable):
                continue  # every larger set of the branch holds that copy stranded
            if ext:
                stack.append((mask, ext, closed, below, above, must, None))

    def branch(self, job: _Job, stack: list, entry: tuple) -> None:
        """Pushes the next child of a state's pending ``entry`` (:meth:`search`), with
        the entry for the rest beneath it: its children in order of their added op, the
        first (which excludes the fewest ops) explored first, so that large groups are
        found early even when a budget cuts the search short."""
        mask, ext, closed, below, above, must, _ = entry
        while ext:
            low = ext & -ext
            ext ^= low
            w = low.bit_length() - 1
            if self.viable(self.hull_with(mask, below, above, w)):
                if ext:
                    stack.append((mask, ext, closed, below, above, must, None))
                fresh = self.reachable(job, self.adj[w] & job.later & ~closed)
                stack.append((mask | low, ext | fresh, closed | (self.adj[w] & job.universe),
                              below | self.below[w], above | self.graph.ancestors_mask[w], must))
                return


def enumerate_candidates(graph: Graph, hw: Hardware, max_ops: int, max_work: int = 10**12,
                         max_candidates: int = 2_000_000, tick: Callable[[int], None] | None = None,
                         kind: str = "time", checkpoint: tuple[int, Callable[[], None]] | None = None,
                         recompute: bool = False) -> Candidates:
    """Every legal group of ``graph`` as a compute-op bitset, each exactly once, unless
    a budget stops the search: ``max_work`` units of search work in all
    (:data:`CANDIDATE_WORK`), ``max_candidates`` groups, or an anchor's cap of
    :data:`MAX_WORK_PER_ANCHOR`. The search runs in passes: in each, every anchor
    still pending may do the work left divided by the anchors left, and those that need more resume in the next pass, where the
    shares are larger. So an anchor whose search explodes (a wide fan-out) cannot
    starve the others. When a budget stops the search, ``stopped`` says which. The
    budgets count work, not seconds, so the result is the same on any machine.
    ``tick(candidates_so_far)`` is called now and then during long searches; each
    candidate is priced by ``cost.objective`` of ``kind``. ``checkpoint`` is a mark
    in units of work and a function called once when the search reaches it (the ILP
    computes its warm start there; the function may raise to end the search). With
    ``recompute``, each set of ops is a candidate once per choice of the
    recomputable members it recomputes (``Candidates.recomputed``)."""
    begin = time.perf_counter()
    kept = spent = 0
    while True:
        search = _Search(graph, hw, max_ops, max(1, max_work - spent), max_candidates, kind, tick, checkpoint,
                         recompute, kept)
        try:
            pending = _anchors(graph, search)
            while pending:
                pending = _searches(search, pending)
        except _Stop:
            _replay_waiting(search)
        unverified = 0 if search.stopped else _unverified_moves(search)
        if not unverified:
            break
        kept |= unverified  # searched again with their sets kept: a rare case, paid twice
        spent += search.work
        if search.checkpoint is not None:  # not reached yet: as far on in the work in all
            checkpoint = (max(0, search.checkpoint[0] - search.work), search.checkpoint[1])
        else:
            checkpoint = None
    return Candidates(search.masks, search.costs, search.recomputed, search.states, search.work + spent,
                      time.perf_counter() - begin, tuple(search.stopped), search.replayed,
                      search.dominated_sets, search.stranded_sets, kept)


def _unverified_moves(search: _Search) -> int:
    """The movable copies (a bitset) whose move into their reader's group the
    candidates do not bear out: for some candidate ``R`` holding the copy's reader
    but not the copy, ``R`` with the copy is no legal group (a candidate, or one the
    prologue rules left out), or costs more. Where every
    copy's moves hold, a plan over every legal group can be turned into one over the
    candidates that costs no more (``docs/strategies.md``, *Movable copies*): so the
    sets :meth:`_Search.stranded` left out are not needed."""
    if not search.movable:
        return 0
    position = {mask: k for k, mask in enumerate(search.masks)}  # one per mask: no recomputation here
    readers = 0
    for reader, _ in search.movable.values():
        readers |= reader
    holding: dict[int, list[int]] = {}
    for k, mask in enumerate(search.masks):
        for r in bits(mask & readers):
            holding.setdefault(r, []).append(k)
    out = 0
    for t, (reader, _) in search.movable.items():
        for k in holding.get(reader.bit_length() - 1, ()):
            mask = search.masks[k]
            if not mask >> t & 1:
                moved = position.get(mask | 1 << t)
                cost = search.costs[moved] if moved is not None else _judged(search, mask | 1 << t)
                if cost is None or cost > search.costs[k]:
                    out |= 1 << t
                    break
    search.work += len(search.masks)
    return out


def _judged(search: _Search, mask: int) -> int | None:
    """The objective of the group of ``mask``, or ``None`` when it is not legal: for a
    set the prologue rules left out (a matmul alone with another step's copy, not its
    weight's free transpose), whose plan those rules' exchange then mends."""
    g = search.graph
    hull = g.convex_hull(mask)
    if (hull ^ mask) & g.compute_mask:
        return None
    legal, cost = search.decide(Group(g, hull))
    return cost if legal else None


def _replay_waiting(search: _Search) -> None:
    """Once a budget stops the search, each job waiting for an unfinished job of its
    structure takes what that one found so far (legal groups at their own costs, as
    the searched job's are), so that a repeated layer is not left with none of its
    groups while the first layer has some."""
    try:
        for leader in search.leaders.values():
            for follower in leader.followers if leader.stack else ():  # a finished one's have its result
                search.replay(follower, leader)
    except _Stop:  # the candidate cap
        pass


def _searches(search: _Search, jobs: list[_Job]) -> list[_Job]:
    """One pass: each anchor's search goes on for an even share of the work left (at
    most :data:`MAX_WORK_PER_ANCHOR` in all). Returns those that overran their share
    below that cap, to resume in the next pass."""
    overran = []
    for n, job in enumerate(jobs):
        search.check()
        search.found = job.found
        if job.kind == "alone":  # one op: never dominated (_Search.emit)
            search.emit(job.stack[0], job.stack[0])
            continue
        if job.key is None:
            job.key, job.region = search.structure(job)
            leader = search.leaders.setdefault(job.key, job)
            if leader is not job:  # an earlier job of this structure searches for both
                if leader.stack:
                    leader.followers.append(job)
                else:
                    search.replay(job, leader)
                continue
        share = (search.max_work - search.work) // (len(jobs) - n)
        search.anchor_budget = search.work + max(1, min(MAX_WORK_PER_ANCHOR - job.work, share))
        before = search.work
        search.region, search.running = sum(1 << i for i in job.region), job
        search.hull_ok.clear()  # one anchor's hulls: few recur in another's (2-layer LSTM: 805 -> 660 MB, no slower)
        try:
            search.search(job)
        except _AnchorFull:
            job.work += search.work - before
            if job.work < MAX_WORK_PER_ANCHOR:
                overran.append(job)
                continue
            job.stack.clear()  # given up: its jobs of the same structure take what it found
            if "anchor" not in search.stopped:
                search.stopped.append("anchor")
        for follower in job.followers:  # what it found, complete or cut at the anchor's cap
            search.replay(follower, job)
    return overran


def _anchors(graph: Graph, search: _Search) -> list[_Job]:
    """Each anchor's search (see the module docstring), in topological order."""
    pointwise = search.pointwise
    attention_pairs: dict[str, list[Pair]] = {}
    for p in pairs(graph):
        attention_pairs.setdefault(p.c1, []).append(p)
    out: list[_Job] = []
    for i in sorted(search.adj):
        op = graph.ops[graph.order[i]]
        later = ~((1 << (i + 1)) - 1)
        if pointwise >> i & 1:
            out.append(search.job("pointwise", i, pointwise, pointwise & later))
        elif op.op_class == "contraction":
            out.append(search.job("contraction", i, pointwise | (1 << i), pointwise))
            for p in attention_pairs.get(op.name, ()):
                seed = (p.middle | (1 << graph.index[p.c1]) | (1 << graph.index[p.c2])) & graph.compute_mask
                out.append(search.seeded_job("attention", p, seed, pointwise))
            for siblings in _horizontal_seeds(graph, i, search):
                out.append(search.seeded_job("contraction", tuple(bits(siblings)), siblings, pointwise))
        elif op.op_class == "reduction":
            same = graph.reduction_classes[graph.reduction_signature(op.name)]
            out.append(search.job("reduction", i, pointwise | same, pointwise | (same & later)))
        else:
            out.append(_Job("alone", i, [1 << i], 0, 0))
    return out


def _horizontal_seeds(graph: Graph, i: int, search: _Search) -> list[int]:
    """The sets of two or more independent horizontal siblings (``horizontal.py``)
    of the classes whose first member is contraction ``i``, as bitsets, each a seed
    of its own. A class of more than :data:`MAX_SIBLINGS` has too many subsets to
    seed: only the sets of its first k members are, and the enumeration says it
    stopped short."""
    found = []
    for siblings in horizontal.sibling_classes(graph):
        if not siblings >> i & 1 or siblings & -siblings != 1 << i:
            continue
        members = bits(siblings)
        if len(members) > MAX_SIBLINGS:
            subsets = [members[:end] for end in range(2, len(members) + 1)]
            if "siblings" not in search.stopped:
                search.stopped.append("siblings")
        else:
            subsets = [subset for r in range(2, len(members) + 1) for subset in itertools.combinations(members, r)]
        for subset in subsets:
            mask = sum(1 << j for j in subset)
            if horizontal.independent(graph, mask):
                found.append(mask)
    return found
