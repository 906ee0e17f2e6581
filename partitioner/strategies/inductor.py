"""The ``inductor`` strategy: TorchInductor's scheduler fusion, re-implemented on our IR.

Follows ``torch/_inductor/scheduler.py`` of PyTorch v2.5 (``Scheduler.fuse_nodes``,
``fuse_nodes_once``, ``get_possible_fusions``, ``can_fuse``,
``can_fuse_vertical``, ``can_fusion_increase_peak_memory``, ``score_fusion``,
``score_fusion_memory``, ``will_fusion_create_cycle``) and the defaults of
``torch/_inductor/config.py`` (``max_fusion_size = 64``,
``max_fusion_buffer_group_pairwise_attempts = 64``, since v2.8: pytorch#154688,
``score_fusion_memory_threshold = 1``, ``aggressive_fusion = False``,
``epilogue_fusion = True``, ``epilogue_fusion_first = False``).
``docs/baselines.md`` describes the procedure and lists every simplification.

Attention. Before scheduling, Inductor's ``fuse_attention`` pass (joint-graph
patterns, on by default with ``config.pattern_matcher``) replaces the subgraphs its
patterns match by ``scaled_dot_product_attention``, an extern kernel the scheduler
never fuses: ``inductor_sdpa.sdpa_rewrites`` finds them, and each becomes a frozen
attention group.

Nodes. One scheduler node per compute op at the start; a fused node is a group.
A node *reads* the storages ``group.Group.reads`` names and *writes* every
storage its ops produce (Inductor's ``read_writes``: a fused node keeps the
buffers its members write, used outside or not). A contraction is an *extern
kernel* (default options: ``max_autotune`` off, so ``mm``, ``addmm``, ``bmm`` and
``convolution`` call the vendor library, ``torch/_inductor/kernel/mm.py``), frozen
before scheduling with the ATen views of its operands and addmm's bias
(:func:`extern_kernel`); a node holding a reduction is a reduction node.

One round (``fuse_nodes_once``): group the nodes that may fuse (not frozen) by
every buffer they use; within each group, every pair (earlier node first) of
nodes at most 64 places apart there
(``config.max_fusion_buffer_group_pairwise_attempts``) that ``can_fuse``
accepts is a candidate. The candidates are sorted by score, highest first: (both or neither
are reductions and they share bytes; bytes shared, ``score_fusion_memory``;
proximity, minus the distance in the original order; Inductor's first term,
whether the first node is not a template, is the same for every pair here);
remaining ties by the first nodes' topological position.
Each candidate, mapped to the nodes that now hold its two nodes, is fused when
``can_fuse`` still accepts it and the fusion closes no cycle. Rounds repeat
until a round fuses nothing or ten rounds have run (``fuse_nodes``).

``can_fuse(a, b)``: not the same node, neither frozen; ``a`` does not depend on
``b``; they share at least one byte; together at most 64 nodes; vertical fusion
(``b`` depends on ``a``) needs no node between them (convexity); horizontal fusion (independent nodes) needs
them within 64 positions of each other in the original order (the peak-memory
guard); and Inductor's backend check (``can_fuse_vertical`` /
``can_fuse_horizontal``: compatible iteration spaces) is our
``legality.is_legal``.
"""

from __future__ import annotations

from ..graph import Graph
from ..hardware import Hardware
from .base import Options, Strategy, assemble
from .inductor_sdpa import sdpa_rewrites
from .merging import Merging

#: ATen view ops: a matmul or conv operand computed by them alone is passed to the
#: extern kernel as a strided view (``ReinterpretView``), not materialised.
VIEW_OPS = frozenset({"transpose", "slice", "broadcast_to"})
#: ``config.max_fusion_size``: scheduler nodes one fused node may hold.
MAX_FUSION_SIZE = 64
#: ``config.max_fusion_buffer_group_pairwise_attempts``: the later nodes of one
#: buffer's group each node is paired with (``get_possible_fusions``).
PAIRWISE_ATTEMPTS = 64
#: ``fuse_nodes`` runs at most this many rounds.
MAX_ROUNDS = 10
#: ``can_fusion_increase_peak_memory``: horizontal fusions farther apart are refused.
MAX_HORIZONTAL_DISTANCE = 64
#: ``config.score_fusion_memory_threshold``: bytes two nodes must share to fuse.
SCORE_FUSION_MEMORY_THRESHOLD = 1


class _Scheduler:
    def __init__(self, graph: Graph, hw: Hardware, max_ops: int):
        self.graph = graph
        self.state = Merging(graph, hw, max_ops)

    # ------------------------------------------------------------ node facts

    def writes(self, gid: int) -> list[str]:
        return self.graph.names(self.state.members[gid])

    def used_buffers(self, gid: int) -> list[str]:
        """Storages the node reads or writes, reads first (Inductor's used_buffer_names)."""
        return [*self.state.group(gid).reads, *self.writes(gid)]

    def is_reduction(self, gid: int) -> bool:
        return "reduction" in self.state.group(gid).classes

    def span(self, gid: int) -> tuple[int, int]:
        """(min_order, max_order): first and last op position in the original order."""
        mask = self.state.members[gid]
        return (mask & -mask).bit_length() - 1, mask.bit_length() - 1

    def ancestors(self, gid: int) -> int:
        out = 0
        for name in self.writes(gid):
            out |= self.graph.ancestors_mask[self.graph.index[name]]
        return out

    def shared_bytes(self, a: int, b: int) -> int:
        """``score_fusion_memory``: bytes of the buffers both nodes read or write."""
        common = set(self.used_buffers(a)) & set(self.used_buffers(b))
        return sum(self.graph.tensor(s).nbytes for s in common)

    def proximity(self, a: int, b: int) -> int:
        (a0, a1), (b0, b1) = self.span(a), self.span(b)
        return max(abs(a0 - b1), abs(b0 - a1))

    # ------------------------------------------------------------ decisions

    def can_fuse(self, a: int, b: int) -> bool:
        """Inductor's ``can_fuse(a, b)`` (module docstring), legality standing in for
        the backend's iteration-space check."""
        if a == b or self.state.frozen.intersection((a, b)):
            return False
        members = self.state.members
        if members[b] & self.ancestors(a):
            return False  # a must run before b
        if self.shared_bytes(a, b) < SCORE_FUSION_MEMORY_THRESHOLD:
            return False
        if (members[a] | members[b]).bit_count() > MAX_FUSION_SIZE:
            return False
        vertical = bool(members[a] & self.ancestors(b))
        if not vertical and self.proximity(a, b) > MAX_HORIZONTAL_DISTANCE:
            return False
        # convexity ("intermediate nodes between node1 & node2") and the backend check
        return self.state.legal_group(members[a] | members[b]) is not None

    def score(self, a: int, b: int) -> tuple:
        shared = self.shared_bytes(a, b)
        return (self.is_reduction(a) == self.is_reduction(b) and shared > 0,
                shared, -self.proximity(a, b))

    def possible_fusions(self) -> list[tuple[int, int]]:
        """``get_possible_fusions``: candidate pairs sorted by score, highest first."""
        by_buffer: dict[str, list[int]] = {}
        for gid in self.state.groups():  # sorted by min_order, as Inductor's node list
            if gid in self.state.frozen:
                continue  # ``unfusable_node``: an extern kernel takes no place in a buffer's group
            for buf in dict.fromkeys(self.used_buffers(gid)):
                by_buffer.setdefault(buf, []).append(gid)
        seen: set[tuple[int, int]] = set()
        pairs: list[tuple[int, int]] = []
        for nodes in by_buffer.values():
            for i, a in enumerate(nodes):
                for b in nodes[i + 1:i + 1 + PAIRWISE_ATTEMPTS]:
                    if (a, b) in seen:
                        continue
                    seen.add((a, b))
                    if self.can_fuse(a, b):
                        pairs.append((a, b))
        keyed = [(self.score(a, b), -a, -b, a, b) for a, b in pairs]
        keyed.sort(reverse=True)
        return [(a, b) for *_, a, b in keyed]

    def fuse_once(self) -> None:
        """``fuse_nodes_once``: one pass over the sorted candidates."""
        for first, second in self.possible_fusions():
            a, b = self.state.owner[first], self.state.owner[second]
            if self.can_fuse(a, b) and not self.state.creates_cycle([a, b]):
                self.state.merge([a, b])

    def run(self) -> list[int]:
        for _ in range(MAX_ROUNDS):
            before = len(self.state.members)
            self.fuse_once()
            if len(self.state.members) in (before, 1):
                break
        return [self.state.members[k] for k in self.state.groups()]


def extern_kernel(graph: Graph, product: str) -> int:
    """The ops (a bitset) of the extern kernel Inductor calls for contraction
    ``product``: the product, the ATen views (:data:`VIEW_OPS`) its operands are
    computed by and nothing else reads, which it passes as strided operands, and for
    a matmul whose only reader adds a vector of the graph's inputs along its rows
    (a Linear's bias), that bias add (``aten.addmm``, which Inductor never splits)."""
    g, i = graph, graph.index[product]
    mask = 1 << i
    frontier = [t for t in g.ops[product].tensor_inputs]
    while frontier:
        producer = g.producer(g.storage[frontier.pop()])
        if producer is None or g.ops[producer].kind not in VIEW_OPS:
            continue
        j = g.index[producer]
        if g.readers_of[j] & ~mask:
            continue  # read elsewhere too: Inductor makes it a kernel
        mask |= 1 << j
        frontier += g.ops[producer].tensor_inputs
    op = g.ops[product]
    readers = g.names(g.readers_of[i])
    if op.kind == "matmul" and len(readers) == 1 and not g.writes_out[i]:
        bias = g.ops[readers[0]]
        others = [t for t in bias.inputs if not (isinstance(t, str) and g.storage[t] == product)]
        if bias.kind == "add" and len(others) == 1 and isinstance(others[0], str) and \
                g.storage[others[0]] in g.inputs and \
                g.tensor(others[0]).shape in ((op.out.shape[-1],), (1, op.out.shape[-1])):
            mask |= 1 << g.index[bias.name]
    return mask


def inductor_groups(graph: Graph, hw: Hardware, max_ops: int) -> tuple[list[int], list[str]]:
    """The Inductor-style plan as compute-op bitsets (one per group, views left out),
    and the attention patterns it rewrote to SDPA."""
    scheduler = _Scheduler(graph, hw, max_ops)
    rewritten = [name for name, ops in sdpa_rewrites(graph)
                 if scheduler.state.freeze(graph.mask(ops) & graph.compute_mask) is not None]
    for product in graph.names(graph.class_masks.get("contraction", 0)):
        if scheduler.state.owner[graph.index[product]] not in scheduler.state.frozen:
            mask = extern_kernel(graph, product)
            if scheduler.state.freeze(mask) is None:
                scheduler.state.freeze(1 << graph.index[product])
    return scheduler.run(), rewritten


class Inductor(Strategy):
    """TorchInductor scheduler fusion (see module docstring)."""

    name = "inductor"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        groups, rewritten = inductor_groups(graph, hw, options.max_ops)
        return assemble(graph, groups), {"status": "HEURISTIC", "details": {"sdpa_rewrites": rewritten}}
