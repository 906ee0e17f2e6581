"""The attention fusion rule: which groups a FlashAttention-style kernel computes, and how.

An *attention group* holds two matmuls: ``C1``, the scores ``S = Q·Kᵀ`` of shape
``batch + [Sq, Sk]`` (contracting the head dimension ``D``), and ``C2 = P·V`` of
shape ``batch + [Sq, Dv]``, which contracts the same key axis ``Sk``. Between them
lies a row softmax over the key axis. The kernel never stores the ``Sq × Sk``
scores: one block takes a tile of query rows, streams ``K``/``V`` tiles through
shared memory and keeps a running row maximum and row sum (FlashAttention-2).

The group is found from the primitive ops, never from names: any two matmuls
whose *middle* (every op on a path from ``C1`` to ``C2``, which a convex group
must hold) computes, per score element, values of these *forms*:

=========== ========================================================================
``raw``     any elementwise function of ``C1``'s element and of operands that do
            not depend on ``C1`` (scale, additive bias or mask, ``where`` with a
            boolean mask, casts): computed exactly as the unfused ops compute it
``max``     ``reduce_max`` over the key axis of a floating-point ``raw`` value ``X``
``shifted`` ``X - max`` (``sub`` of that very ``X``, up to views)
``exp``     ``exp(shifted)``, and casts of it to a float as precise as the products
``sum``     ``reduce_sum`` over the key axis of an ``exp`` value ``E``
``inv``     ``reciprocal(sum)`` or ``1 / sum``
``probs``   ``E / sum`` or ``E * inv`` (that same ``E``), and casts of it as of
            ``exp``: ``C2``'s first operand
``guard``   whether a row holds a score other than -inf: ``reduce_max`` over the key
            axis of ``X != -inf`` (``logical_not(eq(X, -inf))``), ``reduce_min`` of
            ``X == -inf``, and ``logical_not`` of these. ``where(dead, 0, probs)``
            (or ``where(live, probs, 0)``) is ``probs`` again: PyTorch's
            ``_safe_softmax``, which gives rows of -inf only probabilities of 0
=========== ========================================================================

Views (``reshape``), ``identity`` and ``broadcast_to`` keep a value's form. Past
``raw``, an op whose stated dtype is not the one it computes in keeps its form
only where that dtype widens it (a narrower one could round a finite maximum to
-inf, or truncate).

This is exactly the algebra online softmax needs: ``exp(X - m)`` rescales by
``exp(m_old - m_new)`` as the running maximum grows, and division by the row sum
commutes with the sum over keys, so it moves after ``C2``. A guarded row is one
whose running maximum stays -inf: its ``E`` is 0 at every key, so ``C2``'s row is
the sum of ``0 · V`` the unfused product computes, left unnormalised. ``X`` in the
guard may also be the value ``X`` is a widening float cast of (casts that keep -inf
and finite values apart).

*Alignment.* Every middle value is a score element (*elem*: ``B·Sq·Sk`` elements,
last axis ``Sk``) or a per-row value (*row*: ``B·Sq`` elements), and its row-major
position is the score's own: element ``(r, k)`` at ``r·Sk + k``, row ``r`` at ``r``
(``r = b·Sq + q``). An elementwise op combines middle values only at the same
element, or a row value broadcast along the key axis (shape ``[..., 1]``); layout
ops that move elements (transpose, slice, concat, pad) are not allowed in the
middle. So the kernel can evaluate any middle value at the tile element it holds.

Everything else in a group is classified by position: the *epilogue* (downstream
of ``C2``, pointwise at ``C2``'s element count), the *score side* (downstream of
``C1`` but off the path to ``C2``, e.g. the probabilities' consumers), and
*feeders* (not downstream of ``C1``: prologues of Q, K, V, mask and bias
computations), which are recomputed wherever they are read and so are never
written. Reason codes are listed in ``legality.py`` and ``docs/legality.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .dtypes import FLOATS, epsilon
from .errors import IllegalPlan
from .graph import Graph, Op, bits
from .group import Group
from .ops import matmul_shapes, normalize_axes

#: Head dimensions (``D`` and ``Dv``) the template supports.
MAX_HEAD_DIM = 256
#: Dtypes of the two products: tensor cores for half types, CUDA cores for float32.
PRODUCT_DTYPES = ("float16", "bfloat16", "float32")
#: Ops that pass a value on unchanged (its form and its values).
_ALIAS_KINDS = frozenset({"reshape", "identity", "broadcast_to"})
#: Float casts that keep -inf and finite values apart (a narrowing one may overflow to -inf).
_WIDENING = {("float16", "float32"), ("bfloat16", "float32"), ("float16", "float64"), ("bfloat16", "float64"),
             ("float32", "float64")}


@dataclass(frozen=True)
class Pair:
    """The fixed part of every attention group made of contractions ``c1`` and ``c2``.

    Attributes:
        c1, c2: the score and output matmuls.
        middle: bitset of every op (views included) on a path from ``c1`` to ``c2``.
        forms: middle tensor (and ``c1``) -> form (module docstring).
        rows: middle tensors that are per-row values (the others are score elements).
        x, row_max, e, row_sum, probs: ``X``, the ``reduce_max``, ``E``, the
            ``reduce_sum`` and ``C2``'s first operand.
        normalise: ``("div", L)`` when probs are ``E / L``; ``("mul", R)`` when they
            are ``E * R`` with ``R = 1 / sum``; ``L`` and ``R`` are tensors of the middle.
        guard: the ``guard`` reduction and whether it is true for live rows (those
            with a score other than -inf), or ``None`` without a guard.
        batch, sq, sk, d, dv: flattened batch ``B`` (batch × heads), query and key
            lengths, head dims of ``Q·Kᵀ`` and of ``V``.
        dtype: the dtype both products compute in (their operands' promoted dtype).
    """

    c1: str
    c2: str
    middle: int
    forms: dict
    rows: frozenset
    x: str
    row_max: str
    e: str
    row_sum: str
    probs: str
    normalise: tuple[str, str]
    guard: tuple[str, bool] | None
    batch: int
    sq: int
    sk: int
    d: int
    dv: int
    dtype: str


def _fail(code: str, message: str, ops: tuple[str, ...]) -> IllegalPlan:
    return IllegalPlan(f"attention.{code}", message, ops)


def _strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without leading size-1 axes (NumPy broadcasting aligns the rest)."""
    k = 0
    while k < len(shape) and shape[k] == 1:
        k += 1
    return shape[k:]


class _Analysis:
    """Forms and alignment of the middle of one candidate pair (see :func:`pair`)."""

    def __init__(self, g: Graph, c1: Op):
        self.g = g
        self.product = c1.promoted  # the products' dtype (the pair requires C2's to be the same)
        self.sq, self.sk = c1.out.shape[-2:]
        self.elems = math.prod(c1.out.shape)
        self.row_count = self.elems // self.sk if self.sk else 0
        self.forms: dict[str, str] = {c1.name: "raw"}
        self.rows: set[str] = set()
        self.alias: dict[str, str] = {c1.name: c1.name}  # tensor -> the value it passes on unchanged
        self.found: dict[str, str] = {}  # "max", "sum", "x", "e", "inv", "guard", "guard_of" -> tensor
        # elementwise predicates "Y == -inf" (False) or "Y != -inf" (True) by tensor -> (polarity, Y);
        # guard row values -> whether they are true for live rows
        self.predicates: dict[str, tuple[bool, str]] = {}
        self.live: dict[str, bool] = {}

    def dependent(self, op: Op) -> list[str]:
        """Tensor operands of ``op`` that depend on ``C1`` (``C1`` or middle values)."""
        return [t for t in op.tensor_inputs if t in self.forms]

    def root(self, tensor: str) -> str:
        return self.alias.get(tensor, tensor)

    def check_layout(self, op: Op, ins: list[str]) -> bool:
        """Whether ``op``'s result and dependent inputs keep the score alignment;
        records whether the result is a row value."""
        g, out = self.g, op.out.shape
        # a row value broadcast along the keys (to the scores' shape) is a score element
        row_out = op.op_class == "reduction" or all(t in self.rows for t in ins) and op.out.numel == self.row_count
        if row_out:
            if op.out.numel != self.row_count:
                return False
            self.rows.add(op.name)
            if op.op_class == "reduction":
                axes = normalize_axes(op.attrs.get("axes"), len(g.tensor(ins[0]).shape))
                shape = g.tensor(ins[0]).shape
                return ins[0] not in self.rows and axes == (len(shape) - 1,)
            return op.is_view or all(_strip(g.tensor(t).shape) == _strip(out) for t in ins)
        if op.out.numel != self.elems or not out or out[-1] != self.sk:
            return False
        if op.is_view:
            return True
        for t in ins:
            shape = _strip(g.tensor(t).shape)
            if t in self.rows:
                if shape != _strip(out[:-1] + (1,)):
                    return False
            elif shape != _strip(out):
                return False
        return True

    def form_of(self, op: Op, ins: list[str]) -> str | None:
        """The form of ``op``'s result, or ``None`` when online softmax cannot compute it.

        Past the ``raw`` values (which the kernel computes as the unfused ops do, each
        rounded to its dtype), the online algebra holds for the values themselves: an
        op stated in a dtype other than the one it computes in has a form only where
        that dtype widens it (a row maximum stated float16 rounds -1e5 to -inf, and
        stated bfloat16 rounds float32's mask fill -3.4e38 to -inf, so a live row reads
        as one of -inf only; X - max stated int32 truncates), and a cast of ``exp`` or
        ``probs`` keeps its form only to a float as precise as the products' dtype,
        which the kernel rounds them to anyway (a cast to bool or an integer is no
        probability)."""
        form = self._form(op, ins)
        if form in (None, "raw") or op.out.dtype == op.promoted or (op.promoted, op.out.dtype) in _WIDENING:
            return form
        return None

    def _form(self, op: Op, ins: list[str]) -> str | None:
        forms = [self.forms[t] for t in ins]
        kind = op.kind
        if op.is_view or kind in _ALIAS_KINDS:
            self.alias[op.name] = self.root(ins[0])
            return forms[0]
        if kind == "cast" and forms[0] in ("raw", "exp", "probs"):
            keeps = forms[0] == "raw" or op.out.dtype in FLOATS and epsilon(op.out.dtype) <= epsilon(self.product)
            return forms[0] if keeps else None
        if op.op_class == "reduction" and forms == ["raw"] and self.root(ins[0]) in self.predicates:
            return self._guard(op, *self.predicates[self.root(ins[0])])
        if op.op_class == "reduction":
            # the running maximum starts at -inf and rescales by exp(): a float maximum of a float X
            floats = self.g.tensor(ins[0]).dtype in FLOATS and op.out.dtype in FLOATS
            if kind == "reduce_max" and forms == ["raw"] and floats and "max" not in self.found:
                self.found["max"], self.found["x"] = op.name, self.root(ins[0])
                return "max"
            if kind == "reduce_sum" and forms == ["exp"] and "sum" not in self.found:
                self.found["sum"], self.found["e"] = op.name, self.root(ins[0])
                return "sum"
            return None
        if op.op_class != "elementwise":
            return None
        if set(forms) == {"raw"}:
            self._predicate(op, ins)
            return "raw"
        if forms == ["guard"] and kind == "logical_not":
            self.live[op.name] = not self.live[self.root(ins[0])]
            return "guard"
        if kind == "where" and forms == ["guard", "probs"] and op.inputs[0] in ins:
            return self._guarded(op)
        operands = [i if isinstance(i, str) else None for i in op.inputs]
        if kind == "sub" and forms == ["raw", "max"] and operands[0] in ins and operands[1] in ins:
            return "shifted" if self.root(operands[0]) == self.found["x"] else None
        if kind == "exp" and forms == ["shifted"]:
            return "exp"
        if kind == "reciprocal" and forms == ["sum"] or kind == "div" and forms == ["sum"] and op.inputs[0] == 1:
            self.found["inv"] = op.name
            return "inv"
        if kind == "div" and forms == ["exp", "sum"] and op.inputs[0] in ins and op.inputs[1] in ins:
            return self._probs(op, "div", op.inputs[0], op.inputs[1])
        if kind == "mul" and sorted(forms) == ["exp", "inv"] and len(ins) == 2:
            e, r = ins if forms[0] == "exp" else ins[::-1]
            return self._probs(op, "mul", e, r)
        return None

    def _predicate(self, op: Op, ins: list[str]) -> None:
        """Record ``op`` if it is ``Y == -inf``, ``Y != -inf`` or the negation of one."""
        if op.kind in ("eq", "ne") and len(ins) == 1 and -math.inf in op.inputs and op.inputs.count(-math.inf) == 1:
            self.predicates[op.name] = (op.kind == "ne", self.root(ins[0]))
        elif op.kind == "logical_not" and self.root(ins[0]) in self.predicates:
            live, y = self.predicates[self.root(ins[0])]
            self.predicates[op.name] = (not live, y)

    def _guard(self, op: Op, live: bool, y: str) -> str | None:
        """``any`` of a live predicate, or ``all`` of a dead one, over the key axis."""
        if "guard" in self.found or (op.kind, live) not in (("reduce_max", True), ("reduce_min", False)):
            return None
        self.found["guard"], self.found["guard_of"] = op.name, y
        self.live[op.name] = live
        return "guard"

    def _guarded(self, op: Op) -> str | None:
        """``where(dead, 0, probs)`` or ``where(live, probs, 0)``: probs, 0 for rows of -inf only."""
        live = self.live[self.root(op.inputs[0])]
        zero, probs = (op.inputs[2], op.inputs[1]) if live else (op.inputs[1], op.inputs[2])
        if isinstance(zero, str) or zero != 0 or probs not in self.forms or "guarded" in self.found:
            return None
        self.found["guarded"] = op.name
        return "probs"

    def same_infinities(self, y: str) -> bool:
        """Whether ``y`` is -inf exactly where ``X`` is: ``X`` itself, or a widening float cast of it."""
        x = self.found["x"]
        while x != y:
            cast = self.g.ops.get(x)
            if cast is None or cast.kind != "cast" or (self.g.tensor(cast.inputs[0]).dtype, cast.out.dtype) \
                    not in _WIDENING:
                return False
            x = self.root(cast.inputs[0])
        return True

    def _probs(self, op: Op, how: str, e: str, scale: str) -> str | None:
        if "sum" not in self.found or self.root(e) != self.found["e"] or "normalise" in self.found:
            return None
        self.found["normalise"] = how
        self.found["scale"] = scale
        return "probs"


def _matrix_matmul(op: Op, g: Graph) -> bool:
    return op.kind == "matmul" and all(len(g.tensor(t).shape) >= 2 for t in op.inputs)


def pair(g: Graph, c1_name: str, c2_name: str) -> Pair:
    """The attention structure of contractions ``c1_name`` then ``c2_name``, or raise
    :class:`IllegalPlan` (``attention.*``). Depends on the two ops alone (every group
    holding both holds the same middle), so it is cached on the graph."""
    key = ("attention.pair", c1_name, c2_name)
    if key not in g.cache:
        try:
            g.cache[key] = _pair(g, c1_name, c2_name)
        except IllegalPlan as exc:
            g.cache[key] = exc
    found = g.cache[key]
    if isinstance(found, IllegalPlan):
        raise found
    return found


def _pair(g: Graph, c1_name: str, c2_name: str) -> Pair:
    c1, c2 = g.ops[c1_name], g.ops[c2_name]
    i1, i2 = g.index[c1_name], g.index[c2_name]
    names = (c1_name, c2_name)
    if not g.descendants_mask[i1] >> i2 & 1:
        raise IllegalPlan("contraction.multiple", f"contractions '{c1_name}' and '{c2_name}' do not feed one "
                          "another", names)
    if not (_matrix_matmul(c1, g) and _matrix_matmul(c2, g)):
        raise _fail("operand", f"'{c1_name}' and '{c2_name}' are not both matmuls of matrices", names)
    middle = g.descendants_mask[i1] & g.ancestors_mask[i2]
    p_tensor, v_tensor = c2.inputs[0], c2.inputs[1]
    analysis = _Analysis(g, c1)
    if v_tensor == c1_name or g.producer(v_tensor) and middle >> g.index[v_tensor] & 1:
        raise _fail("operand", f"the second operand of '{c2_name}' depends on the scores '{c1_name}'", names)
    if p_tensor != c1_name and not (g.producer(p_tensor) and middle >> g.index[p_tensor] & 1):
        raise _fail("operand", f"the first operand of '{c2_name}' does not depend on the scores '{c1_name}'", names)
    between = middle & g.class_masks.get("contraction", 0)
    if between:  # checked first: contractions layers apart have most of the graph between them
        name = g.names(between, limit=1)[0]
        raise IllegalPlan("contraction.multiple", f"contraction '{name}' lies between '{c1_name}' and "
                          f"'{c2_name}'", (c1_name, name, c2_name))
    for name in g.names(middle):
        op = g.ops[name]
        ins = analysis.dependent(op)
        if op.op_class in ("injective", "gather", "opaque") and not op.is_view or not analysis.check_layout(op, ins):
            raise _fail("score_layout", f"{op.kind} '{name}' moves score elements or combines them at other "
                        f"positions; between '{c1_name}' and '{c2_name}' only per-element and per-row values fuse",
                        (name,))
        form = analysis.form_of(op, ins)
        if form is None:
            raise _fail("not_online", f"{op.kind} '{name}' is not part of a row softmax over the key axis of "
                        f"'{c1_name}' that online softmax can compute", (name,))
        analysis.forms[name] = form
    if analysis.forms.get(p_tensor) != "probs" or p_tensor in analysis.rows:
        raise _fail("not_online", f"'{c2_name}' does not multiply softmax probabilities of the scores '{c1_name}' "
                    "(max, subtract, exp, sum, divide over the key axis)", names)
    return _finish(g, c1, c2, middle, analysis)


def _finish(g: Graph, c1: Op, c2: Op, middle: int, a: _Analysis) -> Pair:
    names = (c1.name, c2.name)
    p_shape = g.tensor(c2.inputs[0]).shape
    batch, m, k, n, out = matmul_shapes(p_shape, g.tensor(c2.inputs[1]).shape)
    if m != a.sq or k != a.sk or math.prod(batch) * m != a.row_count or math.prod(p_shape[:-2]) != math.prod(batch):
        raise _fail("key_axis", f"'{c2.name}' {list(out)} does not contract the key axis of '{c1.name}' "
                    f"{list(c1.out.shape)} row by row", names)
    _, _, d, _, _ = matmul_shapes(g.tensor(c1.inputs[0]).shape, g.tensor(c1.inputs[1]).shape)
    if c1.promoted != c2.promoted or c1.promoted not in PRODUCT_DTYPES:
        raise _fail("dtype", f"'{c1.name}' computes in {c1.promoted} and '{c2.name}' in {c2.promoted}; the kernel "
                    f"needs one of {', '.join(PRODUCT_DTYPES)} for both", names)
    if max(d, n) > MAX_HEAD_DIM:
        raise _fail("head_dim", f"head dims {d} and {n} exceed the template's {MAX_HEAD_DIM}", names)
    scale = a.found["scale"]
    guard = a.found.get("guard")
    if guard is not None and not a.same_infinities(a.found["guard_of"]):
        raise _fail("not_online", f"'{guard}' tests '{a.found['guard_of']}' for -inf, not the scores '{a.found['x']}' "
                    "the softmax reduces: the kernel knows only the latter's all -inf rows", (guard,))
    return Pair(c1.name, c2.name, middle, dict(a.forms), frozenset(a.rows), a.found["x"], a.found["max"],
                a.found["e"], a.found["sum"], c2.inputs[0], (a.found["normalise"], scale),
                (guard, a.live[guard]) if guard is not None else None,
                a.row_count // a.sq if a.sq else 0, a.sq, a.sk, d, n, c1.promoted)


# ---------------------------------------------------------------- whole groups


@dataclass(frozen=True)
class Structure:
    """An attention group's ops by role (see module docstring).

    Attributes:
        pair: the fixed :class:`Pair` of its two contractions.
        score: bitset of score-region ops: the middle plus the score side.
        epilogue: bitset of ops downstream of ``C2``.
        feeders: bitset of the other ops (recomputed where read).
        score_writes: written score-region tensors (stored in a second pass over
            the key tiles, once the row maximum and sum are final).
        rows: score-region tensors that are per-row values (the others are score
            elements).
    """

    pair: Pair
    score: int
    epilogue: int
    feeders: int
    score_writes: tuple[str, ...]
    rows: frozenset


def staged_scores(group: Group, p: Pair) -> tuple[str, ...]:
    """Tensors an attention kernel of ``group`` stages in shared memory per key tile:
    the operands of the middle's score-element ops that the group reads from memory
    (through views at most) and that vary along the keys (last axis of length ``sk``):
    a mask or a bias. Loaded with consecutive threads at consecutive keys, they are read
    in whole sectors; read in the scores' accumulator layout, a warp would touch 8 rows
    for 2 of every 8 keys."""
    g = group.graph
    reads = set(group.reads)
    found: list[str] = []
    for name in g.names(p.middle):
        if name in p.rows:
            continue
        for t in g.ops[name].tensor_inputs:
            shape = g.tensor(t).shape
            if t not in found and g.storage[t] in reads and shape and shape[-1] == p.sk > 1:
                found.append(t)
    return tuple(found)


def contraction_pair(group: Group) -> tuple[str, str]:
    """The two contractions of a group, in topological order (upstream first)."""
    c = [op.name for op in group.compute if op.op_class == "contraction"]
    return c[0], c[1]


def structure(group: Group) -> Structure:
    """The :class:`Structure` of an attention group, or raise :class:`IllegalPlan` for
    a rule of its own (the pair, reductions, the score side, what the epilogue
    reads). The rules it shares with contraction groups (written feeders, epilogue
    ops) are ``legality.written_violation``'s."""
    g = group.graph
    contractions = [op.name for op in group.compute if op.op_class == "contraction"]
    if len(contractions) < 2:
        reduction = next(op.name for op in group.compute if op.op_class == "reduction")
        raise IllegalPlan("contraction.with_reduction", f"contraction '{contractions[0]}' and reduction "
                          f"'{reduction}' share a group without a second contraction to make it attention",
                          (contractions[0], reduction))
    c1, c2 = contractions[:2]
    p = pair(g, c1, c2)
    i1, i2 = g.index[c1], g.index[c2]
    below1 = g.descendants_mask[i1] & group.mask
    epilogue = g.descendants_mask[i2] & group.mask
    score = below1 & ~epilogue & ~(1 << i2)
    feeders = group.mask & ~below1 & ~(1 << i1)
    for op in group.compute:
        j = g.index[op.name]
        if op.op_class == "reduction" and not p.middle >> j & 1:
            raise _fail("extra_reduction", f"reduction '{op.name}' is not the row softmax between '{c1}' and '{c2}'",
                        (op.name, c1, c2))
        if epilogue >> j & 1:
            _check_epilogue_reads(g, op, p, score)
    rows = _check_score_side(g, p, score & ~p.middle)
    writes = tuple(t for t in group.writes if t == c1 or score >> g.index[t] & 1)
    return Structure(p, score, epilogue, feeders, writes, rows)


def _check_epilogue_reads(g: Graph, op: Op, p: Pair, score: int) -> None:
    for t in op.tensor_inputs:
        if t == p.c1 or g.producer(t) and score >> g.index[t] & 1:
            raise _fail("epilogue_input", f"epilogue '{op.name}' reads score value '{t}', which the kernel no "
                        f"longer holds when it finishes '{p.c2}'", (op.name, t))


def _check_score_side(g: Graph, p: Pair, side: int) -> frozenset:
    """Score values off the path to ``C2`` are evaluated in the second pass, at one
    score element or row: they must keep the alignment (no reductions, no moves).
    Returns the per-row tensors of the score region."""
    analysis = _Analysis(g, g.ops[p.c1])
    analysis.rows |= p.rows
    analysis.forms.update(p.forms)
    for name in g.names(side):
        op = g.ops[name]
        ins = analysis.dependent(op)
        if op.op_class not in ("elementwise", "broadcast") and not op.is_view or not analysis.check_layout(op, ins):
            raise _fail("score_layout", f"{op.kind} '{name}' moves score elements or combines them at other "
                        f"positions; between '{p.c1}' and '{p.c2}' only per-element and per-row values fuse",
                        (name,))
        analysis.forms[name] = "side"
    return frozenset(analysis.rows)


# ---------------------------------------------------------------- pairs of a graph


def pairs(g: Graph) -> tuple[Pair, ...]:
    """Every pair of contractions of ``g`` that forms an attention group's core.

    ``C2`` must be reachable from ``C1`` without passing another contraction, or
    the middle would hold three. The answer is cached on the graph.

    Parameters
    ----------
    g : Graph
        A loaded graph.

    Returns
    -------
    tuple of Pair
        In topological order of ``C1``; each names its two contractions, the
        softmax's parts (row max, exponent, row sum, probabilities), and the
        problem's sizes: ``batch`` (batch × heads), ``sq``, ``sk``, ``d``, ``dv``.

    Examples
    --------
    >>> from partitioner import load_graph
    >>> g = load_graph("graphs/bert_base_2l_b32_s128_f16.yaml")
    >>> [(p.c1, p.c2) for p in pairs(g)]
    [('bmm', 'bmm_1'), ('bmm_2', 'bmm_3')]
    >>> p = pairs(g)[0]
    >>> p.row_max, p.row_sum, (p.batch, p.sq, p.sk, p.d, p.dv), p.dtype
    ('_softmax:max', '_softmax:sum', (384, 128, 128, 64, 64), 'float16')
    >>> pairs(load_graph("graphs/mlp_gelu_f16.yaml"))
    ()
    """
    key = "attention.pairs"
    if key not in g.cache:
        found = []
        contractions = g.class_masks.get("contraction", 0)
        nearest = _next_contractions(g, contractions)
        for i1 in bits(contractions):
            for i2 in bits(nearest[i1]):
                # a contraction on another path between them is the cheapest rule to
                # test (layers apart, every pair through the residual stream has one)
                if g.descendants_mask[i1] & g.ancestors_mask[i2] & contractions:
                    continue
                try:
                    found.append(pair(g, g.order[i1], g.order[i2]))
                except IllegalPlan:
                    pass
        g.cache[key] = tuple(found)
    return g.cache[key]


def _next_contractions(g: Graph, contractions: int) -> list[int]:
    """Per op index, the contractions (a bitset) reachable from it by a path with no
    other contraction on it: from its readers back, in one pass in reverse
    topological order."""
    nearest = [0] * len(g.order)
    for i in range(len(g.order) - 1, -1, -1):
        reach = 0
        for succ in g.dag.successors(g.order[i]):
            j = g.index[succ]
            reach |= 1 << j if contractions >> j & 1 else nearest[j]
        nearest[i] = reach
    return nearest
