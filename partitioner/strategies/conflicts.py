"""Ops that no legal group can hold together, and what that forces on every plan.

Two compute ops *conflict* when no legal group holds both (:func:`conflict`). Ops
that pairwise conflict sit in as many groups, and each of those groups launches, so
a set of them (:func:`exclusive_ops`, greedy) counts launches every plan makes: an
unrolled LSTM's cell states, which no GEMM kernel can hold (the gates are slices of
the product, and a slice moves elements), are one launch per step besides the
step's GEMM, which the class counts of ``ilp.structural_bound`` miss. Each of those
groups also reads its member's operands, or what they are computed from, and
writes its member's result where another group reads it, and what it must pass on
to the members after it (:func:`member_bytes`): a weight every step of a
recurrence reads is read once per step. ``ilp.structural_bound`` turns both into a lower bound, which the
ilp uses for the plans it cannot prove (``docs/strategies.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .. import attention, horizontal
from ..graph import Graph, bits
from ..legality import breaks_hereditary, written_violation

#: How many producers up :meth:`Conflicts.least_read` follows an operand (each level
#: tests each producer against the op; an LSTM step's gates are 3 ops from its GEMM).
READ_DEPTH = 4


@dataclass(frozen=True)
class Exclusive:
    """Compute ops (indices) no two of which any legal group holds together, all with a
    non-empty result (each needs a launch of its own); per member, the bytes its
    group must read to get its operands and write of its result
    (:func:`member_bytes`); the storages those reads may be of (each read is of
    one of them); and the members' results those writes are of."""

    ops: tuple[int, ...]
    moved: tuple[tuple[int, int], ...]  # (member index, bytes)
    chained: frozenset[str]
    written: frozenset[str]

    @property
    def bytes(self) -> int:
        """What all its members' groups must read and write, bytes."""
        return sum(b for _, b in self.moved)


class Conflicts:
    """Pairwise conflict tests on one graph, under one op cap, with or without
    recomputation (see :func:`conflict`)."""

    def __init__(self, graph: Graph, max_ops: int, recompute: bool):
        self.g, self.max_ops = graph, max_ops
        self.recomputable = graph.recomputable_mask if recompute else 0
        self.contractions = graph.class_masks.get("contraction", 0)
        self.paired = 0  # contractions a group may hold as an attention pair
        for pair in attention.pairs(graph):
            self.paired |= 1 << graph.index[pair.c1] | 1 << graph.index[pair.c2]
        self.siblings = 0  # contractions a group may hold with horizontal siblings
        for siblings in horizontal.sibling_classes(graph):
            self.siblings |= siblings

    def hull(self, mask: int) -> int:
        """What every legal group holding ``mask`` holds: its convex hull, less the
        paths out of ops it may recompute (which only shrink a group's hull)."""
        return self.g.convex_hull(mask, self.recomputable)

    def anchors(self, hull: int) -> int | tuple[int, ...] | None:
        """The contractions of ``hull`` (as ``legality.written_violation`` takes them)
        when every legal group holding ``hull`` is a contraction group of them, and
        perhaps of more horizontal siblings: there is one, or siblings, and none is
        of an attention pair. Otherwise ``None``."""
        contractions = hull & self.contractions
        if not contractions or contractions & self.paired:
            return None
        found = bits(contractions)
        return found[0] if len(found) == 1 else tuple(found)

    def doomed(self, hull: int) -> bool:
        """Whether no legal group holds the ops ``hull`` (a convex hull): it breaks a
        hereditary rule, or every such group is a contraction group of its
        contractions (:meth:`anchors`) and an op after one of them is no epilogue
        (``legality.written_violation`` with nothing written: the epilogue rules,
        which hold product by product, however many siblings join)."""
        g = self.g
        if breaks_hereditary(g, hull, self.max_ops):
            return True
        anchors = self.anchors(hull)
        return anchors is not None and written_violation(g, "contraction", anchors, hull, set()) is not None

    def must_write(self, hull: int) -> set[str]:
        """Members of ``hull`` every legal group holding it writes: graph outputs, and
        those with a reader that no legal group holds with ``hull`` (:meth:`doomed`);
        never one that may be recomputed, which its readers' groups may compute."""
        g = self.g
        out = set()
        for m in bits(hull & g.compute_mask & ~self.recomputable):
            if g.writes_out[m] or any(self.doomed(self.hull(hull | 1 << r)) for r in bits(g.readers_of[m] & ~hull)):
                out.add(g.order[m])
        return out

    def conflict(self, i: int, j: int) -> bool:
        """Whether no legal group holds compute ops ``i`` and ``j`` (sound, not
        complete: ``False`` may still be such a pair). Every such group holds their
        hull (:meth:`hull`), so it conflicts when the hull is :meth:`doomed`, or
        when every such group is a contraction group of the hull's contractions
        (:meth:`anchors`) and the values it must write (:meth:`must_write`) break
        that kind's rules (``legality.written_violation``, which only grows with
        the group and what it writes): a prologue needed outside, or, for a
        contraction that has no horizontal sibling (one could join and make a side
        value its epilogue), a side value off the product's element count.

        A member whose writing alone would break those rules is written by no
        legal group holding the hull, so every such group holds all its readers
        too: the hull grows by them (:meth:`forced_readers`) and is tested again,
        until nothing more is forced. An LSTM's initial state, a broadcast that
        both layers' first GEMMs slice, is a prologue value of either GEMM that
        the other one needs, so no group holds it with a GEMM; it is a launch of
        its own, which the test on the hull alone missed."""
        hull = self.hull(1 << i | 1 << j)
        while not self.doomed(hull):
            anchors = self.anchors(hull)
            if anchors is None:
                return False
            if written_violation(self.g, "contraction", anchors, hull, self.rule_writes(hull)) is not None:
                return True
            forced = self.forced_readers(hull, anchors)
            if not forced:
                return False
            hull = self.hull(hull | forced)
        return True

    def rule_writes(self, hull: int) -> set[str]:
        """What :meth:`must_write` says every legal group holding ``hull`` writes, less,
        where a horizontal sibling may join the hull's contractions, the values that
        are no prologue value of them (a sibling's product may make such a value its
        epilogue)."""
        written = self.must_write(hull)
        contractions = hull & self.contractions
        if contractions & self.siblings:
            prologue = self.ancestors(contractions)
            written = {name for name in written if prologue >> self.g.index[name] & 1}
        return written

    def ancestors(self, mask: int) -> int:
        """The ops some op of ``mask`` depends on (of contractions: their prologue)."""
        found = 0
        for c in bits(mask):
            found |= self.g.ancestors_mask[c]
        return found

    def forced_readers(self, hull: int, anchors) -> int:
        """Readers outside ``hull`` that every legal group holding it holds: those of a
        member (not recomputable, which another group could compute) whose writing
        alone breaks the rules of the hull's contraction group (only a prologue
        value, where a horizontal sibling may join: see :meth:`rule_writes`). Such
        a group cannot write the member, so no reader of it is outside."""
        g = self.g
        members = hull & g.compute_mask & ~self.recomputable
        if hull & self.contractions & self.siblings:
            members &= self.ancestors(hull & self.contractions)
        forced = 0
        for m in bits(members):
            outside = g.readers_of[m] & ~hull
            if outside and written_violation(g, "contraction", anchors, hull, {g.order[m]}) is not None:
                forced |= outside
        return forced

    def operand_reads(self, u: int) -> tuple[int, frozenset[str]]:
        """Bytes every group holding op ``u`` reads to get its operands, and the
        storages that read may be of (:meth:`least_read` of each operand storage;
        those whose storages meet may be one read, so only the others add up)."""
        g = self.g
        total, counted = 0, frozenset()
        for storage in dict.fromkeys(g.storage[t] for t in g.ops[g.order[u]].tensor_inputs):
            least, storages = self.least_read(u, g.order[u], storage, READ_DEPTH)
            if least and not storages & counted:
                total += least
                counted |= storages
        return total, counted

    def least_read(self, u: int, reader: str, storage: str, depth: int) -> tuple[int, frozenset[str]]:
        """The fewest bytes a group holding op ``u`` and ``reader`` (one of its
        members, which reads ``storage``) reads to get ``storage``, and the storages
        that read may be of. The group reads what ``reader`` touches of it
        (``Graph.touched_bytes``), or holds its producer, and then gets each of the
        producer's operands the same way, up to ``depth`` producers up (beyond, 0):
        the least of the two, where the operands' shares add up if their storages
        are apart (else the largest counts). A graph input is read; so is the result
        of a producer that conflicts with ``u``, which the group cannot hold. A
        producer with no operand storage may be held for nothing."""
        g = self.g
        touched = g.touched_bytes(reader, storage)
        if storage not in g.ops or self.conflict(g.index[storage], u):
            return touched, frozenset((storage,))
        operands = dict.fromkeys(g.storage[t] for t in g.ops[storage].tensor_inputs)
        if not depth or not operands:
            return 0, frozenset()
        parts = [self.least_read(u, storage, o, depth - 1) for o in operands]
        storages = frozenset().union(*(found for _, found in parts))
        apart = sum(len(found) for _, found in parts) == len(storages)
        held = sum(b for b, _ in parts) if apart else max(b for b, _ in parts)
        return min(touched, held), storages | {storage}


def conflict(graph: Graph, i: int, j: int, max_ops: int, recompute: bool = False) -> bool:
    """Whether no legal group (a legal covering's group, with ``recompute``) holds
    both compute ops ``i`` and ``j`` (indices). Sound, not complete: ``True`` is
    proven; ``False`` may still be such a pair. See :meth:`Conflicts.conflict`."""
    return Conflicts(graph, max_ops, recompute).conflict(i, j)


def exclusive_ops(graph: Graph, max_ops: int, recompute: bool = False) -> Exclusive:
    """A set of compute ops with non-empty results that pairwise :func:`conflict`,
    grown greedily: the contractions in topological order, then the other ops from
    the last (the ends of a recurrence's steps, each of which conflicts with every
    GEMM of the net), each tested against the ops taken last first (the nearest,
    which decide most tests). Every legal plan has a group per member, each
    launching, and each moving what :func:`member_bytes` says.

    Cost: a conflict test per pair of members, per other op one test per member
    until one passes, and a few per member's operand (an unrolled 2-layer LSTM of
    32 steps, 1,375 ops: 130 members, 0.1 CPU s here; GPT-2 48L, 4,290 ops: 345
    members, 1.1-1.5 s).
    """
    tests = Conflicts(graph, max_ops, recompute)
    candidates = bits(graph.compute_mask & graph.nonempty_mask)
    contractions = graph.class_masks.get("contraction", 0)
    order = [i for i in candidates if contractions >> i & 1] + [i for i in reversed(candidates)
                                                                 if not contractions >> i & 1]
    taken: list[int] = []
    for v in order:
        if all(tests.conflict(v, u) for u in reversed(taken)):
            taken.append(v)
    taken.sort()
    return Exclusive(tuple(taken), *member_bytes(tests, taken))


def member_bytes(tests: Conflicts, ops: list[int]) -> tuple[tuple[tuple[int, int], ...], frozenset[str],
                                                             frozenset[str]]:
    """Per op of ``ops`` (pairwise conflicting: one group each), the bytes its group
    reads to get its operands and writes; the storages all those reads may be of;
    and the members' results counted as written. A group holding an op gets each
    operand by reading it or by computing it, and so reads at least the least of
    the two (:meth:`Conflicts.least_read`): a recurrence's weight, transposed for
    each step's GEMM, is read in full by each step's group. It writes the op's
    result where it is an output or a reader conflicts with it (so sits in another
    group), unless that reader's group may recompute it; and at least
    :func:`cut_writes`, what it must pass towards the nearest later members, if
    more. Reads and writes of different groups are different, so they add up."""
    g = tests.g
    out, chained, written = [], frozenset(), set()
    cuts = cut_writes(tests, ops)
    for u in ops:
        least, storages = tests.operand_reads(u)
        own = 0
        if not tests.recomputable >> u & 1 and (g.writes_out[u] or any(tests.conflict(r, u)
                                                                      for r in bits(g.readers_of[u]))):
            own = g.ops[g.order[u]].out.nbytes
            written.add(g.order[u])
        out.append((u, least + max(own, cuts[u] + (own if g.writes_out[u] else 0))))
        chained |= storages
    return tuple(out), chained, frozenset(written)


def cut_writes(tests: Conflicts, ops: list[int]) -> dict[int, int]:
    """Per op ``u`` of ``ops`` (pairwise conflicting), bytes its group writes: at least
    a minimum vertex cut between ``u`` and the nearest members after it (those no
    other later member reaches). Every path from ``u`` to such a member ``v``
    leaves ``u``'s group, which cannot hold ``v``; the last op on the path inside
    the group has a reader outside, so the group writes it, unless a group of that
    reader computes it too (a recomputable op, cut at 0 bytes). So the values the
    group writes cut ``u`` from ``v``, weighing their results' bytes. Graph outputs
    weigh 0: every output is counted as written elsewhere (``ilp.structural_bound``).
    An LSTM step's GEMM group writes the gates (or the product) that its cell's
    group reads, and that group the cell and hidden states. Each group writes its
    own values, so the cuts of different members add up."""
    g = tests.g
    weight = [0 if tests.recomputable >> i & 1 or g.writes_out[i] else g.ops[name].out.nbytes
              for i, name in enumerate(g.order)]
    members = sum(1 << u for u in ops)
    cuts = {}
    for u in ops:
        targets = later = g.descendants_mask[u] & members
        for v in bits(later):
            targets &= ~g.descendants_mask[v]
        region = g.descendants_mask[u] & tests.ancestors(targets) & g.compute_mask & ~targets
        cuts[u] = _vertex_cut(g, u, region, targets, weight) if targets else 0
    return cuts


def _vertex_cut(g: Graph, u: int, region: int, targets: int, weight: list[int]) -> int:
    """The least total ``weight`` of ops of ``u`` and ``region`` whose removal leaves no
    producer-to-reader path from ``u`` to ``targets`` (a maximum flow, each op split
    into an entry and an exit joined by its weight)."""
    flow = nx.DiGraph()
    for x in [u, *bits(region)]:
        flow.add_edge(("in", x), ("out", x), capacity=weight[x])
        for r in bits(g.readers_of[x] & (region | targets)):
            flow.add_edge(("out", x), "sink" if targets >> r & 1 else ("in", r))
    return nx.maximum_flow_value(flow, ("in", u), "sink") if flow.has_node("sink") else 0
