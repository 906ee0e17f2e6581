"""Context of ``scan.cu.j2``: a ``cumsum`` on its own (scans never fuse).

The input is viewed as ``[outer, length, inner]`` around the scanned axis; each of
the ``outer * inner`` rows is a sequential sum in the accumulator dtype (float32 for
half types, float64 for float64, int64 for integers and bool), the order
``numpy.cumsum`` adds in, so results are bit-identical to the reference: a warp's
(coalesced, lanes at consecutive elements) for rows along the last axis, a thread's
otherwise (neighbouring threads at neighbouring elements).
"""

from __future__ import annotations

import math

from partitioner.cost import WARP
from partitioner.dtypes import accumulator_dtype
from partitioner.group import Group
from partitioner.ops import normalize_axis

from ..codegen import REGISTER, convert, literal, to_storage
from .common import grid_stride_blocks, index_type, parameters

THREADS = 256


def build(group: Group, index: int, hw) -> dict:
    """The kernel of a group holding one ``cumsum`` of a non-empty tensor (any rank of
    at least 1, any axis; ``exclusive`` and ``reverse`` as attributes say)."""
    g = group.graph
    params = parameters(group)
    itype, bits = index_type(group)
    op = group.compute[0]
    x = g.tensor(op.inputs[0])
    axis = normalize_axis(op.attrs["axis"], len(x.shape))
    length, inner = x.shape[axis], math.prod(x.shape[axis + 1:])
    rows = x.numel // length
    acc = accumulator_dtype(x.dtype)
    step = "acc + v" if acc in ("float32", "float64") else "part_wrap_add(acc, v)"
    warp_rows = inner == 1  # rows along the last axis: a warp each, so that loads are coalesced

    def store(var: str) -> str:
        result = convert(var, acc, op.promoted)
        if op.out.dtype != op.promoted:  # a stated dtype converts the rounded sum
            result = convert(result, op.promoted, op.out.dtype)
        return f"PART_STG({params.pointer[op.name]}[at]) = {to_storage(result, op.out.dtype)};"

    return {
        "template": "scan.cu.j2", "params": params, "bits": bits,
        "grid": (grid_stride_blocks(rows * (WARP if warp_rows else 1), THREADS, hw.sm_count), 1, 1),
        "block": (THREADS, 1, 1),
        "smem_dynamic": 0, "smem_static": 0,
        "context": {
            "threads": THREADS, "index_type": itype, "rows": rows, "length": length, "inner": inner,
            "reverse": op.attrs["reverse"], "exclusive": op.attrs["exclusive"],
            "acc_type": REGISTER[acc], "zero": literal(0, acc),
            "load": convert(f"part_load(PART_LDG({params.pointer[g.storage[op.inputs[0]]]}[at]))", x.dtype, acc),
            "step": step, "store": store("acc"), "warp_store": store("out"), "warp_rows": warp_rows,
        },
    }
