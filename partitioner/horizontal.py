"""Horizontal contraction groups: independent matmuls that read one A operand, as one kernel.

Llama's q, k and v projections (and its gate and up projections) read the same
normalised activations ``A`` and have no path between them. One kernel can run
them all with their N concatenated: each block computes one output tile of one of
them, so the launch is shared and ``A`` is read by one kernel (which the cost model
counts once, as it counts any operand read by one kernel; XLA's ``DotMerger`` and
cuBLAS users' fused QKV weights do the same by concatenating the weights).

Two matmuls are *horizontal siblings* when their first operands are one value (the
same storage, viewed at the same shape: a reshape keeps row-major order, so that
is the same matrix), their batch dims are equal and they compute in one dtype:
then they have the same M, K and batch, and the same tile sizes and shared memory.
Two convolutions of one group are siblings when they read one input through the
same window (kernel size, strides, pads, dilations): then their implicit GEMMs have
one A (the 1x1 convolutions of an Inception block, or of a ResNet bottleneck and its
projection shortcut at stride 1). A group may hold any number of horizontal siblings
with no path between them; each op downstream of one of them is that one's epilogue,
and no op may be downstream of two (its tile would need two products).
"""

from __future__ import annotations

from .errors import IllegalPlan
from .graph import Graph, bits
from .ops import matmul_shapes


def sibling_key(g: Graph, name: str) -> tuple | None:
    """What makes contraction ``name`` a horizontal sibling of another: for a matmul,
    (storage of A, A's shape, the product's batch dims, its compute dtype); for a
    conv2d of one group, its input's storage and shape, the window (weight shape but
    for the output channels, strides, pads, dilations) and dtype, which fix its
    implicit GEMM's A. ``None`` for a matrix-vector product or a grouped conv,
    which have no sibling. Memoised on the graph: every candidate holding two
    contractions asks."""
    keys = g.cache.setdefault("sibling_keys", {})
    if name not in keys:
        keys[name] = _sibling_key(g, name)
    return keys[name]


def _sibling_key(g: Graph, name: str) -> tuple | None:
    op = g.ops[name]
    a, b = (g.tensor(t) for t in op.inputs[:2])
    if op.kind == "conv2d":
        if op.attrs["groups"] != 1:
            return None
        window = tuple(op.attrs[k] if isinstance(op.attrs[k], int) else tuple(op.attrs[k])
                       for k in ("strides", "pads", "dilations"))
        return "conv2d", g.storage[op.inputs[0]], a.shape, b.shape[1:], window, op.promoted
    if len(a.shape) < 2 or len(b.shape) < 2:
        return None
    batch, *_ = matmul_shapes(a.shape, b.shape)
    return "matmul", g.storage[op.inputs[0]], a.shape, batch, op.promoted


def sibling_classes(g: Graph) -> tuple[int, ...]:
    """The contractions (bitsets) that share a :func:`sibling_key`, two or more each,
    in topological order of their first members (memoised on the graph)."""
    if "sibling_classes" not in g.cache:
        found: dict[tuple, int] = {}
        for name in g.names(g.class_masks.get("contraction", 0)):
            key = sibling_key(g, name)
            if key is not None:
                found[key] = found.get(key, 0) | 1 << g.index[name]
        g.cache["sibling_classes"] = tuple(m for m in found.values() if m & (m - 1))
    return g.cache["sibling_classes"]


def independent(g: Graph, contractions: int) -> bool:
    """Whether no path joins two of ``contractions`` (a bitset of ops)."""
    return not any(g.descendants_mask[i] & contractions for i in bits(contractions))


def violation(g: Graph, contractions: int, mask: int) -> IllegalPlan | None:
    """The rule the independent contractions ``contractions`` (two or more) of the op
    set ``mask`` break as one horizontal group, or ``None``: they are not all
    siblings (``contraction.horizontal``), or an op of ``mask`` is downstream of two
    of them (``contraction.epilogue_mixes``). Both hold for every superset too."""
    names = g.names(contractions)
    first = sibling_key(g, names[0])
    for other in names[1:]:
        if first is None or sibling_key(g, other) != first:
            return IllegalPlan("contraction.horizontal", f"'{names[0]}' and '{other}' have no path between them but "
                               "are not matmuls of one A operand at one batch shape and dtype, nor convolutions of "
                               "one input through one window", (names[0], other))
    seen = 0
    for i in bits(contractions):
        below = g.descendants_mask[i] & mask
        if below & seen:
            op = g.names(below & seen)[0]
            owner = next(c for c in names if g.descendants_mask[g.index[c]] >> g.index[op] & 1)
            return IllegalPlan("contraction.epilogue_mixes", f"'{op}' depends on both '{owner}' and "
                               f"'{g.order[i]}'; a horizontal group's tile holds one product", (op, owner, g.order[i]))
        seen |= below
    return None
