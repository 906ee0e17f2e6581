"""Attention groups: found from the primitive ops, legal only as online softmax can
compute them, priced like every group, enumerated without loss, and chosen by the
ILP exactly (brute force over every partition into legal groups)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioner import IllegalPlan, PROFILES, evaluate, load_graph, partition
from partitioner.attention import pairs, structure
from partitioner.cost import free_prologues, group_cost, input_prologues, movable_copies
from partitioner.graph import bits
from partitioner.group import Group
from partitioner.legality import check_acyclic, check_group
from partitioner.strategies.base import group_of
from partitioner.strategies.candidates import enumerate_candidates
from partitioner.cost import objective
from partitioner.strategies.conflicts import exclusive_ops
from partitioner.strategies.ilp import structural_bound

from .attention_graphs import attention
from .conftest import GRAPHS, make_graph, op

H100 = PROFILES["h100"]


def reason(graph, fused):
    """Reason code of evaluating ``fused`` as one group and every other op alone."""
    groups = [list(fused)] + [[n] for n in graph.ops if n not in fused]
    with pytest.raises(IllegalPlan) as info:
        evaluate(graph, groups)
    return info.value.reason


def everything_but(graph, *left_out):
    return [n for n in graph.ops if n not in left_out]


# ---------------------------------------------------------------- discovery


@pytest.mark.parametrize("softmax", ["composite", "primitives"])
def test_pair_found_from_primitives_whatever_the_names(softmax):
    g = attention(batch=2, heads=3, sq=33, sk=31, d=32, dv=16, mask="causal", softmax=softmax)
    (p,) = pairs(g)
    assert (p.c1, p.c2, p.batch, p.sq, p.sk, p.d, p.dv, p.dtype) == ("scores", "out", 6, 33, 31, 32, 16, "float16")
    assert p.normalise[0] == "div"
    assert group_kinds(partition(g, "ilp")) == ["attention"]


def test_normalising_by_a_reciprocal_is_online_too():
    g = make_graph({"q": [2, 8, 16], "k": [2, 16, 8], "v": [2, 8, 4]}, [
        op("s", "matmul", ["q", "k"]), op("m", "reduce_max", ["s"], axes=[2], keepdims=True),
        op("d", "sub", ["s", "m"]), op("e", "exp", ["d"]), op("l", "reduce_sum", ["e"], axes=[2], keepdims=True),
        op("r", "reciprocal", ["l"]), op("p", "mul", ["r", "e"]), op("o", "matmul", ["p", "v"])], ["o"])
    (p,) = pairs(g)
    assert p.normalise == ("mul", "r")
    evaluate(g, [list(g.ops)])


@pytest.mark.parametrize("spelling", ["any_of_finite", "all_of_inf", "live_where"])
def test_a_guard_for_rows_of_minus_inf_only_is_online(spelling):
    """PyTorch's _safe_softmax (scaled_dot_product_attention's decomposition) and its
    equivalent spellings: the guard is the kernel's own "the running maximum is -inf",
    here of a float32 X cast from the float16 scores the guard tests."""
    inputs = {"q": ([2, 8, 16], "float16"), "k": ([2, 16, 8], "float16"), "v": ([2, 8, 4], "float16")}
    ops = [op("s", "matmul", ["q", "k"]), op("x", "cast", ["s"], dtype="float32"),
           op("p0", "softmax", ["x"], axis=-1)]
    if spelling == "all_of_inf":
        ops += [op("inf", "eq", ["s", -math.inf]), op("dead", "reduce_min", ["inf"], axes=[-1], keepdims=True),
                op("p", "where", ["dead", 0.0, "p0"])]
    else:
        ops += [op("fin", "ne", ["s", -math.inf]), op("live", "reduce_max", ["fin"], axes=[-1], keepdims=True)]
        ops += [op("p", "where", ["live", "p0", 0.0])] if spelling == "live_where" else \
               [op("dead", "logical_not", ["live"]), op("p", "where", ["dead", 0, "p0"])]
    ops += [op("ph", "cast", ["p"], dtype="float16"), op("o", "matmul", ["ph", "v"])]
    g = make_graph(inputs, ops, ["o"])
    (p,) = pairs(g)
    assert p.guard == ("dead" if spelling == "all_of_inf" else "live", spelling != "all_of_inf")
    assert group_kinds(partition(g, "ilp")) == ["attention"]


@pytest.mark.parametrize("mutation", ["other_tensor", "narrowing_cast", "nonzero_fill", "any_of_inf"])
def test_a_guard_the_kernel_cannot_know_is_rejected(mutation):
    """The kernel knows only which rows of X are -inf throughout, and that their
    probabilities must then be 0 for C2's row to be the sum of 0 * V it holds."""
    inputs = {"q": [2, 8, 16], "k": [2, 16, 8], "v": [2, 8, 4], "b": [2, 8, 8]}
    ops = [op("s", "matmul", ["q", "k"]), op("x", "add", ["s", "b"])]
    x, tested = "x", {"other_tensor": "s"}.get(mutation, "x")
    if mutation == "narrowing_cast":  # float32 scores beyond float16's range become -inf only after the cast
        ops.append(op("xh", "cast", ["s"], dtype="float16"))
        ops.append(op("xw", "cast", ["xh"], dtype="float32"))
        x, tested = "xh", "s"
    ops += [op("p0", "softmax", [x], axis=-1),
            op("t", "eq" if mutation == "any_of_inf" else "ne", [tested, -math.inf]),
            op("g", "reduce_max", ["t"], axes=[-1], keepdims=True),
            op("p", "where", ["g", "p0", 1.0 if mutation == "nonzero_fill" else 0.0]), op("o", "matmul", ["p", "v"])]
    g = make_graph(inputs, [o for o in ops if o["name"] != "xw"], ["o"])
    assert pairs(g) == ()
    assert reason(g, list(g.ops)) == "attention.not_online"


def group_kinds(plan):
    return [c.kind for c in plan.cost.groups if c.kind != "view"]


# ---------------------------------------------------------------- rules, each with its code


def test_two_matmuls_without_a_softmax_between_are_two_contractions():
    g = make_graph({"x": [8, 16], "w1": [16, 32], "w2": [32, 16]}, [
        op("h", "matmul", ["x", "w1"]), op("a", "gelu", ["h"]), op("y", "matmul", ["a", "w2"])], ["y"])
    assert reason(g, ["h", "a", "y"]) == "contraction.multiple"


@pytest.mark.parametrize("mutation,code", [
    ("transposed_scores", "attention.score_layout"),
    ("column_softmax", "attention.score_layout"),
    ("log_softmax", "attention.not_online"),
    ("bias_after_softmax", "attention.not_online"),
    ("scores_as_second_operand", "attention.operand"),
    ("rows_regrouped", "attention.key_axis"),
    ("integer_scores", "attention.not_online"),
])
def test_what_online_softmax_cannot_compute_is_rejected(mutation, code):
    g = _mutated(mutation)
    assert reason(g, list(g.ops)) == code


def _rounded(change, dtype="float32"):
    """Scores through a primitive softmax with one op's value rounded or cast, as a
    fuzz of the emulated kernels found them: the fused kernel dropped the rounding."""
    ops = [op("s", "matmul", ["q", "kt"]), op("mx", "reduce_max", ["s"], axes=[-1], keepdims=True),
           op("sh", "sub", ["s", "mx"]), op("e", "exp", ["sh"]),
           op("su", "reduce_sum", ["e"], axes=[-1], keepdims=True), op("p", "div", ["e", "su"])]
    named = {o["name"]: o for o in ops}
    p = "p"
    if change[0] == "stated":  # ("stated", op, dtype): the op's result stated in dtype
        named[change[1]]["dtype"] = change[2]
    else:  # ("cast", op, dtype): a cast of the op's result and back, in place of it
        _, name, to = change
        ops += [op(f"{name}_c", "cast", [name], dtype=to), op(f"{name}_b", "cast", [f"{name}_c"], dtype=dtype)]
        for o in ops[ops.index(named[name]) + 1:-2]:
            o["inputs"] = [f"{name}_b" if i == name else i for i in o["inputs"]]
        p = "p_b" if name == "p" else "p"
    ops.append(op("o", "matmul", [p, "v"]))
    return make_graph({"q": [1, 4, 16], "kt": [1, 16, 130], "v": [1, 130, 16]}, ops, ["o"], dtype=dtype)


@pytest.mark.parametrize("change, dtype", [
    (("cast", "p", "bool"), "float16"),  # probabilities as 0/1: the kernel multiplied the probabilities
    (("stated", "p", "bool"), "float32"),
    (("cast", "e", "bool"), "float32"),  # the row sum of 0/1 values: the online rescale assumed exp
    (("stated", "sh", "int32"), "float32"),  # X - max truncated
    (("stated", "mx", "float16"), "float32"),  # -1e5 rounds to -inf: a live row read as all -inf
    (("stated", "mx", "bfloat16"), "float32"),  # float32's -3.4e38 mask fill rounds to -inf
    (("cast", "p", "float8_e4m3fn"), "float16"),  # off by 2.8%, within the float8 tolerance only
], ids=["probs_cast_bool", "probs_stated_bool", "exp_cast_bool", "shift_stated_int32", "max_stated_float16",
        "max_stated_bfloat16", "probs_cast_float8"])
def test_a_rounding_the_online_softmax_cannot_follow_is_no_attention_group(change, dtype):
    g = _rounded(change, dtype)
    assert reason(g, list(g.ops)) == "attention.not_online"
    assert "attention" not in group_kinds(partition(g, "ilp"))


@pytest.mark.parametrize("change", [("cast", "p", "float32"), ("cast", "e", "float32")])
def test_a_rounding_the_kernel_follows_keeps_the_attention_group(change):
    """Float16 probabilities or exponentials through float32 and back keep their form
    (a widening stated dtype too: ``test_attention_emulated.py``)."""
    g = _rounded(change, "float16")
    assert structure(group_of(g, g.mask(list(g.ops))))


def _mutated(mutation):
    inputs = {"q": [2, 8, 16], "k": [2, 16, 8], "v": [2, 8, 8]}
    ops = [op("s", "matmul", ["q", "k"])]
    x = "s"
    if mutation == "transposed_scores":
        ops.append(op("st", "transpose", ["s"], perm=[0, 2, 1]))
        x = "st"
    if mutation == "integer_scores":  # the running maximum is a float that starts at -inf
        ops.append(op("si", "cast", ["s"], dtype="int32"))
        x = "si"
    axis = -2 if mutation == "column_softmax" else -1
    ops.append(op("p0", "log_softmax" if mutation == "log_softmax" else "softmax", [x], axis=axis))
    p = "p0"
    if mutation == "bias_after_softmax":
        ops.append(op("pb", "add", ["p0", 0.1]))
        p = "pb"
    if mutation == "rows_regrouped":  # 2 x 8 query rows become 4 x 4: a product per half head
        inputs["v"] = [4, 8, 8]
        ops += [op("pr", "reshape", [p], shape=[4, 4, 8]), op("o", "matmul", ["pr", "v"])]
    elif mutation == "scores_as_second_operand":
        ops.append(op("o", "matmul", ["v", p]))
    else:
        ops.append(op("o", "matmul", [p, "v"]))
    return make_graph(inputs, ops, ["o"])


def test_feeders_are_recomputed_so_never_written():
    g = make_graph({"q": [1, 2, 8, 16], "k": [1, 2, 8, 16], "v": [1, 2, 8, 16], "bias": [8, 8]}, [
        op("kt", "transpose", ["k"], perm=[0, 1, 3, 2]), op("s", "matmul", ["q", "kt"]), op("b2", "mul", ["bias", 2.0]),
        op("sb", "add", ["s", "b2"]), op("p", "softmax", ["sb"]), op("o", "matmul", ["p", "v"])], ["o", "b2"])
    assert reason(g, list(g.ops)) == "contraction.prologue_written"
    evaluate(g, [everything_but(g, "b2"), ["b2"]])


def test_epilogue_rules():
    base = {"q": [1, 2, 8, 16], "k": [1, 2, 16, 8], "v": [1, 2, 8, 8]}
    core = [op("s", "matmul", ["q", "k"]), op("p", "softmax", ["s"]), op("o", "matmul", ["p", "v"])]
    moved = make_graph(base, core + [op("t", "transpose", ["o"], perm=[0, 2, 1, 3])], ["t"])
    assert reason(moved, list(moved.ops)) == "contraction.epilogue_op"
    with_scores = make_graph(base, core + [op("y", "add", ["o", "p"])], ["y"])
    assert reason(with_scores, list(with_scores.ops)) == "attention.epilogue_input"
    reduced = make_graph(base, core + [op("r", "reduce_sum", ["o"], axes=[-1])], ["r"])
    assert reason(reduced, list(reduced.ops)) == "attention.extra_reduction"


@pytest.mark.parametrize("spec,code", [
    (dict(dtype="float64"), "attention.dtype"),
    (dict(d=320, dtype="bfloat16"), "attention.head_dim"),
])
def test_dtypes_and_head_dims(spec, code):
    g = attention(sq=8, sk=8, **spec)
    assert reason(g, list(g.ops)) == code


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_head_dim_256_fits_and_budgets_still_bind(dtype):
    g = attention(d=256, sq=8, sk=8, dtype=dtype)
    group = evaluate(g, [list(g.ops)]).groups[0]
    assert group.kind == "attention" and group.budgets.registers <= 255
    assert group.tiling.block_n == 32  # a wide accumulator leaves room for half the key tile
    with pytest.raises(IllegalPlan) as info:
        evaluate(g, [list(g.ops)], max_ops=4)
    assert info.value.reason == "budget.ops" and (info.value.used, info.value.limit) == (len(group.group.compute), 4)


def test_two_attentions_or_three_contractions_never_share_a_group():
    g = make_graph({"q": [2, 8, 16], "k": [2, 16, 8], "v": [2, 8, 16], "w": [16, 8]}, [
        op("s", "matmul", ["q", "k"]), op("p", "softmax", ["s"]), op("o", "matmul", ["p", "v"]),
        op("y", "matmul", ["o", "w"])], ["y"])
    assert reason(g, list(g.ops)) == "contraction.multiple"


# ---------------------------------------------------------------- cost


def test_attention_bytes_are_its_inputs_output_and_written_scores():
    g = attention(batch=2, heads=4, sq=64, sk=48, d=32, mask="additive", probs_output=True)
    group = Group(g, g.mask(g.ops))
    cost = group_cost(group, H100)
    assert cost.bytes_read == sum(g.tensor(t).nbytes for t in ("q", "k", "v", "mask"))
    assert cost.bytes_written == g.tensor("out").nbytes + g.tensor("probs").nbytes
    assert cost.launches == 1
    tiles = structure(group)
    assert tiles.score_writes == ("probs",)


def test_gpt2_attention_traffic_leaves_the_plan():
    g = load_graph(next(p for p in GRAPHS if p.stem == "gpt2_2l_b8_s1024_f16"))
    plan = partition(g, "ilp")
    assert plan.solver.status == "OPTIMAL"
    assert group_kinds(plan).count("attention") == 2
    # the plan without attention groups: 797.9 us of traffic time (memory and launches)
    assert plan.cost.traffic_time_us <= 0.45 * 797.9


# ---------------------------------------------------------------- enumeration and exactness


def convex_groups(graph):
    """Every convex subset of ``graph``'s ops holding a compute op, as a Group, by
    brute force over all subsets."""
    ops = list(graph.ops)
    for size in range(1, len(ops) + 1):
        for members in itertools.combinations(ops, size):
            group = Group.of(graph, members)
            if group.mask == graph.convex_hull(group.mask) and group.compute:
                yield group


def legal_variants(graph, hw=H100, recompute=True):
    """Every legal group of ``graph`` by brute force over all subsets of its compute
    ops and every choice of the recomputable members it recomputes (one of the graph
    inputs alone with its producers, all held; any other alone, read outside the
    group: ``legality.check_covering``), whose hull (``Graph.convex_hull`` less the
    paths out of them) takes in no other compute op; as Groups. Without
    ``recompute``, the groups that recompute nothing."""
    g = graph
    compute = bits(g.compute_mask)
    for size in range(1, len(compute) + 1):
        for members in itertools.combinations(compute, size):
            mask = sum(1 << i for i in members)
            able = [i for i in members if g.recomputable_mask >> i & 1] if recompute else []
            for r in range(len(able) + 1):
                for chosen in itertools.combinations(able, r):
                    recomputed = sum(1 << i for i in chosen)
                    if any(g.ancestors_mask[i] & g.compute_mask & ~recomputed for i in chosen
                           if g.input_derived_mask >> i & 1):
                        continue  # a recomputed op of the inputs alone: its producers are recomputed too
                    if any(not g.readers_of[i] & ~mask for i in chosen if not g.input_derived_mask >> i & 1):
                        continue  # a copy of any other is read outside
                    hull = g.convex_hull(mask, recomputed)
                    if hull & g.compute_mask != mask:
                        continue
                    group = Group(g, hull, recomputed)
                    try:
                        check_group(group, hw)
                    except IllegalPlan:
                        continue
                    yield group


def legal_groups(graph, recompute=True):
    """Every legal group of ``graph`` by brute force (:func:`legal_variants`), as
    (compute-op mask, values written) pairs: recomputing a member nothing outside
    reads changes nothing."""
    return {(group.compute_mask, frozenset(group.writes)) for group in legal_variants(graph, recompute=recompute)}


def prologues_left_out(g, prologues: int, mask: int) -> int:
    """The input prologues (``prologues``, a bitset) that the set ``mask`` leaves out
    but holds every reader of: the largest such set closed under producers, found by
    dropping, until none is left to drop, each prologue read outside ``mask`` and
    the set, or produced by a prologue not in it."""
    out = prologues & ~mask
    while True:
        drop = sum(1 << t for t in bits(out) if g.readers_of[t] & ~(mask | out)
                   or any(base in g.ops and not out >> g.index[base] & 1 for base in g.storage_reads[g.order[t]]))
        if not drop:
            return out
        out &= ~drop


def usable_groups(graph, hw=H100):
    """The :func:`legal_groups` with recomputation that some legal covering may
    hold, by brute force: those whose every recomputed op has each reader outside
    the group in a legal group that recomputes it too (a recomputed op is never
    written, so the groups of its readers compute it: ``legality.check_covering``)."""
    variants = list(legal_variants(graph, hw))
    together = {}  # recomputed op -> the readers some legal group holds while recomputing it
    for group in variants:
        for i in bits(group.recomputed):
            together[i] = together.get(i, 0) | group.compute_mask
    g = graph
    return {(group.compute_mask, frozenset(group.writes)) for group in variants
            if all(not g.readers_of[i] & ~group.compute_mask & ~together[i] for i in bits(group.recomputed))}


def needed_groups(graph, recompute=False, hw=H100, kind="time", kept=0):
    """What the enumeration of ``kind`` on ``hw`` must find under the time and
    traffic objectives: the :func:`legal_groups` less, without ``recompute``, each
    group ``S`` of two or more ops that leaves out prologues it holds every reader
    of, where the group with them is legal too and costs no more than ``S`` and
    one launch:

    - free prologues (``cost.free_prologues``), which cost nothing taken in
      (``test_optimality.test_a_free_prologue_left_out_saves_nothing``);
    - input prologues (``cost.input_prologues``): the largest set of them outside
      ``S``, closed under producers, whose readers are all in ``S`` or the set.
      Left out, they are a kernel of their own at least (one launch).

    It also leaves out the :func:`stranded_groups` (but for the copies ``kept``).
    The enumeration may keep some of those (a prologue outside the region of the
    search that finds the group, or one ``cost.prologue_excess`` does not bound
    below a launch), never fewer."""
    legal = legal_groups(graph, recompute)
    if recompute:
        return usable_groups(graph)
    free = free_prologues(graph)
    prologues = input_prologues(graph)
    masks = {mask for mask, _ in legal}
    g = graph

    def cost(mask):
        return objective(Group(g, g.convex_hull(mask)), hw, kind)

    def dominated(mask):
        if not mask & (mask - 1):  # an op alone is kept
            return False
        absent = sum(1 << t for t, readers in free.items() if not mask >> t & 1 and readers & mask == readers)
        cheap = prologues_left_out(g, prologues, mask)
        full = mask | absent | cheap
        if not absent | cheap or full not in masks:
            return False
        return not cheap or cost(full) <= cost(mask) + hw.launch_bytes.numerator

    stranded = stranded_groups(graph, masks, kept)
    return {(mask, writes) for mask, writes in legal if not dominated(mask) and mask not in stranded}


def stranded_groups(graph, masks, kept: int = 0) -> set:
    """Of the legal groups ``masks`` (compute-op bitsets), those of two or more ops and
    no pool, pointwise or contraction, that hold a movable copy (``cost.movable_copies``, less
    the bitset ``kept``) without its reader and without its operand's producer: what
    the enumeration leaves out (``_Search.stranded``)."""
    copies = {t: move for t, move in movable_copies(graph).items() if not kept >> t & 1}
    windows = graph.class_masks.get("window", 0)
    return {mask for mask in masks if mask & (mask - 1) and not mask & windows
            and any(mask >> t & 1 and not (reader | producer) & mask for t, (reader, producer) in copies.items())
            and Group(graph, graph.convex_hull(mask)).kind in ("pointwise", "contraction")}


def assert_finds_the_needed_groups(graph, found, recompute=False) -> set:
    """The enumeration ``found`` is complete, finds each group once, every
    :func:`needed_groups` group, and only legal groups, and counts each legal group
    it left out once (``Candidates.dominated``). Returns its groups."""
    pairs = found_groups(graph, found)
    legal = legal_groups(graph, recompute)
    needed = needed_groups(graph, recompute, kept=found.kept)
    dropped = set() if recompute else stranded_groups(graph, {mask for mask, _ in legal}, found.kept)
    stranded = {pair for pair in legal if pair[0] in dropped}
    assert found.complete and len(pairs) == len(set(pairs))
    assert needed <= set(pairs) <= legal
    untried = set()
    if recompute:  # copies of ops no covering recomputes (Graph.never_recomputed_mask): neither tried nor counted
        pair = {True: set(), False: set()}
        for group in legal_variants(graph):
            pair[bool(group.recomputed & graph.never_recomputed_mask)].add((group.compute_mask,
                                                                             frozenset(group.writes)))
        untried = pair[True] - pair[False]
    assert not untried & needed and not stranded & set(pairs)
    assert found.dominated == len(legal - untried - stranded) - len(pairs)
    return set(pairs)


def found_groups(graph, found):
    """The enumeration's candidates as :func:`legal_groups` pairs, in its order."""
    return [(mask, frozenset(Group(graph, graph.convex_hull(mask, r), r).writes))
            for mask, r in zip(found.masks, found.recomputed)]


def best_covering(graph, hw=H100, kinds=("time",), recompute=True) -> dict:
    """Objective -> the least exact integer objective (``cost.objective``) of any
    legal plan of ``graph``, partition or covering (an op in several groups is
    recomputed), by brute force independent of the ILP: every way of covering the
    ops with legal groups (:func:`legal_variants`) and views alone, each group
    taken to cover an op no earlier one holds and overlapping them only on
    recomputable ops, judged by ``evaluate``. Without ``recompute``, partitions only
    (and for the time objective alone, judged by their groups' own costs and
    ``check_acyclic``, as ``evaluate`` would)."""
    g = graph
    lowest: dict[int, int] = {}  # group ops -> its least time objective (a bound: fewer writes cost less)
    for group in legal_variants(g, hw, recompute):
        cost = objective(group, hw, "time")
        lowest[group.mask] = min(lowest.get(group.mask, cost), cost)
    for i in bits(((1 << len(g.ops)) - 1) & ~g.compute_mask):
        lowest[1 << i] = 0
    dup = sum(1 << i for i, base in enumerate(g.base_index)
              if recompute and base >= 0 and g.recomputable_mask >> base & 1)
    by_op = {i: sorted(m for m in lowest if m >> i & 1) for i in range(len(g.ops))}
    full = (1 << len(g.ops)) - 1
    best = dict.fromkeys(kinds, math.inf)

    def cover(covered: int, chosen: list[int], floor: int) -> None:
        if covered == full and not recompute and kinds == ("time",):
            # a partition's groups cost what they cost alone: only a cycle can make it illegal
            try:
                check_acyclic(g, [Group(g, m) for m in chosen])
            except IllegalPlan:
                return
            best["time"] = min(best["time"], floor)
            return
        if covered == full:
            try:
                cost = evaluate(g, [g.names(m) for m in chosen], hw)
            except IllegalPlan:
                return
            for kind in kinds:
                best[kind] = min(best[kind], sum(objective(c.group, hw, kind) for c in cost.groups))
            return
        if kinds == ("time",) and floor >= best["time"]:
            return
        first = (~covered & full & -(~covered & full)).bit_length() - 1
        for m in by_op[first]:
            if not m & covered & ~dup:
                cover(covered | m, chosen + [m], floor + lowest[m])

    cover(0, [], 0)
    return best


SMALL = [
    dict(sq=8, sk=8, d=16, heads=1, mask="causal"),
    dict(sq=8, sk=8, d=16, heads=2, kv_heads=1, softmax="primitives"),
    dict(sq=8, sk=8, d=16, heads=1, mask="additive", epilogue=True, probs_output=True),
    dict(sq=8, sk=8, d=16, heads=1, mask="padding", softmax="safe", probs_output=True),
]


@pytest.mark.parametrize("spec", SMALL, ids=["causal", "gqa_primitives", "mask_epilogue_probs", "safe_probs"])
def test_enumeration_finds_every_legal_attention_group_once(spec):
    g = attention(**spec)
    found = enumerate_candidates(g, H100, 64, recompute=True)
    pairs = found_groups(g, found)
    assert found.complete and len(pairs) == len(set(pairs))
    assert set(pairs) == legal_groups(g)
    assert any(group_of(g, mask).kind == "attention" for mask in found.masks)


@st.composite
def attention_specs(draw):
    mask = draw(st.sampled_from([None, "causal", "padding", "additive", "bias"]))
    softmax = draw(st.sampled_from(["composite", "primitives", "safe"]))
    # the guard adds five ops, 32x the subsets the brute force walks: one extra at most with it
    extras = st.sampled_from(["q_prologue", "k_written", "score_side", "out_consumers"])
    return dict(sq=draw(st.sampled_from([8, 64, 256])), sk=draw(st.sampled_from([8, 64, 256])),
                d=draw(st.sampled_from([16, 64])), heads=draw(st.sampled_from([1, 4])), mask=mask,
                scale=draw(st.booleans()), softmax=softmax,
                epilogue=draw(st.booleans()), probs_output=draw(st.booleans()),
                dtype=draw(st.sampled_from(["float16", "float32"])),
                extras=draw(st.sets(extras, max_size=1 if softmax == "safe" else 4)))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(attention_specs())
def test_ilp_equals_brute_force_on_attention_graphs(spec):
    g = attention(**spec)
    plan = partition(g, "ilp")
    assert plan.solver.status == "OPTIMAL"
    best = best_covering(g, recompute=False)["time"]
    assert sum(objective(c.group, H100) for c in plan.cost.groups) == best
    # the fallback bounds (used when the enumeration stops early) stay lower bounds
    assert structural_bound(g, H100, 64) <= best
    assert structural_bound(g, H100, 64, exclusive=exclusive_ops(g, 64)) <= best


def test_every_transformer_of_the_corpus_gets_one_attention_group_per_layer(graph_path):
    g = load_graph(graph_path)
    layers = len(pairs(g))
    if not layers:
        pytest.skip("no attention in this graph")
    assert group_kinds(partition(g, "ilp")).count("attention") == layers


# ---------------------------------------------------------------- reports and pictures


def test_report_json_and_drawing_show_the_attention_tiling():
    from partitioner.draw import to_dot
    from partitioner.report import text_report

    g = attention(batch=2, heads=4, sq=200, sk=150, d=80)
    plan = partition(g, "ilp")
    (tiling,) = [grp["tiling"] for grp in plan.to_dict()["groups"] if grp["kind"] == "attention"]
    assert (tiling["block_m"], tiling["block_n"], tiling["d_pad"], tiling["q_tiles"], tiling["k_tiles"]) == \
        (64, 64, 80, 4, 3)
    assert "attention #0: 64x64 tiles (query rows x keys), head dims 80/80 padded, 4 warps, 4 query tile(s) per " \
           "head, 3 K/V tile(s) streamed per block" in text_report(plan, width=200)
    source = to_dot(plan).source
    assert "#0 attention" in source and "64x64 tiles, 3 K/V tile(s) per block" in source
