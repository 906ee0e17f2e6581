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

from partitioner.cost import REDUCTION_THREADS, SHORT_ROW, WARP, reduction_smem, row_length, rows_per_block, shuffle_dtype
from partitioner.dtypes import FLOATS, numpy_dtype
from partitioner.graph import Op
from partitioner.group import Group
from partitioner.legality import row_structure

from ..codegen import REGISTER, Emitter, Source, convert, delinearize, linear, literal, storage_type, to_storage
from .common import expr_macro, external_sources, grid_stride_blocks, index_type, parameters, shared_memory_split

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
    buffers, buffered, scratch = [], {}, []
    reductions = [op for op in group.compute if op.op_class == "reduction"]
    for region in reduction_smem(group):
        if region.role == "row":
            var = f"buf_{len(buffers)}"
            buffers.append({"var": var, "type": storage_type(region.dtype), "offset": region.offset})
            buffered[region.name] = var
        else:
            k = [op.name for op in reductions].index(region.name)
            var = f"part_{k}" + ("_i" if region.role == "index" else "")
            scratch.append({"var": var, "type": REGISTER[region.dtype], "offset": region.offset})
    smem = sum(region.bytes for region in reduction_smem(group))

    first_use = {}
    for op in group.compute:
        for base in g.storage_reads[op.name]:
            first_use[base] = min(first_use.get(base, 10**9), group.run_stage(op))
    last_stage = max([group.stages[w] for w in group.writes] + [group.run_stage(op) for op in reductions])
    writes_by_stage: dict[int, list[str]] = {}
    for w in group.writes:
        writes_by_stage.setdefault(group.stages[w], []).append(w)

    for stage in range(last_stage + 1):
        em.emit(f"// stage {stage}")
        staged = [op for op in reductions if group.run_stage(op) == stage]
        accs = _declare_accumulators(em, g, staged)
        em.open(f"for (idx_t l = lane; l < {length}; l += {team})")
        elem_idx = tuple(em.index_var(e) for e in delinearize(layout.reduced_shape, "l"))
        idx = layout.full_index(row_idx, elem_idx)
        for base, var in buffered.items():
            if first_use[base] < stage:
                pointer = params.pointer.get(base, "") if base in group.reads else ""
                em.sources[base] = Source("buffer", var, at=idx, position="l", pointer=pointer, shared=True)
        for op, acc in zip(staged, accs):
            _accumulate(em, g, op, acc, idx, elem_idx, layout)
        for base, var in buffered.items():
            if first_use[base] == stage:
                t = g.tensor(base)
                em.emit(f"PART_STS({var}[l]) = {to_storage(em.value(base, idx), t.dtype)};")
        aligned = [w for w in writes_by_stage.get(stage, []) if _row_aligned(g, w, layout, rows)]
        for w in aligned:
            em.store(w, params.pointer[w], idx)
        em.close()
        for op, acc in zip(staged, accs):
            _combine(em, op, acc, per_block, length, reductions.index(op))
        for w in writes_by_stage.get(stage, []):
            if w not in aligned:
                _general_write(em, g, w, params.pointer[w], row_idx, layout, rows, team)
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


def _accumulate(em: Emitter, g, op: Op, acc, idx, elem_idx, layout: _Layout) -> None:
    var, acc_dtype, index_var = acc
    src = op.inputs[0]
    value = convert(em.value(src, idx), g.tensor(src).dtype, acc_dtype)
    if op.kind in ("argmax", "argmin"):
        flat = _flat_position(layout, op, idx)
        em.emit(f"if (part_arg_better<{'true' if op.kind == 'argmax' else 'false'}>({value}, (int64_t)({flat}), "
                f"{var}, {index_var})) {{ {var} = {value}; {index_var} = (int64_t)({flat}); }}")
    else:
        em.emit(f"{var} = {_COMBINE[op.kind]}({var}, {value});")


def _flat_position(layout: _Layout, op: Op, idx) -> str:
    """Index argmax/argmin reports: along its axis, or into the flattened input."""
    if op.attrs.get("axes") is None:
        return linear(layout.shape, idx)
    return idx[layout.axes[0]]


def _combine(em: Emitter, op: Op, acc, per_block: int, length: int, slot: int) -> None:
    """Team-wide combine of one accumulator; afterwards every lane holds the result,
    rounded to the reduction's dtype, as the op's row scalar."""
    var, acc_dtype, index_var = acc
    arg = op.kind in ("argmax", "argmin")
    if arg:
        em.emit(f"part_warp_arg<{'true' if op.kind == 'argmax' else 'false'}>({var}, {index_var});")
    else:
        em.emit(f"{var} = part_warp_reduce({var}, {_COMBINE[op.kind]});")
    if per_block == 1:
        warps = REDUCTION_THREADS // WARP
        scratch = f"part_{slot}"
        em.emit(f"if (threadIdx.x % {WARP} == 0) {{ PART_STS({scratch}[threadIdx.x / {WARP}]) = {var};"
                + (f" PART_STS({scratch}_i[threadIdx.x / {WARP}]) = {index_var};" if arg else "") + " }")
        em.emit("__syncthreads();")
        em.open(f"if (threadIdx.x < {WARP})")
        ident = _identity(op, acc_dtype)
        em.emit(f"{var} = threadIdx.x < {warps} ? PART_LDS({scratch}[threadIdx.x]) : {ident};")
        if arg:
            em.emit(f"{index_var} = threadIdx.x < {warps} ? PART_LDS({scratch}_i[threadIdx.x]) : INT64_MAX;")
            em.emit(f"part_warp_arg<{'true' if op.kind == 'argmax' else 'false'}>({var}, {index_var});")
        else:
            em.emit(f"{var} = part_warp_reduce({var}, {_COMBINE[op.kind]});")
        em.emit(f"if (threadIdx.x == 0) {{ PART_STS({scratch}[{warps}]) = {var};"
                + (f" PART_STS({scratch}_i[{warps}]) = {index_var};" if arg else "") + " }")
        em.close()
        em.emit("__syncthreads();")
        em.emit(f"{var} = PART_LDS({scratch}[{warps}]);"
                + (f" {index_var} = PART_LDS({scratch}_i[{warps}]);" if arg else ""))
        em.emit("__syncthreads();")
    if arg:
        result = index_var
        final = "int64"
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
