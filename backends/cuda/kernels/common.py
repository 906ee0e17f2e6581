"""What every kernel builder shares: the template environment, kernel parameters,
where external tensors come from, and the index width."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import jinja2

from partitioner.group import Group

from ..codegen import Source, needs_int64, storage_type

TEMPLATES = "backends.templates"
# Grid-stride kernels launch at most this many blocks per SM: enough to fill it.
BLOCKS_PER_SM = 32
# The widest global access of one thread: a 16-byte vector load or store, or cp.async copy
# (CUDA C++ Programming Guide, "Device Memory Accesses": 1, 2, 4, 8 or 16 bytes).
VECTOR_BYTES = 16


def _raise(message: str):
    raise ValueError(message)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja2 environment over the packaged templates."""
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: resources.files(TEMPLATES).joinpath(name).read_text()),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        autoescape=False,
    )
    env.globals["raise"] = _raise
    return env


def expr_macro():
    """The ``op_expr`` macro of ``_expr.j2``: C++ expression of one elementwise op."""
    return environment().get_template("_expr.j2").module.op_expr


@dataclass
class Parameters:
    """Kernel parameters of a group: a pointer per storage read, then per storage
    written. ``args`` describes them for the manifest and the runners."""

    decls: list[str]
    args: list[dict]
    pointer: dict[str, str]


def parameters(group: Group) -> Parameters:
    g = group.graph
    decls, args, pointer = [], [], {}
    for role, prefix, storages in (("in", "in", group.reads), ("out", "out", group.writes)):
        for k, base in enumerate(storages):
            t = g.tensor(base)
            pointer[base] = f"{prefix}{k}"
            const = "const " if role == "in" else ""
            decls.append(f"{const}{storage_type(t.dtype)}* __restrict__ {prefix}{k}")
            args.append({"tensor": base, "role": role, "dtype": t.dtype, "shape": list(t.shape)})
    return Parameters(decls, args, pointer)


def external_sources(group: Group, params: Parameters) -> dict[str, Source]:
    """Every tensor the group reads from memory (a storage or a view of it) -> its pointer."""
    g = group.graph
    sources = {}
    for op in group.compute:
        for t in op.tensor_inputs:
            base = g.storage[t]
            if base in group.reads:
                sources[t] = Source("global", params.pointer[base])
    return sources


def index_type(group: Group) -> tuple[str, int]:
    """``(C++ type, bits)`` of the kernel's index arithmetic: 64-bit when any tensor it
    touches can reach 2^31 elements, 32-bit otherwise."""
    touched = [t for op in group.compute for t in (*op.tensor_inputs, op.name)]
    return ("int64_t", 64) if needs_int64(group.graph, touched) else ("int32_t", 32)


def shared_memory_split(smem: int, hw) -> tuple[int, int]:
    """``(static, dynamic)`` bytes for a kernel needing ``smem`` bytes of shared memory:
    declared statically (so ptxas reports it) up to what a block may use without the
    opt-in attribute, ``hw.smem_per_block_default_bytes`` (48 KiB on every profile
    here), and dynamic beyond, where the runner raises the kernel's limit."""
    return (smem, 0) if smem <= hw.smem_per_block_default_bytes else (0, smem)


#: Largest x-dimension of a grid: 2^31 - 1 on every compute capability since 3.0
#: (CUDA C++ Programming Guide, "Features and Technical Specifications", table of
#: technical specifications per compute capability). y and z stop at 65535.
MAX_GRID_X = 2**31 - 1


def tile_grid(tiles: int) -> int:
    """Blocks for a kernel that loops over ``tiles`` output tiles, one per block and
    iteration (``for (tile = blockIdx.x; tile < tiles; tile += gridDim.x)``): one block
    per tile up to the grid's x limit, so that no size is too large to launch."""
    return max(1, min(tiles, MAX_GRID_X))


def grid_stride_blocks(work: int, threads: int, sm_count: int) -> int:
    """Blocks for a grid-stride loop over ``work`` items: enough to fill the GPU."""
    return max(1, min(math.ceil(work / threads), sm_count * BLOCKS_PER_SM))


def row_major_walk(row: str, col: str, rows: int, cols: int, stride: int, fast: str) -> dict[str, str]:
    """How the threads walk an operand tile of ``rows`` x ``cols`` held row-major in
    shared memory (rows ``stride`` elements apart: the CUDA-core contraction's tiles,
    the attention template's Q, K and V tiles): tile element ``e``, consecutive for consecutive threads, at tile coordinates
    ``row`` and ``col``. Consecutive threads take consecutive ``col`` elements, or
    consecutive ``row`` elements when ``fast`` is ``row``: the coordinate along which
    the operand's global reads are consecutive, so that a warp's loads are coalesced
    whatever the operand's layout."""
    if fast == row:
        return {row: f"e % {rows}", col: f"e / {rows}", "slot": f"e % {rows} * {stride} + e / {rows}"}
    return {row: f"e / {cols}", col: f"e % {cols}", "slot": f"e / {cols} * {stride} + e % {cols}"}
