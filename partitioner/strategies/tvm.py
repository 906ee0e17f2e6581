"""The ``tvm`` strategy: TVM Relay's FuseOps, re-implemented on our IR.

Follows ``src/relay/analysis/graph_partitioner.cc`` (``GraphPartitioner``:
``RunFuse``, ``CheckPath``, ``CommitFuse``, ``CountFusedNodesWithNewChild``) and
``src/relay/transforms/fuse_ops.cc`` (``IndexedForwardGraph::Creator``,
``DominatorTree::PostDom``, ``kMaxFusedOps`` and the ``relay.FuseOps.max_depth``
option) of apache/tvm at commit 08a44943918c. ``docs/baselines.md`` describes the
procedure and lists every simplification.

Op pattern kinds (``OpPatternKind``), from our op classes (``ops.py``):

=================== ==========================================================
kElemWise (0)        elementwise ops with one operand (``exp``, ``relu``, ``cast``)
kBroadcast (1)       elementwise ops with two or more operands (TVM marks
                     ``add``, ``multiply``, ``where`` ... broadcast), ``broadcast_to``
kInjective (2)       layout ops: ``transpose``, ``slice``, ``concat``, ``pad``,
                     and a ``reshape`` that converts its dtype
kCommReduce (3)      reductions
kOutEWiseFusable (4) contractions (TVM's ``conv2d``, ``dense``, ``batch_matmul``) and
                     pools (TVM registers ``nn.max_pool2d``/``nn.avg_pool2d`` so)
kTuple (7)           the tuple a ``concat`` reads its operands from (TVM's
                     ``concatenate`` takes a Relay tuple)
kOpaque (8)          ``gather``, ``cumsum`` and ``custom`` (our legality never
                     fuses them; TVM's ``take`` would be injective)
=================== ==========================================================

Views (``reshape`` that shares memory) are not nodes: an edge goes from a
producer to each compute op that reads its memory, through any views.

Procedure. The forward graph has a node per compute op (and per concat tuple),
in topological order; an edge's pattern is its consumer's pattern, lowered to
kElemWise where the consumer is broadcast-kind and the value it reads already
has the consumer's shape. A node that is a graph output has no post-dominator.
The post-dominator tree is built in reverse order as the least common ancestor
of a node's consumers, with the maximum pattern met on the way. Then three
phases visit every node in order and try to fuse its group into the group of
its immediate post-dominator, when every node on every path between them
(checked by the pattern of its current group) passes a condition:

* phase 0: an out-elementwise-fusable group (a contraction) fuses into its
  post-dominator when all edges to it are elementwise and every path holds
  groups of kind <= kBroadcast; an elementwise or broadcast group fuses when
  the post-dominator relation is injective or a reduction, the inner path
  holds kinds <= kInjective and the post-dominator's group is <= kBroadcast,
  injective, a reduction or out-elementwise-fusable;
* phase 1: injective groups and tuples fuse when every path is <= kInjective;
* phase 2: elementwise, broadcast or injective groups fuse into a tuple whose
  group has become injective (the operands of a concat join it last).

A reduction's group never fuses into anything (it ends a group), and nothing
fuses into an elementwise group after it. A fusion is also refused when the
group would hold more than ``max_depth`` compute ops (``--max-ops``), when
``legality`` rejects the merged group, or when it would close a cycle between
groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import Graph, bits
from ..hardware import Hardware
from .base import Options, Strategy, assemble
from .merging import Merging

ELEMWISE, BROADCAST, INJECTIVE, COMM_REDUCE, OUT_EWISE_FUSABLE, TUPLE, OPAQUE = 0, 1, 2, 3, 4, 7, 8


def op_pattern(graph: Graph, name: str) -> int:
    """TVM pattern kind of a compute op (table in the module docstring)."""
    op = graph.ops[name]
    cls = op.op_class
    if cls == "elementwise":
        return BROADCAST if len(op.inputs) > 1 else ELEMWISE
    return {"broadcast": BROADCAST, "injective": INJECTIVE, "reduction": COMM_REDUCE,
            "contraction": OUT_EWISE_FUSABLE, "window": OUT_EWISE_FUSABLE}.get(cls, OPAQUE)


@dataclass
class _Node:
    """A node of TVM's IndexedForwardGraph: a compute op, or the tuple of a concat."""

    op: int | None  # op index, or None for a tuple node
    pattern: int
    extern_ref: bool = False
    outputs: list[tuple[int, int]] = field(default_factory=list)  # (node position, edge pattern)


@dataclass
class _DomNode:
    parent: int | None
    depth: int
    pattern: int


def forward_graph(graph: Graph) -> list[_Node]:
    """TVM's forward dataflow graph over compute ops (views transparent), in topological
    order, with a tuple node just before each concat."""
    nodes: list[_Node] = []
    position: dict[int, int] = {}  # op index -> node position
    outputs = graph.output_storages
    for name, op in graph.ops.items():
        if op.is_view:
            continue
        i = graph.index[name]
        if op.kind == "concat":
            nodes.append(_Node(None, TUPLE))
            tuple_pos = len(nodes) - 1
        nodes.append(_Node(i, op_pattern(graph, name), extern_ref=name in outputs))
        position[i] = len(nodes) - 1
        for tensor in op.tensor_inputs:
            producer = graph.storage[tensor]
            if producer not in graph.ops:
                continue  # a graph input
            if op.kind == "concat":
                nodes[position[graph.index[producer]]].outputs.append((tuple_pos, INJECTIVE))
                continue
            pattern = nodes[position[i]].pattern
            if pattern == BROADCAST and graph.tensor(tensor).shape == op.out.shape:
                pattern = ELEMWISE
            nodes[position[graph.index[producer]]].outputs.append((position[i], pattern))
        if op.kind == "concat":
            nodes[tuple_pos].outputs.append((position[i], INJECTIVE))
    return nodes


def post_dominators(nodes: list[_Node]) -> list[_DomNode]:
    """TVM's ``DominatorTree::PostDom``: each node's immediate post-dominator (the LCA
    of its consumers in the tree) and the maximum pattern on the way to it."""
    tree: list[_DomNode | None] = [None] * len(nodes)

    def lca(a: int | None, b: int | None, pattern: int) -> tuple[int | None, int]:
        while a != b:
            if a is None or b is None:
                return None, pattern
            da, db = tree[a].depth, tree[b].depth
            if da < db:
                pattern, b = max(pattern, tree[b].pattern), tree[b].parent
            elif db < da:
                pattern, a = max(pattern, tree[a].pattern), tree[a].parent
            else:
                pattern = max(pattern, tree[a].pattern, tree[b].pattern)
                a, b = tree[a].parent, tree[b].parent
        return a, pattern

    for k in reversed(range(len(nodes))):
        node = nodes[k]
        if node.extern_ref or not node.outputs:
            tree[k] = _DomNode(None, 1, OPAQUE)
            continue
        pattern = ELEMWISE
        parent, edge = node.outputs[0]
        pattern = max(pattern, edge)
        for other, edge in node.outputs[1:]:
            parent, pattern = lca(parent, other, pattern)
            pattern = max(pattern, edge)
        tree[k] = _DomNode(parent, tree[parent].depth + 1 if parent is not None else 1, pattern)
    return tree


class _Partitioner:
    """TVM's GraphPartitioner on top of :class:`Merging` (legality and cycles)."""

    def __init__(self, graph: Graph, hw: Hardware, max_depth: int):
        self.nodes = forward_graph(graph)
        self.tree = post_dominators(self.nodes)
        self.state = Merging(graph, hw, max_depth)
        self.max_depth = max_depth
        # union-find over node positions; a root's pattern and whether it holds an anchor
        self.parent = list(range(len(self.nodes)))
        self.pattern = [n.pattern for n in self.nodes]
        self.anchor = [n.pattern == OUT_EWISE_FUSABLE for n in self.nodes]
        self.mask = [0 if n.op is None else 1 << n.op for n in self.nodes]

    def root(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def paths(self, src: int, sink: int) -> list[int]:
        """Nodes on the paths from ``src``'s consumers to ``sink`` (sink last), each once."""
        seen, order, stack = set(), [], [t for t, _ in self.nodes[src].outputs]
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            if k != sink:
                stack.extend(t for t, _ in self.nodes[k].outputs)
                order.append(k)
        return sorted(order) + [sink]

    def check_path(self, src: int, sink: int, cond) -> bool:
        """TVM's CheckPath: every node between src (excluded) and sink passes ``cond``
        with the pattern of its current group."""
        return all(cond(self.pattern[self.root(k)], k == sink) for k in self.paths(src, sink))

    def commit(self, src: int, sink: int) -> None:
        """TVM's CommitFuse, preceded by our checks: the op cap, legality, no cycle."""
        roots = sorted({self.root(k) for k in [src, *self.paths(src, sink)]})
        target = self.root(sink)
        mask = 0
        for r in roots:
            mask |= self.mask[r]
        if mask.bit_count() > self.max_depth:
            return
        ids = sorted({self.state.owner[i] for i in bits(mask)})
        if len(ids) > 1 and self.state.mergeable(ids) is None:
            return
        if len(ids) > 1:
            self.state.merge(ids)
        for r in roots:
            if r == target:
                continue
            self.parent[r] = target
            self.mask[target] |= self.mask[r]
            if self.anchor[r]:  # MergeFromTo: the anchor's pattern carries over
                self.anchor[target] = True
                self.pattern[target] = max(self.pattern[target], self.pattern[r])

    def run_phase(self, phase: int) -> None:
        """TVM's RunFuse. As there, a node's own pattern is the one its group had when
        the node was last a group root; paths are checked with current group patterns."""
        for k in range(len(self.nodes)):
            dom = self.tree[k]
            kind = self.pattern[k]
            if kind == OPAQUE or dom.parent is None:
                continue
            sink = dom.parent
            sink_group = self.root(sink)
            if phase == 2:
                # operands of a concat join its group once the tuple has fused into the concat
                if kind <= INJECTIVE and self.pattern[sink] == TUPLE and self.pattern[sink_group] <= INJECTIVE \
                        and self.check_path(k, sink, lambda kd, is_sink: kd <= INJECTIVE):
                    self.commit(k, sink)
                continue
            if self.root(k) == sink_group or self.nodes[sink].pattern == TUPLE:
                continue  # already fused; or the sink is a tuple, fused in phase 2 only
            if kind == OUT_EWISE_FUSABLE:
                if phase == 0 and dom.pattern == ELEMWISE \
                        and self.check_path(k, sink, lambda kd, is_sink: kd <= BROADCAST):
                    self.commit(k, sink)
            elif kind <= BROADCAST:
                if (dom.pattern <= INJECTIVE or dom.pattern == COMM_REDUCE) and self.check_path(k, sink, _into_anchor):
                    self.commit(k, sink)
            elif kind in (INJECTIVE, TUPLE):
                if phase == 1 and self.check_path(k, sink, lambda kd, is_sink: kd <= INJECTIVE):
                    self.commit(k, sink)
            # COMM_REDUCE: a reduction's group ends there

    def run(self) -> list[int]:
        for phase in (0, 1, 2):
            self.run_phase(phase)
        return [self.state.members[k] for k in self.state.groups()]


def _into_anchor(kind: int, is_sink: bool) -> bool:
    """Path condition of an elementwise or broadcast group: injective or lighter on the
    way; at the sink also a reduction or a contraction group (its epilogue)."""
    if not is_sink:
        return kind <= INJECTIVE
    return kind <= BROADCAST or kind in (COMM_REDUCE, INJECTIVE, OUT_EWISE_FUSABLE)


def tvm_groups(graph: Graph, hw: Hardware, max_depth: int) -> list[int]:
    """The TVM-style plan as compute-op bitsets (one per group, views left out)."""
    return _Partitioner(graph, hw, max_depth).run()


class Tvm(Strategy):
    """TVM FuseOps (see module docstring); ``max_depth`` is ``options.max_ops``."""

    name = "tvm"

    def plan(self, graph: Graph, hw: Hardware, options: Options) -> tuple[list[list[str]], dict]:
        return assemble(graph, tvm_groups(graph, hw, options.max_ops)), {"status": "HEURISTIC"}
