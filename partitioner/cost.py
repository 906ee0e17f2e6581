"""The cost model: the one function every strategy, the validator and the report use.

For a fusion group ``G`` (all figures *modelled*, none measured):

* ``bytes_read``: each distinct storage that ops in ``G`` read and that ``G`` does
  not produce, counted once (literals are free; a view shares its input's bytes);
* ``bytes_written``: each storage produced in ``G`` that is a graph output or is
  read by an op outside ``G``, less those ``G`` recomputes (``Group.recomputed``:
  other groups compute them too, and none writes them);
* ``launches``: 1, or 0 for a group made only of views or only of empty results
  (which also reads nothing);
* ``flops``: each op's FLOP per result element times the elements the kernel
  computes of it, recomputation included (:func:`op_executions`: a pointwise
  prologue of a contraction once per tile of the other operand, a value under a
  broadcast once per element it is broadcast to);
* ``time = launches * launch_overhead + max(bytes / bandwidth, Σ FLOP / peak)``,
  each op's FLOP at the peak of the unit it runs on (the roofline; the default
  objective);
* ``traffic_time = launches * launch_overhead + bytes / bandwidth`` (the
  memory-only objective);
* ``energy = bytes · E_hbm + on-chip bytes · E_sram + Σ FLOP · E_flop`` (modelled
  joules; the profile's per-byte and per-FLOP energies, with their sources).

``objective(group, hw, kind)`` is each of these as an exact integer for the ILP.

Budgets per group (estimates, checked against the hardware by ``legality.py``;
their derivation is in ``docs/cost-model.md``): shared memory per block,
registers per thread, kernel-parameter bytes, and the number of non-view ops.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field

from .attention import contraction_pair, pair, staged_scores
from .dtypes import HALFS, compute_dtype, itemsize, product_accumulator, reduction_accumulator
from .graph import Op, bits
from .group import Group
from .hardware import Hardware
from .ops import ALONE_CLASSES, conv2d_output, matmul_shapes, transpose_perm
from .pooling import geometry, window_elements

#: The objectives the ILP can minimise (``--objective``).
OBJECTIVES = ("time", "traffic", "energy")

# Tiling the contraction template uses (one source for the estimate and the backend):
# a 128x128 output tile per block of 256 threads, K stepped 32 at a time, operand
# tiles in shared-memory stages (the classic CUTLASS-style tiling). Tensor cores
# (float16/bfloat16) pipeline 3 stages of cp.async copies, CUTLASS's default for its
# sm80 tensor-op GEMMs (``DefaultGemmConfiguration<OpClassTensorOp, Sm80>::kStages``) and
# Triton's ``num_stages`` default: 60 KiB a block, so two blocks fit an SM's 228 KiB
# with conv staging beside them. CUDA cores double-buffer (65.25 KiB a float32 block).
TILE_M, TILE_N, TILE_K = 128, 128, 32
TILE_STAGES_TENSOR_CORES, TILE_STAGES_CUDA_CORES = 3, 2
CONTRACTION_THREADS = 256
# Shared-memory operand tiles are padded so that main-loop reads meet no bank conflict
# (CUTLASS's padded layouts). Tensor cores (float16/bfloat16): each row by 8 elements,
# 16 bytes; an ldmatrix reads 8 rows of 16 bytes per phase, and rows of 64 (A:
# TILE_K halves) or 256 bytes (B: TILE_N) fall on 2 or 1 of the 8 16-byte bank groups
# (4- and 8-way conflicts), where 80- and 272-byte rows fall on 8 (ldmatrix rows must
# be 16-byte aligned, so the padding is a multiple of 8 halves). CUDA cores: rows by 1
# element; a warp reads one element of each of two A rows 16 rows apart, the same bank
# at a stride of 32 words, different banks at 33; and a warp loading a tile along k (an
# operand consecutive in k) writes 32 rows of B at once, all in one bank at a stride of
# 128 words.
TILE_PAD_TENSOR_CORES, TILE_PAD_CUDA_CORES = 8, 1
# Reductions: 256 threads per block. A row of more than SHORT_ROW elements is
# processed by the whole block (a partial per warp goes through shared memory for
# the block-level combine); shorter rows by one warp each, ROWS_PER_WARP_BLOCK rows
# per block.
REDUCTION_THREADS = 256
WARP = 32
SHORT_ROW = 128
ROWS_PER_WARP_BLOCK = REDUCTION_THREADS // WARP
# Attention (templates/attention.cu.j2, FlashAttention-2): a block of ATTN_WARPS warps
# takes ATTN_BLOCK_M = 16 query rows per warp and streams the keys ATTN_BLOCK_N at a
# time: 64, or 32 where the output accumulator already holds many registers (head dims
# over 128) or the products run on CUDA cores (float32). Q, K and V tiles live in shared
# memory with ATTN_ROW_PAD extra elements per row (rows then start 4 banks apart:
# fragment loads are free of bank conflicts). The head dims are padded to the mma
# shape m16n8k16: D to 16, Dv to 8.
ATTN_WARPS = 4
ATTN_BLOCK_M = 16 * ATTN_WARPS
ATTN_BLOCK_N, ATTN_BLOCK_N_NARROW = 64, 32
ATTN_WIDE_HEAD = 128
ATTN_ROW_PAD = 8
# After the last key tile each warp stages its 16 normalised output rows in shared
# memory (float32, over the K/V tiles), ATTN_OUT_PAD floats apart beyond Dv, so that
# the epilogue stores consecutive dv from consecutive lanes (coalesced) rather than
# the accumulator layout's 2 of every 8 elements per row.
ATTN_OUT_PAD = 4
# Masks and biases the scores read (attention.staged_scores) are staged per key tile,
# ATTN_BLOCK_M rows of ATTN_BLOCK_N keys, each row padded by 16 bytes. A warp reads them
# in the accumulator layout, lane (g, t) at row g and keys 2t, 2t + 1 of each 8: for a
# 2-byte mask, word g·R + t of rows R words apart, on 32 distinct banks when R is 4
# modulo 32 (144-byte rows of 64 keys, 80-byte rows of 32); a 1-byte mask's 80-byte
# rows put the 8 rows' word pairs on distinct banks too (4-byte masks stay 2-way).
ATTN_SCORE_PAD_BYTES = 16
# Pointwise kernels that transpose their innermost axis (templates/pointwise.cu.j2's
# tiled mode) stage TRANSPOSE_TILE x TRANSPOSE_TILE elements of each written value in
# shared memory: computed with lanes along the axis their reads are consecutive in,
# stored with lanes along the innermost axis (the classic tiled transpose of CUDA's
# samples, CUTLASS and Triton's layout conversions). Rows are padded to an odd number
# of 4-byte words (transpose_tile_row), so that a column of 32 falls on 32 banks.
TRANSPOSE_TILE = 32
# Register estimate: indices, loop bounds and the grid-stride counter.
BASE_REGISTERS = 16
# 64-bit address per tensor plus its 64-bit element count in the parameter space.
PARAM_BYTES_PER_TENSOR = 16
DEFAULT_MAX_OPS = 64


def check_max_ops(max_ops) -> None:
    """Raise ``ValueError`` unless ``max_ops`` (the cap on non-view ops per group) is
    an int of at least 1."""
    if isinstance(max_ops, bool) or not isinstance(max_ops, numbers.Integral) or max_ops < 1:
        raise ValueError(f"max_ops must be an int of at least 1; got {max_ops!r}")


@dataclass(frozen=True)
class Budgets:
    """Estimated resources of one group and the limits they are checked against.

    Units: bytes (shared memory, parameters), 32-bit registers per thread, op count.
    """

    shared_memory: int
    registers: int
    kernel_params: int
    ops: int
    shared_memory_limit: int
    registers_limit: int
    kernel_params_limit: int
    ops_limit: int

    def over(self) -> list[tuple[str, int, int]]:
        """(budget, used, limit) for every budget this group exceeds."""
        checks = [
            ("shared_memory", self.shared_memory, self.shared_memory_limit),
            ("registers", self.registers, self.registers_limit),
            ("kernel_params", self.kernel_params, self.kernel_params_limit),
            ("ops", self.ops, self.ops_limit),
        ]
        return [c for c in checks if c[1] > c[2]]


@dataclass(frozen=True)
class GroupCost:
    """A built, priced group: bytes, launches, FLOP (recomputation included; the
    part of it that recomputes values in ``recomputed_flops``), modelled times in
    microseconds (``modeled_time_us`` the roofline, ``traffic_time_us`` memory
    only, ``compute_time_us`` FLOP at peak), modelled energy in microjoules, its
    budgets (under the op cap it was priced with), for an attention group the tiling
    its kernel uses, and the :class:`~partitioner.group.Group` itself, which reports
    and backends use as it is (nothing downstream rebuilds or re-prices a group)."""

    ops: tuple[str, ...]
    kind: str
    bytes_read: int
    bytes_written: int
    launches: int
    flops: int
    recomputed_flops: int
    modeled_time_us: float
    traffic_time_us: float
    compute_time_us: float
    energy_uj: float
    budgets: Budgets
    tiling: "AttentionTiling | None"
    group: Group = field(compare=False, repr=False)
    #: FLOP per compute op (:func:`op_flops`), which the plan's recomputation totals read
    op_flops: dict[str, int] = field(compare=False, repr=False)

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    def value(self, objective: str) -> float:
        """The group's cost under ``objective`` (``OBJECTIVES``) in its display unit
        (``UNITS``): modelled microseconds, or microjoules for ``energy``."""
        return {"time": self.modeled_time_us, "traffic": self.traffic_time_us, "energy": self.energy_uj}[objective]


@dataclass(frozen=True)
class AttentionTiling:
    """The tiling of one attention group (constants above, dims from the group).

    ``d_pad``/``dv_pad``: head dims padded to the mma shape; ``q_tiles``: query
    tiles per (batch, head), each one block; ``k_tiles``: key tiles each block
    streams; ``threads`` per block; ``shared_memory``: bytes of the Q tile and of the
    K and V tiles with the staged masks and biases, or of the staged output tile where
    that is larger; ``score_tiles``: (tensor, row elements, byte offset) of each staged
    mask or bias (``attention.staged_scores``), ``block_m`` rows each.
    """

    block_m: int
    block_n: int
    d_pad: int
    dv_pad: int
    q_tiles: int
    k_tiles: int
    threads: int
    shared_memory: int
    score_tiles: tuple[tuple[str, int, int], ...] = ()

    def describe(self) -> str:
        """One line for reports: tile sizes, warps, blocks and how many K/V tiles each streams."""
        return (f"{self.block_m}x{self.block_n} tiles (query rows x keys), head dims {self.d_pad}/{self.dv_pad} "
                f"padded, {self.threads // WARP} warps, {self.q_tiles} query tile(s) per head, "
                f"{self.k_tiles} K/V tile(s) streamed per block")

    def to_dict(self) -> dict:
        return asdict(self)


def score_tile_row(block_n: int, dtype: str) -> int:
    """Elements from one row of a staged score tile (``attention.staged_scores``) of
    ``dtype`` to the next: the key tile and ``ATTN_SCORE_PAD_BYTES`` of padding."""
    return block_n + max(1, ATTN_SCORE_PAD_BYTES // itemsize(dtype))


def attention_tiling(group: Group) -> AttentionTiling:
    """The :class:`AttentionTiling` of a legal attention group."""
    last = group.graph.cache.get("attention_tiling")  # pricing one group asks several times
    if last is not None and last[0] is group:
        return last[1]
    tiling = _attention_tiling(group)
    group.graph.cache["attention_tiling"] = (group, tiling)
    return tiling


def _attention_tiling(group: Group) -> AttentionTiling:
    p = pair(group.graph, *contraction_pair(group))
    d_pad, dv_pad = -(-p.d // 16) * 16, -(-p.dv // 8) * 8
    block_n = ATTN_BLOCK_N_NARROW if p.dtype == "float32" or dv_pad > ATTN_WIDE_HEAD else ATTN_BLOCK_N
    q_tile = ATTN_BLOCK_M * (d_pad + ATTN_ROW_PAD) * itemsize(p.dtype)
    end = q_tile + block_n * (d_pad + dv_pad + 2 * ATTN_ROW_PAD) * itemsize(p.dtype)
    score_tiles = []
    for t in staged_scores(group, p):
        dtype = group.graph.tensor(t).dtype
        score_tiles.append((t, score_tile_row(block_n, dtype), end))
        end += ATTN_BLOCK_M * score_tile_row(block_n, dtype) * itemsize(dtype)
    staged_output = ATTN_BLOCK_M * (dv_pad + ATTN_OUT_PAD) * itemsize("float32")
    return AttentionTiling(ATTN_BLOCK_M, block_n, d_pad, dv_pad, -(-p.sq // ATTN_BLOCK_M), -(-p.sk // block_n),
                           WARP * ATTN_WARPS, max(end, q_tile + staged_output), tuple(score_tiles))


def op_executions(group: Group) -> dict[str, int]:
    """Result elements the group's kernel computes of each of its ops, recomputation
    included (modelled from how the templates work; ``docs/cost-model.md``).

    A fused kernel never buffers a pointwise value: it computes it wherever a
    consumer needs it. So an op is computed once per element each in-group consumer
    reads of it (a broadcast's result element, a window's tap, a reduction's input
    element) and, when it is written or dead, once per own element. A reduction or
    contraction result is computed once and kept, however often it is read. Consumers in
    the same stage of a reduction kernel share a computation where they read it at the
    same index (the larger demand counts): an elementwise consumer of its shape, a
    reshape or a reduction reads it where it is computed, while each distinct slice,
    transpose, concat, pad, window, gather or broadcast reads it elsewhere, so what each
    of those reads is computed apart (three slices of one value compute all of it, not
    a third; the generated code memoises a value per index). Each further stage
    recomputes it, and a contraction's operand loads and its epilogue compute what each
    needs apart. In a horizontal group each product's
    part of the kernel computes its own prologue, epilogue and the side values they
    read, so a value two parts need is computed by each. A contraction reads its A operand
    once per tile of N and its B operand once per tile of M (a conv's input once
    per tap of its implicit GEMM); an attention kernel reads Q and the scores once,
    and K and V once per query tile.

    Returns
    -------
    dict of str to int
        Op name -> elements computed (0 for an op nothing needs).
    """
    if group.empty:  # nothing it computes can be seen: it computes nothing (Group.empty)
        return dict.fromkeys(group.ops, 0)
    g = group.graph
    written = set(group.writes) | set(group.sinks)
    products = group.compute_mask & g.class_masks.get("contraction", 0)
    if group.kind != "contraction" or not products & (products - 1):
        return _executions(group, group.mask, written)
    # a horizontal group: each product's part of the kernel computes what its loads and
    # its stores need on its own (its prologue, its epilogue and the side values they read)
    total = dict.fromkeys(group.ops, 0)
    covered = 0
    for i in bits(products):
        below = g.descendants_mask[i] & group.mask
        part = 1 << i | below | g.ancestors_mask[i] & group.mask
        for j in bits(below):
            part |= g.ancestors_mask[j] & group.mask
        covered |= part
        mine = frozenset(w for w in written if (below | 1 << i) >> g.index[w] & 1)
        for name, n in _part_executions(group, part, mine).items():
            total[name] += n
    for name in g.names(group.mask & ~covered):  # in no product's part: computed if written
        total[name] = g.ops[name].out.numel if name in written else 0
    return total


def _part_executions(group: Group, part: int, written: frozenset[str]) -> dict[str, int]:
    """:func:`_executions` of one product's part of a horizontal group, memoised per
    graph: the siblings' parts recur across the many horizontal groups of one family
    (a part's counts read only its ops, what it writes, and the group's kind, always
    ``contraction`` here, with no reduction stage)."""
    memo = group.graph.cache.setdefault("part_executions", {})
    key = (part, written)
    if key not in memo:
        memo[key] = _executions(group, part, set(written))
    return memo[key]


def _executions(group: Group, members: int, written: set[str]) -> dict[str, int]:
    """:func:`op_executions` of the ops ``members`` of ``group`` (a set closed under
    in-group producers) when the values ``written`` leave it.

    A demand is keyed by its stage (and contraction) and its *index map*: an interned
    id of the chain of :func:`_index_token` from the element a kernel iteration writes
    (``0``) to the element it reads; demands of one key are shared, the rest add."""
    g = group.graph
    order, facts = g.order, _execution_facts(g)
    maps = g.cache.setdefault("index_maps", {})  # (token, map) -> map id; 0 is the identity
    runs = group.run_stages if group.mask & g.class_masks.get("reduction", 0) else None  # else all stage 0
    demand: dict[int, dict] = {}  # producer index -> {(stage or (stage, contraction), map): elements}
    executions: dict[str, int] = {}
    for i in reversed(group.indices if members == group.mask else bits(members)):
        name = order[i]
        numel, kept, contraction, operands = facts[i]
        at: dict[int, int] = {}  # index map -> elements computed through it
        for (_, index_map), need in demand.get(i, {}).items():
            at[index_map] = at.get(index_map, 0) + need
        if name in written:
            at[0] = max(at.get(0, 0), numel)
        if kept and at:
            at = {0: numel}  # computed once per result and kept (registers, shared memory)
        executions[name] = sum(at.values())
        key = None
        for position, producer, factor, token in operands:
            if not members >> producer & 1:
                continue
            if key is None:
                stage = runs[name] if runs else 0
                key = (stage, i) if contraction else stage
            wanted = demand.setdefault(producer, {})
            for index_map, n in at.items():
                need = n * factor if factor is not None else _operand_demand(group, g.ops[name], position, n)
                if token is not None:
                    index_map = maps.setdefault((token, index_map), len(maps) + 1)
                if need > wanted.get((key, index_map), 0):
                    wanted[key, index_map] = need
    return executions


def _execution_facts(g) -> tuple[tuple, ...]:
    """Per op index, what :func:`_executions` reads of it (computed once per graph):
    its result's element count, whether its result is computed once and kept (a
    reduction or contraction), whether it is a contraction, and per operand an op
    produces, (position, producer index, elements read per result element computed
    (``None`` for a contraction's, which depend on the group's tiling), and
    :func:`_index_token`)."""
    found = g.cache.get("execution_facts")
    if found is None:
        operands = _produced_operands(g)
        tokens: dict = {}
        found = g.cache["execution_facts"] = tuple(
            (op.out.numel, op.op_class in ("reduction", "contraction"), op.op_class == "contraction",
             tuple((position, producer, _demand_factor(g, op, position), _index_token(g, op, position, tokens))
                   for position, _, producer in operands[name]))
            for name, op in g.ops.items())
    return found


def _index_token(g, op, position: int, tokens: dict) -> int | None:
    """``None`` where ``op`` reads operand ``position`` at the index it computes its own
    element at (an elementwise op of the operand's shape, a reshape, a scan, a reduction
    or contraction: their reads are keyed apart already), else an int naming how it maps
    indices, equal for ops that read the operand at the same elements (an elementwise
    broadcast of the same shapes, a layout op of the same kind, attributes and
    operands), interned in ``tokens``."""
    operand = g.tensor(op.inputs[position])
    if op.op_class in ("reduction", "contraction", "scan") or op.kind == "reshape":
        return None
    if op.op_class == "elementwise":
        if operand.shape == op.out.shape:
            return None
        token = ("broadcast", operand.shape, op.out.shape)
    else:
        token = (op.kind, position, tuple(op.inputs), repr(sorted(op.attrs.items())))
    return tokens.setdefault(token, len(tokens))


def _produced_operands(g) -> dict[str, tuple[tuple[int, str, int], ...]]:
    """Op name -> (position, producer, producer's index) of each operand an op of
    ``g`` produces (computed once per graph: every candidate's pricing walks them)."""
    found = g.cache.get("produced_operands")
    if found is None:
        found = g.cache["produced_operands"] = {
            op.name: tuple((position, tensor, g.index[tensor]) for position, tensor in enumerate(op.inputs)
                           if isinstance(tensor, str) and g.producer(tensor) is not None)
            for op in g.ops.values()}
    return found


def _operand_demand(group: Group, op, position: int, executions: int) -> int:
    """Elements of operand ``position`` that ``executions`` result elements of ``op``
    read (see :func:`op_executions`)."""
    factor = _demand_factor(group.graph, op, position)
    if factor is None:
        return _contraction_reads(group, op, position, group.graph.tensor(op.inputs[position]).numel)
    return executions * factor


def _demand_factor(g, op, position: int) -> int | None:
    """Elements of operand ``position`` that one result element of ``op`` reads (see
    :func:`op_executions`); ``None`` for a contraction (:func:`_contraction_reads`)."""
    if op.op_class == "contraction":
        return None
    if op.op_class == "reduction":
        return g.tensor(op.inputs[position]).numel // max(op.out.numel, 1)
    if op.op_class == "window":
        return window_elements(op.attrs)
    return 1


def _contraction_reads(group: Group, op, position: int, numel: int) -> int:
    """Operand elements a contraction's kernel loads: A once per N tile and B once
    per M tile (as an implicit GEMM: a conv's A is its input windows), a bias once
    per output element; in an attention kernel, Q and the scores once, K and V once
    per query tile."""
    if group.kind == "attention":  # position 1 is K (first product) or V (second)
        return numel * attention_tiling(group).q_tiles if position == 1 else numel
    batch, m, n, k = gemm_dims(group.graph, op)
    if position == 0:
        return batch * m * k * -(-n // TILE_N)
    if position == 1:
        return batch * k * n * -(-m // TILE_M)
    return batch * m * n


def flops_once(graph, op) -> int:
    """FLOP to compute ``op``'s result once (the registry's count; computed once per
    op of the graph, since every candidate group holding the op prices it)."""
    counts = graph.cache.setdefault("flops_once", {})
    if op.name not in counts:
        operands = [graph.tensor(i) if isinstance(i, str) else i for i in op.inputs]
        counts[op.name] = op.spec.flops(operands, op.attrs, op.out)
    return counts[op.name]


#: Objectives under which a free prologue (:func:`free_prologues`) costs nothing.
FREE_PROLOGUE_OBJECTIVES = ("time", "traffic")


def free_prologues(graph) -> dict[int, int]:
    """Ops that a group holding all their readers takes in at no cost under the
    ``time`` and ``traffic`` objectives, as op index -> bitset of its readers,
    computed once per graph: an elementwise, broadcast or injective op of no FLOP
    (the transpose of a weight that only a matmul reads, which a GEMM does as it
    loads its B operand, as cuBLAS's ``transb``)
    whose operands are graph inputs that nothing else reads, whose result has
    elements and is no graph output, and whose readers each touch all of that
    result, no fewer bytes than the op touches of its operands.

    Taken into a group with its readers, such an op reads its operands where the
    group read its result (no more bytes), computes no FLOP, is not written and adds
    no launch, so the group's time and traffic stay the same or fall. Left out, it
    shares a tensor with no op outside that group, so it is a kernel of its own.
    (Under ``energy`` the on-chip bytes it moves count, so this does not hold there.)
    """
    found = graph.cache.get("free_prologues")
    if found is None:
        found = graph.cache["free_prologues"] = {
            i: graph.readers_of[i] for i, op in enumerate(graph.ops.values()) if _free_prologue(graph, i, op)}
    return found


def _free_prologue(g, i: int, op) -> bool:
    if (op.is_view or op.op_class not in PROLOGUE_CLASSES or flops_once(g, op) or g.writes_out[i] or not op.out.numel
            or not g.readers_of[i]):
        return False  # (a custom op or a gather of no FLOP never fuses: no group takes it in)
    touched = 0
    for base in g.storage_reads[op.name]:
        if g.producer(base) is not None or g.storage_readers[base] != 1 << i:
            return False
        touched += min(g.tensor(base).nbytes, g.touched_bytes(op.name, base))
    size = op.out.nbytes
    return touched <= size and all(g.touched_bytes(r, op.name) >= size for r in g.names(g.readers_of[i]))


def movable_copies(graph) -> dict[int, tuple[int, int]]:
    """Ops that only copy values from one storage for one reader, as op index ->
    (bitset of that reader, bitset of the storage's producer, 0 for a graph input),
    computed once per graph: an elementwise, broadcast or injective op of no FLOP
    (a transpose, a slice, a cast, a pad) that reads one storage, touching no more
    bytes of it than its result holds, whose result has elements and is no graph
    output, and is read by one op that touches all of it and may fuse (no
    gather, scan or custom op); no free or input prologue (:func:`free_prologues`,
    :func:`input_prologues`).

    Under the ``time`` and ``traffic`` objectives, taken out of a group that holds
    neither its reader nor its operand's producer, such an op leaves the group
    legal and no costlier (``docs/strategies.md``, *Movable copies*), and taken into
    its reader's group it reads its operand where that group read its result, no
    more bytes; the enumeration checks the latter for every candidate that holds
    the reader (``strategies.candidates``)."""
    found = graph.cache.get("movable_copies")
    if found is None:
        free, prologues = free_prologues(graph), input_prologues(graph)
        found = graph.cache["movable_copies"] = {
            i: move for i, op in enumerate(graph.ops.values())
            if i not in free and not prologues >> i & 1 and (move := _movable_copy(graph, i, op)) is not None}
    return found


def _movable_copy(g, i: int, op) -> tuple[int, int] | None:
    if (op.is_view or op.op_class not in PROLOGUE_CLASSES or flops_once(g, op) or g.writes_out[i]
            or not op.out.numel):
        return None
    readers, bases = g.readers_of[i], list(g.storage_reads[op.name])
    if readers.bit_count() != 1 or len(bases) != 1:
        return None
    reader, size = g.order[readers.bit_length() - 1], op.out.nbytes
    if g.ops[reader].op_class in ALONE_CLASSES:  # it could not take the copy in
        return None
    if g.touched_bytes(op.name, bases[0]) > size or g.touched_bytes(reader, op.name) < size:
        return None
    producer = g.index.get(bases[0])
    return readers, 0 if producer is None else 1 << producer


#: Op classes an input prologue (:func:`input_prologues`) may have: those a group of any
#: kind takes in as elementwise or layout work on an operand.
PROLOGUE_CLASSES = ("elementwise", "broadcast", "injective")


def input_prologues(graph) -> int:
    """Bitset of the ops computed from graph inputs that nothing else reads (a batch
    norm's ``rsqrt(var + eps)`` of its parameters, a weight's transpose or cast),
    computed once per graph: an elementwise, broadcast or injective op whose result
    has elements and is no graph output but has readers, and each of whose operand
    storages is a graph input it alone reads, or the result of another such op.

    A group of such ops reads only inputs no other group reads, so it shares a
    tensor only with the groups of its readers and its own producers: a plan that
    keeps them out of their readers' group launches one kernel for them at least.
    :func:`prologue_excess` bounds what taking them in costs instead."""
    found = graph.cache.get("input_prologues")
    if found is None:
        found = 0
        g = graph
        for i, name in enumerate(g.order):
            op = g.ops[name]
            if op.is_view or op.op_class not in PROLOGUE_CLASSES or g.writes_out[i] or not op.out.numel \
                    or not g.readers_of[i]:
                continue
            if all(found >> g.index[base] & 1 if base in g.ops else g.storage_readers[base] == 1 << i
                   for base in g.storage_reads[name]):
                found |= 1 << i
        graph.cache["input_prologues"] = found
    return found


def prologue_excess(group: Group, prologue: int, hw: Hardware, kind: str,
                    flops: dict[str, tuple[tuple[str, bool], int]] | None = None) -> int:
    """An upper bound, in :func:`objective` units, on what the input prologues
    ``prologue`` (a bitset of :func:`input_prologues` among the group's members,
    closed under their producers, whose readers are all members) add to the
    objective of the group without them: ``objective(group) - objective(rest) <=``
    this, for ``kind`` ``time`` or ``traffic``. ``flops`` is the group's
    :func:`unit_flops`, when the caller has them.

    Taking them in changes only what the group reads and computes: it reads their
    input storages (at most the bytes they touch of each) where it read their
    results (at least the bytes its other readers touch of each), writes the same
    values (nothing outside reads a prologue, and a prologue reads no member), and
    computes their FLOP on top of the rest's, which their executions do not change
    (an op's count follows its in-group readers and writes: ``op_executions``). As
    ``max(a + x, b + y) <= max(a, b) + max(x, y)`` and a ceiling of a sum is at most
    the sum of the ceilings, the larger of the two differences bounds the change.
    That needs both groups to launch alike: an empty group (``Group.empty``) and the
    rest, which writes the same values, cost nothing; a group that writes nothing
    is priced with and without them."""
    if group.empty:
        return 0
    if not group.writes:  # the rest may be empty, and launch nothing
        rest = Group(group.graph, group.graph.convex_hull(group.mask & ~prologue))
        return objective(group, hw, kind) - objective(rest, hw, kind)
    added = _prologue_bytes(group.graph, prologue)
    memory = added * hw.launch_bytes.denominator
    if kind == "traffic":
        return memory
    if flops is None:
        flops = unit_flops(group)
    order = group.graph.order
    per_unit: dict[tuple[str, bool], int] = {}
    for i in bits(prologue):
        unit, n = flops[order[i]]
        per_unit[unit] = per_unit.get(unit, 0) + n
    return max(memory, math.ceil(sum(n * hw.flop_units(*unit) for unit, n in per_unit.items())))


def _prologue_bytes(g, prologue: int) -> int:
    """Bytes the input prologues ``prologue`` touch of their inputs, less the bytes
    their other readers touch of their results (each storage at most whole), as
    :func:`prologue_excess` counts them; memoised per graph (those readers are all
    of the prologues' but themselves, whatever group holds them)."""
    memo = g.cache.setdefault("prologue_bytes", {})
    found = memo.get(prologue)
    if found is None:
        inputs: dict[str, int] = {}
        taken = 0
        for i in bits(prologue):
            name = g.order[i]
            for base in g.storage_reads[name]:
                if base not in g.ops:
                    inputs[base] = inputs.get(base, 0) + g.touched_bytes(name, base)
            others = g.readers_of[i] & ~prologue
            if others:
                taken += min(g.tensor(name).nbytes, sum(g.touched_bytes(r, name) for r in g.names(others)))
        found = memo[prologue] = sum(min(g.tensor(b).nbytes, n) for b, n in inputs.items()) - taken
    return found


def unit_flops(group: Group) -> dict[str, tuple[tuple[str, bool], int]]:
    """Compute op name -> (:func:`flop_unit`, :func:`op_flops`' FLOP) of the group."""
    return {name: (unit, flops) for name, unit, flops in _scaled_flops(group)}


def op_flops(group: Group) -> dict[str, int]:
    """FLOP per compute op of the group: the registry's count for one result, scaled
    to the elements the kernel computes (:func:`op_executions`), rounded up."""
    return {name: flops for name, _, flops in _scaled_flops(group)}


def _scaled_flops(group: Group):
    """(name, :func:`flop_unit`, :func:`op_flops`' FLOP) per compute op of the group."""
    executions = op_executions(group)
    facts = _flop_facts(group.graph)
    for op in group.compute:
        once, numel, unit = facts[op.name]
        yield op.name, unit, -(-once * executions[op.name] // numel) if numel else 0


def _flop_facts(g) -> dict[str, tuple[int, int, tuple[str, bool]]]:
    """Op name -> (:func:`flops_once`, result elements, :func:`flop_unit`) of each
    compute op (computed once per graph: every candidate's pricing reads them)."""
    found = g.cache.get("flop_facts")
    if found is None:
        found = g.cache["flop_facts"] = {op.name: (flops_once(g, op), op.out.numel, flop_unit(op))
                                         for op in g.ops.values() if not op.is_view}
    return found


def flop_unit(op) -> tuple[str, bool]:
    """(dtype, on tensor cores) of the unit ``op``'s arithmetic runs on: contractions
    on tensor cores at their operand dtype; other math in float32 (float64 stays)."""
    contraction = op.op_class == "contraction"
    return (op.promoted if contraction else compute_dtype(op.promoted)), contraction


def op_compute_seconds(group: Group, hw: Hardware) -> dict[str, float]:
    """Seconds each compute op of the group needs at the peak FLOP rate of its unit,
    recomputation included (:func:`op_flops` over ``hw.peak_flops``)."""
    return {name: flops / hw.peak_flops(*flop_unit(group.graph.ops[name]))
            for name, flops in op_flops(group).items()}


def recomputed_flops(graph, flops: dict[str, int]) -> int:
    """FLOP beyond computing each op's result once, op by op, of ``flops`` (op name ->
    FLOP it computes, over one group or a whole plan): an op computed for fewer
    elements than its result (a slice of it is all any reader needs) recomputes
    nothing, and offsets no other op's recomputation."""
    return sum(max(0, n - flops_once(graph, graph.ops[name])) for name, n in flops.items())


def group_cost(group: Group, hw: Hardware, max_ops: int = DEFAULT_MAX_OPS) -> GroupCost:
    """The modelled cost and budgets of ``group`` on ``hw`` (no legality check).

    Modelled time is the launch overhead plus the larger of the bytes moved over
    HBM bandwidth and the FLOP (recomputation included) over the peak of the unit
    each op runs on; traffic time leaves the FLOP out (``docs/cost-model.md``).

    Parameters
    ----------
    group : Group
        A fusion group (:meth:`Group.of`).
    hw : Hardware
        Bandwidth (bytes/s), launch overhead (s), peak FLOP/s, energies per byte
        and per FLOP (pJ) and the budgets' limits.
    max_ops : int
        The op cap reported among the budgets.

    Returns
    -------
    GroupCost
        Bytes read and written, launches, FLOP, ``modeled_time_us``,
        ``traffic_time_us`` and ``compute_time_us`` (microseconds, modelled),
        ``energy_uj`` (microjoules, modelled), the :class:`Budgets` estimates and
        limits, the attention tiling for an attention group, and the group itself.

    Examples
    --------
    >>> from partitioner import load_graph, load_hardware
    >>> from partitioner.group import Group
    >>> g = load_graph("graphs/mlp_gelu_f16.yaml")
    >>> c = group_cost(Group.of(g, ["h:weight_t", "h:matmul", "h", "a"]), load_hardware("h100"))
    >>> c.kind, c.bytes_read, c.bytes_written, c.flops, c.recomputed_flops
    ('contraction', 25174016, 67108864, 68786585600, 0)
    >>> round(c.traffic_time_us, 2), round(c.compute_time_us, 2), round(c.modeled_time_us, 2)
    (28.55, 70.45, 71.45)
    >>> c.budgets.shared_memory, c.budgets.shared_memory_limit
    (61440, 232448)
    """
    moved = group.bytes_read + group.bytes_written
    flops = op_flops(group)
    launch_s = group.launches * hw.launch_overhead
    return GroupCost(
        ops=group.ops,
        kind=group.kind,
        bytes_read=group.bytes_read,
        bytes_written=group.bytes_written,
        launches=group.launches,
        flops=sum(flops.values()),
        recomputed_flops=recomputed_flops(group.graph, flops),
        modeled_time_us=display_value(objective(group, hw, "time"), hw, "time"),
        traffic_time_us=(launch_s + moved / hw.bandwidth) * 1e6,
        compute_time_us=sum(op_compute_seconds(group, hw).values()) * 1e6,
        energy_uj=display_value(objective(group, hw, "energy"), hw, "energy"),
        budgets=budgets(group, hw, max_ops),
        tiling=attention_tiling(group) if group.kind == "attention" else None,
        group=group,
        op_flops=flops,
    )


def on_chip_bytes(group: Group) -> int:
    """Bytes the group's ops read from registers or shared memory: every operand
    element an op reads (:func:`op_executions`' demands), at its dtype's size, less
    what the group reads from global memory (counted as HBM bytes)."""
    g = group.graph
    executions = op_executions(group)
    total = 0
    for op in group.compute:
        for position, tensor in enumerate(op.inputs):
            if isinstance(tensor, str):
                t = g.tensor(tensor)
                total += _operand_demand(group, op, position, executions[op.name]) * itemsize(t.dtype)
    return max(0, total - group.bytes_read)


def display_value(units: float, hw: Hardware, kind: str) -> float:
    """An :func:`objective` value (or a sum or bound of them) in its display unit:
    microseconds for ``time`` and ``traffic``, microjoules for ``energy``."""
    return units * 1e-9 if kind == "energy" else units / hw.time_units_per_s * 1e6


#: The display unit of each objective.
UNITS = {"time": "us", "traffic": "us", "energy": "uJ"}


def objective(group: Group, hw: Hardware, kind: str = "time") -> int:
    """Exact integer objective of a group, for the ILP.

    ``time`` and ``traffic`` are in units of ``1 / hw.time_units_per_s`` seconds
    (the time one byte takes over HBM, or a fraction of it): launches times the
    launch overhead, plus the bytes (``traffic``) or the larger of the bytes and the
    FLOP at peak (``time``). The FLOP term is the one rational part: it is rounded up
    to a whole unit per group, so the optimum is exact over costs within one unit
    (under a femtosecond on the built-in profiles) of the real-valued ones.
    ``energy`` is in femtojoules: HBM bytes, on-chip bytes and FLOP at the
    profile's energies (exact: each is a whole number of femtojoules).

    Raises
    ------
    ValueError
        An unknown ``kind``.
    """
    if kind == "energy":
        flop_energy = sum(flops * hw.flop_energy_fj(*unit) for unit, flops in _flops_per_unit(group).items())
        return ((group.bytes_read + group.bytes_written) * hw.hbm_energy_fj
                + on_chip_bytes(group) * hw.sram_energy_fj + flop_energy)
    launch = hw.launch_bytes
    memory = (group.bytes_read + group.bytes_written) * launch.denominator
    if kind == "traffic":
        return group.launches * launch.numerator + memory
    if kind != "time":
        raise ValueError(f"unknown objective {kind!r} (known: {', '.join(OBJECTIVES)})")
    # the FLOP at each unit's peak, summed over a common denominator: whole numbers only
    rates = [(flops, hw.flop_units(*unit)) for unit, flops in _flops_per_unit(group).items()]
    common = math.lcm(*[rate.denominator for _, rate in rates])
    compute = sum([flops * rate.numerator * (common // rate.denominator) for flops, rate in rates])
    return group.launches * launch.numerator + max(memory, -(-compute // common))


def _flops_per_unit(group: Group) -> dict[tuple[str, bool], int]:
    """The group's FLOP (:func:`op_flops`) summed per unit (:func:`flop_unit`): the
    objective prices each unit once, not each op."""
    per_unit: dict[tuple[str, bool], int] = {}
    for _, unit, flops in _scaled_flops(group):
        per_unit[unit] = per_unit.get(unit, 0) + flops
    return per_unit


# ---------------------------------------------------------------- budgets


def budgets(group: Group, hw: Hardware, max_ops: int = DEFAULT_MAX_OPS, registers_used: int | None = None) -> Budgets:
    """Estimated shared memory, registers (``registers_used``, when given, in place of
    :func:`registers`), parameter bytes and op count of ``group``."""
    return Budgets(
        shared_memory=shared_memory(group),
        registers=registers(group) if registers_used is None else registers_used,
        kernel_params=PARAM_BYTES_PER_TENSOR * (len(group.reads) + len(group.writes)),
        ops=len(group.compute),
        shared_memory_limit=hw.smem_per_block_optin_bytes,
        registers_limit=hw.registers_per_thread,
        kernel_params_limit=hw.kernel_param_bytes,
        ops_limit=max_ops,
    )


def budget_overruns(group: Group, hw: Hardware, max_ops: int = DEFAULT_MAX_OPS) -> list[tuple[str, int, int]]:
    """(budget, used, limit) for every budget of :func:`budgets` the group exceeds.
    The register estimate is computed only when a bound on it is over the limit:
    every value the group uses live at once, two registers each (``legality`` asks
    this of every candidate group; the walk of :func:`_peak_live_values` costs more
    than the rest of the budgets)."""
    bound = _registers(group, 2 * (len(group.compute) + len(group.reads)))
    found = budgets(group, hw, max_ops, bound if bound <= hw.registers_per_thread else None)
    return found.over()


def row_length(group: Group) -> int:
    """Elements per reduced row of a reduction group (of its first reduction)."""
    op = next(op for op in group.compute if op.op_class == "reduction")
    shape, axes = group.graph.reduction_signature(op.name)
    return math.prod(shape[a] for a in axes)


@dataclass(frozen=True)
class SmemRegion:
    """One region of a reduction kernel's shared memory (offsets and sizes in bytes).

    ``role`` is ``"row"`` (the rows of storage ``name`` the block processes, kept
    for a later stage), ``"partial"`` (a partial per warp and the result of
    reduction ``name``) or ``"index"`` (the same for the index of an argmax/argmin).
    """

    name: str
    role: str
    dtype: str
    offset: int
    bytes: int


def reduction_smem(group: Group) -> list[SmemRegion]:
    """The shared-memory layout of a reduction group's kernel, one source for its budget
    and for ``templates/row_reduction.cu.j2``: first each storage read in two different
    stages (``Group.stages``: before and after a reduction it feeds) and laid out like
    the reduction input, one row per row the block processes; then, when a whole block
    shares a row, a partial per warp and a result slot per reduction (and an int64
    index for argmax/argmin). A value read in two stages in another layout is re-read
    or recomputed instead. Each region starts 16-byte aligned."""
    g = group.graph
    first = next(op for op in group.compute if op.op_class == "reduction")
    row_shape = g.reduction_signature(first.name)[0]
    row = row_length(group)
    rows = rows_per_block(row)
    stages_used: dict[str, set[int]] = {}
    for op in group.compute:
        for base in g.storage_reads[op.name]:
            stages_used.setdefault(base, set()).add(group.run_stage(op))
    regions: list[SmemRegion] = []

    def add(name: str, role: str, dtype: str, count: int) -> None:
        offset = regions[-1].offset + regions[-1].bytes if regions else 0
        regions.append(SmemRegion(name, role, dtype, offset, align16(count * itemsize(dtype))))

    for base, stages in stages_used.items():
        if len(stages) > 1 and g.tensor(base).shape == row_shape:
            add(base, "row", g.tensor(base).dtype, rows * row)
    if rows == 1:
        slots = REDUCTION_THREADS // WARP + 1  # a partial per warp, and the result
        for op in group.compute:
            if op.op_class == "reduction":
                add(op.name, "partial", shuffle_dtype(op, g.tensor(op.tensor_inputs[0]).dtype), slots)
                if op.kind in ("argmax", "argmin"):
                    add(op.name, "index", "int64", slots)
    return regions


def shuffle_dtype(op, in_dtype: str) -> str:
    """The dtype reduction ``op`` of ``in_dtype`` values accumulates in inside the
    kernel: its accumulator (``dtypes.reduction_accumulator``), widened to 32 bits
    where it is narrower, since warp shuffles move 32-bit words."""
    acc = reduction_accumulator(op.kind, in_dtype)
    return "int32" if itemsize(acc) < 4 else acc  # bool and 8- and 16-bit integers: every value fits


def align16(n: int) -> int:
    """``n`` rounded up to 16 bytes: each shared-memory region starts 16-byte aligned."""
    return (n + 15) // 16 * 16


def rows_per_block(row: int) -> int:
    """Rows one reduction block processes at once: one warp per row for short rows."""
    return ROWS_PER_WARP_BLOCK if row <= SHORT_ROW else 1


def contraction_dims(group: Group) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of the group's contraction as a GEMM (implicit GEMM for conv2d);
    for a horizontal group (``horizontal.py``), its siblings' N added up: the GEMM
    its kernel computes, their weights side by side."""
    dims = [gemm_dims(group.graph, op) for op in group.compute if op.op_class == "contraction"]
    batch, m, _, k = dims[0]
    return batch, m, sum(d[2] for d in dims), k


def gemm_dims(graph, op) -> tuple[int, int, int, int]:
    """(batch, M, N, K) of contraction ``op`` as a GEMM (implicit GEMM for conv2d);
    memoised per graph, since every candidate holding ``op`` is priced with it."""
    memo = graph.cache.setdefault("gemm_dims", {})
    if op.name not in memo:
        memo[op.name] = _gemm_dims(graph, op)
    return memo[op.name]


def _gemm_dims(graph, op) -> tuple[int, int, int, int]:
    shapes = [graph.tensor(t).shape for t in op.inputs[:2]]
    if op.kind == "matmul":
        batch, m, k, n, _ = matmul_shapes(shapes[0], shapes[1])
        return math.prod(batch), m, n, k
    n_, _, ho, wo = conv2d_output(shapes[0], shapes[1], op.attrs)
    o, ci, kh, kw = shapes[1]
    return op.attrs["groups"], n_ * ho * wo, o // op.attrs["groups"], ci * kh * kw


def _operand_bytes(group: Group) -> int:
    """Bytes per operand element in the contraction's shared-memory tiles: the storage of
    a half type (tensor cores), the register of the others (an 8-bit float's is float32)."""
    op = next(op for op in group.compute if op.op_class == "contraction")
    return itemsize(op.promoted if op.promoted in HALFS else compute_dtype(op.promoted))


def tile_row_strides(group: Group) -> tuple[int, int]:
    """Elements from one row of the contraction's shared-memory operand tiles to the
    next: (A, B), rows of ``TILE_K`` and ``TILE_N`` elements and their padding."""
    op = next(op for op in group.compute if op.op_class == "contraction")
    if op.promoted in HALFS:
        return TILE_K + TILE_PAD_TENSOR_CORES, TILE_N + TILE_PAD_TENSOR_CORES
    return TILE_K + TILE_PAD_CUDA_CORES, TILE_N + TILE_PAD_CUDA_CORES


def tile_stages(group: Group) -> int:
    """Shared-memory stages of the contraction's operand tiles: ``TILE_STAGES_TENSOR_CORES``
    on tensor cores (a cp.async pipeline), ``TILE_STAGES_CUDA_CORES`` otherwise."""
    op = next(op for op in group.compute if op.op_class == "contraction")
    return TILE_STAGES_TENSOR_CORES if op.promoted in HALFS else TILE_STAGES_CUDA_CORES


def tile_elements(group: Group) -> tuple[int, int]:
    """Elements of shared memory per stage for the contraction's (A, B) operand tiles.
    On CUDA cores the tiles are row-major (``tile_row_strides``). On tensor cores each
    tile is consecutive along the axis its operand is consecutive in memory, so it is
    row-major or column-major (a transposed weight: ``TILE_N`` rows of ``TILE_K + p``),
    and its region holds the larger of the two."""
    a_stride, b_stride = tile_row_strides(group)
    a, b = TILE_M * a_stride, TILE_K * b_stride
    op = next(op for op in group.compute if op.op_class == "contraction")
    if op.promoted in HALFS:
        a = max(a, TILE_K * (TILE_M + TILE_PAD_TENSOR_CORES))
        b = max(b, TILE_N * (TILE_K + TILE_PAD_TENSOR_CORES))
    return a, b


#: Global memory moves in 32-byte sectors (CUDA C++ Programming Guide, *Device Memory
#: Accesses*; Nsight Compute counts requests in them): a warp's request is fully
#: efficient when it covers whole aligned sectors.
SECTOR_BYTES = 32
#: Most shared memory, in bytes, a conv's staged input rows (:class:`ConvRows`) may take;
#: a conv that would need more gathers its A tile from global memory directly. With the
#: 60 KiB of half-precision operand tiles (three stages), 48 KiB keeps two blocks per SM
#: in the H100's 228 KiB, each block also taking the 1 KiB the driver reserves (NVIDIA,
#: *Hopper Tuning Guide*: 2 x 109 KiB), as many as its registers allow (128 per thread x
#: 256 threads of 65,536 per SM: CUDA C++ Programming Guide, compute capability 9.0).
CONV_ROWS_MAX_BYTES = 48 * 1024


@dataclass(frozen=True)
class ConvRows:
    """The input rows an NCHW conv's A tile reads, staged in shared memory in memory order.

    The tile is ``TILE_M`` output pixels by ``TILE_K`` columns (channel, tap row, tap
    column) of the implicit GEMM. A *run* is what one output row of the tile reads of
    one input row (image, channel, h) through one tap row: at most ``rows`` output rows
    by ``taps`` (channel, tap row) pairs per tile. Each run is loaded from the aligned
    address at or below its first element to the aligned end at or above its last
    (``align`` elements: one sector of the narrowest dtype read at the input's
    addresses), at most ``slots`` elements, so that every warp request covers whole
    sectors whatever the stride, padding or width; the tile is then gathered from shared
    memory. A 1x1 conv of stride 1 without padding is staged as if each image were one
    row of ``height * width`` pixels (the fields are then of that view).

    Fields, in elements: the input's ``channels``, ``height`` and ``width``, the output's
    ``out_height`` and ``out_width``, the window ``kh`` x ``kw``, the strides ``sh``, ``sw``,
    the dilations ``dh``, ``dw`` and the top and left pads ``pt``, ``pl``; ``groups_k``
    is the channels of one group (C / groups), ``numel`` the input's elements.
    """

    channels: int
    height: int
    width: int
    out_height: int
    out_width: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    groups_k: int
    numel: int
    rows: int
    taps: int
    slots: int
    align: int

    @property
    def elements(self) -> int:
        """Elements of the staging buffer: ``rows * taps`` runs of ``slots``."""
        return self.rows * self.taps * self.slots


def _conv(group: Group):
    """The group's conv2d, or None: its first contraction, which stands for its horizontal
    siblings too where they agree (``partitioner.horizontal``: one input through one
    window, so one A operand and one K; their weights and output channels differ)."""
    op = next((op for op in group.compute if op.op_class == "contraction"), None)
    return op if op is not None and op.kind == "conv2d" else None


def _spans(extent: int, tile: int) -> int:
    """Most distinct values of ``i // extent`` over ``tile`` consecutive ``i``."""
    return (extent - 1 + tile - 1) // extent + 1


def conv_rows(group: Group) -> ConvRows | None:
    """The staged input rows of the group's conv (:class:`ConvRows`), or None: not a
    conv, its A tile already read along whole aligned sectors (a 1x1 conv of stride 1
    without padding whose images are a whole number of sectors), or more staging than
    :data:`CONV_ROWS_MAX_BYTES`."""
    op = _conv(group)
    if op is None:
        return None
    g = group.graph
    x, w = g.tensor(op.inputs[0]), g.tensor(op.inputs[1])
    _, c, height, width = x.shape
    _, cg, kh, kw = w.shape
    _, _, ho, wo = conv2d_output(x.shape, w.shape, op.attrs)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = op.attrs["strides"], op.attrs["dilations"], op.attrs["pads"]
    align = _sector_elements(group, x.shape, x.dtype)
    if (kh, kw, sh, sw, pt, pl, pb, pr) == (1, 1, 1, 1, 0, 0, 0, 0):
        if height * width % align == 0:
            return None
        height, width, ho, wo = 1, height * width, 1, ho * wo  # each image one row
    cols = min(width, (min(wo, TILE_M) - 1) * sw + (kw - 1) * dw + 1)
    rows = ConvRows(c, height, width, ho, wo, kh, kw, sh, sw, dh, dw, pt, pl, cg, x.numel,
                    rows=_spans(wo, TILE_M), taps=_spans(kw, TILE_K),
                    slots=(cols + 2 * align - 2) // align * align, align=align)
    return rows if rows.elements * _operand_bytes(group) <= CONV_ROWS_MAX_BYTES else None


@dataclass(frozen=True)
class WeightRows:
    """A conv weight's B tile, staged in shared memory as rows: B(k, n) = w[n, k], each
    output channel's ``k`` taps consecutive. When ``k`` is not a whole number of sectors
    (``align`` elements: the stem's 3 x 7 x 7 = 147), each channel's ``TILE_K`` taps start
    at an unaligned address; so each is loaded from the aligned address at or below its
    first to the aligned end at or above its last, at most ``slots`` elements per channel,
    and the tile is gathered from them."""

    k: int
    numel: int
    align: int
    slots: int

    @property
    def elements(self) -> int:
        """Elements of the staging buffer: ``TILE_N`` channels of ``slots``."""
        return TILE_N * self.slots


def conv_weight_rows(group: Group, op=None) -> WeightRows | None:
    """The staged weight rows (:class:`WeightRows`) of the group's conv ``op`` (by
    default its first: horizontal siblings share K but not their weights, whose output
    channels, so ``numel``, differ), or None: not a conv, or its rows a whole number of
    sectors."""
    op = op or _conv(group)
    if op is None or op.kind != "conv2d":
        return None
    g = group.graph
    w = g.tensor(op.inputs[1])
    if not w.numel:  # no output channel (or none in): no row to stage
        return None
    k = w.numel // w.shape[0]
    align = _sector_elements(group, w.shape, w.dtype)
    if k % align == 0:
        return None
    return WeightRows(k, w.numel, align, (TILE_K + 2 * align - 2) // align * align)


def sector_elements(dtypes) -> int:
    """Elements of the narrowest of ``dtypes`` in one :data:`SECTOR_BYTES` sector: the
    alignment at which runs of elements of all of them start on sectors."""
    return max(1, SECTOR_BYTES // min(itemsize(d) for d in dtypes))


def _sector_elements(group: Group, shape: tuple[int, ...], dtype: str, tensors: tuple[str, ...] = ()) -> int:
    """:func:`sector_elements` of ``dtype``, ``tensors`` and the tensors of ``shape`` the
    group reads (a prologue or an epilogue reads them at the same addresses)."""
    g = group.graph
    touched = list(tensors) + [t for t in group.reads if g.tensor(t).shape == shape]
    return sector_elements([dtype] + [g.tensor(t).dtype for t in touched])


#: Most shared memory, in bytes, a conv's staged output tile (:class:`ConvOutRuns`) may
#: take: a float tile of ``TILE_M x TILE_N`` and its padding (a float64 one stores as before).
CONV_OUT_MAX_BYTES = 72 * 1024
#: Floats of padding per staged output column: columns 132 floats apart put the four
#: columns a quad of lanes stores from the mma.sync accumulator layout (2 apart) 8 banks
#: apart, so a warp's 32 stores meet no bank conflict.
CONV_OUT_PAD = 4


@dataclass(frozen=True)
class ConvOutRuns:
    """An NCHW conv's output tile, staged in shared memory and stored in memory order.

    When an image's ``pixels`` (Ho * Wo) are not a whole number of sectors, the pixel
    runs of consecutive channels start at unaligned addresses, and lanes at 16
    consecutive pixels straddle sectors. So the accumulators are staged (column n
    ``ld`` elements of ``dtype`` apart), and each run (image, channel: at most
    ``segments`` images per tile, by ``TILE_N`` channels) is stored from the aligned
    address at or below its first pixel, ``slots`` lanes per run (a whole number of
    warps, so that no request mixes two runs), ``align`` elements per sector.
    """

    pixels: int
    channels: int
    segments: int
    slots: int
    align: int
    ld: int
    dtype: str

    @property
    def bytes(self) -> int:
        """Shared memory of the staged tile."""
        return TILE_N * self.ld * itemsize(self.dtype)


def conv_out_runs(group: Group) -> ConvOutRuns | None:
    """The staged output tile of the group's conv (:class:`ConvOutRuns`), or None: not a
    conv, its images a whole number of sectors of every tensor it writes, or a tile of
    more than :data:`CONV_OUT_MAX_BYTES`."""
    op = _conv(group)
    if op is None:
        return None
    _, channels, ho, wo = op.out.shape
    align = _sector_elements(group, op.out.shape, op.out.dtype, group.writes)
    pixels = ho * wo
    if pixels % align == 0:
        return None
    span = (min(pixels, TILE_M) + 2 * align - 2) // align * align
    runs = ConvOutRuns(pixels, channels, _spans(pixels, TILE_M), -(-span // WARP) * WARP, align,
                       TILE_M + CONV_OUT_PAD, product_accumulator(op.promoted))
    return runs if runs.bytes <= CONV_OUT_MAX_BYTES else None


#: Output elements a staged pooling tile (:class:`WindowRows`) aims at: two per thread.
WINDOW_TILE_OUTPUTS = 512
#: Most shared memory, in bytes, a pool's staged input rows may take: a pointwise kernel
#: declares its shared memory statically, at most 48 KiB per block without the opt-in
#: (CUDA C++ Programming Guide, compute capability tables; ``smem_per_block_default_bytes``).
WINDOW_ROWS_MAX_BYTES = 48 * 1024


@dataclass(frozen=True)
class WindowRows:
    """The input rows a pool's tile of output rows reads, staged in shared memory.

    Lanes at consecutive outputs read a window's tap ``stride`` elements apart, from
    wherever the row starts: a 3 x 3 pool of stride 2 took 3 sectors per ideal one. So
    a pointwise group whose one window op (``window``) is the only reader of its input
    (``source``) takes tiles of ``out_rows`` output rows of one (image, channel) plane
    (``tiles_per_plane`` per plane), and stages the input rows they read (at most
    ``in_rows``: consecutive in memory) from the aligned address at or below the first
    element to the aligned end at or above the last, ``slots`` elements at most, ``align``
    per sector of the input's ``dtype``: every request whole sectors; the window then
    reads its taps there.
    """

    window: str
    source: str
    out_rows: int
    tiles_per_plane: int
    in_rows: int
    slots: int
    align: int
    dtype: str

    @property
    def bytes(self) -> int:
        """Shared memory of the staged rows."""
        return align16(self.slots * itemsize(self.dtype))


def _keeps_planes(group: Group, window: Op) -> bool:
    """Whether every op of ``group`` after ``window`` computes its element from the
    window's value at the same element (elementwise ops and reshapes, all at the
    window's shape, since every written value has it): so each output element needs
    the window over its own (image, channel) plane, the one a block stages. A slice,
    concat or transpose after the pool may read another plane (a reversed channel
    axis read the plane next to the staged one)."""
    g = group.graph
    after = g.descendants_mask[g.index[window.name]]
    return all(o.op_class == "elementwise" or o.kind == "reshape"
               for o in group.compute if after >> g.index[o.name] & 1)


def window_rows(group: Group) -> WindowRows | None:
    """The staged input rows of the group's pool (:class:`WindowRows`), or None: not a
    pointwise group of one window op, whose outputs are all of its shape and computed
    from it at their own elements (:func:`_keeps_planes`) and whose input nothing else
    in the group reads or writes; a group that stages a transpose; or more than
    :data:`WINDOW_ROWS_MAX_BYTES`."""
    if group.kind != "pointwise" or transposes_innermost_axis(group):
        return None
    windows = [op for op in group.compute if op.op_class == "window"]
    if len(windows) != 1:
        return None
    (op,) = windows
    g = group.graph
    x = g.tensor(op.inputs[0])
    readers = [name for name in group.ops if op.inputs[0] in g.ops[name].tensor_inputs]  # views too
    if readers != [op.name] or op.inputs[0] in group.writes or \
            any(g.tensor(w).shape != op.out.shape for w in group.writes) or not _keeps_planes(group, op):
        return None
    rows, cols = geometry(x.shape, op.attrs)
    align = sector_elements([x.dtype])
    for out_rows in dict.fromkeys((min(rows.out, -(-WINDOW_TILE_OUTPUTS // cols.out)), 1)):
        in_rows = min(rows.size, (out_rows - 1) * rows.stride + (rows.kernel - 1) * rows.dilation + 1)
        staged = WindowRows(op.name, op.inputs[0], out_rows, -(-rows.out // out_rows), in_rows,
                            (in_rows * cols.size + 2 * align - 2) // align * align, align, x.dtype)
        if staged.bytes <= WINDOW_ROWS_MAX_BYTES:
            return staged
    return None


def transposes_innermost_axis(group: Group) -> bool:
    """Whether a transpose of the group moves a tensor's innermost axis: the only
    pointwise groups whose kernel may stage a tile (:data:`TRANSPOSE_TILE`)."""
    for op in group.compute:
        rank = len(op.out.shape)
        if op.kind == "transpose" and rank and transpose_perm(rank, op.attrs.get("perm"))[-1] != rank - 1:
            return True
    return False


def transpose_tile_row(dtype: str) -> int:
    """Elements from one row of a transpose tile of ``dtype`` to the next: ``TRANSPOSE_TILE``
    and the padding that makes the row an odd number of 4-byte words (33 floats, 34
    halves, 36 bytes; 33 for 8-byte types, whose 32 lanes take two wavefronts anyway)."""
    return TRANSPOSE_TILE + max(1, 4 // itemsize(dtype))


def transpose_tile_bytes(group: Group) -> int:
    """Shared memory of a pointwise kernel's transpose tiles: one padded tile per
    written value (``TRANSPOSE_TILE`` rows of :func:`transpose_tile_row` elements)."""
    g = group.graph
    return sum(align16(TRANSPOSE_TILE * transpose_tile_row(dtype) * itemsize(dtype))
               for dtype in (g.tensor(w).dtype for w in group.writes))


def shared_memory(group: Group) -> int:
    """Bytes of shared memory per block the group's kernel needs (estimate; for a
    pointwise group that transposes its innermost axis, the tiles its kernel may
    stage, an upper bound; for one with a pool, its staged input rows)."""
    if group.kind == "pointwise":
        if transposes_innermost_axis(group):
            return transpose_tile_bytes(group)
        staged = window_rows(group)
        return staged.bytes if staged else 0
    if group.kind == "reduction":
        return sum(region.bytes for region in reduction_smem(group))
    if group.kind == "contraction":
        rows, out = conv_rows(group), conv_out_runs(group)
        # a block runs one product: the weight rows' buffer holds the largest sibling's
        weights = max((w.elements for w in (conv_weight_rows(group, op) for op in group.compute) if w), default=0)
        staged = (rows.elements if rows else 0) + weights
        operands = (sum(tile_elements(group)) * tile_stages(group) + staged) * _operand_bytes(group)
        return max(operands, out.bytes if out else 0)
    if group.kind == "attention":
        return attention_tiling(group).shared_memory
    return 0


def _words(dtype: str) -> int:
    return 2 if itemsize(compute_dtype(dtype)) == 8 else 1


def _peak_live_values(group: Group) -> int:
    """Registers for values alive at once, walking the group's ops in order: a value is
    live from its first use (an outside value) or its op (a member's) through its last
    use in the group (a member's value nothing in the group reads, at its op only)."""
    g = group.graph
    words, operands = _value_words(g)
    inside = group.mask & g.compute_mask
    members = bits(inside)
    last_use: dict[int, int] = {}
    for position, i in enumerate(members):
        for base in operands[i]:
            last_use[base] = position
    outside: set[int] = set()  # outside values already live
    ending: dict[int, list[int]] = {}  # position -> values whose last use it is
    total = peak = 0
    for position, i in enumerate(members):
        for base in operands[i]:
            if base not in outside and not inside >> base & 1:
                outside.add(base)
                total += words[base]
                ending.setdefault(last_use[base], []).append(base)
        total += words[i]
        ending.setdefault(max(position, last_use.get(i, -1)), []).append(i)
        if total > peak:
            peak = total
        for base in ending.pop(position, ()):
            total -= words[base]
    return peak


def _value_words(g) -> tuple[list[int], tuple[tuple[int, ...], ...]]:
    """(registers per value of each storage, each op's distinct operand storages in
    operand order), computed once per graph for :func:`_peak_live_values`. A storage
    is numbered by its op's index, a graph input after the ops."""
    found = g.cache.get("value_words")
    if found is None:
        number = {name: k for k, name in enumerate((*g.order, *g.inputs))}
        words = [_words(g.tensor(name).dtype) for name in number]
        operands = tuple(tuple(number[base] for base in dict.fromkeys(g.storage[t] for t in op.tensor_inputs))
                         for op in g.ops.values())
        found = g.cache["value_words"] = (words, operands)
    return found


def registers(group: Group) -> int:
    """32-bit registers per thread the group's kernel needs (estimate).

    ``16`` for indexing, ``2`` per tensor address, the peak number of live values
    (64-bit values count twice), and for a contraction its accumulator tile
    (``TILE_M*TILE_N/threads`` float32 values) plus one operand fragment pair. An
    attention warp holds 16 query rows: its output accumulator (``16·Dv/32`` float32
    per lane), two sets of scores of one key tile (the products and the values
    computed from them, ``2·16·BN/32``), one A and one B fragment (6 registers for
    half types, 12 for float32) and a running maximum, sum and rescale factor for
    each of its lane's two rows (6). (Checked against ptxas for sm_80 and sm_90 at
    head dims 32 to 256, float16 and float32, with masks, written probabilities and
    epilogues: up to head dim 128 the estimate is at or above ptxas' count; at 256
    ptxas takes registers up to the cap of two blocks per SM, 255, without spilling.)
    """
    return _registers(group, _peak_live_values(group))


def _registers(group: Group, live: int) -> int:
    """:func:`registers` with ``live`` registers of live values."""
    if group.kind == "view":
        return 0
    count = BASE_REGISTERS + 2 * (len(group.reads) + len(group.writes)) + live
    if group.kind == "contraction":
        count += TILE_M * TILE_N // CONTRACTION_THREADS + TILE_K
    elif group.kind == "attention":
        tiling = attention_tiling(group)
        count += (16 * tiling.dv_pad + 2 * 16 * tiling.block_n) // WARP + 6
        count += 12 if _operand_bytes(group) == 4 else 6
    return count
