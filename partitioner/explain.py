"""Why two ops do or do not share a kernel in a plan: ``partition GRAPH --explain A B``.

For each plan, the answer is one of:

* ``together``: the two ops are in one group;
* ``illegal``: the plan with the smallest group holding both, given the plan,
  breaks a fusion rule or a budget (the rule's code, and for a budget the estimate
  and the limit), the merged group's own or, with recomputation, one a copy makes
  of the others (what a group writes depends on what the others recompute);
* ``cycle``: that plan is legal group by group, but its groups would close a
  cycle between kernels (``plan.cycle``);
* ``not cheaper`` / ``cheaper``: the plan with that group instead costs more (the
  plan's choice) or less (a merge the strategy did not make) under the plan's own
  objective: modelled µs of time or traffic, or µJ of energy.

The smallest group holding both is the union of their two groups and of every
group on a path between them (a group must be convex), with the views between
them. The merged plan is judged and priced whole by :func:`partitioner.plan.evaluate`:
nothing here restates a rule.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from .cost import UNITS, display_value, objective
from .errors import GraphError, IllegalPlan
from .group import Group
from .legality import holders
from .plan import Plan, PlanCost, evaluate


@dataclass(frozen=True)
class Explanation:
    """One strategy's answer (see module docstring).

    Attributes:
        strategy: the plan's strategy.
        verdict: ``together``, ``illegal``, ``cycle``, ``not cheaper`` or ``cheaper``.
        groups: the plan's group index of each op (launch order).
        reason: the rule's code for ``illegal`` and ``cycle``, else ``None``.
        message: one line saying why.
        delta: for ``not cheaper``/``cheaper``, what the merged plan adds (positive)
            or saves (negative) under the plan's objective, modelled, in ``unit``
            (``cost.UNITS``: microseconds, or microjoules for ``energy``).
        unit: ``delta``'s unit.
        used, limit: for a budget, the estimate and the limit it exceeds.
    """

    strategy: str
    verdict: str
    groups: tuple[int, int]
    reason: str | None = None
    message: str = ""
    delta: float | None = None
    unit: str | None = None
    used: int | None = None
    limit: int | None = None

    def to_dict(self) -> dict:
        return {key: value for key, value in vars(self).items() if value is not None}


def explain(plan: Plan, a: str, b: str) -> Explanation:
    """Whether ops ``a`` and ``b`` share a group in ``plan``, and if not, why.

    The groups between them (those on a path from one to the other) are merged
    with theirs, and the plan with the merged group is judged and priced by
    :func:`partitioner.plan.evaluate` against ``plan``.

    Parameters
    ----------
    plan : Plan
        From :func:`partitioner.partition`.
    a, b : str
        Op names; a composite's parts are named ``COMPOSITE:part`` (``sm:max`` for
        a softmax ``sm``).

    Returns
    -------
    Explanation
        ``together``; ``illegal`` with a legality code (a budget with its numbers);
        ``cycle``; or ``not cheaper``/``cheaper`` with the modelled delta under the
        plan's objective.

    Raises
    ------
    GraphError
        ``a`` or ``b`` is not an op of the plan's graph, or they are one op.

    Examples
    --------
    >>> import partitioner
    >>> plan = partitioner.partition(partitioner.load_graph("graphs/mlp_gelu_f16.yaml"), "ilp")
    >>> explain(plan, "h:matmul", "a").verdict
    'together'
    >>> e = explain(plan, "a", "y:matmul")
    >>> e.verdict, e.reason
    ('illegal', 'contraction.multiple')
    >>> e = explain(partitioner.partition(plan.graph, "none"), "h", "a")
    >>> e.verdict, round(e.delta, 2), e.unit
    ('cheaper', -41.06, 'us')
    """
    g = plan.graph
    for name in (a, b):
        if name not in g.ops:
            raise GraphError(f"{g.path or g.name}: --explain: {_not_an_op(g, name)}")
    if a == b:
        raise GraphError(f"{g.path or g.name}: --explain: '{a}' is named twice; name two ops")
    groups = [c.group for c in plan.cost.groups]
    held = holders(groups)
    shared = sorted(set(held[a]) & set(held[b]))
    if shared:  # a recomputed op may share several groups with the other
        ka = shared[0]
        return Explanation(plan.strategy, "together", (ka, ka), message=f"both in group {ka} ({groups[ka].kind})")
    owner = {name: ks[0] for name, ks in held.items()}
    ka, kb = owner[a], owner[b]
    merged_ids = _between(g, groups, owner, ka, kb)
    merged = g.names(_union(groups, merged_ids))
    rest = [list(group.ops) for k, group in enumerate(groups) if k not in merged_ids]
    try:  # the whole plan: under recomputation, what a group writes depends on the others
        cost = evaluate(g, [*rest, merged], plan.hardware, plan.max_ops)
    except IllegalPlan as error:
        verdict = "cycle" if error.reason == "plan.cycle" else "illegal"
        return Explanation(plan.strategy, verdict, (ka, kb), error.reason, error.message, used=error.used,
                           limit=error.limit)
    kind, unit = plan.objective, UNITS[plan.objective]
    delta = display_value(_objective(cost, plan) - _objective(plan.cost, plan), plan.hardware, kind)
    if delta >= 0:
        return Explanation(plan.strategy, "not cheaper", (ka, kb),
                           message=f"legal but not cheaper: +{delta:,.2f} {unit} modelled ({kind})",
                           delta=delta, unit=unit)
    return Explanation(plan.strategy, "cheaper", (ka, kb),
                       message=f"legal and {-delta:,.2f} {unit} cheaper (modelled {kind}): {plan.strategy} "
                               f"did not merge them", delta=delta, unit=unit)


def _objective(cost: PlanCost, plan: Plan) -> int:
    """A priced plan's exact integer objective: the sign of a difference is never a
    float's rounding."""
    return sum(objective(c.group, plan.hardware, plan.objective) for c in cost.groups)


def _not_an_op(g, name: str) -> str:
    """Why ``name`` is no op, with the names it may have meant."""
    if name in g.inputs:
        return f"'{name}' is a graph input, not an op: name an op that reads it"
    folded = [n for n in g.ops if n.lower() == name.lower()]
    close = folded + [n for n in difflib.get_close_matches(name, g.ops, n=3) if n not in folded]
    hint = f"; close: {', '.join(map(repr, close[:3]))}" if close else ""
    return (f"'{name}' is not an op of the graph (a composite op's parts are named COMPOSITE:part, e.g. 'sm:max' "
            f"for a softmax 'sm'{hint})")


def _union(groups: list[Group], ids) -> int:
    """The ops of the groups ``ids`` (a recomputed op may be in several)."""
    mask = 0
    for k in ids:
        mask |= groups[k].mask
    return mask


def _between(g, groups: list[Group], owner: dict[str, int], ka: int, kb: int) -> set[int]:
    """The fewest whole groups that hold ``ka`` and ``kb`` and form a convex set: the two,
    and every group an op on a path between their ops belongs to, until none is left."""
    ids = {ka, kb}
    while True:
        mask = _union(groups, ids)
        grown = ids | {owner[name] for name in g.names(g.convex_hull(mask) & ~mask)}
        if grown == ids:
            return ids
        ids = grown
