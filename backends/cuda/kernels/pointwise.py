"""Context of ``pointwise.cu.j2``: elementwise, broadcast and layout ops of one iteration space."""

from __future__ import annotations

import math
from dataclasses import asdict

from partitioner.cost import (TRANSPOSE_TILE, WARP, sector_elements, transpose_tile_bytes, transpose_tile_row,
                             transposes_innermost_axis, window_rows)
from partitioner.dtypes import itemsize
from partitioner.group import Group
from partitioner.pooling import geometry

from ..codegen import INT32_LIMIT, Emitter, Source, delinearize, storage_type, to_storage
from .common import (BLOCKS_PER_SM, VECTOR_BYTES, expr_macro, external_sources, grid_stride_blocks, index_type,
                     parameters)
from .probe import sectors

THREADS = 256


def vector_width(dtypes: list[str], n: int) -> int:
    """Elements per thread step: 16 bytes of the widest dtype, reduced until it divides ``n``."""
    vec = max(1, VECTOR_BYTES // max(itemsize(d) for d in dtypes))
    while vec > 1 and n % vec:
        vec //= 2
    return vec


def build(group: Group, index: int, hw) -> dict:
    """Each thread takes ``vec`` consecutive elements per step and moves the tensors
    read or written at exactly those elements as one 16-byte vector. A tensor read
    at another index (a broadcast row, a slice, a concat's part, a pooling window) is
    read one element at a time, so its lanes' reads lie ``vec`` elements apart. When
    those reads touch fewer sectors with the lanes of a warp at consecutive elements,
    the kernel takes that order instead (``lanes``, ``vec`` elements per step and lane,
    a warp's step ``32 * vec`` wide): a read that steps along the elements is then
    coalesced, and so is every other access, element by element."""
    g = group.graph
    writes = list(group.writes)
    shape = g.tensor(writes[0]).shape if writes else ()
    n = g.tensor(writes[0]).numel if writes else 0
    dtypes = [g.tensor(b).dtype for b in (*group.reads, *writes)]
    # vector stores need every written tensor laid out like the iteration space
    aligned = bool(writes) and all(g.tensor(w).shape == shape for w in writes)
    vec = vector_width(dtypes, n) if aligned else 1
    axis = _tile_axis(group, shape, n) if transposes_innermost_axis(group) else None
    if axis is not None:
        return _tiled(group, shape, axis, hw)
    staged = window_rows(group)
    if staged:
        return _windowed(group, shape, staged, hw)
    kernel = _emit(group, shape, vec)
    if vec > 1 and _lanes_touch_fewer_sectors(kernel["body"], n, vec, kernel["params"]):
        kernel = _emit(group, shape, 1)
        unroll, steps, lanes = vec, -(-n // (WARP * vec)), True
        if n + WARP * unroll > INT32_LIMIT:  # a last step's indices run past n
            kernel.update(itype="int64_t", bits=64)
    else:
        unroll, steps, lanes = vec, n // vec, False
    return {
        "template": "pointwise.cu.j2", "params": kernel["params"], "bits": kernel["bits"],
        "grid": (grid_stride_blocks(max(1, -(-n // unroll)), THREADS, hw.sm_count), 1, 1),
        "block": (THREADS, 1, 1), "smem_dynamic": 0, "smem_static": 0,
        "context": {"threads": THREADS, "index_type": kernel["itype"], "n": n, "tiled": False, "windowed": False,
                    "vec": unroll,
                    "steps": steps, "lanes": lanes, "warp": WARP, "body": kernel["body"],
                    "vector_loads": kernel["loads"], "vector_stores": kernel["stores"]},
    }


def _tile_axis(group: Group, shape: tuple[int, ...], n: int) -> int | None:
    """The axis of the iteration space along which the body's reads touch the fewest
    sectors over a warp, when that is no more than half what lanes along the
    innermost axis touch (a transposed read): the kernel then stages tiles
    (``_tiled``). ``None`` otherwise."""
    if len(shape) < 2 or shape[-1] < 2:
        return None
    kernel = _emit(group, shape, 1)
    lines, sizes = kernel["body"].split("\n"), _itemsizes(kernel["params"])
    base = n // 2

    def touched(axis: int) -> int:
        stride = math.prod(shape[axis + 1:])
        lanes = min(WARP, shape[axis])
        return sectors(lines, [[{"i": base + lane * stride} for lane in range(lanes)]], sizes) * WARP // lanes

    along = {axis: touched(axis) for axis in range(len(shape) - 1) if shape[axis] > 1}
    if not along:
        return None
    best = min(along, key=lambda a: (along[a], -a))
    return best if 2 * along[best] <= touched(len(shape) - 1) else None


def _tiled(group: Group, shape: tuple[int, ...], axis: int, hw) -> dict:
    """A tiled transpose: each block takes tiles of ``TRANSPOSE_TILE`` elements along
    ``axis`` (the one the reads are consecutive in) by as many along the innermost
    axis, computes every written value with lanes along ``axis`` into a padded
    shared-memory tile, then stores it with lanes along the innermost axis: both
    coalesced. Values are computed exactly as in the other modes; only their order
    changes."""
    g = group.graph
    params, itype, bits, em, idx = _emitter(group, shape, 4)
    tiles = []
    for k, w in enumerate(group.writes):
        t = g.tensor(w)
        row = transpose_tile_row(t.dtype)
        value = em.value(w, em.element_index(t.shape, shape, idx, "i"))
        em.emit(f"PART_STS(tile{k}[ll * {row} + al]) = {to_storage(value, t.dtype)};")
        tiles.append({"var": f"tile{k}", "type": storage_type(t.dtype), "pointer": params.pointer[w], "row": row})
    rest = [d for d in range(len(shape)) if d not in (axis, len(shape) - 1)]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    rest_index = delinearize(tuple(shape[d] for d in rest), "rest")
    base = " + ".join(f"({c}) * {strides[d]}" for c, d in zip(rest_index, rest) if c != "0") or "0"
    a_tiles, l_tiles = -(-shape[axis] // TRANSPOSE_TILE), -(-shape[-1] // TRANSPOSE_TILE)
    count = a_tiles * l_tiles * math.prod(shape[d] for d in rest)
    smem = transpose_tile_bytes(group)
    return {
        "template": "pointwise.cu.j2", "params": params, "bits": bits,
        "grid": (max(1, min(count, hw.sm_count * BLOCKS_PER_SM)), 1, 1),
        "block": (THREADS, 1, 1), "smem_dynamic": 0, "smem_static": smem,
        "context": {"threads": THREADS, "index_type": itype, "n": math.prod(shape), "tiled": True, "windowed": False,
                    "tile": TRANSPOSE_TILE, "tiles": tiles, "count": count, "a_tiles": a_tiles, "l_tiles": l_tiles,
                    "a_extent": shape[axis], "a_stride": strides[axis], "l_extent": shape[-1], "base": base,
                    "body": "\n".join(em.lines)},
    }


def _windowed(group: Group, shape: tuple[int, ...], staged, hw) -> dict:
    """A staged pool (``cost.WindowRows``): each block takes tiles of output rows of one
    (image, channel) plane, stages the input rows they read in memory order (the pool's
    input computed there, its producers in the group run once per element), then
    computes the outputs with lanes at consecutive ones, the window reading its taps
    from the staged rows. Values are computed exactly as in the other modes."""
    g = group.graph
    params, itype, bits, em, idx = _emitter(group, shape, 4)
    x = g.tensor(staged.source)
    stage = Emitter(g, dict(em.sources), expr_macro(), "idx_t", em.names)
    stage.depth = 4
    at = tuple(stage.index_var(e) for e in delinearize(x.shape, "a"))
    stage.emit(f"PART_STS(rows[e]) = {to_storage(stage.value(staged.source, at), x.dtype)};")
    em.sources[staged.source] = Source("tile", "rows", position="tile_base")
    for w in group.writes:
        em.store(w, params.pointer[w], em.element_index(g.tensor(w).shape, shape, idx, "i"))
    rows, cols = geometry(x.shape, g.ops[staged.window].attrs)
    count = x.shape[0] * x.shape[1] * staged.tiles_per_plane
    return {
        "template": "pointwise.cu.j2", "params": params, "bits": bits,
        "grid": (max(1, min(count, hw.sm_count * BLOCKS_PER_SM)), 1, 1),
        "block": (THREADS, 1, 1), "smem_dynamic": 0, "smem_static": staged.bytes,
        "context": {"threads": THREADS, "index_type": itype, "n": math.prod(shape), "tiled": False, "windowed": True,
                    "rows": {**asdict(staged), "type": storage_type(x.dtype), "count": count, "numel": x.numel,
                             "loop": -(-staged.slots // WARP) * WARP, "height": rows, "width": cols,
                             "out_align": sector_elements(g.tensor(w).dtype for w in group.writes)},
                    "stage": "\n".join(stage.lines), "body": "\n".join(em.lines)},
    }


def _lanes_touch_fewer_sectors(body: str, n: int, vec: int, params) -> bool:
    """Whether the body's one-element global reads (vector reads are the template's)
    touch fewer sectors over one warp step of ``32 * vec`` elements (from the middle
    of the iteration space) with lanes at consecutive elements than ``vec`` apart."""
    width = WARP * vec
    base = n // 2 // width * width
    by_vector = [[{"i": base + lane * vec + j} for lane in range(WARP)] for j in range(vec)]
    by_lane = [[{"i": base + j * WARP + lane} for lane in range(WARP)] for j in range(vec)]
    lines, sizes = body.split("\n"), _itemsizes(params)
    return sectors(lines, by_lane, sizes) < sectors(lines, by_vector, sizes)


def _itemsizes(params) -> dict[str, int]:
    """Kernel pointer -> bytes per element of the tensor behind it (``probe.sectors``)."""
    return {params.pointer[arg["tensor"]]: itemsize(arg["dtype"]) for arg in params.args}


def _emitter(group: Group, shape: tuple[int, ...], depth: int):
    """The kernel's parameters, index type and width, and an emitter (at ``depth``)
    over its external sources with the multi-index of element ``i`` of ``shape``."""
    params = parameters(group)
    itype, bits = index_type(group)
    em = Emitter(group.graph, external_sources(group, params), expr_macro(), "idx_t")
    em.depth = depth
    return params, itype, bits, em, tuple(em.index_var(e) for e in delinearize(shape, "i"))


def _emit(group: Group, shape: tuple[int, ...], vec: int) -> dict:
    """The body computing element ``i`` (and, for ``vec`` > 1, the vector loads and
    stores around it)."""
    g = group.graph
    params, itype, bits, em, idx = _emitter(group, shape, 3)
    loads = []
    if vec > 1:
        for name, src in sorted(em.sources.items()):
            if g.tensor(name).shape == shape:
                var = f"vec_{src.name}"
                em.sources[name] = Source("buffer", f"{var}.v", at=idx, position="j", pointer=src.name)
                if all(load["var"] != var for load in loads):
                    dtype = g.tensor(g.storage[name]).dtype
                    loads.append({"var": var, "type": storage_type(dtype), "pointer": src.name})
    stores = []
    for w in group.writes:
        t = g.tensor(w)
        if vec > 1:
            var = f"vec_{params.pointer[w]}"
            em.emit(f"{var}.v[j] = {to_storage(em.value(w, idx), t.dtype)};")
            stores.append({"var": var, "type": storage_type(t.dtype), "pointer": params.pointer[w]})
        else:
            em.store(w, params.pointer[w], em.element_index(t.shape, shape, idx, "i"))
    body = "\n".join(em.lines)
    # a tensor of the iteration space's shape read only elsewhere (transposed, say) needs no
    # vector load: the GPU compiler would drop it, but the emulator's counters would not
    loads = [load for load in loads if f"{load['var']}.v[j]" in body]
    return {"params": params, "itype": itype, "bits": bits, "body": body, "loads": loads, "stores": stores}
