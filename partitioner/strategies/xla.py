"""The ``xla`` strategy: XLA GPU priority fusion, re-implemented on our IR.

Follows ``xla/service/gpu/transforms/priority_fusion.cc`` (``PriorityFusionQueue``,
``CanFuse``, ``PriorityFusion::Run``) of openxla/xla at commit 1aea158147bc, and
its time model ``xla/service/gpu/model/gpu_performance_model.cc``
(``EstimateRunTimesForPriorityFusion``) and ``gpu_performance_model_base.cc``
(``CombineComputeAndMemoryAccessTime``, ``kMemoryComputeParallelism = 0.95``).
``docs/baselines.md`` describes the procedure and lists every simplification.

Procedure. Every group that has consumers is a *producer* in a priority queue.
Its priority is ``time_unfused - time_fused``: the time of the producer and its
consumer groups apart, minus the time of the one group made by fusing the
producer into all of them. The producer with the highest priority is fused
(ties: the larger stable id, as XLA's ordered map pops its last key); a
producer whose priority is negative, or whose fusion ``CanFuse`` declines, is
not in the queue. After a fusion, the priorities of the fused group and of
every producer feeding it are recomputed, as XLA does for the fusion and its
operands. It ends when the queue is empty.

No duplication. XLA copies a producer into each consumer; our plans are
partitions, so a producer fuses only when all its consumers end up in one group
with it: the fusion merges the producer and all its consumer groups.

Time model (XLA's notion of "time when fused", built from the shared modules).
For a group ``G``: memory time = ``(G.bytes_read + G.bytes_written) /
bandwidth`` (``group.Group``, the same bytes as ``cost.group_cost``); compute
time = ``Σ_op cost.op_compute_seconds × utilization(op)``, where utilization
counts how often a fused kernel evaluates each element, XLA's operand
utilization: 1 for a value that leaves the group, and ``numel(reader) /
numel(value)`` through an elementwise or broadcast reader that is larger (a
broadcast recomputes its operand per output element); reductions, contractions
and layout ops read each element once. ``time = launches × launch_overhead +
compute + memory - 0.95 × min(compute, memory)``. Since a merge never adds
bytes, a priority turns negative only through recomputation.

Attention. XLA's fused-attention rewrite (``xla_fmha``) runs before fusion only
with ``--xla_gpu_enable_cudnn_fmha``, which is off by default: the ``xla``
strategy leaves attention to priority fusion, as XLA does; ``xla-fmha`` turns the
flag on, and each subgraph the rewrite matches becomes a frozen attention group
(a custom call priority fusion never fuses).

Dot merging. Before fusion, XLA GPU's ``DotMerger``
(``xla/hlo/transforms/simplifiers/dot_merger.h``) merges dots that share an
operand and have no path between them into one dot of the other operands
concatenated, when the input and output bytes of at least one of the two are at
most ``xla_gpu_dot_merger_threshold_mb`` (32 MiB by default,
``xla/debug_options_flags.cc``). Here siblings of one A operand
(``horizontal.py``) merge so, in topological order, each into the dot merged so
far, as one horizontal group (BERT-base's q, k and v projections merge; Llama-7B's,
at 160 MB each, do not). Dots that share only their B operand are not merged: no
template of ours runs them as one kernel.

Multi-output fusion. After priority fusion, XLA's ``GpuMultiOutputFusion`` joins
siblings that read one value and fuses producers into one consumer while they
still write their value for the others (``xla_mof.py``).

``CanFuse`` guards kept (they decide which fusions XLA makes, not what a kernel
can do): the merged group must be legal (``legality.is_legal``: every fusion
rule and budget) and close no cycle; at most one of the merged groups may hold a
reduction of 16 or more elements per row ("both the producer and the consumer
contain a reduce"); at most one may hold a contraction (fusion puts one dot in
a kernel; a producer read by several dots is duplicated into each); no op after
a reduction in the merged group may have another element count than the
reduction's result ("fusion into output of a reduce
fusion would create a loop fusion"; XLA checks it when the producer is the
reduction, but with all consumers merged at once the reduction can also come
from a consumer).
"""

from __future__ import annotations

import heapq

from .. import horizontal
from ..cost import op_compute_seconds, row_length
from ..graph import Graph
from ..group import Group
from ..hardware import Hardware
from .base import Options, Strategy, assemble
from .merging import Merging
from .xla_fmha import fmha_rewrites
from .xla_mof import multi_output_fusion

#: Share of the shorter of compute and memory time hidden under the longer
#: (``kMemoryComputeParallelism`` in gpu_performance_model_base.h).
MEMORY_COMPUTE_PARALLELISM = 0.95
#: A reduce over at least this many elements per row is "significant" in CanFuse.
SIGNIFICANT_REDUCTION = 16
#: DotMerger's threshold on a dot's input and output bytes (xla_gpu_dot_merger_threshold_mb).
DOT_MERGER_BYTES = 32 << 20
#: Reader op classes through which a smaller value is recomputed per output element.
_BROADCASTING = frozenset({"elementwise", "broadcast"})


def utilization(group: Group) -> dict[str, float]:
    """How many times a fused kernel evaluates each element of each compute op of
    ``group`` (XLA's operand utilization, see module docstring)."""
    g = group.graph
    written = set(group.writes)
    util: dict[str, float] = {}
    for op in reversed(group.compute):
        readers = [g.ops[n] for n in g.names(g.storage_readers.get(op.name, 0) & group.mask)]
        value = 1.0 if op.name in written or not readers else 0.0
        if op.op_class != "reduction":  # a reduction's row result is computed once per row
            for r in readers:
                grow = r.out.numel / op.out.numel if r.op_class in _BROADCASTING and op.out.numel else 1.0
                value = max(value, util[r.name] * max(1.0, grow))
        util[op.name] = max(value, 1.0)
    return util


def xla_time(group: Group, hw: Hardware) -> float:
    """XLA's modelled run time of ``group`` as one kernel, in seconds (module docstring)."""
    memory = (group.bytes_read + group.bytes_written) / hw.bandwidth
    seconds = op_compute_seconds(group, hw)
    util = utilization(group)
    compute = sum(seconds[name] * util[name] for name in seconds)
    overlap = MEMORY_COMPUTE_PARALLELISM * min(compute, memory)
    return group.launches * hw.launch_overhead + compute + memory - overlap


def _significant_reduction(group: Group) -> bool:
    return "reduction" in group.classes and row_length(group) >= SIGNIFICANT_REDUCTION


def _stays_reduction_kernel(merged: Group) -> bool:
    """Whether every op after a reduction in ``merged`` keeps that reduction's element
    count: XLA's reduction emitter only takes such epilogues; anything else would
    turn the fusion into a loop fusion that recomputes the reduction."""
    g = merged.graph
    for op in merged.compute:
        if op.op_class != "reduction":
            continue
        after = g.descendants_mask[g.index[op.name]] & merged.compute_mask
        if any(g.ops[n].out.numel != op.out.numel for n in g.names(after)):
            return False
    return True


class _PriorityFusion:
    def __init__(self, graph: Graph, hw: Hardware, max_ops: int):
        self.state = Merging(graph, hw, max_ops)
        self.hw = hw
        self.version: dict[int, int] = {}
        self.heap: list = []
        self._times: dict[tuple, float] = {}  # Group.signature -> xla_time

    def time(self, gid: int) -> float:
        return self.group_time(self.state.group(gid))

    def group_time(self, group: Group) -> float:
        """``xla_time`` of ``group``, computed once per ``Group.signature``: a repeated
        layer's groups and merges cost the same."""
        key = group.signature
        if key not in self._times:
            self._times[key] = xla_time(group, self.hw)
        return self._times[key]

    def priority(self, producer: int) -> float | None:
        """``time_unfused - time_fused`` of fusing ``producer`` into all its consumers,
        or ``None`` when CanFuse declines (no consumers, an illegal or cyclic merge,
        or one of XLA's reduction guards)."""
        consumers = self.state.consumers(producer)
        if not consumers:
            return None
        parts = [producer, *consumers]
        if sum(_significant_reduction(self.state.group(p)) for p in parts) > 1:
            return None
        if sum("contraction" in self.state.group(p).classes for p in parts) > 1:
            return None  # a fusion holds one dot (DotMerger's merged dot counts as one)
        merged = self.state.mergeable(parts)
        if merged is None:
            return None
        if not _stays_reduction_kernel(merged):
            return None
        unfused = sum(self.time(p) for p in parts)
        fused = self.group_time(merged)
        return unfused - fused

    def update(self, gid: int) -> None:
        """Recompute ``gid``'s priority; negative or declined producers leave the queue."""
        self.version[gid] = self.version.get(gid, 0) + 1
        prio = self.priority(gid)
        if prio is not None and prio >= 0:
            anchor = self.state.members[gid].bit_length() - 1  # its last op: the stable id
            heapq.heappush(self.heap, (-prio, -anchor, gid, self.version[gid]))

    def run(self) -> None:
        for gid in self.state.groups():
            self.update(gid)
        while self.heap:
            _, _, gid, version = heapq.heappop(self.heap)
            if self.version.get(gid) != version or gid not in self.state.members:
                continue  # a stale entry: the group changed or was merged away
            merged = self.state.merge([gid, *self.state.consumers(gid)])
            for other in [merged, *self.state.producers(merged)]:
                self.update(other)


def _dot_bytes(graph: Graph, name: str) -> int:
    op = graph.ops[name]
    return sum(graph.tensor(t).nbytes for t in op.tensor_inputs) + op.out.nbytes


def merge_dots(state: Merging) -> None:
    """XLA's ``DotMerger`` on the groups of ``state`` (see module docstring): each
    sibling of a class merges into the dot merged so far when either moves at most
    :data:`DOT_MERGER_BYTES` and the merge is legal and closes no cycle."""
    g = state.graph
    for siblings in horizontal.sibling_classes(g):
        if horizontal.sibling_key(g, g.names(siblings, limit=1)[0])[0] != "matmul":
            continue  # DotMerger merges dots, not convolutions
        merged = size = None
        for name in g.names(siblings):
            gid, own = state.owner[g.index[name]], _dot_bytes(g, name)
            if merged is None:
                merged, size = gid, own
            elif min(own, size) <= DOT_MERGER_BYTES and state.mergeable([merged, gid]) is not None:
                merged = state.merge([merged, gid])
                size += own - g.tensor(g.ops[name].inputs[0]).nbytes  # the shared operand once


def xla_groups(graph: Graph, hw: Hardware, max_ops: int, cudnn_fmha: bool = False) -> tuple[list[int], int]:
    """The XLA-style plan as compute-op bitsets (one per group, views left out), and how
    many attention subgraphs the fused-attention rewrite took (with ``cudnn_fmha``)."""
    fusion = _PriorityFusion(graph, hw, max_ops)
    merge_dots(fusion.state)
    rewritten = 0
    if cudnn_fmha:
        for ops in fmha_rewrites(graph):
            rewritten += fusion.state.freeze(graph.mask(ops) & graph.compute_mask) is not None
    fusion.run()
    multi_output_fusion(fusion.state, fusion.group_time)
    return [fusion.state.members[k] for k in fusion.state.groups()], rewritten


class Xla(Strategy):
    """XLA GPU priority fusion with XLA's default flags (see module docstring)."""

    name = "xla"
    cudnn_fmha = False  # --xla_gpu_enable_cudnn_fmha

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        groups, rewritten = xla_groups(graph, hw, options.max_ops, self.cudnn_fmha)
        details = {"fmha_rewrites": rewritten} if self.cudnn_fmha else {}
        return assemble(graph, groups), {"status": "HEURISTIC", "details": details}


class XlaFmha(Xla):
    """XLA with ``--xla_gpu_enable_cudnn_fmha=true``: its fused-attention rewrite first."""

    name = "xla-fmha"
    cudnn_fmha = True
