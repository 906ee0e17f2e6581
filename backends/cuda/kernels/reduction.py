"""Context of ``row_reduction.cu.j2``: reductions over the same rows with their
pointwise prologue and epilogue, stage by stage (see ``Group.stages``).

Layout: rows are the kept axes of the reduction input ``S`` (row ``r`` is their
row-major index, which is also the linear index of the reduced result), and a
row's elements are the reduced axes. Values read in two stages are buffered in
shared memory as ``cost.reduction_smem`` lays them out (the kernel's budget is
that layout's size). Written values are stored in the stage that makes them
available.
"""

from __future__ import annotations

import math

import numpy as np

from partitioner.cost import (REDUCTION_THREADS, SHORT_ROW, WARP, reduction_smem, row_length, rows_per_block,
                             sector_elements, shuffle_dtype)
from partitioner.dtypes import FLOATS, numpy_dtype
from partitioner.graph import Op
from partitioner.group import Group
from partitioner.legality import row_structure

from ..codegen import (REGISTER, Emitter, Index, Source, broadcast_index, convert, delinearize, linear, literal,
                       storage_type, to_storage)
from .common import expr_macro, external_sources, grid_stride_blocks, index_type, parameters, shared_memory_split
from .pointwise import vector_width

#: Chunks of a row a thread loads before it uses the first: the loads it has in flight.
UNROLL = 4

_COMBINE = {"reduce_sum": "part_sum_op()", "reduce_mean": "part_sum_op()", "reduce_prod": "part_prod_op()",
            "reduce_max": "part_max_op()", "reduce_min": "part_min_op()"}


def _identity(op: Op, acc: str) -> str:
    if op.kind in ("reduce_sum", "reduce_mean"):
        return literal(0, acc)
    if op.kind == "reduce_prod":
        return literal(1, acc)
    high = op.kind in ("reduce_min", "argmin")
    if acc in FLOATS:
        return literal(math.inf if high else -math.inf, acc)
    if acc == "bool":
        return "true" if high else "false"
    info = np.iinfo(numpy_dtype(acc))
    return literal(int(info.max) if high else int(info.min), acc)


class _Layout:
    """Row and element indices of the reduction input ``S``."""

    def __init__(self, shape, axes):
        self.shape, self.axes = shape, axes
        self.kept = [d for d in range(len(shape)) if d not in axes]
        self.kept_shape = tuple(shape[d] for d in self.kept)
        self.reduced_shape = tuple(shape[d] for d in axes)

    def full_index(self, row_idx, elem_idx):
        out = [""] * len(self.shape)
        for d, i in zip(self.kept, row_idx):
            out[d] = i
        for d, i in zip(self.axes, elem_idx):
            out[d] = i
        return tuple(out)


def build(group: Group, index: int, hw) -> dict:
    g = group.graph
    rows = row_structure(group)
    layout = _Layout(rows.shape, rows.axes)
    params = parameters(group)
    itype, bits = index_type(group)
    n_rows = math.prod(layout.kept_shape)
    length = row_length(group)
    per_block = rows_per_block(length)
    team = WARP if per_block > 1 else REDUCTION_THREADS

    em = Emitter(g, external_sources(group, params), expr_macro(), "idx_t")
    em.depth = 2
    row_idx = tuple(em.index_var(e) for e in delinearize(layout.kept_shape, "r"))

    # shared memory as cost.reduction_smem lays it out: rows kept for a later stage, then partials
    buffers, buffered, scratch, row_dtypes = [], {}, [], []
    reductions = [op for op in group.compute if op.op_class == "reduction"]
    for region in reduction_smem(group):
        if region.role == "row":
            var = f"buf_{len(buffers)}"
            buffers.append({"var": var, "type": storage_type(region.dtype), "offset": region.offset})
            buffered[region.name] = var
            row_dtypes.append(region.dtype)
        else:
            k = [op.name for op in reductions].index(region.name)
            var = f"part_{k}" + ("_i" if region.role == "index" else "")
            scratch.append({"var": var, "type": REGISTER[region.dtype], "offset": region.offset})
    smem = sum(region.bytes for region in reduction_smem(group))
    for base in buffered:
        # a row staged from memory is written at its first use as the storage it is;
        # where the group reads it only through views (a reshape to its own shape), the
        # emitter's sources hold those views alone
        if base in group.reads:
            em.sources.setdefault(base, Source("global", params.pointer[base]))

    first_use = {}
    for op in group.compute:
        for base in g.storage_reads[op.name]:
            first_use[base] = min(first_use.get(base, 10**9), group.run_stage(op))
    last_stage = max([group.stages[w] for w in group.writes] + [group.run_stage(op) for op in reductions])
    writes_by_stage: dict[int, list[str]] = {}
    for w in group.writes:
        writes_by_stage.setdefault(group.stages[w], []).append(w)

    written = [w for w in group.writes if _row_aligned(g, w, layout, rows)]
    vec = _vector_width(g, layout, length, list(em.sources), row_dtypes, written)
    walk = _Walk(em, layout, row_idx, team, length, vec, _skew_alignment(g, layout, list(em.sources), vec))
    barriers = 0
    for stage in range(last_stage + 1):
        em.emit(f"// stage {stage}")
        staged = [op for op in reductions if group.run_stage(op) == stage]
        accs = _declare_accumulators(em, g, staged)
        idx = walk.open()
        for base, var in buffered.items():
            if first_use[base] < stage:
                pointer = params.pointer.get(base, "") if base in group.reads else ""
                walk.read_buffer(base, var, idx, pointer)
        walk.vector_reads(idx)
        for op, acc in zip(staged, accs):
            _accumulate(em, g, op, acc, idx, walk.elem_idx, layout, walk.guard)
        for base, var in buffered.items():
            if first_use[base] == stage:
                walk.write(base, var, idx, shared=True)
        aligned = [w for w in writes_by_stage.get(stage, []) if _row_aligned(g, w, layout, rows)]
        for w in aligned:
            walk.write(w, params.pointer[w], idx, shared=False)
        walk.close()
        if _combine_stage(em, staged, accs, [reductions.index(op) for op in staged], per_block, length):
            barriers += 1
        for w in writes_by_stage.get(stage, []):
            if w not in aligned:
                _general_write(em, g, w, params.pointer[w], row_idx, layout, rows, team)
    if barriers == 1:
        # The next row rewrites the partials: with one combine per row, nothing else keeps
        # a fast warp from overwriting them before a slow warp has read them.
        em.emit("__syncthreads();")
    static, dynamic = shared_memory_split(smem, hw)
    return {
        "template": "row_reduction.cu.j2", "params": params, "bits": bits,
        "grid": (grid_stride_blocks(n_rows, per_block, hw.sm_count), 1, 1), "block": (REDUCTION_THREADS, 1, 1),
        "smem_dynamic": dynamic, "smem_static": static,
        "context": {"threads": REDUCTION_THREADS, "short_row": SHORT_ROW, "index_type": itype, "team_size": team,
                    "rows_per_block": per_block, "rows": n_rows, "row_length": length, "buffers": buffers,
                    "scratch": scratch, "smem_static": static, "smem_dynamic": dynamic,
                    "body": "\n".join(em.lines)},
    }


def _contiguous_rows(layout: _Layout) -> bool:
    """Whether a row's elements are consecutive in memory: the reduced axes are the
    trailing axes, in order (not so for column reductions)."""
    rank, k = len(layout.shape), len(layout.axes)
    return list(layout.axes) == list(range(rank - k, rank))


def _row_contiguous(shape: tuple[int, ...], layout: _Layout) -> bool:
    """Whether a tensor of ``shape``, read at the row's elements broadcast as NumPy
    does, holds a row's elements consecutively: its trailing axes are the reduced ones.
    One of a higher rank than the rows' tensor is read at no row element (an epilogue
    over a larger space reads it), so never along the row."""
    k = len(layout.axes)
    return k <= len(shape) <= len(layout.shape) and tuple(shape[len(shape) - k:]) == layout.reduced_shape


def _vector_width(g, layout: _Layout, length: int, sources: list[str], row_dtypes: list[str],
                  written: list[str]) -> int:
    """Elements per chunk of the row walk: 16 bytes of the widest dtype that moves by
    vectors (global reads along the row, shared-memory row buffers, row-aligned writes),
    halved until it divides the row length; 1 when rows are not contiguous. One width for
    every stage, so each lane reads back from shared memory what it buffered itself."""
    if not _contiguous_rows(layout):
        return 1
    dtypes = [g.tensor(g.storage[t]).dtype for t in sources if _row_contiguous(g.tensor(t).shape, layout)]
    dtypes += row_dtypes + [g.tensor(w).dtype for w in written]
    return vector_width(dtypes, length) if dtypes else 1


def _skew_alignment(g, layout: _Layout, sources: list[str], vec: int) -> int | None:
    """Elements per sector of the narrowest tensor read along contiguous rows one element
    at a time (``vec`` 1: a row length of no even divisor, such as a 7 x 7 image's 49),
    whose walk then starts at the sector holding the row's first element; None when rows
    move by vectors or are not contiguous."""
    if vec > 1 or not _contiguous_rows(layout):
        return None
    dtypes = [g.tensor(g.storage[t]).dtype for t in sources if _row_contiguous(g.tensor(t).shape, layout)]
    align = sector_elements(dtypes) if dtypes else 1
    return align if align > 1 else None


class _Walk:
    """A team's walk over its row, one stage at a time.

    The row is cut into chunks of ``vec`` consecutive elements; lane ``k`` takes chunks
    ``k``, ``k + team``, ... in every stage (so what a lane buffers in shared memory it
    reads back itself, without a barrier), ``UNROLL`` chunks per step with all their
    global loads issued before the first is used. With ``vec`` > 1 each tensor read
    along the row, each row buffer and each row-aligned write moves through one
    ``vec``-wide vector access per chunk (16 bytes of the widest dtype); with ``vec`` 1
    elements are read one by one, at whatever index arithmetic gives, and along
    contiguous rows from the start of the sector holding the row's first element
    (``align``: ``_skew_alignment``), the lanes before it taking the first element but
    adding nothing (``guard``): what they write there is what the lane at it writes.
    """

    def __init__(self, em: Emitter, layout: _Layout, row_idx: Index, team: int, length: int, vec: int,
                 align: int | None):
        self.em, self.layout, self.row_idx, self.team, self.vec = em, layout, row_idx, team, vec
        self.chunks = length // vec
        self.length, self.align = length, align
        self.guard = "if (in_row) " if align else ""

    def open(self) -> Index:
        """Opens the loops over the row; returns the index of the element at hand (``l``)."""
        em = self.em
        self.saved = dict(em.sources)  # vector sources live in this stage's loops only
        self.global_loads: list[tuple[str, str, str]] = []
        self.chunk_loads: list[tuple[str, str, str]] = []
        self.staged: list[tuple[str, str, str, bool]] = []
        chunks = self.chunks
        if self.align:
            # elements one by one along a row that may start inside a sector: the lanes start
            # at the sector's start, those before the row's first element reading that element
            # (the same sector) and adding nothing, so that every request covers whole sectors
            skew = em.fresh("skew")
            em.emit(f"const idx_t {skew} = {self._row_base(self.layout.shape)} % {self.align};")
            chunks = f"{self.length} + {skew}"
        em.open(f"for (idx_t step = lane; step < {chunks}; step += {UNROLL * self.team})")
        self.loads_at = len(em.lines)
        em.emit("#pragma unroll")
        em.open(f"for (int u = 0; u < {UNROLL}; ++u)")
        em.emit(f"const idx_t c = step + u * {self.team};")
        em.emit(f"if (c >= {chunks}) break;")
        self.chunk_at = len(em.lines)
        if self.align:
            em.emit(f"const bool in_row = c >= {skew};")
            em.emit(f"const idx_t l = in_row ? c - {skew} : 0;")
        elif self.vec > 1:
            em.emit("#pragma unroll")
            em.open(f"for (int j = 0; j < {self.vec}; ++j)")
            em.emit(f"const idx_t l = c * {self.vec} + j;")
        else:
            em.emit("const idx_t l = c;")
        self.elem_idx = tuple(em.index_var(e) for e in delinearize(self.layout.reduced_shape, "l"))
        return self.layout.full_index(self.row_idx, self.elem_idx)

    def _row_base(self, shape: tuple[int, ...]) -> str:
        """Linear index, in a tensor of ``shape``, of the row's first element: an
        expression of the row's index variables, valid anywhere in the row's body."""
        zeros = self.layout.full_index(self.row_idx, ("0",) * len(self.layout.axes))
        return f"({linear(shape, broadcast_index(shape, zeros))})"

    def _vector(self, ctype: str) -> str:
        return f"part_vec<{ctype}, {self.vec}>"

    def vector_reads(self, idx: Index) -> None:
        """Every tensor still read from global memory whose row is contiguous: through
        the step's vector loads (dropped at ``close`` if the stage reads it elsewhere only)."""
        if self.vec == 1:
            return
        g = self.em.graph
        for name, src in list(self.em.sources.items()):
            shape = g.tensor(name).shape
            if src.kind != "global" or not _row_contiguous(shape, self.layout):
                continue
            var = self.em.fresh("vld")
            base = self._row_base(shape)
            self.global_loads.append((var, storage_type(g.tensor(g.storage[name]).dtype), f"{src.name} + {base}"))
            self.em.sources[name] = Source("buffer", f"{var}[u].v", at=broadcast_index(shape, idx), position="j",
                                           pointer=src.name)

    def read_buffer(self, base: str, var: str, idx: Index, pointer: str) -> None:
        """``base``'s row values, buffered in shared memory ``var`` by an earlier stage;
        at any other index it is loaded through ``pointer`` (or computed)."""
        if self.vec == 1:
            self.em.sources[base] = Source("buffer", var, at=idx, position="l", pointer=pointer, shared=True)
            return
        chunk, vector = self.em.fresh("sld"), self._vector(self._ctype(base))
        load = f"PART_LDS(*reinterpret_cast<const {vector}*>({var} + c * {self.vec}))"
        self.chunk_loads.append((chunk, vector, load))
        self.em.sources[base] = Source("buffer", f"{chunk}.v", at=idx, position="j", pointer=pointer)

    def _ctype(self, tensor: str) -> str:
        return storage_type(self.em.graph.tensor(tensor).dtype)

    def write(self, tensor: str, pointer: str, idx: Index, shared: bool) -> None:
        """Stores ``tensor``'s value at the element into the row buffer (``shared``) or
        into global memory at ``pointer``, whose layout is the row's."""
        em = self.em
        value = to_storage(em.value(tensor, idx), em.graph.tensor(tensor).dtype)
        if self.vec == 1:
            # unguarded: a lane before the row's first element writes that element's value,
            # as the lane at it does (and so reads back what it buffered itself)
            if shared:
                em.emit(f"PART_STS({pointer}[l]) = {value};")
            else:
                em.store(tensor, pointer, idx)
            return
        var = em.fresh("vst")
        em.emit(f"{var}.v[j] = {value};")
        target = pointer if shared else f"{pointer} + {self._row_base(em.graph.tensor(tensor).shape)}"
        self.staged.append((var, self._ctype(tensor), target, shared))

    def close(self) -> None:
        """Closes the loops, writing the chunk's staged vectors and, at the top of the
        step, the loads the stage turned out to use."""
        em = self.em
        if self.vec > 1:
            em.close()  # j
            for var, ctype, target, shared in self.staged:
                access = "PART_STS" if shared else "PART_STG"
                em.emit(f"{access}(*reinterpret_cast<{self._vector(ctype)}*>({target} + c * {self.vec})) = {var};")
        em.close()  # u
        em.close()  # step
        body = "\n".join(em.lines[self.loads_at:])
        indent = "  " * (em.depth + 2)
        per_chunk = [f"{indent}const {vector} {var} = {load};" for var, vector, load in self.chunk_loads
                     if f"{var}.v[j]" in body]
        per_chunk += [f"{indent}{self._vector(ctype)} {var};" for var, ctype, _, _ in self.staged]
        em.lines[self.chunk_at:self.chunk_at] = per_chunk
        indent = "  " * (em.depth + 1)
        loads = []
        for var, ctype, pointer in self.global_loads:
            if f"{var}[u].v[j]" not in body:
                continue
            vector, chunk = self._vector(ctype), f"step + u * {self.team}"
            loads += [f"{indent}{vector} {var}[{UNROLL}];", f"{indent}#pragma unroll",
                      f"{indent}for (int u = 0; u < {UNROLL}; ++u)",
                      f"{indent}  if ({chunk} < {self.chunks}) {var}[u] = "
                      f"PART_LDG(*reinterpret_cast<const {vector}*>({pointer} + ({chunk}) * {self.vec}));"]
        em.lines[self.loads_at:self.loads_at] = loads
        em.sources = self.saved


def _declare_accumulators(em: Emitter, g, ops: list[Op]) -> list[tuple[str, str, str | None]]:
    out = []
    for op in ops:
        acc = shuffle_dtype(op, g.tensor(op.inputs[0]).dtype)
        var = em.fresh("acc")
        em.emit(f"{REGISTER[acc]} {var} = {_identity(op, acc)};")
        index_var = None
        if op.kind in ("argmax", "argmin"):
            index_var = var + "_i"
            em.emit(f"int64_t {index_var} = INT64_MAX;")
        out.append((var, acc, index_var))
    return out


def _accumulate(em: Emitter, g, op: Op, acc, idx, elem_idx, layout: _Layout, guard: str) -> None:
    """Adds the element's value into ``acc`` (its loads emitted unguarded, the combine
    behind ``guard``: ``_Walk.guard``)."""
    var, acc_dtype, index_var = acc
    src = op.inputs[0]
    value = convert(em.value(src, idx), g.tensor(src).dtype, acc_dtype)
    if op.kind in ("argmax", "argmin"):
        flat = _flat_position(layout, op, idx)
        em.emit(f"{guard}if (part_arg_better<{'true' if op.kind == 'argmax' else 'false'}>({value}, (int64_t)({flat}), "
                f"{var}, {index_var})) {{ {var} = {value}; {index_var} = (int64_t)({flat}); }}")
    else:
        em.emit(f"{guard}{var} = {_COMBINE[op.kind]}({var}, {value});")


def _flat_position(layout: _Layout, op: Op, idx) -> str:
    """Index argmax/argmin reports: along its axis, or into the flattened input."""
    if op.attrs.get("axes") is None:
        return linear(layout.shape, idx)
    return idx[layout.axes[0]]


def _combine_stage(em: Emitter, ops: list[Op], accs, slots: list[int], per_block: int, length: int) -> bool:
    """Team-wide combine of a stage's accumulators; afterwards every lane holds each
    result, rounded to the reduction's dtype, as the op's row scalar. Butterfly shuffles
    combine a warp; a team of several warps adds one shared-memory round with one
    barrier for all of the stage's reductions: each warp writes its partials, and every
    warp then combines all of them itself (the butterfly gives every lane the same value,
    so all warps agree). Returns whether it used a barrier."""
    for op, acc in zip(ops, accs):
        _warp_combine(em, op, acc)
    across = per_block == 1 and bool(ops)
    if across:
        for op, acc, slot in zip(ops, accs, slots):
            _publish_partial(em, op, acc, slot)
        em.emit("__syncthreads();")
        for op, acc, slot in zip(ops, accs, slots):
            _gather_partials(em, op, acc, slot)
            _warp_combine(em, op, acc)
    for op, acc in zip(ops, accs):
        _row_scalar(em, op, acc, length)
    return across


def _warp_combine(em: Emitter, op: Op, acc) -> None:
    var, _, index_var = acc
    if op.kind in ("argmax", "argmin"):
        em.emit(f"part_warp_arg<{'true' if op.kind == 'argmax' else 'false'}>({var}, {index_var});")
    else:
        em.emit(f"{var} = part_warp_reduce({var}, {_COMBINE[op.kind]});")


def _publish_partial(em: Emitter, op: Op, acc, slot: int) -> None:
    """Lane 0 of each warp writes the warp's result to the reduction's partials."""
    var, _, index_var = acc
    scratch = f"part_{slot}"
    em.emit(f"if (threadIdx.x % {WARP} == 0) {{ PART_STS({scratch}[threadIdx.x / {WARP}]) = {var};"
            + (f" PART_STS({scratch}_i[threadIdx.x / {WARP}]) = {index_var};" if index_var else "") + " }")


def _gather_partials(em: Emitter, op: Op, acc, slot: int) -> None:
    """Lane ``k`` of every warp takes warp ``k``'s partial (the identity past the last warp)."""
    var, acc_dtype, index_var = acc
    warps, scratch = REDUCTION_THREADS // WARP, f"part_{slot}"
    em.emit(f"{var} = threadIdx.x % {WARP} < {warps} ? PART_LDS({scratch}[threadIdx.x % {WARP}]) : "
            f"{_identity(op, acc_dtype)};")
    if index_var:
        em.emit(f"{index_var} = threadIdx.x % {WARP} < {warps} ? PART_LDS({scratch}_i[threadIdx.x % {WARP}]) "
                f": INT64_MAX;")


def _row_scalar(em: Emitter, op: Op, acc, length: int) -> None:
    """The combined accumulator as the op's value: the index for argmax/argmin, the sum
    over ``length`` for a mean, rounded to the op's dtypes."""
    var, acc_dtype, index_var = acc
    if index_var:
        result, final = index_var, "int64"
    elif op.kind == "reduce_mean":
        result = f"({var} / {literal(length, acc_dtype if acc_dtype in FLOATS else 'float64')})"
        final = acc_dtype if acc_dtype in FLOATS else "float64"
    else:
        result, final = var, acc_dtype
    value = em.declare(op.promoted, convert(result, final, op.promoted), "red")
    if op.out.dtype != op.promoted:
        value = em.declare(op.out.dtype, convert(value, op.promoted, op.out.dtype), "red")
    em.sources[op.name] = Source("scalar", value)


def _row_aligned(g, tensor: str, layout: _Layout, rows) -> bool:
    """Whether ``tensor`` is laid out like the reduction input (stored at the element index)."""
    if g.tensor(tensor).shape != layout.shape:
        return False
    labels = rows.labels.get(tensor)
    return labels is None or all(labels[d] == ("o", d) for d in layout.kept if layout.shape[d] > 1)


def _outer_dims(g, tensor: str, layout: _Layout, rows) -> dict[int, int]:
    """Dims of ``tensor`` that index rows -> the kept dim of the reduction input."""
    labels = rows.labels.get(tensor)
    shape = g.tensor(tensor).shape
    if labels is not None:
        return {j: lab[1] for j, lab in enumerate(labels) if isinstance(lab, tuple) and lab[0] == "o"}
    if len(shape) == len(layout.shape):  # the input's shape, or the reduced shape with keepdims
        return {d: d for d in layout.kept if layout.shape[d] > 1}
    return {j: d for j, d in enumerate(layout.kept) if layout.shape[d] > 1}  # reduced shape without keepdims


def _general_write(em: Emitter, g, tensor: str, pointer: str, row_idx, layout: _Layout, rows, team: int) -> None:
    """Store a written value whose layout is not the row's: each lane takes some of
    the row's elements of it (just one, for a per-row value)."""
    shape = g.tensor(tensor).shape
    outer = _outer_dims(g, tensor, layout, rows)
    inner_dims = [j for j in range(len(shape)) if j not in outer]
    inner_shape = tuple(shape[j] for j in inner_dims)
    count = math.prod(inner_shape)
    row_of = dict(zip(layout.kept, row_idx))
    em.open(f"for (idx_t p = lane; p < {count}; p += {team})")
    inner = delinearize(inner_shape, "p")
    idx = [""] * len(shape)
    for j, d in outer.items():
        idx[j] = row_of[d]
    for j, e in zip(inner_dims, inner):
        idx[j] = em.index_var(e)
    for j, n in enumerate(shape):
        if idx[j] == "":
            idx[j] = "0"
    em.store(tensor, pointer, tuple(idx))
    em.close()
