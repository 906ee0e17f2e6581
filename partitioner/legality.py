"""The fusion rules: the one place each rule lives, each rejection with a reason code.

Every rule, its reason and an example are written down in ``docs/legality.md``.
Strategies, the validator and backends ask this module; none re-implements a rule.

Reason codes:

=============================== ====================================================
partition.unknown_op             a group names an op the graph does not have
partition.duplicate              an op is in two groups
partition.missing                an op is in no group
partition.empty_group            a group has no ops
plan.cycle                       the groups depend on each other in a cycle
group.disconnected               members share neither a tensor nor a dependency
group.not_convex                 a path between two members leaves the group
op.never_fuses                   gather, cumsum or custom together with another op
window.kernel                    a pooling op with a contraction or a reduction
contraction.multiple             contractions in one group that are no attention pair and
                                 not all independent
contraction.horizontal           independent contractions that are not matmuls of one A
contraction.epilogue_mixes       an op downstream of two contractions of a horizontal group
contraction.with_reduction       a contraction and a reduction in one group, no attention
attention.operand                an attention product that is not a matmul of matrices, or
                                 whose operands take the scores in the wrong place
attention.score_layout           a score value moved (transpose, slice, ...) or misaligned
attention.not_online             the path between the products is not a row softmax
attention.key_axis               the second product does not contract the key axis row by row
attention.dtype                  products not both float16, bfloat16 or float32
attention.head_dim               a head dimension over the template's 256
attention.extra_reduction        a reduction outside the softmax of an attention group
attention.epilogue_input         an attention epilogue reading a score value
contraction.prologue_written     a prologue value is needed outside the group
contraction.epilogue_op          a layout op after the contraction
contraction.epilogue_shape       an epilogue whose shape differs from the product's
contraction.side_written         a written value outside the product's iteration space
reduction.signature_mismatch     reductions over different rows in one group
reduction.reorders_rows          a layout op after a reduction moves rows
reduction.row_mismatch           values of different rows combined after a reduction
reduction.written_layout         a written value that does not follow the rows
pointwise.iteration_space        written values with different element counts
budget.shared_memory             shared memory per block over the opt-in limit
budget.registers                 registers per thread over the hardware limit
budget.kernel_params             kernel-parameter bytes over the limit
budget.ops                       more ops than the group size cap
=============================== ====================================================
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import networkx as nx

from . import attention, horizontal
from .cost import DEFAULT_MAX_OPS, budget_overruns
from .errors import IllegalPlan
from .graph import Graph, Op, bits
from .group import Group
from .hardware import Hardware, load_hardware
from .ops import ALONE_CLASSES

# ---------------------------------------------------------------- group shape


def _check_connected(group: Group) -> None:
    g = group.graph
    reached = frontier = group.mask & -group.mask
    while frontier:
        grow = 0
        while frontier:
            low = frontier & -frontier
            frontier ^= low
            grow |= g.links[low.bit_length() - 1]
        frontier = grow & group.mask & ~reached
        reached |= frontier
    if reached != group.mask:
        first = g.names(reached & -reached)[0]
        rest = group.mask & ~reached
        second = g.names(rest & -rest)[0]
        raise IllegalPlan(
            "group.disconnected",
            f"'{first}' and '{second}' share neither a tensor nor a dependency inside the group",
            (first, second),
        )


def _check_convex(group: Group) -> None:
    g = group.graph
    outside = g.convex_hull(group.mask, group.recomputed) & ~group.mask
    if not outside:
        return
    via = g.names(outside & -outside)[0]
    i = g.index[via]
    before = g.names((g.ancestors_mask[i] & group.mask))[-1]
    after = g.names(g.descendants_mask[i] & group.mask)[0]
    raise IllegalPlan(
        "group.not_convex",
        f"'{before}' and '{after}' share a group but the path between them leaves it through '{via}'",
        (before, after, via),
    )


# ---------------------------------------------------------------- rules no superset can repair


def hereditary_violation(g: Graph, mask: int, max_ops: int = DEFAULT_MAX_OPS) -> IllegalPlan | None:
    """The first rule broken by the op set ``mask`` that no larger set can repair, or ``None``.

    These rules count or compare members (never-fusing ops, reduction signatures,
    the op cap, a window op with a contraction or reduction) or depend on ops every
    convex superset holds too: three contractions with a path between two of them,
    or two whose middle (every op on a path between them, which a convex set must
    hold) is no attention softmax (``attention.pair``), or a reduction no attention
    pair of the set's contractions can take; independent contractions that are not
    horizontal siblings, or whose members mix their products
    (``horizontal.violation``), or share the set with a reduction. A set breaking
    one is illegal together with every convex superset; candidate enumeration
    prunes on them.
    """
    compute = mask & g.compute_mask
    classes = g.class_masks
    never = compute & sum(classes.get(c, 0) for c in ALONE_CLASSES)
    if never and compute != never & -never:
        op = g.ops[g.names(never & -never)[0]]
        return IllegalPlan("op.never_fuses", f"{op.kind} '{op.name}' never fuses with other ops", (op.name,))
    reductions = compute & classes.get("reduction", 0)
    windows = compute & classes.get("window", 0)
    anchors = compute & (classes.get("contraction", 0) | reductions)
    if windows and anchors:  # only a pointwise kernel evaluates a window's input at every tap
        op, other = (g.ops[g.names(m & -m)[0]] for m in (windows, anchors))
        return IllegalPlan("window.kernel", f"{op.kind} '{op.name}' fuses only with elementwise and layout ops, "
                           f"not with {other.op_class} '{other.name}'", (op.name, other.name))
    violation = _contraction_violation(g, compute & classes.get("contraction", 0), reductions, compute)
    if violation is not None:
        return violation
    if reductions:
        first = g.names(reductions & -reductions)[0]
        sig = g.reduction_signature(first)
        other = reductions & ~g.reduction_classes[sig]
        if other:
            second = g.names(other & -other)[0]
            sig2 = g.reduction_signature(second)
            return IllegalPlan(
                "reduction.signature_mismatch",
                f"'{first}' reduces {list(sig[0])} over axes {list(sig[1])} but '{second}' "
                f"reduces {list(sig2[0])} over axes {list(sig2[1])}",
                (first, second),
            )
    count = compute.bit_count()
    if count > max_ops:
        return IllegalPlan("budget.ops", f"{count} ops exceed the cap of {max_ops} per group", (), count, max_ops)
    return None


def breaks_hereditary(g: Graph, mask: int, max_ops: int = DEFAULT_MAX_OPS) -> bool:
    """Whether the op set ``mask`` breaks a rule of :func:`hereditary_violation`, the
    op cap tested first: a hull across layers breaks it at a count, before the rules
    that analyse every pair of its contractions (which grows with the hull)."""
    return (mask & g.compute_mask).bit_count() > max_ops or hereditary_violation(g, mask, max_ops) is not None


def _contraction_violation(g: Graph, contractions: int, reductions: int, mask: int) -> IllegalPlan | None:
    """Contractions and reductions together: legal only inside an attention group, so a
    set is beyond repair unless its contractions and reductions all fit one attention
    pair. Contractions with no path between them are a horizontal group
    (``horizontal.violation``), which holds no reduction."""
    if contractions & (contractions - 1) and horizontal.independent(g, contractions):
        found = horizontal.violation(g, contractions, mask)
        if found is None and reductions:
            first, name = g.names(contractions)[0], g.names(reductions & -reductions)[0]
            found = IllegalPlan("contraction.with_reduction", f"contraction '{first}' and reduction '{name}' "
                                "share a group", (first, name))
        return found
    names = g.names(contractions, limit=3)  # a hull across layers holds hundreds
    if len(names) > 2 or len(names) == 2 and not g.descendants_mask[g.index[names[0]]] >> g.index[names[1]] & 1:
        return IllegalPlan("contraction.multiple", f"'{names[0]}' and '{names[1]}' are both contractions",
                           tuple(names[:2]))
    if len(names) == 2:
        try:
            found = attention.pair(g, names[0], names[1])
        except IllegalPlan as exc:
            middle = g.descendants_mask[g.index[names[0]]] & g.ancestors_mask[g.index[names[1]]]
            if middle & g.class_masks.get("reduction", 0):
                return exc
            return IllegalPlan("contraction.multiple", f"'{names[0]}' and '{names[1]}' are both contractions "
                               "and no softmax lies between them", tuple(names))
        outside = reductions & ~found.middle
        if outside:
            name = g.names(outside & -outside)[0]
            return IllegalPlan("attention.extra_reduction", f"reduction '{name}' is not the row softmax between "
                               f"'{names[0]}' and '{names[1]}'", (name, *names))
        return None
    if names and reductions:
        index = g.index[names[0]]
        for p in attention.pairs(g):
            if index in (g.index[p.c1], g.index[p.c2]) and not reductions & ~p.middle:
                return None  # an attention group of this pair can still take them all
        name = g.names(reductions & -reductions)[0]
        return IllegalPlan("contraction.with_reduction", f"contraction '{names[0]}' and reduction '{name}' share "
                           "a group", (names[0], name))
    return None


# ---------------------------------------------------------------- kind rules


def _pointwise_rules(g: Graph, mask: int, written: set[str]) -> IllegalPlan | None:
    """One iteration space: the values that leave the group (``written`` members, and
    sinks: values nothing reads and no output holds) share one element count."""
    outs = [*written, *g.names(mask & g.sink_mask)]
    if len({g.tensor(t).numel for t in outs}) < 2:
        return None
    outs.sort(key=g.index.__getitem__)
    a = outs[0]
    b = next(t for t in outs if g.tensor(t).numel != g.tensor(a).numel)
    return IllegalPlan(
        "pointwise.iteration_space",
        f"'{a}' {list(g.tensor(a).shape)} and '{b}' {list(g.tensor(b).shape)} leave the group with different "
        "element counts; a pointwise kernel has one iteration space",
        (a, b),
    )


def _contraction_rules(g: Graph, anchors: tuple[int, ...], mask: int, written: set[str]) -> IllegalPlan | None:
    """The epilogue, written prologue and side-value rules of a group of the
    contractions ``anchors`` (one, or horizontal siblings). A side value (neither a
    prologue nor downstream of a product) is written only over the product's
    iteration space, so a horizontal group, whose tiles each hold one product, writes
    none."""
    c = g.ops[g.order[anchors[0]]]
    prologue = products = 0
    for i in anchors:
        violation = epilogue_violation(g, g.order[i], mask)
        if violation is not None:
            return violation
        prologue |= g.ancestors_mask[i]
        products |= 1 << i | g.descendants_mask[i]
    for name in _written_members(g, mask & g.compute_mask & ~products, written):
        if prologue >> g.index[name] & 1:
            consumer = next(g.order[i] for i in anchors if g.ancestors_mask[i] >> g.index[name] & 1)
            return IllegalPlan("contraction.prologue_written",
                               f"'{name}' feeds contraction '{consumer}' and is also needed outside the group",
                               (name, consumer))
        op = g.ops[name]
        if len(anchors) > 1:
            return IllegalPlan("contraction.side_written",
                               f"'{name}' {list(op.out.shape)} is written but a horizontal group stores only over "
                               f"its products' iteration spaces", (name, c.name))
        if op.out.numel != c.out.numel:
            return IllegalPlan("contraction.side_written",
                               f"'{name}' {list(op.out.shape)} is written but lies outside the iteration space of "
                               f"'{c.name}' {list(c.out.shape)}", (name, c.name))
    return None


def epilogue_violation(g: Graph, product: str, mask: int) -> IllegalPlan | None:
    """The first op of ``mask`` downstream of contraction ``product`` that no epilogue
    can apply: one that moves elements, or one off the product's element count."""
    c = g.ops[product]
    for name in g.names(mask & g.compute_mask & g.descendants_mask[g.index[product]]):
        op = g.ops[name]
        if op.op_class == "injective":
            return IllegalPlan("contraction.epilogue_op", f"{op.kind} '{name}' after contraction '{product}' moves "
                               "elements; only elementwise epilogues fuse", (name, product))
        if op.out.numel != c.out.numel:
            return IllegalPlan("contraction.epilogue_shape", f"epilogue '{name}' {list(op.out.shape)} differs from "
                               f"the product '{product}' {list(c.out.shape)}", (name, product))
    return None


def written_violation(g: Graph, kind: str, anchor, mask: int, written: set[str]) -> IllegalPlan | None:
    """The rule every group of ``kind`` holding the ops ``mask`` breaks once the values
    ``written`` leave it, or ``None``: a pointwise group's one iteration space; a
    contraction's epilogue, written prologue and side values (``anchor``: its index,
    or the indices of a horizontal group's siblings);
    an attention group's epilogue and written feeders (``anchor``: its
    :class:`~partitioner.attention.Pair`). Every ``mask`` member that decides these
    rules keeps its role in a larger group of the same contractions, so a larger
    group that still writes those values breaks the rule too: candidate enumeration
    prunes on it with the values every group of a branch must write, and
    :func:`check_group` checks it with the group's own writes."""
    if kind == "pointwise":
        return _pointwise_rules(g, mask, written)
    if kind == "contraction":
        return _contraction_rules(g, (anchor,) if isinstance(anchor, int) else anchor, mask, written)
    if kind == "attention":
        violation = epilogue_violation(g, anchor.c2, mask)
        scores = g.descendants_mask[g.index[anchor.c1]] | (1 << g.index[anchor.c1])
        feeders = _written_members(g, mask & g.compute_mask & ~scores, written)
        if violation is None and feeders:
            violation = IllegalPlan("contraction.prologue_written", f"'{feeders[0]}' feeds attention "
                                    f"'{anchor.c1}'/'{anchor.c2}' and is also needed outside the group",
                                    (feeders[0], anchor.c1))
        return violation
    return None


def _written_members(g: Graph, mask: int, written: set[str]) -> list[str]:
    """The values ``written`` that are members of ``mask``, in topological order."""
    return sorted((name for name in written if mask >> g.index[name] & 1), key=g.index.__getitem__)


class RowStructure:
    """Row structure of a reduction group: which dims of a row-dependent value are
    row (outer) dims.

    A value is *row-dependent* when it depends, inside the group, on a reduction's
    result. Its dims are labelled ``("o", d)`` (outer dim ``d`` of the reduction
    input), ``"r"`` (a reduced dim), ``"f"`` (a dim that comes from independent
    values only) or ``"1"`` (size one). One block processes one row, so every
    row-dependent value must carry all the outer labels, each once.
    """

    def __init__(self, group: Group, first_reduction: Op):
        self.group = group
        shape, axes = group.graph.reduction_signature(first_reduction.name)
        self.shape, self.axes = shape, axes
        self.outer = tuple(("o", d) for d, n in enumerate(shape) if d not in axes and n > 1)
        self.labels: dict[str, tuple] = {}

    def reduced_labels(self, keepdims: bool) -> tuple:
        out = []
        for d, n in enumerate(self.shape):
            if d in self.axes:
                if keepdims:
                    out.append("1")
            else:
                out.append(("o", d) if n > 1 else "1")
        return tuple(out)

    def input_fits(self, labels: tuple) -> bool:
        for d, label in enumerate(labels):
            if d in self.axes:
                if isinstance(label, tuple):
                    return False
            elif label != (("o", d) if self.shape[d] > 1 else "1"):
                return False
        return True

    def broadcast(self, op: Op, inputs: list[tuple[tuple, tuple]]) -> tuple | None:
        """Labels of an elementwise result from (shape, labels) of its dependent inputs."""
        out_shape = op.out.shape
        rank = len(out_shape)
        labels: list = ["f" if n > 1 else "1" for n in out_shape]
        fixed = [False] * rank
        for shape, lab in inputs:
            for k, (n, label) in enumerate(zip(shape, lab)):
                j = rank - len(shape) + k
                if n == 1 or n != out_shape[j]:
                    continue
                if fixed[j] and labels[j] != label:
                    return None
                labels[j], fixed[j] = label, True
        outer = [label for label in labels if isinstance(label, tuple) and label[0] == "o"]
        if len(outer) != len(set(outer)):
            return None
        return tuple(labels)


def row_structure(group: Group) -> RowStructure:
    """The row structure of a legal reduction group (labels of its row-dependent values);
    raises :class:`IllegalPlan` for an illegal one. Backends lay out their kernels by it."""
    return _check_reduction(group)


def _check_reduction(group: Group) -> RowStructure:
    g = group.graph
    reductions = [op for op in group.compute if op.op_class == "reduction"]
    rows = RowStructure(group, reductions[0])
    for name in group.ops:
        op = g.ops[name]
        dependent = [t for t in op.tensor_inputs if t in rows.labels]
        if op.op_class == "reduction":
            if dependent and not rows.input_fits(rows.labels[dependent[0]]):
                raise IllegalPlan(
                    "reduction.row_mismatch",
                    f"reduction '{name}' reads '{dependent[0]}' whose rows are not the rows being reduced",
                    (name, dependent[0]),
                )
            rows.labels[name] = rows.reduced_labels(op.attrs["keepdims"])
        elif not dependent:
            continue
        elif op.is_view:
            in_shape = g.tensor(dependent[0]).shape
            if [n for n in in_shape if n != 1] != [n for n in op.out.shape if n != 1]:
                raise IllegalPlan(
                    "reduction.reorders_rows",
                    f"reshape '{name}' regroups row-dependent '{dependent[0]}'; only size-1 axes may be added "
                    "or removed after a reduction",
                    (name,),
                )
            kept = iter([lab for n, lab in zip(in_shape, rows.labels[dependent[0]]) if n != 1])
            rows.labels[name] = tuple(next(kept) if n != 1 else "1" for n in op.out.shape)
        elif op.op_class in ("elementwise", "broadcast"):
            labels = rows.broadcast(op, [(g.tensor(t).shape, rows.labels[t]) for t in dependent])
            if labels is None:
                raise IllegalPlan(
                    "reduction.row_mismatch",
                    f"'{name}' combines values of different rows after a reduction",
                    (name,),
                )
            rows.labels[name] = labels
        else:
            raise IllegalPlan(
                "reduction.reorders_rows",
                f"{op.kind} '{name}' moves elements of row-dependent '{dependent[0]}' across rows",
                (name,),
            )
    keep = tuple(1 if d in rows.axes else n for d, n in enumerate(rows.shape))
    drop = tuple(n for d, n in enumerate(rows.shape) if d not in rows.axes)
    for base in group.writes:
        if base not in rows.labels and g.tensor(base).shape not in (rows.shape, keep, drop):
            raise IllegalPlan(
                "reduction.written_layout",
                f"'{base}' {list(g.tensor(base).shape)} is written but follows neither the rows "
                f"{list(rows.shape)} nor the reduced shape",
                (base,),
            )
    return rows


# ---------------------------------------------------------------- entry points


def check_group(group: Group, hw: Hardware | str, max_ops: int = DEFAULT_MAX_OPS) -> None:
    """Raise :class:`IllegalPlan` if ``group`` breaks a fusion rule or a budget.

    The rules and budgets are listed with their codes in ``docs/legality.md``; a
    group of one compute op is always accepted by the budgets (it is a kernel
    anyway; the report flags a lone op over one).

    Parameters
    ----------
    group : Group
        The candidate fusion group (:meth:`Group.of`).
    hw : Hardware or str
        Supplies the shared-memory (bytes), register (per thread) and kernel
        parameter (bytes) limits: a profile, or its name or file as
        :func:`partitioner.load_hardware` takes them.
    max_ops : int
        The cap on non-view ops per group.

    Raises
    ------
    IllegalPlan
        The first rule broken: ``.reason`` its code, ``.ops`` the ops involved, and
        for a ``budget.*`` code ``.used`` and ``.limit``.
    HardwareError
        ``hw`` names no profile.

    Examples
    --------
    >>> from partitioner import load_graph, load_hardware
    >>> from partitioner.group import Group
    >>> g = load_graph("graphs/mlp_gelu_f16.yaml")
    >>> check_group(Group.of(g, ["h:weight_t", "h:matmul", "h", "a"]), load_hardware("h100"))
    >>> check_group(Group.of(g, ["h", "y"]), load_hardware("h100"))
    Traceback (most recent call last):
    ...
    partitioner.errors.IllegalPlan: [group.not_convex] 'h' and 'y' share a group but the path between them leaves it through 'a'
    """
    if not group.mask:
        raise IllegalPlan("partition.empty_group", "a group has no ops")
    hw = load_hardware(hw)  # (as partition and evaluate take it)
    g = group.graph
    _check_convex(group)
    _check_connected(group)
    violation = hereditary_violation(g, group.mask, max_ops)
    if violation is not None:
        raise violation
    if group.kind == "pointwise":
        violation = written_violation(g, "pointwise", None, group.mask, set(group.writes))
    elif group.kind == "contraction":
        anchors = tuple(bits(group.compute_mask & g.class_masks["contraction"]))
        violation = written_violation(g, "contraction", anchors, group.mask, set(group.writes))
    elif group.kind == "reduction":
        _check_reduction(group)
    elif group.kind == "attention":
        violation = written_violation(g, "attention", attention.structure(group).pair, group.mask, set(group.writes))
    if violation is not None:
        raise violation
    if len(group.compute) < 2:
        return  # one op is always a kernel: budgets limit fusion (the report flags a lone op over one)
    for name, used, limit in budget_overruns(group, hw, max_ops):
        raise IllegalPlan(
            f"budget.{name}",
            f"group of {', '.join(group.ops[:3])}{', ...' if len(group.ops) > 3 else ''} needs {used} "
            f"({name.replace('_', ' ')}) over the limit {limit}",
            group.ops, used, limit,
        )


@dataclass(frozen=True)
class Decision:
    """Whether a group may be one kernel: accepted (``reason`` is ``None``), or the
    rule it breaks, as XLA's ``FusionDecision`` and Inductor's ``WhyNoFuse`` say it.

    Attributes:
        reason: the rule's code (``docs/legality.md``), or ``None`` when accepted.
        message: why, one line.
        ops: the ops the rule involves.
        used, limit: for a ``budget.*`` code, the estimate and the limit.
    """

    reason: str | None = None
    message: str = ""
    ops: tuple[str, ...] = ()
    used: int | None = None
    limit: int | None = None

    @property
    def accepted(self) -> bool:
        return self.reason is None

    @classmethod
    def rejected(cls, error: IllegalPlan) -> "Decision":
        return cls(error.reason, error.message, error.ops, error.used, error.limit)


ACCEPTED = Decision()


def decide(group: Group, hw: Hardware | str, max_ops: int = DEFAULT_MAX_OPS) -> Decision:
    """The :class:`Decision` on ``group``: :func:`check_group` as a value.

    Parameters
    ----------
    group : Group
        The candidate fusion group.
    hw : Hardware or str
        Supplies the budgets' limits (a profile, or its name or file).
    max_ops : int
        The cap on non-view ops per group.

    Returns
    -------
    Decision
        Accepted (``reason`` is ``None``), or the rule's code, message and ops, with
        the estimate and the limit for a budget.

    Examples
    --------
    >>> from partitioner import load_graph, load_hardware
    >>> from partitioner.group import Group
    >>> g = load_graph("graphs/mlp_gelu_f16.yaml")
    >>> decide(Group.of(g, ["h:weight_t", "h:matmul", "h", "a"]), load_hardware("h100")).accepted
    True
    >>> d = decide(Group.of(g, list(g.ops)), load_hardware("h100"))
    >>> d.reason, d.ops
    ('contraction.multiple', ('h:matmul', 'y:matmul'))
    >>> d = decide(Group.of(g, list(g.ops)[:4]), load_hardware("h100"), max_ops=2)
    >>> d.reason, d.used, d.limit
    ('budget.ops', 4, 2)
    """
    try:
        check_group(group, hw, max_ops)
    except IllegalPlan as error:
        return Decision.rejected(error)
    return ACCEPTED


def is_legal(group: Group, hw: Hardware | str, max_ops: int = DEFAULT_MAX_OPS) -> bool:
    """Whether ``group`` passes :func:`check_group`.

    Parameters
    ----------
    group : Group
        The candidate fusion group.
    hw : Hardware or str
        Supplies the budgets' limits (a profile, or its name or file).
    max_ops : int
        The cap on non-view ops per group.

    Returns
    -------
    bool
        ``decide(group, hw, max_ops).accepted``.

    Examples
    --------
    >>> from partitioner import load_graph, load_hardware
    >>> from partitioner.group import Group
    >>> g = load_graph("graphs/mlp_gelu_f16.yaml")
    >>> is_legal(Group.of(g, ["a", "y:weight_t", "y:matmul", "y"]), load_hardware("h100"))  # a GELU prologue
    True
    >>> is_legal(Group.of(g, list(g.ops)), load_hardware("h100"))
    False
    """
    return decide(group, hw, max_ops).accepted


def check_covering(graph: Graph, groups: list[list[str]]) -> int:
    """Raise :class:`IllegalPlan` unless ``groups`` covers every op, each once but
    for recomputed ones; return the bitset of the recomputed ops (those in two or
    more groups).

    An op may be in several groups only if it is recomputable
    (``Graph.recomputable_mask``, or a view of such an op); then it is recomputed:
    no group writes it, so every group that holds a reader of it holds it too. A
    group that recomputes it reads its operands, or recomputes their producers as
    well; one of the graph inputs alone (``Graph.input_derived_mask``) is
    recomputed with its producers, back to the graph inputs. Any other is read
    outside each group that holds it (a copy no reader needs is never made). A
    group writes a value it does not recompute if a recomputed member reads it, for
    the other copies; so which values a group writes never depends on the other
    groups.

    Raises :class:`TypeError` when ``groups`` is not a sequence of collections of
    op names (``None``, or one group's names given as the plan)."""
    if isinstance(groups, str) or not isinstance(groups, Sequence):
        raise TypeError(f"a plan is a list of groups, each a list of op names; got {type(groups).__name__}")
    seen: dict[str, int] = {}
    recomputed = 0
    for k, ops in enumerate(groups):
        # a collection, not any iterable: the groups are read again below, and a
        # generator read twice would leave an empty group behind without a word
        if isinstance(ops, str) or not isinstance(ops, Collection):
            raise TypeError(f"group {k} is {type(ops).__name__} {ops!r}, not a list of op names")
        ops = list(ops)
        if not ops:
            raise IllegalPlan("partition.empty_group", f"group {k} has no ops")
        if len(set(ops)) < len(ops):
            twice = next(name for name in ops if ops.count(name) > 1)
            raise IllegalPlan("partition.duplicate", f"'{twice}' is twice in group {k}", (twice,))
        for name in ops:
            if name not in graph.ops:
                raise IllegalPlan("partition.unknown_op", f"'{name}' is not an op of the graph", (name,))
            if name in seen:
                base = graph.base_index[graph.index[name]]
                if base < 0 or not graph.recomputable_mask >> base & 1:
                    raise IllegalPlan("partition.duplicate", f"'{name}' is in groups {seen[name]} and {k}; only "
                                      "recomputable ops may be computed twice", (name,))
                recomputed |= 1 << graph.index[name]
            seen.setdefault(name, k)
    missing = [name for name in graph.ops if name not in seen]
    if missing:
        raise IllegalPlan(
            "partition.missing",
            f"{len(missing)} op(s) in no group: {', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}",
            tuple(missing),
        )
    if recomputed:
        _check_recomputation(graph, [graph.mask(ops) for ops in groups], recomputed)
    return recomputed


def covering_groups(graph: Graph, groups: list[list[str]]) -> list[Group]:
    """The groups of a plan, each recomputing its members that other groups hold too,
    after :func:`check_covering` (whose :class:`IllegalPlan` it raises)."""
    recomputed = check_covering(graph, groups)
    return [Group(graph, mask, mask & recomputed) for mask in map(graph.mask, groups)]


def _check_recomputation(graph: Graph, masks: list[int], recomputed: int) -> None:
    """The rules of recomputed ops (:func:`check_covering`)."""
    g = graph
    for k, mask in enumerate(masks):
        for i in bits(mask & recomputed & g.input_derived_mask):
            # the ops computing what it reads (through views: a view of a graph input
            # reads the input, and one of a member lies between members, in the group)
            producers = g.mask(g.storage[t] for t in g.ops[g.order[i]].tensor_inputs if g.storage[t] in g.ops)
            if producers & ~mask:
                missing = g.names(producers & ~mask)[0]
                raise IllegalPlan("recompute.producer", f"group {k} recomputes '{g.order[i]}' but not its "
                                  f"operand '{missing}'", (g.order[i], missing))
        for i in bits(mask & recomputed & g.compute_mask & ~g.input_derived_mask):
            if not g.readers_of[i] & ~mask:
                raise IllegalPlan("recompute.unread", f"group {k} holds every reader of '{g.order[i]}', so its "
                                  "copies in the other groups are read by none", (g.order[i],))
        for i in bits(recomputed & g.compute_mask & ~mask):
            readers = g.readers_of[i] & mask
            if readers:
                reader = g.names(readers & -readers)[0]
                raise IllegalPlan("recompute.reader", f"'{reader}' in group {k} reads '{g.order[i]}', which is "
                                  "recomputed and never written, but the group does not recompute it",
                                  (reader, g.order[i]))


def holders(groups: list[Group]) -> dict[str, list[int]]:
    """Op name -> the positions of the groups that hold it (several for a recomputed op)."""
    held: dict[str, list[int]] = {}
    for k, group in enumerate(groups):
        for name in group.ops:
            held.setdefault(name, []).append(k)
    return held


def dependencies(graph: Graph, groups: list[Group]) -> nx.DiGraph:
    """The groups (by position) and their dependencies: an edge from the group that
    computes a value to each other group that reads it. A recomputed value makes
    none (each group that reads it computes it)."""
    owner: dict[str, int] = {}
    for k, group in enumerate(groups):
        for name in group.ops:
            if not group.recomputed >> graph.index[name] & 1:
                owner[name] = k
    held = holders(groups)
    quotient = nx.DiGraph()
    quotient.add_nodes_from(range(len(groups)))
    for u, v in graph.dag.edges:
        if u in owner:
            quotient.add_edges_from((owner[u], k) for k in held[v] if k != owner[u])
    return quotient


def check_acyclic(graph: Graph, groups: list[Group]) -> None:
    """Raise ``plan.cycle`` if the groups, as nodes, depend on each other in a cycle
    (:func:`dependencies`)."""
    quotient = dependencies(graph, groups)
    if nx.is_directed_acyclic_graph(quotient):  # find_cycle alone restarts from every source
        return
    cycle = nx.find_cycle(quotient)
    firsts = [groups[k].ops[0] for k, _ in cycle]
    raise IllegalPlan(
        "plan.cycle",
        "groups depend on each other in a cycle: " + " -> ".join(f"[{f}, ...]" for f in firsts + firsts[:1]),
        tuple(firsts),
    )
