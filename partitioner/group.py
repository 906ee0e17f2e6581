"""What a fusion group is: its members, the memory it reads and writes, its kind.

These are structural facts shared by ``legality.py`` and ``cost.py``; neither
re-derives them. Memory is counted per *storage*: a ``reshape`` result is a view
that shares its input's bytes, so a kernel reading a tensor and a view of it reads
that memory once, and a view placed in any group moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .graph import Graph, Op, bits
from .ops import ALONE_CLASSES


class cached_property:
    """``functools.cached_property`` without its lock: Python 3.11's takes a lock on
    each first access, which the enumeration makes for every property of tens of
    thousands of groups, each read once (under cProfile on Phi-3 2L: 2.1 s of 45 s
    in the stock descriptor, 1.1 s in this one; 3.12 dropped the lock). A Group is
    immutable, so computing a value twice in a race would be harmless."""

    def __init__(self, func):
        self.func = func
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)
        return value


#: Template kind of a group, by the op classes it contains (see docs/legality.md).
KINDS = ("view", "pointwise", "reduction", "contraction", "attention", "single")


@dataclass(frozen=True)
class Group:
    """One fusion group of ``graph``: a set of op names (given as a bitset).

    Properties (all derived, cached):
        ops: members in topological order; compute: the non-view members.
        kind: ``view`` (only views: free), ``pointwise``, ``reduction``,
            ``contraction`` (one contraction, or independent ones: a horizontal
            group), ``attention`` (two contractions with a path between them, or a
            contraction with reductions: only a FlashAttention-style group can be
            legal so)
            or ``single`` (a gather or custom op).
        reads: storages the group reads from global memory (produced outside it or
            graph inputs), each once; ``bytes_read`` counts the bytes of them its
            ops touch.
        writes: storages produced in the group that are graph outputs, or read by
            an op outside it or by a ``recomputed`` member (whose other copies read
            them from memory), less the ``recomputed`` ones.
        sinks: storages produced in the group that nothing in it reads and that are
            not written (dead values).
    """

    graph: Graph
    mask: int
    #: members that other groups of the plan compute too (``Graph.recomputable_mask``):
    #: never written, since every group that reads one computes it.
    recomputed: int = 0

    @classmethod
    def of(cls, graph: Graph, ops) -> "Group":
        return cls(graph, graph.mask(ops))

    @cached_property
    def indices(self) -> tuple[int, ...]:
        """Members' op indices, ascending (topological order)."""
        return tuple(bits(self.mask))

    @cached_property
    def ops(self) -> tuple[str, ...]:
        order = self.graph.order
        return tuple(order[i] for i in self.indices)

    @cached_property
    def signature(self) -> tuple:
        """The group up to the names of its ops and tensors: per member, in order, what
        it is (``Graph.op_keys``), where each operand comes from (a member's position,
        a literal, or an outside storage numbered in first-read order with how it is
        read: ``Graph.operand_keys``) and whether its value is written. Legality and
        cost read nothing else of a convex group, so convex groups with equal
        signatures (a repeated layer's) are equally legal and cost the same; the
        candidate enumeration and the baselines' merges decide each signature once.
        (Whether a group is convex depends on paths outside it, which the signature
        does not hold.)"""
        g, mask = self.graph, self.mask
        members = self.indices
        local = {i: k for k, i in enumerate(members)}
        index = g.index
        written = {index[name] for name in self.writes}
        outside: dict[str, int] = {}
        out = []
        for i in members:
            operands = tuple([key if storage is None else local[producer]
                              if producer is not None and mask >> producer & 1
                              else (outside.setdefault(storage, len(outside)), key)
                              for producer, storage, key in g.operand_keys[i]])
            out.append((g.op_keys[i], operands, i in written))
        return tuple(out)

    @cached_property
    def compute(self) -> tuple[Op, ...]:
        return tuple(self.graph.ops[n] for n in self.ops if not self.graph.ops[n].is_view)

    @cached_property
    def compute_mask(self) -> int:
        return self.graph.mask(op.name for op in self.compute)

    @cached_property
    def classes(self) -> frozenset[str]:
        return frozenset(op.op_class for op in self.compute)

    @cached_property
    def kind(self) -> str:
        classes = self.classes
        if not classes:
            return "view"
        if "contraction" in classes:
            g = self.graph
            products = self.compute_mask & g.class_masks["contraction"]
            chained = any(g.descendants_mask[i] & products for i in bits(products))
            return "attention" if chained or "reduction" in classes else "contraction"
        if "reduction" in classes:
            return "reduction"
        if classes & ALONE_CLASSES:
            return "single"
        return "pointwise"

    @cached_property
    def empty(self) -> bool:
        """Every result the group writes has zero elements (for a group that writes
        nothing, every compute op's result): nothing it computes can be seen, so it
        computes nothing, reads nothing and launches nothing, whatever it fuses (a
        non-empty transpose feeding an empty matmul included)."""
        if not self.compute:
            return False
        g = self.graph
        return all(g.ops[name].out.numel == 0 for name in self.writes or [op.name for op in self.compute])

    @cached_property
    def launches(self) -> int:
        """Kernel launches: one, or none for a group of views only or of empty tensors."""
        return 0 if self.kind == "view" or self.empty else 1

    @cached_property
    def reads(self) -> tuple[str, ...]:
        g, mask = self.graph, self.mask
        index = g.index  # a storage is produced inside when it is a member's result
        found: dict[str, None] = {}
        for op in self.compute:
            for base in g.storage_reads[op.name]:
                i = index.get(base)
                if i is None or not mask >> i & 1:
                    found[base] = None
        return tuple(found)

    @cached_property
    def writes(self) -> tuple[str, ...]:
        g, mask, recomputed = self.graph, self.mask, self.recomputed
        readers, output = g.readers_of, g.writes_out
        compute = g.compute_mask
        return tuple(g.order[i] for i in self.indices if compute >> i & 1 and not recomputed >> i & 1
                     and (output[i] or readers[i] & ~mask or readers[i] & recomputed))

    @cached_property
    def sinks(self) -> tuple[str, ...]:
        g = self.graph
        written = set(self.writes)
        return tuple(
            op.name
            for op in self.compute
            if op.name not in written and not g.storage_readers.get(op.name, 0) & self.mask
        )

    @cached_property
    def bytes_read(self) -> int:
        """Bytes read from global memory: the sum of :attr:`bytes_read_of`."""
        return sum(self.bytes_read_of.values())

    @cached_property
    def bytes_read_of(self) -> dict[str, int]:
        """Per storage read (:attr:`reads`), the bytes read of it from global memory:
        what the group's readers of it touch (``Graph.touched_bytes``: a slice its
        elements, a gather at most a table element per result element), summed and
        at most the storage; 0 for each in a group of no elements."""
        g = self.graph
        touched = dict.fromkeys(self.reads, 0)
        if self.empty:  # no element is computed, so no operand is read
            return touched
        for op in self.compute:
            for base in g.storage_reads[op.name]:
                if base in touched:
                    touched[base] += g.touched_bytes(op.name, base)
        return {s: min(g.tensor(s).nbytes, n) for s, n in touched.items()}

    @cached_property
    def bytes_written(self) -> int:
        return sum(self.graph.tensor(s).nbytes for s in self.writes)

    @cached_property
    def stages(self) -> dict[str, int]:
        """Tensor -> reduction stage: how many reductions of this group lie on the
        longest path to it (external tensors are stage 0). A reduction of stage-k
        inputs produces stage k+1; ops run in the stage of their latest input."""
        order = self.graph.order
        return {order[i]: s for i, s in self._stages[0].items()}

    @cached_property
    def _stages(self) -> tuple[dict[int, int], dict[str, int]]:
        """(each member's result stage by op index, each member's run stage by name),
        in one pass; with no reduction, every stage is 0."""
        g = self.graph
        reductions = self.mask & g.class_masks.get("reduction", 0)
        if not reductions:
            return dict.fromkeys(self.indices, 0), dict.fromkeys(self.ops, 0)
        order, producers = g.order, g.input_producers
        stage: dict[int, int] = {}
        runs: dict[str, int] = {}
        for i in self.indices:
            s = max([stage.get(j, 0) for j in producers[i]], default=0)
            runs[order[i]] = s
            stage[i] = s + (reductions >> i & 1)
        return stage, runs

    @property
    def run_stages(self) -> dict[str, int]:
        """Member name -> the stage it runs in: that of its latest input."""
        return self._stages[1]

    def run_stage(self, op: Op) -> int:
        """The stage a member runs in: that of its latest input."""
        return self.run_stages[op.name]
