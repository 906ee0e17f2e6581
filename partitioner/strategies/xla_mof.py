"""XLA GPU's multi-output fusion, which runs after priority fusion in its pipeline.

Follows ``xla/service/gpu/transforms/multi_output_fusion.cc`` of openxla/xla
(``DoMultiOutputFusion``, ``FuseSiblings``, ``IsSiblingFusionCandidate``,
``CanFuseSiblings``, ``ParameterSlicesAreNonOverlapping``,
``GetProducerConsumerMultiOutputFusionCandidates``, ``ProducerCandidateIsFusible``)
and ``xla/service/gpu/gpu_fusible.cc`` (``IsProducerMultiOutputFusible``). Every
value that leaves a group or enters the graph is a *parent*, taken uses before
definitions (reverse topological order), and for each:

1. *Sibling fusion.* The groups that read it and can root a multi-output fusion
   (loop and reduction kernels: no contraction, gather, scan or custom op, no
   frozen attention group) are sorted stably, multi-output groups first, then
   fusions of several ops, then lone ops. Each fusion, in that order, takes every
   later sibling it can: one not connected to it by a path, whose merge is legal
   (our legality stands for ``ShapesCompatibleForMultiOutputFusion`` and
   ``FusionFitsInBudget``), and, when both read a parent of 1024 bytes or more
   through a slice, whose slice overlaps its own. A parent of one element is not
   a profitable shared operand and is skipped.
2. *Producer-consumer fusion.* The group that produces the parent (a loop
   kernel that writes one value and transposes nothing, ``IsProducerMultiOutputFusible``)
   merges with the first consumer group, by the order above, that can root a
   multi-output fusion, whose merge is legal and closes no cycle, and which XLA's
   time model says is no slower fused (``EstimateRunTimesForMultiOutputFusion``);
   its value stays written for the other readers. A producer with one consumer
   group that is not multi-output is skipped: priority fusion declined it already.
"""

from __future__ import annotations

from typing import Callable

from ..graph import Graph, bits
from ..group import Group
from ..ops import slice_params
from .merging import Merging

#: ``ParameterSlicesAreNonOverlapping``: smaller parents are shared whatever their slices.
SMALL_PARENT_BYTES = 1024
#: Op classes of groups that cannot root a multi-output fusion (``IsFusibleAsMultiOutputFusionRoot``).
_NOT_ROOTS = frozenset({"contraction", "gather", "opaque", "scan"})


def multi_output_fusion(state: Merging, time: Callable[[Group], float]) -> None:
    """Run both parts (module docstring) over every parent of ``state``'s groups;
    ``time`` is XLA's modelled run time of a group (``xla.xla_time``)."""
    g = state.graph
    parents = [*g.inputs, *g.names(g.compute_mask)]
    ranges: dict[str, list[tuple[int, int]]] = {}  # slice name -> its index ranges (_slices_overlap)
    for parent in reversed(parents):
        _fuse_siblings(state, parent, ranges)
        _fuse_into_consumer(state, parent, time)


def _can_root(state: Merging, gid: int) -> bool:
    return gid not in state.frozen and not state.group(gid).classes & _NOT_ROOTS


def _priority(state: Merging, gid: int) -> int:
    """``FusionPriority``: 2 for a multi-output group, 1 for a fusion, 0 for a lone op."""
    group = state.group(gid)
    return 2 if len(group.writes) > 1 else 1 if len(group.compute) > 1 else 0


def _readers(state: Merging, parent: str) -> list[int]:
    """Groups reading storage ``parent`` other than its producer's, by priority (stable)."""
    g = state.graph
    producer = state.owner.get(g.index[parent]) if parent in g.ops else None
    found = sorted({state.owner[i] for i in bits(g.storage_readers.get(parent, 0))} - {producer})
    return sorted(found, key=lambda gid: -_priority(state, gid))


def _connected(g: Graph, a: int, b: int) -> bool:
    """Whether a path joins an op of the compute-op set ``a`` and one of ``b``."""
    below = above = 0
    for i in bits(a):
        below |= g.descendants_mask[i]
        above |= g.ancestors_mask[i]
    return bool((below | above) & b)


def _slice_of(state: Merging, gid: int, parent: str):
    """The one slice through which group ``gid`` reads ``parent``, or ``None``."""
    g = state.graph
    readers = [g.ops[n] for n in g.names(g.storage_readers.get(parent, 0) & state.members[gid])]
    if len(readers) == 1 and readers[0].kind == "slice":
        return readers[0]
    return None


def _slices_overlap(state: Merging, a: int, b: int, parent: str, ranges: dict[str, list[tuple[int, int]]]) -> bool:
    """``ParameterSlicesAreNonOverlapping`` allows the pair (see module docstring);
    ``ranges`` caches each slice's index ranges (a 600-way split tries 360,000 pairs)."""
    g = state.graph
    if g.tensor(parent).nbytes < SMALL_PARENT_BYTES:
        return True
    sa, sb = _slice_of(state, a, parent), _slice_of(state, b, parent)
    if sa is None or sb is None or g.tensor(sa.inputs[0]).shape != g.tensor(sb.inputs[0]).shape:
        return True
    shape = g.tensor(sa.inputs[0]).shape
    for s in (sa, sb):
        if s.name not in ranges:
            # each axis's half-open range of indices, whatever the step's sign (XLA ignores strides)
            ranges[s.name] = [(start, stop) if step > 0 else (stop + 1, start + 1)
                              for start, stop, step in slice_params(shape, s.attrs)]
    return all(s1 < e2 and s2 < e1 for (s1, e1), (s2, e2) in zip(ranges[sa.name], ranges[sb.name]))


def _fuse_siblings(state: Merging, parent: str, ranges: dict[str, list[tuple[int, int]]]) -> None:
    g = state.graph
    if g.tensor(parent).numel <= 1:
        return  # IsProfitableOperand: an effective scalar
    siblings = [gid for gid in _readers(state, parent) if _can_root(state, gid)]
    i = 0
    while i < len(siblings):
        first = siblings[i]
        if len(state.group(first).compute) < 2:
            i += 1
            continue  # the first of a pair is a fusion
        j = i + 1
        while j < len(siblings):
            other = siblings[j]
            if (not _connected(g, state.members[first], state.members[other])
                    and _slices_overlap(state, first, other, parent, ranges)
                    and state.mergeable([first, other]) is not None):
                first = siblings[i] = state.merge([first, other])
                del siblings[j]
            else:
                j += 1
        i += 1


def _fuse_into_consumer(state: Merging, parent: str, time: Callable[[Group], float]) -> None:
    g = state.graph
    if parent not in g.ops:
        return
    producer = state.owner[g.index[parent]]
    group = state.group(producer)
    if (producer in state.frozen or group.kind != "pointwise" or len(group.writes) > 1
            or any(op.kind == "transpose" for op in group.compute)):
        return  # IsProducerMultiOutputFusible
    consumers = _readers(state, parent)
    if len(consumers) == 1 and len(state.group(consumers[0]).writes) < 2:
        return  # priority fusion considered (and declined) this one
    for consumer in consumers:
        if not _can_root(state, consumer):
            continue
        merged = state.mergeable([producer, consumer])
        if merged is not None and time(merged) <= time(group) + time(state.group(consumer)):
            state.merge([producer, consumer])
            return
