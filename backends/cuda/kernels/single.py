"""Kernels of groups holding one op that never fuses: a gather (``single_op.cu.j2``)
or a cumsum (``scan.cu.j2``, built by ``scan.py``). Custom ops get no kernel."""

from __future__ import annotations

import math

from partitioner.group import Group
from partitioner.ops import normalize_axis

from ..codegen import REGISTER, convert, to_storage
from . import scan
from .common import grid_stride_blocks, index_type, parameters

THREADS = 256


def build(group: Group, index: int, hw) -> dict:
    """The kernel context of a single-op group, by its op's kind."""
    builder = scan.build if group.compute[0].kind == "cumsum" else _gather
    return builder(group, index, hw)


def _gather(group: Group, index: int, hw) -> dict:
    g = group.graph
    params = parameters(group)
    itype, bits = index_type(group)
    op = group.compute[0]
    data, indices = (g.tensor(t) for t in op.inputs)
    axis = normalize_axis(op.attrs["axis"], len(data.shape))
    out = op.out
    return {
        "template": "single_op.cu.j2", "params": params, "bits": bits,
        "grid": (grid_stride_blocks(out.numel, THREADS, hw.sm_count), 1, 1), "block": (THREADS, 1, 1),
        "smem_dynamic": 0, "smem_static": 0,
        "context": {
            "threads": THREADS, "index_type": itype, "out": out, "register": REGISTER[data.dtype],
            "store": to_storage(convert("value", data.dtype, out.dtype), out.dtype),
            "dim": data.shape[axis], "inner": math.prod(data.shape[axis + 1:]), "count": indices.numel,
            "data_ptr": params.pointer[g.storage[op.inputs[0]]], "indices_ptr": params.pointer[g.storage[op.inputs[1]]],
            "out_ptr": params.pointer[op.name],
        },
    }
