"""Context of ``pointwise.cu.j2``: elementwise, broadcast and layout ops of one iteration space."""

from __future__ import annotations

from partitioner.dtypes import itemsize
from partitioner.group import Group

from ..codegen import Emitter, Source, delinearize, storage_type, to_storage
from .common import expr_macro, external_sources, grid_stride_blocks, index_type, parameters

THREADS = 256
VECTOR_BYTES = 16


def vector_width(dtypes: list[str], n: int) -> int:
    """Elements per thread step: 16 bytes of the widest dtype, reduced until it divides ``n``."""
    vec = max(1, VECTOR_BYTES // max(itemsize(d) for d in dtypes))
    while vec > 1 and n % vec:
        vec //= 2
    return vec


def build(group: Group, index: int, hw) -> dict:
    g = group.graph
    params = parameters(group)
    itype, bits = index_type(group)
    writes = list(group.writes)
    shape = g.tensor(writes[0]).shape if writes else ()
    n = g.tensor(writes[0]).numel if writes else 0
    # vector stores need every written tensor laid out like the iteration space
    aligned = bool(writes) and all(g.tensor(w).shape == shape for w in writes)
    vec = vector_width([g.tensor(b).dtype for b in (*group.reads, *writes)], n) if aligned else 1
    em = Emitter(g, external_sources(group, params), expr_macro(), "idx_t")
    em.depth = 3
    idx = tuple(em.index_var(e) for e in delinearize(shape, "i"))
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
    for w in writes:
        t = g.tensor(w)
        if vec > 1:
            var = f"vec_{params.pointer[w]}"
            em.emit(f"{var}.v[j] = {to_storage(em.value(w, idx), t.dtype)};")
            stores.append({"var": var, "type": storage_type(t.dtype), "pointer": params.pointer[w]})
        else:
            w_idx = idx if t.shape == shape else tuple(em.index_var(e) for e in delinearize(t.shape, "i"))
            em.store(w, params.pointer[w], w_idx)
    body = "\n".join(em.lines)
    # a tensor of the iteration space's shape read only elsewhere (transposed, say) needs no
    # vector load: the GPU compiler would drop it, but the emulator's counters would not
    loads = [load for load in loads if f"{load['var']}.v[j]" in body]
    return {
        "template": "pointwise.cu.j2", "params": params, "bits": bits,
        "grid": (grid_stride_blocks(max(1, n // vec), THREADS, hw.sm_count), 1, 1), "block": (THREADS, 1, 1),
        "smem_dynamic": 0, "smem_static": 0,
        "context": {"threads": THREADS, "index_type": itype, "n": n, "vec": vec, "body": body,
                    "vector_loads": loads, "vector_stores": stores},
    }
