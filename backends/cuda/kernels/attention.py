"""Context of ``attention.cu.j2``: a FlashAttention-2 kernel for one attention group.

``partitioner.attention.structure`` says which op plays which part; the tiling comes
from ``partitioner.cost.attention_tiling``, so the budgets the partitioner checks
and the kernel agree by construction. Every value the kernel computes between the
two products comes from the group's own ops through :class:`~..codegen.Emitter`,
with the products' elements and the running row maximum and sum as sources, so
the kernel evaluates exactly the ops the group holds, rounded as they round.
"""

from __future__ import annotations

import math
import re

from partitioner.attention import Structure, structure
from partitioner.cost import ATTN_OUT_PAD, ATTN_ROW_PAD, attention_tiling
from partitioner.dtypes import HALFS, accumulator_dtype
from partitioner.group import Group
from partitioner.ops import matmul_shapes

from ..codegen import REGISTER, Emitter, Names, Source, broadcast_index, convert, delinearize, literal, \
    storage_type, to_storage
from .common import expr_macro, external_sources, index_type, parameters, row_major_walk, shared_memory_split, tile_grid
from .probe import fast_axis

class _Context:
    """Emitters of one kernel, sharing its names and external sources."""

    def __init__(self, group: Group, params):
        self.g = group.graph
        self.names = Names()
        self.sources = external_sources(group, params)
        self.params = params

    def emitter(self, depth: int, **scalars: str) -> Emitter:
        """An emitter whose tensors named in ``scalars`` are registers holding their
        value at the element being computed."""
        em = Emitter(self.g, self.sources, expr_macro(), "idx_t", self.names)
        em.depth = depth
        for tensor, var in scalars.items():
            em.sources[tensor] = Source("scalar", var)
        return em


def _score_index(em: Emitter, shape: tuple[int, ...], sq: int, key: str) -> tuple[str, ...]:
    """Index in a score-aligned tensor of ``shape`` of element (row ``b * sq + q``, key)."""
    row = em.index_var(f"b * {sq} + q")
    return tuple(em.index_var(e) for e in delinearize(shape[:-1], row)) + (key,)


def _row_index(em: Emitter, shape: tuple[int, ...], sq: int) -> tuple[str, ...]:
    """Index in a per-row tensor of ``shape`` of row ``b * sq + q``."""
    row = em.index_var(f"b * {sq} + q")
    return tuple(em.index_var(e) for e in delinearize(shape, row))


def _operand(ctx: _Context, tensor: str, batch_idx: tuple[str, ...], rows: str, cols: str, dtype: str) -> str:
    """Statements that set ``val`` to the matmul operand ``tensor`` at (batch, rows, cols)."""
    em = ctx.emitter(4)
    t = ctx.g.tensor(tensor)
    idx = broadcast_index(t.shape[:-2], batch_idx) + (rows, cols)
    em.emit(f"val = {convert(em.value(tensor, idx), t.dtype, dtype)};")
    return "\n".join(em.lines)


def build(group: Group, index: int, hw) -> dict:
    g = group.graph
    st = structure(group)
    p = st.pair
    tiling = attention_tiling(group)
    params = parameters(group)
    itype, bits = index_type(group)
    ctx = _Context(group, params)
    c1, c2 = g.ops[p.c1], g.ops[p.c2]

    head = ctx.emitter(2)
    batch1, *_ = matmul_shapes(*(g.tensor(t).shape for t in c1.inputs))
    batch2, *_ = matmul_shapes(*(g.tensor(t).shape for t in c2.inputs))
    b1 = tuple(head.index_var(e) for e in delinearize(batch1, "b"))
    b2 = tuple(head.index_var(e) for e in delinearize(batch2, "b"))

    dtype = p.dtype
    x_t, e_t = g.tensor(p.x), g.tensor(p.e)
    m_op, l_op = g.ops[p.row_max], g.ops[p.row_sum]
    l_acc = accumulator_dtype(e_t.dtype)
    c1_value = convert(convert("acc", "float32", c1.promoted), c1.promoted, c1.out.dtype)
    m_value = convert("m", m_op.promoted, m_op.out.dtype)
    m_round = convert(convert("part_max(m_run[h], mx[h])", m_op.promoted, m_op.out.dtype), m_op.out.dtype,
                      m_op.promoted)
    l_value = convert(convert("l", l_acc, l_op.promoted), l_op.promoted, l_op.out.dtype)

    # pass 1: X (what the row maximum reduces) and E (what the row sum adds) per score element
    tiles = _score_tiles(g, tiling)
    x_em, score_tiles, score_loads = _x_of(ctx, p, tiles, tiling, f"const {REGISTER[c1.out.dtype]} s = {c1_value};")
    e_em = ctx.emitter(3, **{p.c1: "s", p.x: "x", p.row_max: "mv"})
    e_em.emit(f"const {REGISTER[c1.out.dtype]} s = {c1_value};")
    e_em.emit(f"const {REGISTER[m_op.out.dtype]} mv = {m_value};")
    e_em.emit(f"return {convert(e_em.value(p.e, _score_index(e_em, e_t.shape, p.sq, 'k')), e_t.dtype, l_acc)};")

    # the normalisation that moves after C2: divide by the row sum, or multiply by 1 / sum
    how, scale = p.normalise
    n_em = ctx.emitter(3, **{p.row_sum: "lv"})
    if p.guard is not None:  # a row of -inf only: probabilities 0, so C2's row is the sum of 0 * V it holds
        n_em.emit(f"if (m == {literal(-math.inf, m_op.promoted)}) return o;")
    n_em.emit(f"const {REGISTER[l_op.out.dtype]} lv = {l_value};")
    scale_shape = g.tensor(scale).shape  # a row value, or one broadcast along the keys (the same at any key)
    at = _row_index(n_em, scale_shape, p.sq) if scale in p.rows else _score_index(n_em, scale_shape, p.sq, "0")
    factor = n_em.value(scale, at)
    factor = convert(factor, g.tensor(scale).dtype, "float32")
    n_em.emit(f"return {'o / ' if how == 'div' else 'o * '}{factor};")

    epilogue = _epilogue(ctx, group, st, b2)
    score_writes, row_writes = _score_writes(ctx, st, m_value, l_value, c1_value)

    q_value = _operand(ctx, c1.inputs[0], b1, "q", "d", dtype)
    k_value = _operand(ctx, c1.inputs[1], b1, "d", "k", dtype)
    v_value = _operand(ctx, c2.inputs[1], b2, "k", "dv", dtype)
    probe = {"b": p.batch // 2, "q": p.sq // 2, "k": p.sk // 2, "d": p.d // 2, "dv": p.dv // 2}

    def walk(code: str, row: str, col: str, rows: int, cols: int, stride: int) -> dict[str, str]:
        """The tile's walk: consecutive threads along the coordinate its global reads are
        consecutive in (``probe.fast_axis``; a K stored transposed, along the keys)."""
        fast = fast_axis(head.lines + code.split("\n"), probe, (row, col))
        return row_major_walk(row, col, rows, cols, stride, fast)

    grid = tile_grid(tiling.q_tiles * p.batch)
    smem = tiling.shared_memory
    static, dynamic = shared_memory_split(smem, hw)
    d_pad, dv_pad = tiling.d_pad, tiling.dv_pad
    return {
        "template": "attention.cu.j2", "params": params, "bits": bits,
        "grid": (grid, 1, 1), "block": (tiling.threads, 1, 1),
        "smem_dynamic": dynamic, "smem_static": static,
        "context": {
            "threads": tiling.threads, "index_type": itype, "op_type": storage_type(dtype),
            "ldmatrix": dtype in HALFS, "bm": tiling.block_m,
            "bn": tiling.block_n, "dp": d_pad, "dvp": dv_pad, "ldq": d_pad + ATTN_ROW_PAD,
            "ldk": d_pad + ATTN_ROW_PAD, "ldv": dv_pad + ATTN_ROW_PAD, "ldo": dv_pad + ATTN_OUT_PAD,
            "sq": p.sq, "sk": p.sk, "d": p.d, "dv": p.dv,
            "q_tiles": tiling.q_tiles, "batch": p.batch, "looped": grid < tiling.q_tiles * p.batch, "k_tiles": tiling.k_tiles, "smem_static": static,
            "batch_index": "\n".join(head.lines),
            "q_value": q_value, "k_value": k_value, "v_value": v_value,
            "q_walk": walk(q_value, "q", "d", tiling.block_m, d_pad, d_pad + ATTN_ROW_PAD),
            "k_walk": walk(k_value, "k", "d", tiling.block_n, d_pad, d_pad + ATTN_ROW_PAD),
            "v_walk": walk(v_value, "k", "dv", tiling.block_n, dv_pad, dv_pad + ATTN_ROW_PAD),
            "to_op": to_storage("v", dtype) if dtype != "float32" else "v",
            "x_reg": REGISTER[x_t.dtype], "x_body": "\n".join(x_em.lines),
            "m_reg": REGISTER[m_op.promoted], "neg_inf": literal(-math.inf, m_op.promoted), "m_round": m_round,
            "l_reg": REGISTER[l_acc], "l_nan": literal(math.nan, l_acc), "e_body": "\n".join(e_em.lines), "norm_body": "\n".join(n_em.lines),
            "epilogue": epilogue, "score_writes": score_writes, "row_writes": row_writes,
            "score_tiles": score_tiles, "score_loads": score_loads,
        },
    }


def _score_tiles(g, tiling) -> list[dict]:
    """The staged masks' and biases' tiles, where ``cost.attention_tiling`` lays them out."""
    return [{"tensor": tensor, "var": f"st_{k}", "ctype": storage_type(g.tensor(tensor).dtype), "row": row,
             "offset": offset} for k, (tensor, row, offset) in enumerate(tiling.score_tiles)]


class _Recording(Emitter):
    """An emitter that notes the first index at which it reads each tensor of ``watched``."""

    def __init__(self, *args, watched=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.watched, self.seen = set(watched), {}

    def value(self, tensor, idx):
        if tensor in self.watched:
            self.seen.setdefault(tensor, idx)
        return super().value(tensor, idx)


_DECLARED = re.compile(r"^\s*const idx_t (\w+) = (.*);$")


def _x_of(ctx: _Context, p, tiles: list[dict], tiling, head: str) -> tuple[Emitter, list[dict], str]:
    """``x_of``'s statements, which read each staged tensor from its tile in shared
    memory; the tiles X reads; and the statements that load them for one key tile
    (``q`` and ``k`` the element, consecutive threads at consecutive keys).

    X is emitted twice from the same names: first to note at which index it reads each
    staged tensor (a function of ``b``, ``q`` and ``k``), then with that tensor's tile
    as the source at that index (at any other index it is read from memory, so a value
    never depends on the staging). A tile's loader replays the index declarations that
    index depends on."""
    x_t = ctx.g.tensor(p.x)

    def emit(em: Emitter) -> None:
        em.emit(head)
        em.emit(f"return {em.value(p.x, _score_index(em, x_t.shape, p.sq, 'k'))};")

    start = ctx.names.count
    probe = _Recording(ctx.g, ctx.sources, expr_macro(), "idx_t", ctx.names, watched=[t["tensor"] for t in tiles])
    probe.sources[p.c1] = Source("scalar", "s")
    emit(probe)
    ctx.names.count = start
    x_em = ctx.emitter(3, **{p.c1: "s"})
    staged = [(tile, probe.seen[tile["tensor"]]) for tile in tiles if tile["tensor"] in probe.seen]
    for tile, at in staged:
        source = ctx.sources.get(tile["tensor"])
        pointer = source.name if source is not None and source.kind == "global" else ""
        x_em.sources[tile["tensor"]] = Source(
            "buffer", tile["var"], at=at, shared=True, pointer=pointer,
            position=f"q % {tiling.block_m} * {tile['row']} + k % {tiling.block_n}")
    emit(x_em)  # first, so that it declares what the probe declared, under the same names
    loads = "\n".join(_tile_load(ctx, tile, at, probe.lines, tiling) for tile, at in staged)
    return x_em, [tile for tile, _ in staged], loads


def _tile_load(ctx: _Context, tile: dict, at: tuple[str, ...], lines: list[str], tiling) -> str:
    """One staged tensor's element (q, k) into its tile: the index declarations ``at``
    depends on (from ``x_of``'s statements, in order, under fresh names), then the value
    at ``at``."""
    declared = {m.group(1): (n, m.group(2)) for n, m in ((n, _DECLARED.match(ln)) for n, ln in enumerate(lines)) if m}
    needed, pending = set(), [name for e in at for name in re.findall(r"[A-Za-z_]\w*", e)]
    while pending:
        name = pending.pop()
        if name in declared and name not in needed:
            needed.add(name)
            pending += re.findall(r"[A-Za-z_]\w*", declared[name][1])
    em = ctx.emitter(5)
    renamed = {name: ctx.names.fresh("i") for name in needed}  # a generated name is declared once per kernel

    def rename(expression: str) -> str:
        return re.sub(r"[A-Za-z_]\w*", lambda m: renamed.get(m.group(0), m.group(0)), expression)

    em.emit("{")
    for name in sorted(needed, key=lambda v: declared[v][0]):
        em.emit(f"  const idx_t {renamed[name]} = {rename(declared[name][1])};")
    t = ctx.g.tensor(tile["tensor"])
    value = to_storage(em.value(tile["tensor"], tuple(rename(e) for e in at)), t.dtype)
    em.emit(f"  PART_STS({tile['var']}[e / {tiling.block_n} * {tile['row']} + e % {tiling.block_n}]) = {value};")
    em.emit("}")
    return "\n".join(em.lines)


def _epilogue(ctx: _Context, group: Group, st: Structure, b2: tuple[str, ...]) -> str:
    """Statements storing C2's element (q, dv) and the epilogue values computed from it."""
    g, p = ctx.g, st.pair
    c2 = g.ops[p.c2]
    em = ctx.emitter(3)
    cvar = em.declare(c2.promoted, convert("o", "float32", c2.promoted), "c")
    if c2.out.dtype != c2.promoted:
        cvar = em.declare(c2.out.dtype, convert(cvar, c2.promoted, c2.out.dtype), "c")
    em.sources[p.c2] = Source("scalar", cvar)
    out_idx = b2 + ("q", "dv")
    written = [w for w in group.writes if w == p.c2 or st.epilogue >> g.index[w] & 1]
    _stores(em, ctx, written, c2.out.shape, out_idx)
    return "\n".join(em.lines)


def _stores(em: Emitter, ctx: _Context, tensors: list[str], shape: tuple[int, ...], idx: tuple[str, ...]) -> None:
    """Store each of ``tensors`` (same element count as ``shape``) at the element ``idx`` of ``shape``."""
    for w in tensors:
        em.store(w, ctx.params.pointer[w], em.element_index(ctx.g.tensor(w).shape, shape, idx))


def _score_writes(ctx: _Context, st: Structure, m_value: str, l_value: str, c1_value: str) -> tuple[str, str]:
    """Pass-2 statements storing written score elements, and statements storing written
    per-row values, from the final row maximum ``m`` and sum ``l``."""
    g, p = ctx.g, st.pair
    elems = [w for w in st.score_writes if w not in st.rows]
    rows = [w for w in st.score_writes if w in st.rows]
    row_scalars = {p.row_max: "mv", p.row_sum: "lv", **({p.guard[0]: "gv"} if p.guard else {})}
    em = ctx.emitter(3, **{p.c1: "s"}, **row_scalars)
    if elems:
        em.emit(f"const {REGISTER[g.ops[p.c1].out.dtype]} s = {c1_value};")
        _row_values(em, st, m_value, l_value)
        for w in elems:
            em.store(w, ctx.params.pointer[w], _score_index(em, g.tensor(w).shape, p.sq, "k"))
    rem = ctx.emitter(3, **row_scalars)
    if rows:
        _row_values(rem, st, m_value, l_value)
        for w in rows:
            rem.store(w, ctx.params.pointer[w], _row_index(rem, g.tensor(w).shape, p.sq))
    return "\n".join(em.lines), "\n".join(rem.lines)


def _row_values(em: Emitter, st: Structure, m_value: str, l_value: str) -> None:
    """Declare the row's maximum ``mv`` and sum ``lv`` as their ops round them, from the
    final ``m`` and ``l``, and its guard ``gv`` (a row of -inf only: ``m`` is -inf)."""
    g, p = em.graph, st.pair
    em.emit(f"const {REGISTER[g.ops[p.row_max].out.dtype]} mv = {m_value};")
    em.emit(f"const {REGISTER[g.ops[p.row_sum].out.dtype]} lv = {l_value};")
    if p.guard is not None:
        _, live = p.guard
        neg_inf = literal(-math.inf, g.ops[p.row_max].promoted)
        em.emit(f"const bool gv = m {'!=' if live else '=='} {neg_inf};")
