"""The operator graph: ops, tensors, a ``networkx.DiGraph`` and reachability.

A :class:`Graph` is built by ``loader.py`` and never mutated afterwards. Nodes of
``Graph.dag`` are op names in topological order; an edge ``u -> v`` means ``v``
reads the tensor ``u`` produces, and carries ``tensor`` (its name) and ``bytes``
(its size in global memory). Graph inputs are tensors without a producer node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Mapping

import networkx as nx

from .dtypes import Literal
from .ops import REGISTRY, OpSpec, TensorType, normalize_axes


def bits(mask: int) -> list[int]:
    """Indices of the set bits of ``mask`` (op positions of a bitset), ascending."""
    out = []
    shift = 0
    while mask:  # shifting the rest down keeps a sparse bitset of a whole network short
        low = (mask & -mask).bit_length()
        shift += low
        out.append(shift - 1)
        mask >>= low
    return out


@dataclass(frozen=True)
class Op:
    """One primitive op; its result is the tensor of the same name.

    Attributes:
        name: op and result tensor name.
        kind: registry key (``"add"``, ``"matmul"``, ...).
        inputs: tensor names and numeric literals, in operand order.
        attrs: attributes with defaults filled in.
        out: result shape and dtype (the stated dtype when the file gives one).
        promoted: the dtype the op computes its result in before any stated cast.
        origin: the composite op this primitive was expanded from, or ``None``.
    """

    name: str
    kind: str
    inputs: tuple[str | Literal, ...]
    attrs: Mapping
    out: TensorType
    promoted: str
    origin: str | None = None

    # Cached: the enumeration reads these millions of times on a whole network, and an
    # Op never changes (frozen), so each is derived once.
    @cached_property
    def spec(self) -> OpSpec:
        return REGISTRY[self.kind]

    @cached_property
    def op_class(self) -> str:
        return self.spec.op_class

    @cached_property
    def is_view(self) -> bool:
        """A reshape that keeps its dtype shares its input's memory; one that states
        another dtype converts, so it is a real op."""
        return self.spec.is_view and self.out.dtype == self.promoted

    @cached_property
    def tensor_inputs(self) -> tuple[str, ...]:
        """Distinct tensor operands, in first-use order."""
        return tuple(dict.fromkeys(i for i in self.inputs if isinstance(i, str)))


@dataclass
class Graph:
    """A loaded, validated operator graph (format v1, composites expanded).

    Attributes:
        name: the graph's name (the file stem by default).
        source: free text on where the graph came from.
        inputs: graph input tensors, in file order.
        ops: primitive ops in a deterministic topological order.
        outputs: tensors that must be written to global memory.
        path: the file it was loaded from, if any.
        values: constant values of inputs (format 1.1) held in memory, by input
            name, in each input's shape and dtype: the file's inline ones, and
            every one an importer kept (``ImportResult.load``).
        values_file: the ``.npz`` side file of larger constant values the graph
            names, relative to ``path`` (``partitioner.values.constants`` reads it).
        hooks: semantics of ``custom`` ops an importer attached, in memory only:
            op name -> a callable from the op's tensor operands (NumPy arrays) to
            its result (the framework's own op, e.g. ``torch.topk``).
        cache: derived structure other modules compute once per graph (e.g. the
            attention structure of a pair of contractions); never part of equality.
    """

    name: str
    source: str
    inputs: dict[str, TensorType]
    ops: dict[str, Op]
    outputs: tuple[str, ...]
    path: str | None = None
    values: dict = field(default_factory=dict, repr=False, compare=False)
    values_file: str | None = None
    hooks: dict = field(default_factory=dict, repr=False, compare=False)
    dag: nx.DiGraph = field(init=False, repr=False)
    cache: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.dag = nx.DiGraph()
        for op in self.ops.values():
            self.dag.add_node(op.name, op=op)
        for op in self.ops.values():
            for tensor in op.tensor_inputs:
                if tensor in self.ops:
                    self.dag.add_edge(tensor, op.name, tensor=tensor, bytes=self.ops[tensor].out.nbytes)

    # ------------------------------------------------------------ tensors

    def tensor(self, name: str) -> TensorType:
        """Shape and dtype of a graph input or an op's result."""
        return self.ops[name].out if name in self.ops else self.inputs[name]

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        """Tensor name -> ops reading it, in topological order."""
        readers: dict[str, list[str]] = {name: [] for name in (*self.inputs, *self.ops)}
        for op in self.ops.values():
            for tensor in op.tensor_inputs:
                readers[tensor].append(op.name)
        return {name: tuple(ops) for name, ops in readers.items()}

    @cached_property
    def storage(self) -> dict[str, str]:
        """Tensor name -> the tensor whose memory it is: a reshape's result aliases its input."""
        base: dict[str, str] = {name: name for name in self.inputs}
        for op in self.ops.values():
            base[op.name] = base[op.inputs[0]] if op.is_view else op.name
        return base

    def producer(self, tensor: str) -> str | None:
        """The op producing ``tensor``; ``None`` for a graph input."""
        return tensor if tensor in self.ops else None

    @cached_property
    def storage_reads(self) -> dict[str, tuple[str, ...]]:
        """Op name -> distinct storages its tensor operands live in (empty for views,
        which read nothing themselves)."""
        return {
            op.name: () if op.is_view else tuple(dict.fromkeys(self.storage[t] for t in op.tensor_inputs))
            for op in self.ops.values()
        }

    @cached_property
    def storage_readers(self) -> dict[str, int]:
        """Storage -> bitset of the non-view ops that read it (through any view of it)."""
        readers: dict[str, int] = {}
        for op in self.ops.values():
            for base in self.storage_reads[op.name]:
                readers[base] = readers.get(base, 0) | (1 << self.index[op.name])
        return readers

    @cached_property
    def output_storages(self) -> frozenset[str]:
        """Storages that hold a graph output (directly or through a view)."""
        return frozenset(self.storage[t] for t in self.outputs)

    @cached_property
    def op_keys(self) -> tuple[int, ...]:
        """Per op index, a small int naming what the op is apart from its name and
        operands: kind, attributes, result type, computed dtype and whether it is a
        view. Equal keys, equal ops (``Group.signature`` builds on them)."""
        ids: dict[str, int] = {}
        return tuple(ids.setdefault(repr((op.kind, sorted(op.attrs.items()), op.out, op.promoted, op.is_view)),
                                    len(ids)) for op in self.ops.values())

    @cached_property
    def operand_keys(self) -> tuple[tuple[tuple, ...], ...]:
        """Per op index, its operands as ``Group.signature`` reads them: a literal as
        ``(None, None, (type, repr))``; a tensor as ``(producer, storage, key)`` (the
        producer's op index, ``None`` for a graph input), the key
        a small int naming how it is read from outside a group that does not produce
        it (its type, its storage's type and the views, by ``op_keys``, from its
        storage to it: equal keys, equal memory read the same way)."""
        ids: dict[str, int] = {}
        chain: dict[str, tuple] = {name: () for name in self.inputs}
        for name, op in self.ops.items():
            chain[name] = (*chain[op.inputs[0]], self.op_keys[self.index[name]]) if op.is_view else ()
        key = {name: ids.setdefault(repr((self.tensor(name), self.tensor(self.storage[name]), chain[name])), len(ids))
               for name in chain}
        return tuple(tuple((None, None, (type(t).__name__, repr(t))) if not isinstance(t, str)
                           else (self.index.get(t), self.storage[t], key[t]) for t in op.inputs)
                     for op in self.ops.values())

    @cached_property
    def input_producers(self) -> tuple[tuple[int, ...], ...]:
        """Per op index, the indices of the ops producing its tensor operands (graph
        inputs left out), in first-use order."""
        return tuple(tuple(self.index[t] for t in op.tensor_inputs if t in self.ops) for op in self.ops.values())

    @cached_property
    def sink_mask(self) -> int:
        """Bitset of the compute ops whose value nothing reads and no output holds: a
        sink of every group that computes it."""
        return self.mask(name for name in self.names(self.compute_mask)
                         if not self.storage_readers.get(name, 0) and name not in self.output_storages)

    @cached_property
    def readers_of(self) -> tuple[int, ...]:
        """Per op index, ``storage_readers`` of its result (0 for a view)."""
        return tuple(self.storage_readers.get(name, 0) for name in self.order)

    @cached_property
    def writes_out(self) -> tuple[bool, ...]:
        """Per op index, whether its result's storage holds a graph output."""
        return tuple(name in self.output_storages for name in self.order)

    # ------------------------------------------------------------ order and reachability

    @cached_property
    def index(self) -> dict[str, int]:
        """Op name -> position in the topological order (used for tie-breaking and bitsets)."""
        return {name: i for i, name in enumerate(self.ops)}

    @cached_property
    def order(self) -> tuple[str, ...]:
        return tuple(self.ops)

    @cached_property
    def descendants_mask(self) -> tuple[int, ...]:
        """Per op index, a bitset (Python int) of the ops reachable from it."""
        return self._reachable_through(lambda name: True)

    def _reachable_through(self, passes: Callable[[str], bool]) -> tuple[int, ...]:
        """Per op index, a bitset of the ops reachable from it through ops ``passes`` accepts."""
        masks = [0] * len(self.ops)
        for i in reversed(range(len(self.order))):
            for succ in self.dag.successors(self.order[i]):
                if passes(succ):
                    j = self.index[succ]
                    masks[i] |= masks[j] | (1 << j)
        return tuple(masks)

    @cached_property
    def ancestors_mask(self) -> tuple[int, ...]:
        """Per op index, a bitset of the ops that reach it."""
        masks = [0] * len(self.ops)
        for i, name in enumerate(self.order):
            for pred in self.dag.predecessors(name):
                j = self.index[pred]
                masks[i] |= masks[j] | (1 << j)
        return tuple(masks)

    @cached_property
    def class_masks(self) -> dict[str, int]:
        """Fusion class -> bitset of the compute (non-view) ops of that class."""
        masks: dict[str, int] = {}
        for name, op in self.ops.items():
            if not op.is_view:
                masks[op.op_class] = masks.get(op.op_class, 0) | (1 << self.index[name])
        return masks

    def reduction_signature(self, name: str) -> tuple:
        """(input shape, sorted axes) of a reduction: reductions with equal signatures
        reduce the same rows."""
        op = self.ops[name]
        shape = self.tensor(op.tensor_inputs[0]).shape
        return shape, normalize_axes(op.attrs.get("axes"), len(shape))

    @cached_property
    def reduction_classes(self) -> dict[tuple, int]:
        """Reduction signature -> bitset of the reductions that have it."""
        masks: dict[tuple, int] = {}
        for name in self.names(self.class_masks.get("reduction", 0)):
            sig = self.reduction_signature(name)
            masks[sig] = masks.get(sig, 0) | (1 << self.index[name])
        return masks

    @cached_property
    def links(self) -> tuple[int, ...]:
        """Per op index, a bitset of the ops it is directly tied to: its producers and
        consumers, and the other readers of a storage it reads."""
        masks = [0] * len(self.ops)
        for i, name in enumerate(self.order):
            for other in (*self.dag.predecessors(name), *self.dag.successors(name)):
                masks[i] |= 1 << self.index[other]
            for base in self.storage_reads[name]:
                masks[i] |= self.storage_readers.get(base, 0)
            masks[i] &= ~(1 << i)
        return tuple(masks)

    @cached_property
    def compute_mask(self) -> int:
        """Bitset of every op except views (the ops that cost a launch when alone)."""
        return self.mask(name for name, op in self.ops.items() if not op.is_view)

    @cached_property
    def nonempty_mask(self) -> int:
        """Bitset of the compute ops every group holding them launches: an op with
        a non-empty result that is a graph output or is read by such an op. The
        others (empty results, non-empty ones that only feed empty results, dead
        code) may sit in groups that write only empty results, which compute and
        launch nothing (``Group.empty``); so a lower bound counts only these."""
        hiding: set[str] = set()
        for name in reversed(list(self.ops)):
            op = self.ops[name]
            if op.is_view:
                continue
            readers = self.names(self.storage_readers.get(name, 0))
            if not op.out.numel or (name not in self.output_storages and all(r in hiding for r in readers)):
                hiding.add(name)
        return self.mask(name for name, op in self.ops.items() if not op.is_view and name not in hiding)

    def touched_bytes(self, op_name: str, storage: str) -> int:
        """Bytes of ``storage`` that op ``op_name`` reads (the op reads it): a slice
        touches the elements it selects, a gather at most one table element per result
        element (its indices are data: a bound, never above the table), every other
        op the whole storage. Counted in elements; a strided slice's partly used
        sectors are not counted."""
        memo = self.cache.setdefault("touched_bytes", {})  # every candidate's pricing asks
        found = memo.get((op_name, storage))
        if found is None:
            found = memo[op_name, storage] = self._touched_bytes(op_name, storage)
        return found

    def _touched_bytes(self, op_name: str, storage: str) -> int:
        op, full = self.ops[op_name], self.tensor(storage).nbytes
        selecting = op.kind == "slice" or op.kind == "gather" and self.storage[op.inputs[1]] != storage
        if not selecting or self.storage[op.inputs[0]] != storage:
            return full
        return min(full, op.out.numel * self.tensor(storage).nbytes // max(self.tensor(storage).numel, 1))

    def least_touched(self, storage: str, readers: int = -1) -> int:
        """The fewest bytes of ``storage`` any one of its non-view readers (those in the
        bitset ``readers``) touches (:meth:`touched_bytes`): at least what a group
        reading it through them reads; 0 when none reads it."""
        mask = self.storage_readers.get(storage, 0) & readers
        return min((self.touched_bytes(r, storage) for r in self.names(mask)), default=0)

    def all_touched(self, storage: str, readers: int = -1) -> int:
        """The bytes of ``storage`` its non-view readers (those in the bitset
        ``readers``) touch together, at most the storage: at least what all the
        groups holding them read of it (each group reads at most the storage, so
        the groups' reads add up to at least this)."""
        mask = self.storage_readers.get(storage, 0) & readers
        return min(self.tensor(storage).nbytes, sum(self.touched_bytes(r, storage) for r in self.names(mask)))

    def last_readers(self, ops: Iterable[str]) -> dict[str, int]:
        """Tensor -> position (in ``ops``) of the last of ``ops`` that reads it, for
        the tensors they read: when a value held for them can be dropped."""
        last: dict[str, int] = {}
        for position, name in enumerate(ops):
            for tensor in self.ops[name].tensor_inputs:
                last[tensor] = position
        return last

    def mask(self, ops: Iterable[str]) -> int:
        """Bitset of a set of op names."""
        bits = 0
        for name in ops:
            bits |= 1 << self.index[name]
        return bits

    def names(self, mask: int, limit: int | None = None) -> list[str]:
        """Op names of a bitset, in topological order (the first ``limit`` of them, if given:
        each costs a pass over the whole bitset)."""
        out, order, shift = [], self.order, 0
        while mask and len(out) != limit:
            low = (mask & -mask).bit_length()
            shift += low
            out.append(order[shift - 1])
            mask >>= low
        return out

    def convex_hull(self, mask: int, recomputed: int = 0) -> int:
        """The smallest convex superset of ``mask``: the set plus every op on a path
        between two of its members. A path that leaves a ``recomputed`` member (or a
        view of one) does not count, but for the views on it: the member's readers
        outside recompute it (``recomputable_mask``), so they need nothing of this
        group."""
        below = above = 0
        rest = mask
        descendants, ancestors = self.descendants_mask, self.ancestors_mask
        while rest:
            low = rest & -rest
            i = low.bit_length() - 1
            base = self.base_index[i] if recomputed else -1  # (a lookup saved on the common path)
            below |= self.view_closure[i] if base >= 0 and recomputed >> base & 1 else descendants[i]
            above |= ancestors[i]
            rest ^= low
        return mask | (below & above)

    @cached_property
    def base_index(self) -> tuple[int, ...]:
        """Per op index, the index of the op whose storage its result is (itself, or
        for a view the op it views), or -1 for a view of a graph input."""
        return tuple(self.index.get(self.storage[name], -1) for name in self.order)

    @cached_property
    def view_closure(self) -> tuple[int, ...]:
        """Per op index, a bitset of the views reachable from it through views alone."""
        return self._reachable_through(lambda name: self.ops[name].is_view)

    @cached_property
    def recomputable_mask(self) -> int:
        """Bitset of the compute ops a plan may compute in more than one group
        (recomputation; ``docs/legality.md``): those of :attr:`input_derived_mask`,
        recomputed from the graph inputs, and the elementwise, broadcast and layout
        ops whose value is no graph output, that two or more ops read, no path
        between which passes another compute op, and that no group can hold with
        all its readers (their convex hull breaks a hereditary rule,
        ``legality.hereditary_violation``, at any op cap: a GEMM and a reduction
        over another axis). Every plan then puts a reader apart from such an op,
        which must be written or recomputed there, from its operands, which each
        group that recomputes it reads or recomputes in turn. (The
        enumeration's must-write cuts skip every recomputable op: making every
        value two ops read recomputable gave GPT-2 2L 2.4 million variants of its
        groups to decide, against 10,613; a residual sum, read by the next layer
        norm and the next residual add with a whole block between them, let the
        search grow sets across layers.)"""
        from .legality import hereditary_violation  # (legality reads graphs: imported when first needed)

        able = 0
        for i in range(len(self.order)):
            readers = self.readers_of[i]
            if not (self._pointwise_value(i) and readers & (readers - 1)):
                continue
            hull = self.convex_hull(1 << i | readers)
            if not (hull & ~readers & self.compute_mask) ^ (1 << i) and \
                    hereditary_violation(self, hull, len(self.order)) is not None:
                able |= 1 << i
        return able | self.input_derived_mask

    @cached_property
    def never_recomputed_mask(self) -> int:
        """Bitset of the ops of :attr:`recomputable_mask` that no legal covering
        recomputes: one with a reader that no group can hold while recomputing it
        (that reader, the op and, for an op of :attr:`input_derived_mask`, its
        producers back to the graph inputs break a hereditary rule: a gather of a
        RoPE table by the position ids), since a recomputed op is never written, so
        every group holding a reader of it holds it (``legality.check_covering``);
        and each op of :attr:`input_derived_mask` below such an op of it, since a
        group that recomputes one of those recomputes its producers too. Every plan
        computes these once; candidate enumeration tries no copies of them."""
        from .legality import hereditary_violation  # (legality reads graphs: imported when first needed)

        derived, never = self.input_derived_mask, 0
        for i in bits(self.recomputable_mask):
            held = 1 << i | (self.ancestors_mask[i] & derived if derived >> i & 1 else 0)
            if any(hereditary_violation(self, held | 1 << r, len(self.order)) is not None
                   for r in bits(self.readers_of[i])):
                never |= 1 << i | (self.descendants_mask[i] & derived if derived >> i & 1 else 0)
        return never & self.recomputable_mask

    @cached_property
    def input_derived_mask(self) -> int:
        """Bitset of the recomputable ops (:attr:`recomputable_mask`) whose value is a
        function of the graph inputs and literals alone (masks, position ids, RoPE
        tables, casts of parameters): their compute producers are such ops too, and
        a group that recomputes one recomputes those as well, back to the inputs."""
        derived = 0
        for i, name in enumerate(self.order):
            producers = (self.index.get(self.storage[t], -1) for t in self.ops[name].tensor_inputs)
            if self._pointwise_value(i) and all(p < 0 or derived >> p & 1 for p in producers):
                derived |= 1 << i
        shared = 0
        for i in bits(derived):
            if self.readers_of[i].bit_count() > 1:
                shared |= 1 << i | self.ancestors_mask[i]
        return derived & shared

    def _pointwise_value(self, i: int) -> bool:
        """Whether op ``i`` is an elementwise, broadcast or layout op (not a view)
        whose value is no graph output."""
        op = self.ops[self.order[i]]
        return (not op.is_view and op.op_class in ("elementwise", "broadcast", "injective")
                and not self.writes_out[i])

    @cached_property
    def dead_ops(self) -> tuple[str, ...]:
        """Ops whose result reaches no graph output (kept, and reported as dead code)."""
        live = 0
        for out in self.outputs:
            if out in self.ops:
                i = self.index[out]
                live |= self.ancestors_mask[i] | (1 << i)
        return tuple(name for i, name in enumerate(self.order) if not live >> i & 1)

    @property
    def composites(self) -> dict[str, list[str]]:
        """Composite op name -> the primitive ops it expanded into, in order."""
        groups: dict[str, list[str]] = {}
        for op in self.ops.values():
            if op.origin is not None:
                groups.setdefault(op.origin, []).append(op.name)
        return groups
