"""Context of ``contraction.cu.j2``: one matmul or conv2d with its prologue and epilogue,
or horizontal siblings (``partitioner.horizontal``), their N side by side.

The GEMM view (batch, M, N, K) of each product comes from ``cost.gemm_dims`` and the tile
shape from ``cost`` (``TILE_M``, ``TILE_N``, ``TILE_K``, ``CONTRACTION_THREADS``),
so the shared-memory estimate and the kernel agree by construction.
"""

from __future__ import annotations

import re
from dataclasses import asdict

from partitioner.cost import (CONTRACTION_THREADS, TILE_K, TILE_M, TILE_N, TILE_PAD_TENSOR_CORES, conv_out_runs,
                             conv_rows, conv_weight_rows, gemm_dims, shared_memory, tile_elements, tile_row_strides,
                             tile_stages)
from partitioner.dtypes import itemsize, product_accumulator
from partitioner.group import Group
from partitioner.ops import conv2d_output, matmul_shapes

from ..codegen import REGISTER, Emitter, Names, Source, broadcast_index, convert, delinearize, storage_type, to_storage
from .common import (VECTOR_BYTES, expr_macro, external_sources, index_type, parameters, row_major_walk,
                     shared_memory_split, tile_grid)
from .probe import STORES, contiguous_runs, fast_axis

WARPS_N = 4  # tensor-core path: 8 warps as 2 x 4, each a 64 x 32 sub-tile
MMA_M, MMA_N = 16, 8  # mma.sync.m16n8k16
MICRO = 8  # CUDA-core path: 8 x 8 products per thread
# Tensor-core epilogue: each warp stages a 16 x 16 block in shared memory, rows 16
# floats apart, or 20 when its lanes read it down the columns (an output consecutive in
# m): 16 would put a column in 2 banks, 20 in 8.
STAGING_LD_M_FAST = 20


def _fma(acc_dtype: str) -> str:
    if acc_dtype in ("float32", "float64"):
        return "acc[i][j] + a[i] * b[j]"
    if acc_dtype == "bool":
        return "(acc[i][j] || (a[i] && b[j]))"
    return "part_wrap_add(acc[i][j], part_wrap_mul(a[i], b[j]))"


def build(group: Group, index: int, hw) -> dict:
    """The context of a contraction group's kernel: one part per product (one, or the
    horizontal siblings of ``partitioner.horizontal``, which share M, K, the batch,
    the dtype and so the tiles), their N tiles side by side in one grid."""
    g = group.graph
    products = [o for o in group.compute if o.op_class == "contraction"]
    params = parameters(group)
    itype, bits = index_type(group)
    first = products[0]
    tensor_cores = first.promoted in ("float16", "bfloat16")
    acc_dtype = product_accumulator(first.promoted)
    names = Names()  # one namespace for every emitter of this kernel
    parts, begin = [], 0
    for op in products:
        part = _part(group, op, len(products) > 1, params, names)
        part["tile_begin"] = begin
        begin += -(-part["n"] // TILE_N)
        part["tile_end"] = begin
        parts.append(part)
    batch, m, _, k = gemm_dims(g, first)
    n_tiles, m_tiles = begin, -(-m // TILE_M)
    smem = shared_memory(group)
    static, dynamic = shared_memory_split(smem, hw)
    grid = tile_grid(n_tiles * m_tiles * batch)
    warps = CONTRACTION_THREADS // 32
    a_region, b_region = tile_elements(group)
    return {
        "template": "contraction.cu.j2", "params": params, "bits": bits,
        "grid": (grid, 1, 1), "block": (CONTRACTION_THREADS, 1, 1),
        "smem_dynamic": dynamic, "smem_static": static,
        "context": {
            "threads": CONTRACTION_THREADS, "index_type": itype, "bm": TILE_M, "bn": TILE_N, "bk": TILE_K,
            "m": m, "k": k, "n_tiles": n_tiles, "m_tiles": m_tiles, "tiles": n_tiles * m_tiles * batch,
            "looped": grid < n_tiles * m_tiles * batch, "parts": parts,
            "tensor_cores": tensor_cores,
            "op_type": storage_type(first.promoted) if tensor_cores else REGISTER[first.promoted],
            "acc_reg": REGISTER[acc_dtype], "smem_static": static, "a_region": a_region, "b_region": b_region,
            "stages": tile_stages(group), "fma": _fma(acc_dtype),
            "warps_n": WARPS_N, "warp_m": TILE_M // (warps // WARPS_N), "warp_n": TILE_N // WARPS_N,
            "frags_m": TILE_M // (warps // WARPS_N) // MMA_M, "frags_n": TILE_N // WARPS_N // MMA_N,
            "tm": MICRO, "tn": MICRO,
        },
    }


def _part(group: Group, op, horizontal: bool, params, names: Names) -> dict:
    """The code of one product ``op`` of the group: its operand loads with their
    prologues, its epilogue and stores (in a horizontal group, of the values
    downstream of ``op``: each belongs to one product), and its tile walks."""
    g = group.graph
    _, m, n, k = gemm_dims(g, op)
    promoted = op.promoted
    tensor_cores = promoted in ("float16", "bfloat16")
    acc_dtype = product_accumulator(promoted)
    sources = external_sources(group, params)
    a_tensor, b_tensor = op.inputs[0], op.inputs[1]
    head = Emitter(g, sources, expr_macro(), "idx_t", names)
    head.depth = 3
    if op.kind == "matmul":
        batch_shape, *_ = matmul_shapes(g.tensor(a_tensor).shape, g.tensor(b_tensor).shape)
        b_idx = tuple(head.index_var(e) for e in delinearize(batch_shape, "bz"))
    else:
        b_idx = ()
    dtypes = {params.pointer[arg["tensor"]]: arg["dtype"] for arg in params.args}

    def operand(which: str) -> tuple[str, str, dict | None]:
        """The operand element's code, the tile coordinate its global reads step along
        consecutively (``probe.fast_axis``), and its 16-byte copy (``_copy``) where it has one."""
        em = Emitter(g, sources, expr_macro(), "idx_t", names)
        em.depth = 6
        tensor = a_tensor if which == "a" else b_tensor
        t = g.tensor(tensor)
        target = f"{which}val"
        if op.kind == "matmul":
            rows, cols = ("m", "k") if which == "a" else ("k", "n")
            if len(t.shape) == 1:
                idx = ("k",)
            else:
                idx = broadcast_index(t.shape[:-2], b_idx) + (rows, cols)
            em.emit(f"{target} = {convert(em.value(tensor, idx), t.dtype, promoted)};")
        else:
            em.emit(f"{target} = {convert(_conv_operand(em, op, which, g), t.dtype, promoted)};")
        axes = ("m", "k") if which == "a" else ("k", "n")
        probe = {"m": m // 2, "n": n // 2, "k": k // 2, "bz": 0}
        copy = None
        if tensor_cores:
            vec = VECTOR_BYTES // itemsize(promoted)
            fixed = "k" if op.kind == "conv2d" and _conv_weight_as_stored(op, which, sources, g) else None
            copy = _copy(em.lines, which, axes, {"m": m, "n": n, "k": k}, vec, dtypes, promoted, fixed)
        if copy is None:
            return "\n".join(em.lines), fast_axis(head.lines + em.lines, probe, axes), None
        return "\n".join(em.lines), copy["fast"], copy

    (a_value, a_fast, a_copy), (b_value, b_fast, b_copy) = operand("a"), operand("b")
    epi = Emitter(g, sources, expr_macro(), "idx_t", names)
    epi.depth = 4
    out_idx = _output_index(epi, op, b_idx, g)
    value = "accv"
    if op.kind == "conv2d" and len(op.inputs) == 3:
        bias = g.tensor(op.inputs[2])
        channel = out_idx[1]
        value = f"(accv + {convert(epi.value(op.inputs[2], (channel,)), bias.dtype, acc_dtype)})"
    cvar = epi.declare(promoted, convert(value, acc_dtype, promoted), "c")
    if op.out.dtype != promoted:
        cvar = epi.declare(op.out.dtype, convert(cvar, promoted, op.out.dtype), "c")
    epi.sources[op.name] = Source("scalar", cvar)
    below = g.descendants_mask[g.index[op.name]] | 1 << g.index[op.name]
    for w in group.writes:
        if horizontal and not below >> g.index[w] & 1:
            continue  # another product's value
        epi.store(w, params.pointer[w], epi.element_index(g.tensor(w).shape, op.out.shape, out_idx))

    # the epilogue stores along n (the default: a row-major product) or along m (an
    # NCHW conv's pixels), whichever its stores step along consecutively
    out_m_fast = fast_axis(head.lines + epi.lines, {"m": m // 2, "n": n // 2, "bz": 0}, ("m", "n"), STORES) == "m"
    store = (lambda v: to_storage(v, promoted)) if tensor_cores else (lambda v: v)
    a_ld, b_ld = tile_row_strides(group)
    if tensor_cores:  # each tile consecutive along the operand's consecutive axis (column-major tiles)
        a_ld = a_ld if a_fast == "k" else TILE_M + TILE_PAD_TENSOR_CORES
        b_ld = b_ld if b_fast == "n" else TILE_K + TILE_PAD_TENSOR_CORES
    walk = _tile_walk if tensor_cores else row_major_walk
    rows, weights = (conv_rows(group), conv_weight_rows(group, op)) if op.kind == "conv2d" else (None, None)
    if weights:
        b_copy = None  # a copy from the rows' unaligned starts would straddle sectors
    zero = store(f"({REGISTER[acc_dtype]})0")
    return {
        "rows": rows and {**asdict(rows), "elements": rows.elements, "zero": zero,
                          "stage": _staged_value(g, op.inputs[0], promoted, sources, names)},
        "weights": weights and {**asdict(weights), "elements": weights.elements, "zero": zero,
                                "stage": _staged_value(g, op.inputs[1], promoted, sources, names)},
        "product": op.name, "n": n, "a_ld": a_ld, "b_ld": b_ld, "batch_index": "\n".join(head.lines),
        "a_value": a_value, "b_value": b_value, "a_store": store("aval"), "b_store": store("bval"),
        "a_walk": walk("m", "k", TILE_M, TILE_K, a_ld, a_fast),
        "b_walk": walk("k", "n", TILE_K, TILE_N, b_ld, b_fast),
        "s_store": store("sval"),
        "a_copy": a_copy and {**a_copy, **_vector_walk("m", "k", TILE_M, TILE_K, a_ld, a_fast, a_copy["vec"])},
        "b_copy": b_copy and {**b_copy, **_vector_walk("k", "n", TILE_K, TILE_N, b_ld, b_fast, b_copy["vec"])},
        "a_col_major": tensor_cores and a_fast == "m", "b_col_major": tensor_cores and b_fast == "k",
        "epilogue": "\n".join(epi.lines), "out_m_fast": out_m_fast,
        "out_runs": _out_runs(group, op) if out_m_fast else None,
        "staging_ld": STAGING_LD_M_FAST if out_m_fast else 16,
    }


def _tile_walk(row: str, col: str, rows: int, cols: int, stride: int, fast: str) -> dict[str, str]:
    """The tensor-core walk: as ``row_major_walk``, but the tile is consecutive in
    shared memory along ``fast`` too (column-major, columns ``stride`` apart, when
    ``fast`` is ``row``), so that consecutive threads store consecutive elements."""
    if fast == row:
        return {row: f"e % {rows}", col: f"e / {rows}", "slot": f"e / {rows} * {stride} + e % {rows}"}
    return row_major_walk(row, col, rows, cols, stride, fast)


def _vector_walk(row: str, col: str, rows: int, cols: int, stride: int, fast: str, vec: int) -> dict:
    """``_tile_walk`` by vectors of ``vec`` elements along ``fast``: vector ``e``, its
    first element's tile coordinates and shared-memory slot, and the vectors' count."""
    along = rows if fast == row else cols
    first = f"e % {along // vec} * {vec}"
    other = f"e / {along // vec}"
    walk = {row: first, col: other} if fast == row else {row: other, col: first}
    return {**walk, "slot": f"{other} * {stride} + {first}", "vectors": rows * cols // vec}


def _conv_weight_as_stored(op, which: str, sources: dict, g) -> bool:
    """Whether ``which`` is a conv's weight read as it is stored, in the product's dtype:
    B(k, n) = w[n, k], consecutive along k (its index arithmetic splits k into channel
    and tap and joins them again, which ``probe.contiguous_runs`` does not follow)."""
    weight = op.inputs[1]
    return which == "b" and weight in sources and g.tensor(weight).dtype == op.promoted


_LOADED = re.compile(r"^\s*const \w+ (\w+) = part_load\(PART_LDG\((\w+)\[(.*)\]\)\);$")


def _copy(lines: list[str], which: str, axes: tuple[str, str], extents: dict[str, int], vec: int,
          dtypes: dict[str, str], product: str, fixed: str | None) -> dict | None:
    """The 16-byte copy of an operand that is read as it is stored: its code (the
    emitted ``lines``) is index arithmetic, one load of a storage in the ``product``
    dtype, and that value as the operand. Along the tile axis ``fast`` (``fixed``, or
    the axis of ``axes`` along which ``probe.contiguous_runs`` proves the load's
    index steps by one over aligned runs of ``vec``), ``vec`` elements from a multiple
    of ``vec`` are then one aligned 16-byte vector, wholly in bounds or wholly out when
    the GEMM's extent along ``fast`` is a multiple of ``vec``. Its address is the
    load's own index arithmetic at the run's first element. None when any of it fails."""
    if len(lines) < 2:
        return None
    *head, load, last = lines
    found = _LOADED.match(load)
    if not found or last.strip() != f"{which}val = {found.group(1)};" or dtypes.get(found.group(2)) != product:
        return None
    if not all(line.lstrip().startswith("const idx_t ") for line in head):
        return None
    _, pointer, index = found.groups()
    fast = fixed or next((axis for axis in axes if contiguous_runs(head, index, axis, vec)), None)
    if fast is None or extents[fast] % vec:
        return None
    return {"pointer": pointer, "vec": vec, "fast": fast,
            "address": "\n".join(head + [f"{' ' * 8}const idx_t {which}_at = {index};"])}


def _conv_operand(em: Emitter, op, which: str, g) -> str:
    """Value of the implicit-GEMM operand element: A(bz, m, k) from the input with
    zero padding, B(bz, k, n) from the weight."""
    x, w = g.tensor(op.inputs[0]), g.tensor(op.inputs[1])
    _, c, height, width = x.shape
    o, cg, kh, kw = w.shape
    groups = op.attrs["groups"]
    sh, sw = op.attrs["strides"]
    dh, dw = op.attrs["dilations"]
    pt, pl, _, _ = op.attrs["pads"]
    _, _, ho, wo = conv2d_output(x.shape, w.shape, op.attrs)
    ci, ki, kj = (em.index_var(e) for e in delinearize((cg, kh, kw), "k"))
    if which == "b":
        return em.value(op.inputs[1], (em.index_var(f"bz * {o // groups} + n"), ci, ki, kj))
    nb, oh, ow = (em.index_var(e) for e in delinearize((x.shape[0], ho, wo), "m"))
    h = em.index_var(f"{oh} * {sh} - {pt} + {ki} * {dh}")
    col = em.index_var(f"{ow} * {sw} - {pl} + {kj} * {dw}")
    result = em.fresh("x")
    em.emit(f"{REGISTER[x.dtype]} {result} = ({REGISTER[x.dtype]})0;")
    em.open(f"if ({h} >= 0 && {h} < {height} && {col} >= 0 && {col} < {width})")
    channel = em.index_var(f"bz * {cg} + {ci}")
    em.emit(f"{result} = {em.value(op.inputs[0], (nb, channel, h, col))};")
    em.close()
    return result


def _out_runs(group: Group, op) -> dict | None:
    """``cost.conv_out_runs`` for product ``op``, at its own output channels (horizontal
    siblings differ in those)."""
    runs = conv_out_runs(group) if op.kind == "conv2d" else None
    return runs and {**asdict(runs), "channels": op.out.shape[1]}


def _staged_value(g, tensor: str, promoted: str, sources: dict, names: Names) -> str:
    """Code setting ``sval``: a conv operand ``tensor`` (its prologue applied) at linear
    address ``a``, in the ``promoted`` dtype (``cost.ConvRows``, ``cost.WeightRows``: the
    operand is staged in memory order)."""
    em = Emitter(g, sources, expr_macro(), "idx_t", names)
    em.depth = 7
    at = tuple(em.index_var(e) for e in delinearize(g.tensor(tensor).shape, "a"))
    em.emit(f"sval = {convert(em.value(tensor, at), g.tensor(tensor).dtype, promoted)};")
    return "\n".join(em.lines)


def _output_index(em: Emitter, op, b_idx, g) -> tuple[str, ...]:
    """Index of product element (bz, m, n) in the contraction's output tensor."""
    if op.kind == "matmul":
        a, b = (g.tensor(t).shape for t in op.inputs[:2])
        return b_idx + (("m",) if len(a) > 1 else ()) + (("n",) if len(b) > 1 else ())
    x, w = g.tensor(op.inputs[0]), g.tensor(op.inputs[1])
    _, _, ho, wo = conv2d_output(x.shape, w.shape, op.attrs)
    nb, oh, ow = (em.index_var(e) for e in delinearize((x.shape[0], ho, wo), "m"))
    channel = em.index_var(f"bz * {w.shape[0] // op.attrs['groups']} + n")
    return (nb, channel, oh, ow)
