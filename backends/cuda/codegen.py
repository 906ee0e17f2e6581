"""Code generation for fused kernels: the value of any tensor at any index, as C++.

A fused kernel never buffers a pointwise intermediate: it computes the value a
store needs at that store's index, walking back through the group's ops with
index arithmetic (broadcasting, transpose, reshape, slice, concat, pad). A
pooling op is a loop over its window that computes its input at every tap, and
``arange`` is a function of the index. The :class:`Emitter` does this walk and
writes the statements; each elementwise op's arithmetic comes from the
``op_expr`` macro of ``templates/_expr.j2``.

Numerics follow the NumPy reference exactly: every op computes in its compute
dtype (float32 for half types) and rounds its result to its own dtype right
away, so a fused chain produces bit-identical values to the unfused one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from partitioner import pooling
from partitioner.dtypes import FLOATS, HALFS, INTEGERS, cast_array, compute_dtype, numpy_dtype, promote
from partitioner.graph import Graph, Op
from partitioner.ops import TensorType, normalize_axis, slice_params, transpose_perm

REGISTER = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double",
            "int8": "int8_t", "int32": "int32_t", "int64": "int64_t", "bool": "bool",
            "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t", "uint32": "uint32_t",
            "uint64": "uint64_t", "float8_e4m3fn": "float", "float8_e5m2": "float"}
STORAGE = {**REGISTER, "float16": "__half", "bfloat16": "__nv_bfloat16", "float8_e4m3fn": "part_fp8e4m3",
           "float8_e5m2": "part_fp8e5m2"}
# 8-bit floats: the runtime header's rounding and storing functions, by dtype
_FP8 = {"float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2"}
_SUFFIX = {"int64": "LL", "uint32": "u", "uint64": "ULL"}
INT32_LIMIT = 2**31

Index = tuple[str, ...]


def storage_type(dtype: str) -> str:
    """C++ type of one element of ``dtype`` in global or shared memory."""
    return STORAGE[dtype]


def literal(value: float | int, dtype: str) -> str:
    """An exact C++ literal of ``value`` converted to ``dtype`` as NumPy converts it
    (float16 rounds to float16, a float to an integer truncates), in the register type."""
    ctype = REGISTER[dtype]
    value = cast_array(np.asarray(value), dtype).item() if not isinstance(value, bool) else value
    if dtype in FLOATS:
        v = float(value)
        if math.isnan(v):
            return "(__int_as_float(0x7fc00000))" if ctype == "float" else "(__longlong_as_double(0x7ff8000000000000LL))"
        if math.isinf(v):
            bits = ("0x7f800000", "0xff800000") if ctype == "float" else ("0x7ff0000000000000LL", "0xfff0000000000000LL")
            fn = "__int_as_float" if ctype == "float" else "__longlong_as_double"
            return f"({fn}({bits[v < 0]}))"
        return f"({float.hex(v)}{'f' if ctype == 'float' else ''})"
    if dtype == "bool":
        return "true" if value else "false"
    if dtype == "int64" and value == -2**63:  # 9223372036854775808LL does not fit long long
        return "((int64_t)(-9223372036854775807LL - 1))"
    return f"(({ctype}){int(value)}{_SUFFIX.get(dtype, '')})"


def convert(expr: str, src: str, dst: str) -> str:
    """``expr`` (register of dtype ``src``) converted to a register of dtype ``dst``,
    rounding exactly as NumPy's ``astype`` does."""
    if src == dst:
        return expr
    if dst == "bool":
        return f"((bool)({expr}))"
    if dst in _FP8:  # encoded from double: one rounding from a float or double value
        return f"part_round_{_FP8[dst]}((double)({expr}))"
    if dst in HALFS:
        if src == "float64":  # one rounding, not two through float
            return f"__half2float(__double2half({expr}))" if dst == "float16" else \
                f"__bfloat162float(__double2bfloat16({expr}))"
        if dst == "bfloat16" and src in INTEGERS:  # one rounding, not two through float32
            return f"part_round_bf16_int({expr})"
        rounder = "part_round_f16" if dst == "float16" else "part_round_bf16"
        return f"{rounder}((float)({expr}))"
    if dst in ("float32", "float64"):
        return f"(({REGISTER[dst]})({expr}))"
    if src in FLOATS:  # float -> integer
        return f"part_to_{dst}({expr})"
    return f"(({REGISTER[dst]})({expr}))"


def round_result(expr: str, dtype: str) -> str:
    """A computed float32 expression rounded to ``dtype`` if that is a half type."""
    if dtype == "float16":
        return f"part_round_f16({expr})"
    if dtype == "bfloat16":
        return f"part_round_bf16({expr})"
    if dtype in _FP8:
        return f"part_round_{_FP8[dtype]}((double)({expr}))"
    return expr


def strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def linear(shape: tuple[int, ...], idx: Index) -> str:
    """Row-major linear index expression of ``idx`` in ``shape``."""
    terms = []
    for stride, i, n in zip(strides(shape), idx, shape):
        if n == 1 or i == "0":
            continue
        terms.append(i if stride == 1 else f"{i} * {stride}")
    return " + ".join(terms) if terms else "0"


def delinearize(shape: tuple[int, ...], lin: str) -> Index:
    """Multi-index expressions of linear index ``lin`` in ``shape``."""
    out = []
    for k, (stride, n) in enumerate(zip(strides(shape), shape)):
        if n == 1:
            out.append("0")
            continue
        part = lin if stride == 1 else f"({lin}) / {stride}"
        out.append(part if k == 0 else f"({part}) % {n}")
    return tuple(out)


def broadcast_index(in_shape: tuple[int, ...], out_idx: Index) -> Index:
    """Index into an operand of ``in_shape`` broadcast (NumPy, right-aligned) to ``out_idx``."""
    offset = len(out_idx) - len(in_shape)
    return tuple("0" if n == 1 else out_idx[offset + d] for d, n in enumerate(in_shape))


#: Elements past a tensor's last that a kernel's index arithmetic may reach: a tile's
#: bounds (``m0 + 128``) and a staged run's aligned end (at most 48 KiB of 1-byte
#: elements past its start: ``cost.ConvRows``, ``cost.WindowRows``).
INDEX_HEADROOM = 2**16


def needs_int64(graph: Graph, tensors: list[str]) -> bool:
    """64-bit index arithmetic when any tensor the kernel touches (through any view of
    its storage) can reach 2^31 elements, less :data:`INDEX_HEADROOM`."""
    limit = INT32_LIMIT - INDEX_HEADROOM
    return any(graph.tensor(graph.storage[t]).numel >= limit or graph.tensor(t).numel >= limit for t in tensors)


@dataclass(frozen=True)
class Source:
    """Where a kernel finds a tensor's values.

    ``global``: memory at pointer ``name``. ``scalar``: a register ``name`` (one
    value per row). ``buffer``: ``name[position]`` (registers, or shared memory when
    ``shared``: its reads are counted as such) holding the value at index ``at``
    only; at any other index the value is loaded through ``pointer`` if given, and
    computed otherwise. ``tile``: shared memory ``name`` holding the tensor from linear
    index ``position`` (a variable) on, at every index its readers read.
    """

    kind: str
    name: str
    at: Index | None = None
    position: str = ""
    pointer: str = ""
    shared: bool = False


class Names:
    """Fresh C++ identifiers for one kernel.

    Every emitter writing into the same kernel draws from one ``Names``, so a
    generated name is never declared twice and never shadows another generated
    name in an enclosing scope (a declaration like ``const idx_t i1 = i1 * 4;``
    would read the new, uninitialised variable instead of the outer one).
    Generated names are a stem and a number; templates name their own variables
    without a number (``m``, ``n``, ``k``, ``bz``, ...), so the two cannot clash.
    """

    def __init__(self) -> None:
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"


class Emitter:
    """Writes C++ statements that compute tensor values at index expressions.

    ``sources`` says how to read tensors the kernel does not compute; any other
    tensor is computed from its op. Values are memoised per (tensor, index) within
    a block of statements. Emitters whose statements end up in one kernel must
    share ``names`` (see :class:`Names`).
    """

    def __init__(self, graph: Graph, sources: dict[str, Source], expr_macro, index_type: str,
                 names: Names | None = None):
        self.graph, self.sources, self.expr, self.index_type = graph, dict(sources), expr_macro, index_type
        self.names = names if names is not None else Names()
        self.lines: list[str] = []
        self.depth = 1
        self.memo: list[dict] = [{}]

    # ------------------------------------------------------------ statements

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def fresh(self, prefix: str = "v") -> str:
        return self.names.fresh(prefix)

    def declare(self, dtype: str, expr: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        self.emit(f"const {REGISTER[dtype]} {name} = {expr};")
        return name

    def index_var(self, expr: str) -> str:
        """A variable holding index expression ``expr`` (one per distinct expression
        in scope, so that values at equal indices are found in the memo)."""
        if expr.isidentifier() or expr.isdigit():
            return expr
        found = self._lookup(("index", expr))
        if found is not None:
            return found
        name = self.fresh("i")
        self.emit(f"const {self.index_type} {name} = {expr};")
        self.memo[-1][("index", expr)] = name
        return name

    def open(self, header: str) -> None:
        self.emit(header + " {")
        self.depth += 1
        self.memo.append({})

    def close(self, trailer: str = "}") -> None:
        self.depth -= 1
        self.memo.pop()
        self.emit(trailer)


    def _lookup(self, key) -> str | None:
        for scope in reversed(self.memo):
            if key in scope:
                return scope[key]
        return None

    # ------------------------------------------------------------ values

    def value(self, tensor: str, idx: Index) -> str:
        """A C++ variable holding ``tensor`` at ``idx`` (register type of its dtype)."""
        key = (tensor, idx)
        found = self._lookup(key)
        if found is not None:
            return found
        source = self.sources.get(tensor)
        if source is not None and (source.kind != "buffer" or source.at == idx):
            var = self._read(tensor, idx, source)
        elif source is not None and source.pointer:
            var = self._read(tensor, idx, Source("global", source.pointer))
        elif tensor in self.graph.ops:
            var = self._compute(self.graph.ops[tensor], idx)
        else:
            raise KeyError(f"no source for tensor '{tensor}'")
        self.memo[-1][key] = var
        return var

    def _read(self, tensor: str, idx: Index, source: Source) -> str:
        t = self.graph.tensor(tensor)
        if source.kind == "scalar":
            return source.name
        if source.kind == "buffer":
            element = f"{source.name}[{source.position}]"
            return self.declare(t.dtype, f"part_load(PART_LDS({element}))" if source.shared else f"part_load({element})")
        if source.kind == "tile":
            return self.declare(t.dtype, f"part_load(PART_LDS({source.name}[{linear(t.shape, idx)} - {source.position}]))")
        return self.declare(t.dtype, f"part_load(PART_LDG({source.name}[{linear(t.shape, idx)}]))")

    def _operand(self, op: Op, k: int, idx: Index, cdtype: str) -> str:
        operand = op.inputs[k]
        if not isinstance(operand, str):
            return literal(operand, cdtype)
        t = self.graph.tensor(operand)
        return convert(self.value(operand, broadcast_index(t.shape, idx)), t.dtype, cdtype)

    def _compute(self, op: Op, idx: Index) -> str:
        cls = op.op_class
        if op.kind == "cast":  # to its own dtype; a stated dtype converts again below
            src = self.graph.tensor(op.inputs[0])
            var = self.declare(op.promoted, convert(self.value(op.inputs[0], idx), src.dtype, op.promoted))
        elif op.kind == "arange":
            var = self._arange(op, idx)
        elif cls == "elementwise":
            return self._elementwise(op, idx)
        elif cls == "window":
            var = self._window(op, idx)
        elif cls in ("injective", "broadcast"):
            var = self._layout(op, idx)
        else:
            raise ValueError(f"{op.kind} '{op.name}' cannot be computed at an index inside this kernel")
        if op.out.dtype != op.promoted:  # a stated dtype converts the result
            var = self.declare(op.out.dtype, convert(var, op.promoted, op.out.dtype))
        return var

    def _elementwise(self, op: Op, idx: Index) -> str:
        types = [self.graph.tensor(i) if isinstance(i, str) else i for i in op.inputs]
        if op.kind == "identity" and isinstance(op.inputs[0], str) and types[0].dtype == op.out.dtype:
            # a copy (PyTorch's clone) is its operand's value: no round trip through float32
            return self.value(op.inputs[0], broadcast_index(types[0].shape, idx))
        if op.spec.compute_in == "operands":
            cdtype = compute_dtype(promote([t.dtype for t in types if isinstance(t, TensorType)],
                                           [t for t in types if not isinstance(t, TensorType)]))
        else:
            cdtype = compute_dtype(op.promoted)
        if op.kind == "where":
            cond = self._operand(op, 0, idx, "bool")
            args = [cond] + [self._operand(op, k, idx, cdtype) for k in (1, 2)]
        else:
            args = [self._operand(op, k, idx, cdtype) for k in range(len(op.inputs))]
        lits = {
            "alpha": literal(op.attrs["alpha"], cdtype) if "alpha" in op.attrs else None,
            "min": literal(op.attrs["min"], cdtype) if op.attrs.get("min") is not None else None,
            "max": literal(op.attrs["max"], cdtype) if op.attrs.get("max") is not None else None,
            "approximate": op.attrs.get("approximate"),
        }
        if _is_square(op, cdtype):
            expr = f"({args[0]} * {args[0]})"
        else:
            expr = str(self.expr(op.kind, args, REGISTER[cdtype], lits))
        var = self.declare(op.promoted, round_result(expr, op.promoted) if cdtype != op.promoted else expr)
        if op.out.dtype != op.promoted:
            var = self.declare(op.out.dtype, convert(var, op.promoted, op.out.dtype))
        return var

    def _arange(self, op: Op, idx: Index) -> str:
        """``arange`` at its one index ``i``, as the reference computes it: ``start + i *
        delta`` in int64 for an integer dtype, in float64 otherwise, converted once.
        ``__dmul_rn``/``__dadd_rn`` keep nvcc from contracting the two into one FMA,
        which would round once where NumPy rounds twice."""
        (i,) = idx
        start, delta = op.attrs["start"], op.attrs["delta"]
        if op.promoted in INTEGERS:
            wide = "int64"
            expr = f"part_wrap_add({literal(start, wide)}, part_wrap_mul((int64_t)({i}), {literal(delta, wide)}))"
        else:
            wide = "float64"
            expr = f"__dadd_rn({literal(start, wide)}, __dmul_rn((double)({i}), {literal(delta, wide)}))"
        return self.declare(op.promoted, convert(expr, wide, op.promoted))

    def _window(self, op: Op, idx: Index) -> str:
        """``max_pool2d``/``avg_pool2d`` at output index ``idx`` = (n, c, oh, ow).

        A loop over the window of ``pooling.geometry`` computes the input at every tap
        inside the input (its producers are recomputed per tap, never buffered) and
        combines in the compute dtype, rounding once: the NaN-propagating maximum,
        starting from the lowest value (what a window of padding only gives), or the
        sum divided by the taps inside the input, or inside the padded input with
        ``count_include_pad``; each count is that of ``Axis.taps``/``padded_count``.
        """
        x = op.inputs[0]
        t = self.graph.tensor(x)
        rows, cols = pooling.geometry(t.shape, op.attrs)
        cdtype = compute_dtype(op.promoted)
        n, c, oh, ow = idx
        is_max = op.kind == "max_pool2d"
        lowest = -math.inf if cdtype in FLOATS else int(np.iinfo(numpy_dtype(cdtype)).min)
        acc = self.fresh("acc")
        self.emit(f"{REGISTER[cdtype]} {acc} = {literal(lowest if is_max else 0, cdtype)};")
        taps = []
        for axis, o in ((rows, oh), (cols, ow)):
            tap = self.fresh("tap")
            # kept a loop: unrolled inside a pointwise kernel's unrolled vector loop, ptxas
            # moved the vector to local memory (spills)
            self.emit("#pragma unroll 1")
            self.open(f"for (int {tap} = 0; {tap} < {axis.kernel}; ++{tap})")
            position = self.index_var(_tap_position(axis, o, tap))
            self.emit(f"if ({position} < 0 || {position} >= {axis.size}) continue;")
            taps.append(position)
        value = convert(self.value(x, (n, c, *taps)), t.dtype, cdtype)
        self.emit(f"{acc} = part_max({acc}, {value});" if is_max else f"{acc} += {value};")
        self.close()
        self.close()
        if is_max:
            return self.declare(op.promoted, convert(acc, cdtype, op.promoted))
        if op.attrs["count_include_pad"]:
            counts = [self._tap_count(a, o, -a.begin, a.size + a.end) for a, o in ((rows, oh), (cols, ow))]
        else:
            counts = [self._tap_count(a, o, 0, a.size) for a, o in ((rows, oh), (cols, ow))]
        mean = f"({acc} / ({REGISTER[cdtype]})({counts[0]} * {counts[1]}))"  # no tap: 0 / 0 = NaN
        return self.declare(op.promoted, convert(mean, cdtype, op.promoted))

    def _tap_count(self, axis: pooling.Axis, o: str, low: int, high: int) -> str:
        """A variable holding how many taps of output ``o``'s window along ``axis`` lie in
        ``[low, high)``."""
        count, tap = self.fresh("taps"), self.fresh("tap")
        self.emit(f"int {count} = 0;")
        self.open(f"for (int {tap} = 0; {tap} < {axis.kernel}; ++{tap})")
        position = self.index_var(_tap_position(axis, o, tap))
        self.emit(f"{count} += {position} >= {low} && {position} < {high};")
        self.close()
        return count

    def _layout(self, op: Op, idx: Index) -> str:
        g = self.graph
        src = op.inputs[0]
        in_shape = g.tensor(src).shape if isinstance(src, str) else ()
        if op.kind == "broadcast_to":
            return self.value(src, broadcast_index(in_shape, idx))
        if op.kind == "reshape":
            if [n for n in in_shape if n != 1] == [n for n in op.out.shape if n != 1]:
                kept = iter([i for i, n in zip(idx, op.out.shape) if n != 1])
                return self.value(src, tuple(next(kept) if n != 1 else "0" for n in in_shape))
            lin = self.index_var(linear(op.out.shape, idx))
            return self.value(src, tuple(self.index_var(e) for e in delinearize(in_shape, lin)))
        if op.kind == "transpose":
            perm = transpose_perm(len(in_shape), op.attrs.get("perm"))
            inner = [""] * len(in_shape)
            for d, p in enumerate(perm):
                inner[p] = idx[d]
            return self.value(src, tuple(inner))
        if op.kind == "slice":
            params = slice_params(in_shape, op.attrs)
            inner = []
            for (start, _, step), i in zip(params, idx):
                term = i if step == 1 else f"{i} * {step}"
                inner.append(self.index_var(term if start == 0 else f"{start} + {term}" if step > 0
                                            else f"{start} - ({i}) * {-step}"))
            return self.value(src, tuple(inner))
        if op.kind == "concat":
            return self._concat(op, idx)
        if op.kind == "pad":
            return self._pad(op, idx)
        raise ValueError(f"layout op {op.kind}")

    def _clamped(self, expr: str, size: int) -> str:
        """``expr`` clamped into ``[0, size)``: a safe index to compute at whether or
        not the value is then selected."""
        return self.index_var(f"({expr} < 0 ? 0 : ({expr} > {size - 1} ? {size - 1} : {expr}))")

    def _concat(self, op: Op, idx: Index) -> str:
        # Every operand is computed at a clamped index and the right one selected:
        # no branches, so values stay memoised across the whole kernel body.
        g = self.graph
        axis = normalize_axis(op.attrs["axis"], len(op.out.shape))
        parts, offset = [], 0
        for src in op.inputs:
            t = g.tensor(src)
            end = offset + t.shape[axis]
            if t.shape[axis]:
                inner = list(idx)
                inner[axis] = self._clamped(idx[axis] if offset == 0 else f"{idx[axis]} - {offset}", t.shape[axis])
                value = convert(self.value(src, tuple(inner)), t.dtype, op.promoted)
                parts.append((end, value))
            offset = end
        expr = parts[-1][1]
        for end, value in reversed(parts[:-1]):
            expr = f"({idx[axis]} < {end} ? {value} : {expr})"
        return self.declare(op.promoted, expr)

    def _pad(self, op: Op, idx: Index) -> str:
        g = self.graph
        t = g.tensor(op.inputs[0])
        rank = len(t.shape)
        pads = op.attrs["pads"]
        fill = literal(op.attrs["value"], op.promoted)
        if 0 in t.shape:
            return self.declare(op.promoted, fill)
        inner, checks = [], []
        for d in range(rank):
            before = pads[d]
            inner.append(self._clamped(idx[d] if before == 0 else f"{idx[d]} - {before}", t.shape[d]))
            if before:
                checks.append(f"{idx[d]} >= {before}")
            if pads[d + rank]:
                checks.append(f"{idx[d]} < {before + t.shape[d]}")
        value = self.value(op.inputs[0], tuple(inner))
        return self.declare(op.promoted, f"(({' && '.join(checks) or 'true'}) ? {value} : {fill})")

    # ------------------------------------------------------------ stores

    def element_index(self, shape: tuple[int, ...], space: tuple[int, ...], idx: Index,
                      lin: str | None = None) -> Index:
        """The multi-index in ``shape`` of the element at ``idx`` of ``space`` (as many
        elements; ``lin``, if given, its linear position): ``idx`` where the shapes
        agree, else the multi-index of the same linear position. A kernel writes each
        value at the element's linear position, so a value of another layout beside
        it (a transpose of the same input, a reshape) must be computed there."""
        if tuple(shape) == tuple(space):
            return idx
        lin = self.index_var(lin or linear(space, idx))
        return tuple(self.index_var(e) for e in delinearize(shape, lin))

    def store(self, tensor: str, pointer: str, idx: Index) -> None:
        """Store ``tensor`` at ``idx`` into ``pointer`` (its storage type)."""
        t = self.graph.tensor(tensor)
        self.emit(f"PART_STG({pointer}[{linear(t.shape, idx)}]) = {to_storage(self.value(tensor, idx), t.dtype)};")


def _is_square(op: Op, cdtype: str) -> bool:
    """``pow(x, 2)`` computed in a float type: one multiply, ``x * x``, instead of ``powf``.
    Both round the exact square once, so the value is the same (NumPy's too); integer
    powers keep ``part_ipow``, which wraps as NumPy does."""
    exponent = op.inputs[1] if op.kind == "pow" else None
    return (cdtype in FLOATS and isinstance(exponent, (int, float)) and not isinstance(exponent, bool)
            and exponent == 2)


def _tap_position(axis: pooling.Axis, o: str, tap: str) -> str:
    """Input coordinate of tap ``tap`` of output ``o``'s window: ``Axis.start(o)`` plus
    ``tap`` dilations (may lie in the padding)."""
    return f"{o} * {axis.stride} - {axis.begin} + {tap} * {axis.dilation}"


def to_storage(expr: str, dtype: str) -> str:
    """A register value converted to its storage type."""
    if dtype == "float16":
        return f"part_to_f16({expr})"
    if dtype == "bfloat16":
        return f"part_to_bf16({expr})"
    if dtype in _FP8:
        return f"part_to_{_FP8[dtype]}((double)({expr}))"
    return f"(({STORAGE[dtype]})({expr}))"

