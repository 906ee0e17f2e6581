"""The op registry: every primitive op of graph format v1.

For each op this module gives its fusion class, its attributes, shape and dtype
inference, its FLOP count and its NumPy reference semantics (the numerics section
of ``docs/graph-format.md``). Composite ops (softmax, layer_norm, ...) are not here:
``composites.py`` expands them into these primitives when a graph is loaded.

Fusion classes (the vocabulary of ``legality.py``):

========== ================================================================
elementwise one output element from the same-index elements of its operands
            (with NumPy broadcasting)
broadcast   ``broadcast_to``: replicates its input along new or size-1 axes
injective   layout ops that move elements without arithmetic: reshape,
            transpose, slice, concat, pad (TVM's *injective* pattern)
reduction   reduces over ``axes``
contraction matmul, conv2d
window      ``max_pool2d``, ``avg_pool2d``: each output element from a window
            of its input; fuses only with elementwise and layout ops (a
            pointwise kernel evaluates its producers at every tap)
scan        ``cumsum``: each output element from every earlier one of its
            row; never fuses
gather      data-dependent indexing; never fuses
opaque      ``custom``: no semantics; never fuses
========== ================================================================

``arange`` is elementwise with no operand: its value is a function of the index.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

import numpy as np

from . import pooling
from .dtypes import (FLOATS, INTEGERS, Literal, accumulator_dtype, cast_array, compute_dtype, itemsize,
                     numpy_dtype, product_accumulator, promote, reduction_accumulator)
from .errors import InferenceError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of a tensor; ``nbytes`` is its size in global memory (bytes)."""

    shape: Shape
    dtype: str

    # cached: every candidate's pricing reads them (a frozen dataclass's cached_property
    # writes the instance dict, so fields, equality and hashing are unchanged)
    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int:
        return self.numel * itemsize(self.dtype)


Operand = TensorType | Literal


@dataclass(frozen=True)
class Attr:
    """One attribute: its kind (``int``, ``number``, ``ints``, ``bool``, ``dtype``,
    ``str`` or ``approximate``), whether it is required, and its default."""

    kind: str
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class OpSpec:
    """A primitive op: fusion class, operand count, attributes and semantics.

    ``infer(operands, attrs) -> TensorType`` raises :class:`InferenceError`;
    ``flops(operands, attrs, out) -> int`` counts floating-point operations;
    ``reference(values, attrs, operand_types, out) -> ndarray`` is the NumPy
    semantics, taking arrays (tensors) and Python numbers (literals).
    ``compute_in`` is where an elementwise op computes: ``"result"`` in its result's
    compute dtype, ``"operands"`` in its operands' promoted one (comparisons and
    logical ops, whose result is bool).
    """

    name: str
    op_class: str
    min_inputs: int
    max_inputs: int | None
    infer: Callable[[list[Operand], dict], TensorType]
    reference: Callable[..., np.ndarray]
    flops: Callable[[list[Operand], dict, TensorType], int]
    attrs: dict[str, Attr] = field(default_factory=dict)
    literals_allowed: bool = True
    compute_in: str = "result"

    @property
    def is_view(self) -> bool:
        """A view moves no bytes and launches nothing: only ``reshape`` (when it does
        not also convert its dtype; see ``Op.is_view``)."""
        return self.name == "reshape"


# ---------------------------------------------------------------- shape helpers


def broadcast_shapes(shapes: list[Shape]) -> Shape:
    """NumPy broadcasting of ``shapes``; raises InferenceError when they don't broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise InferenceError(f"shapes {_fmt_shapes(shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _fmt_shapes(shapes: list[Shape]) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def normalize_axis(axis: int, rank: int) -> int:
    """Map a possibly negative axis into ``range(rank)``; raises InferenceError."""
    if not -rank <= axis < rank:
        raise InferenceError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(axes: list[int] | None, rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes; ``None`` means all axes; duplicates are an error."""
    if axes is None:
        return tuple(range(rank))
    norm = [normalize_axis(a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise InferenceError(f"axes {list(axes)} name an axis twice")
    return tuple(sorted(norm))


def _tensors(operands: list[Operand]) -> list[TensorType]:
    return [o for o in operands if isinstance(o, TensorType)]


def _literals(operands: list[Operand]) -> list[Literal]:
    return [o for o in operands if not isinstance(o, TensorType)]


# ---------------------------------------------------------------- inference


def check_literal_range(literals: list[Literal], dtype: str) -> None:
    """An integer literal must fit the integer dtype it takes (NumPy raises too)."""
    if dtype not in INTEGERS:
        return
    info = np.iinfo(numpy_dtype(dtype))
    for value in literals:
        if isinstance(value, int) and not info.min <= value <= info.max:
            raise InferenceError(f"literal {value} does not fit {dtype}")


def _infer_map(result_dtype: Callable[[list[Operand], dict], str]):
    def infer(operands: list[Operand], attrs: dict) -> TensorType:
        shape = broadcast_shapes([t.shape for t in _tensors(operands)])
        check_literal_range(_literals(operands), promote([t.dtype for t in _tensors(operands)], _literals(operands)))
        return TensorType(shape, result_dtype(operands, attrs))

    return infer


def _same_dtype(operands, attrs):
    return promote([t.dtype for t in _tensors(operands)], _literals(operands))


def _float_result(operands, attrs):
    dtype = _same_dtype(operands, attrs)
    return dtype if dtype in FLOATS else "float32"


def _bool_result(operands, attrs):
    return "bool"


def _no_bool(name: str, dtype_rule):
    def rule(operands, attrs):
        dtype = dtype_rule(operands, attrs)
        if dtype == "bool":
            raise InferenceError(f"{name} is not defined on bool tensors")
        return dtype

    return rule


def _cast_result(operands, attrs):
    return attrs["dtype"]


def _clamp_result(operands, attrs):
    bounds = [attrs[k] for k in ("min", "max") if attrs.get(k) is not None]
    dtype = promote([t.dtype for t in _tensors(operands)], bounds)
    check_literal_range(bounds, dtype)
    return dtype


def _where_result(operands, attrs):
    return promote([t.dtype for t in _tensors(operands[1:])], _literals(operands[1:]))


def _div_result(operands, attrs):
    dtype = _same_dtype(operands, attrs)
    return dtype if dtype in FLOATS else "float32"


def _reduction_shape(shape: Shape, axes: tuple[int, ...], keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_reduce(result_dtype: Callable[[str], str], needs_identity: bool = False):
    def infer(operands, attrs):
        (x,) = operands
        axes = normalize_axes(attrs.get("axes"), len(x.shape))
        if needs_identity and any(x.shape[a] == 0 for a in axes):
            raise InferenceError("reducing an empty axis has no identity value")
        return TensorType(_reduction_shape(x.shape, axes, attrs["keepdims"]), result_dtype(x.dtype))

    return infer


def _infer_arg_reduce(operands, attrs):
    (x,) = operands
    axes = attrs.get("axes")
    if axes is not None and len(axes) != 1:
        raise InferenceError(f"takes exactly one axis, got axes {list(axes)}")
    norm = normalize_axes(axes, len(x.shape))
    if any(x.shape[a] == 0 for a in norm):
        raise InferenceError("reducing an empty axis has no identity value")
    return TensorType(_reduction_shape(x.shape, norm, attrs["keepdims"]), "int64")


def reshape_target(shape: Shape, target: list[int]) -> Shape:
    """Resolve a reshape target with at most one ``-1``; raises InferenceError."""
    if target.count(-1) > 1:
        raise InferenceError(f"shape {target} has more than one -1")
    if any(d < -1 for d in target):
        raise InferenceError(f"shape {target} has a negative size")
    numel = math.prod(shape)
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0 or numel % known:
            raise InferenceError(f"cannot reshape {list(shape)} ({numel} elements) to {target}")
        target = [numel // known if d == -1 else d for d in target]
    if math.prod(target) != numel:
        raise InferenceError(f"cannot reshape {list(shape)} ({numel} elements) to {target}")
    return tuple(target)


def _infer_reshape(operands, attrs):
    (x,) = operands
    return TensorType(reshape_target(x.shape, attrs["shape"]), x.dtype)


def transpose_perm(rank: int, perm: list[int] | None) -> tuple[int, ...]:
    """The permutation of a transpose; absent means reversed axes (NumPy)."""
    if perm is None:
        return tuple(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        raise InferenceError(f"perm {perm} is not a permutation of the {rank} axes")
    return tuple(perm)


def _infer_transpose(operands, attrs):
    (x,) = operands
    perm = transpose_perm(len(x.shape), attrs.get("perm"))
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


def _infer_broadcast_to(operands, attrs):
    (x,) = operands
    target = tuple(attrs["shape"])
    if any(d < 0 for d in target):
        raise InferenceError(f"shape {list(target)} has a negative size")
    if len(x.shape) > len(target) or broadcast_shapes([x.shape, target]) != target:
        raise InferenceError(f"cannot broadcast {list(x.shape)} to {list(target)}")
    return TensorType(target, x.dtype)


def slice_params(shape: Shape, attrs: dict) -> list[tuple[int, int, int]]:
    """(start, stop, step) per axis of ``shape`` with ONNX clamping; raises InferenceError."""
    starts, ends = attrs["starts"], attrs["ends"]
    axes = attrs.get("axes")
    axes = list(range(len(starts))) if axes is None else axes
    steps = attrs.get("steps") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise InferenceError("starts, ends, axes and steps must have the same length")
    params = [(0, d, 1) for d in shape]
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = normalize_axis(axis, len(shape))
        if axis in seen:
            raise InferenceError(f"axis {axis} is sliced twice")
        seen.add(axis)
        if step == 0:
            raise InferenceError("a slice step cannot be 0")
        params[axis] = slice(start, end, step).indices(shape[axis])
    return params


def _infer_slice(operands, attrs):
    (x,) = operands
    params = slice_params(x.shape, attrs)
    return TensorType(tuple(len(range(*p)) for p in params), x.dtype)


def _infer_concat(operands, attrs):
    tensors = _tensors(operands)
    rank = len(tensors[0].shape)
    if rank == 0:
        raise InferenceError("cannot concatenate scalars")
    axis = normalize_axis(attrs["axis"], rank)
    for t in tensors[1:]:
        if len(t.shape) != rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, tensors[0].shape)) if i != axis):
            raise InferenceError(f"shapes {_fmt_shapes([t.shape for t in tensors])} differ outside axis {axis}")
    shape = list(tensors[0].shape)
    shape[axis] = sum(t.shape[axis] for t in tensors)
    return TensorType(tuple(shape), promote([t.dtype for t in tensors], []))


def _infer_pad(operands, attrs):
    (x,) = operands
    pads = attrs["pads"]
    rank = len(x.shape)
    if len(pads) != 2 * rank:
        raise InferenceError(f"pads has {len(pads)} numbers, expected 2 x rank = {2 * rank}")
    if any(p < 0 for p in pads):
        raise InferenceError(f"pads {pads} has a negative number")
    value = attrs["value"]
    exact = math.isfinite(value) and value == int(value) and (x.dtype != "bool" or value in (0, 1))
    if (x.dtype in INTEGERS or x.dtype == "bool") and not exact:  # NumPy would convert it without a word
        raise InferenceError(f"value {value} is no {x.dtype} value")
    check_literal_range([value], x.dtype)
    return TensorType(tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(x.shape)), x.dtype)


def matmul_shapes(a: Shape, b: Shape) -> tuple[Shape, int, int, int, Shape]:
    """(batch, M, K, N, output shape) of NumPy ``matmul``; raises InferenceError."""
    if not a or not b:
        raise InferenceError("matmul operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise InferenceError(f"inner dimensions differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes([a2[:-2], b2[:-2]])
    out = batch + ((a2[-2],) if len(a) > 1 else ()) + ((b2[-1],) if len(b) > 1 else ())
    return batch, a2[-2], a2[-1], b2[-1], out


def _infer_matmul(operands, attrs):
    a, b = operands
    *_, out = matmul_shapes(a.shape, b.shape)
    return TensorType(out, promote([a.dtype, b.dtype], []))


def conv_output_length(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int) -> int:
    """Output positions of a convolution along one axis: windows of ``kernel`` taps
    ``dilation`` apart, ``stride`` apart, over the axis of ``size`` padded by ``begin``
    and ``end`` (below 1 when the kernel does not fit)."""
    return (size + begin + end - dilation * (kernel - 1) - 1) // stride + 1


def conv2d_output(x: Shape, w: Shape, attrs: dict) -> Shape:
    """NCHW output shape of conv2d; raises InferenceError on inconsistent shapes."""
    if len(x) != 4 or len(w) != 4:
        raise InferenceError(f"conv2d needs a rank-4 input and weight, got {list(x)} and {list(w)}")
    n, c, h, wd = x
    o, ci, kh, kw = w
    if kh < 1 or kw < 1:
        raise InferenceError(f"the kernel {kh}x{kw} is empty: its height and width must be at least 1")
    for key, length in (("strides", 2), ("pads", 4), ("dilations", 2)):
        if len(attrs[key]) != length:
            raise InferenceError(f"{key} must have {length} numbers, got {attrs[key]}")
    groups = attrs["groups"]
    if groups < 1 or c != ci * groups or o % groups:
        raise InferenceError(f"input channels {c}, weight {list(w)} and groups {groups} are inconsistent")
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    pt, pl, pb, pr = attrs["pads"]
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0:
        raise InferenceError("strides and dilations must be >= 1 and pads >= 0")
    ho, wo = conv_output_length(h, kh, sh, dh, pt, pb), conv_output_length(wd, kw, sw, dw, pl, pr)
    if ho < 1 or wo < 1:
        raise InferenceError(f"the kernel {kh}x{kw} does not fit the padded input {h}x{wd}")
    return (n, o, ho, wo)


def _infer_conv2d(operands, attrs):
    x, w = operands[0], operands[1]
    out = conv2d_output(x.shape, w.shape, attrs)
    if len(operands) == 3 and operands[2].shape != (out[1],):
        raise InferenceError(f"bias shape {list(operands[2].shape)} must be [{out[1]}]")
    return TensorType(out, promote([t.dtype for t in operands], []))


def _infer_gather(operands, attrs):
    data, indices = operands
    if indices.dtype not in INTEGERS:
        raise InferenceError(f"indices must be an integer tensor, got {indices.dtype}")
    if not data.shape:
        raise InferenceError("cannot gather from a scalar")
    axis = normalize_axis(attrs["axis"], len(data.shape))
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype)


def arange_length(attrs: dict) -> int:
    """Elements of ``arange``: ``max(ceil((limit - start) / delta), 0)`` (ONNX Range),
    exact for integers."""
    start, limit, delta = attrs["start"], attrs["limit"], attrs["delta"]
    if all(isinstance(v, int) for v in (start, limit, delta)):
        return max(0, -((start - limit) // delta))
    return max(0, math.ceil((limit - start) / delta))


def arange_dtype(attrs: dict) -> str:
    """The stated ``dtype``, else int64 for integer bounds and float32 otherwise."""
    if attrs.get("dtype"):
        return attrs["dtype"]
    return "int64" if all(isinstance(attrs[k], int) for k in ("start", "limit", "delta")) else "float32"


def _infer_arange(operands, attrs):
    if attrs["delta"] == 0:
        raise InferenceError("delta must not be 0")
    bad = [k for k in ("start", "limit", "delta") if not math.isfinite(attrs[k])]
    if bad:
        raise InferenceError(f"{bad[0]} must be a finite number, got {attrs[bad[0]]}")
    dtype = arange_dtype(attrs)
    if dtype == "bool":
        raise InferenceError("arange has no bool dtype")
    n = arange_length(attrs)
    if dtype in INTEGERS:
        if not all(isinstance(attrs[k], int) for k in ("start", "limit", "delta")):
            raise InferenceError(f"an {dtype} arange needs integer start, limit and delta")
        check_literal_range([attrs["start"], attrs["start"] + max(n - 1, 0) * attrs["delta"]], dtype)
    return TensorType((n,), dtype)


def _infer_cumsum(operands, attrs):
    x = operands[0]
    if not x.shape:
        raise InferenceError("cumsum needs a tensor of rank 1 or more")
    normalize_axis(attrs["axis"], len(x.shape))
    return TensorType(x.shape, _sum_dtype(x.dtype))


def _infer_pool(kind: str):
    def infer(operands, attrs):
        x = operands[0]
        if kind == "avg_pool2d" and x.dtype not in FLOATS:
            raise InferenceError(f"avg_pool2d needs a float tensor, got {x.dtype}")
        if x.dtype == "bool":
            raise InferenceError("max_pool2d of a bool tensor")
        return TensorType(pooling.output_shape(x.shape, attrs), x.dtype)

    return infer


def _infer_custom(operands, attrs):
    raise InferenceError("custom ops must state their shape and dtype")


# ---------------------------------------------------------------- FLOPs


def _flops_per_output(operands, attrs, out: TensorType) -> int:
    return out.numel


def _flops_none(operands, attrs, out) -> int:
    return 0


def _flops_reduce(operands, attrs, out) -> int:
    return operands[0].numel


def _flops_pool(operands, attrs, out) -> int:
    return out.numel * pooling.window_elements(attrs)


def _flops_matmul(operands, attrs, out) -> int:
    batch, m, k, n, _ = matmul_shapes(operands[0].shape, operands[1].shape)
    return 2 * math.prod(batch) * m * k * n


def _flops_conv2d(operands, attrs, out) -> int:
    _, ci, kh, kw = operands[1].shape
    bias = out.numel if len(operands) == 3 else 0
    return 2 * out.numel * ci * kh * kw + bias


# ---------------------------------------------------------------- reference semantics


def _as_compute(value, dtype: str):
    """A tensor or literal converted to ``dtype`` (a literal becomes a 0-d array)."""
    return cast_array(value, dtype)


def _ref_map(fn: Callable[..., np.ndarray], compute_in: str = "result"):
    """Elementwise reference: operands go to the compute dtype, result rounds to ``out``.

    ``compute_in="result"`` computes in the result's compute dtype (float32 for half
    results); ``"operands"`` computes in the operands' promoted dtype (comparisons and
    logical ops, whose result is bool).
    """

    def reference(values, attrs, operand_types, out: TensorType):
        if compute_in == "operands":
            dtype = compute_dtype(promote([t.dtype for t in _tensors(operand_types)], _literals(operand_types)))
        else:
            dtype = compute_dtype(out.dtype)
        with np.errstate(all="ignore"):
            result = fn(*[_as_compute(v, dtype) for v in values], **attrs)
        return cast_array(np.broadcast_to(result, out.shape), out.dtype)

    return reference


# SciPy is imported when a reference runs, not when a graph is planned (its import
# costs about 0.15 s).
def _erf(x):
    from scipy.special import erf

    return erf(x)


def _expit(x):
    from scipy.special import expit

    return expit(x)


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        inner = np.asarray(math.sqrt(2 / math.pi), x.dtype) * (x + np.asarray(0.044715, x.dtype) * x * x * x)
        return 0.5 * x * (1 + np.tanh(inner))
    return 0.5 * x * (1 + _erf(x * np.asarray(1 / math.sqrt(2), x.dtype)))


def _leaky_relu(x, alpha=0.01):
    return np.where(x > 0, x, x * np.asarray(alpha, x.dtype))


def _clamp(x, min=None, max=None):
    if min is not None:
        x = np.maximum(x, np.asarray(min).astype(x.dtype))
    if max is not None:
        x = np.minimum(x, np.asarray(max).astype(x.dtype))
    return x


def _int_pow(base, exponent):
    negative = exponent < 0
    result = np.power(base, np.where(negative, 0, exponent))
    odd = (exponent % 2) != 0
    inverse = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0)).astype(result.dtype)
    return np.where(negative, inverse, result)


def _pow(a, b):
    if a.dtype.kind in "iu":
        return _int_pow(a, b)
    return np.power(a, b)


def _trunc(x):
    """NumPy's ``trunc``; an integer or bool is its own truncation (NumPy before 2.1
    computed integers through float64, which rounds those beyond 2**53)."""
    return np.trunc(x) if x.dtype.kind == "f" else x


def _ref_cast(values, attrs, operand_types, out):
    return cast_array(values[0], out.dtype)


def _ref_where(values, attrs, operand_types, out):
    # a literal enters in the compute dtype, like every elementwise operand
    dtype = compute_dtype(out.dtype)
    cond = np.asarray(values[0]).astype(bool)
    return cast_array(np.where(cond, _as_compute(values[1], dtype), _as_compute(values[2], dtype)), out.dtype)


def _ref_reduce(kind: str, fn: Callable[..., np.ndarray]):
    def reference(values, attrs, operand_types, out):
        x = values[0]
        axes = normalize_axes(attrs.get("axes"), x.ndim)
        acc = reduction_accumulator(kind, operand_types[0].dtype)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty row is NaN, as intended
            result = fn(x.astype(numpy_dtype(acc)), axis=axes, keepdims=attrs["keepdims"])
        return cast_array(result, out.dtype)

    return reference


def _ref_arg_reduce(fn: Callable[..., np.ndarray]):
    def reference(values, attrs, operand_types, out):
        x = values[0]
        axes = attrs.get("axes")
        if axes is None:
            return np.asarray(fn(x)).reshape(out.shape).astype(np.int64)
        return fn(x, axis=normalize_axis(axes[0], x.ndim), keepdims=attrs["keepdims"]).astype(np.int64)

    return reference


def _ref_reshape(values, attrs, operand_types, out):
    return np.reshape(values[0], out.shape)


def _ref_transpose(values, attrs, operand_types, out):
    return np.transpose(values[0], transpose_perm(values[0].ndim, attrs.get("perm")))


def _ref_broadcast_to(values, attrs, operand_types, out):
    return np.broadcast_to(values[0], out.shape).copy()


def _ref_slice(values, attrs, operand_types, out):
    x = values[0]
    return x[tuple(_as_slice(range(*p)) for p in slice_params(x.shape, attrs))].copy()


def _as_slice(indices: range) -> slice:
    """The slice taking exactly ``indices``. ``slice.indices`` gives ``range`` bounds, in
    which a negative start or stop means "before index 0" (a start of -1 when a
    backward slice begins before the first element: nothing); as slice bounds they
    would count from the end."""
    if not indices:
        return slice(0, 0)
    stop = indices[-1] + indices.step
    return slice(indices.start, stop if stop >= 0 else None, indices.step)


def _ref_concat(values, attrs, operand_types, out):
    dtype = numpy_dtype(out.dtype)
    return np.concatenate([v.astype(dtype) for v in values], axis=attrs["axis"])


def _ref_pad(values, attrs, operand_types, out):
    x = values[0]
    pads = attrs["pads"]
    rank = x.ndim
    value = cast_array(attrs["value"], operand_types[0].dtype)
    if rank == 0:
        return x.copy()
    widths = [(pads[i], pads[i + rank]) for i in range(rank)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def _ref_matmul(values, attrs, operand_types, out):
    dtype = numpy_dtype(product_accumulator(out.dtype))
    return cast_array(np.matmul(values[0].astype(dtype), values[1].astype(dtype)), out.dtype)


def _ref_conv2d(values, attrs, operand_types, out):
    dtype = numpy_dtype(product_accumulator(out.dtype))
    x, w = values[0].astype(dtype), values[1].astype(dtype)
    pt, pl, pb, pr = attrs["pads"]
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    groups = attrs["groups"]
    n, c, _, _ = x.shape
    o, ci, kh, kw = w.shape
    x = np.pad(x, [(0, 0), (0, 0), (pt, pb), (pl, pr)])
    windows = np.lib.stride_tricks.sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw][:, :, : out.shape[2], : out.shape[3]]
    windows = windows.reshape(n, groups, ci, out.shape[2], out.shape[3], kh, kw)
    weights = w.reshape(groups, o // groups, ci, kh, kw)
    # optimize: a contraction order through BLAS (8.6 s -> 1.0 s on a VGG layer, same sums to 4e-13)
    result = np.einsum("ngchwij,gocij->ngohw", windows, weights, optimize=True).reshape(out.shape)
    if len(values) == 3:
        result = result + values[2].astype(dtype).reshape(1, o, 1, 1)
    return cast_array(result, out.dtype)


def _ref_gather(values, attrs, operand_types, out):
    data, indices = values
    axis = normalize_axis(attrs["axis"], data.ndim)
    bound = data.shape[axis]
    if indices.size and (indices.min() < -bound or indices.max() >= bound):
        raise IndexError(f"gather index out of range [-{bound}, {bound})")
    return np.take(data, indices, axis=axis)


def _ref_arange(values, attrs, operand_types, out):
    steps = np.arange(out.numel, dtype=np.int64)
    if out.dtype in INTEGERS:
        # modulo 2^64, exact for every value in the dtype (inference checks the first and
        # the last): a uint64 start past int64's range would not fit NumPy's int64 steps
        with np.errstate(over="ignore"):
            wide = np.uint64(attrs["start"] % 2**64) + steps.astype(np.uint64) * np.uint64(attrs["delta"] % 2**64)
        return wide.astype(numpy_dtype(out.dtype))
    return cast_array(attrs["start"] + steps.astype(np.float64) * attrs["delta"], out.dtype)


def _ref_cumsum(values, attrs, operand_types, out):
    x = values[0].astype(numpy_dtype(accumulator_dtype(operand_types[0].dtype)))
    axis = normalize_axis(attrs["axis"], x.ndim)
    if attrs["reverse"]:
        x = np.flip(x, axis)
    with np.errstate(all="ignore"):
        total = np.cumsum(x, axis=axis)
    if attrs["exclusive"]:  # the running sum before each element: zero, then all but the last
        shifted = np.zeros_like(total)
        head, tail = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        head[axis], tail[axis] = slice(None, -1), slice(1, None)
        shifted[tuple(tail)] = total[tuple(head)]
        total = shifted
    if attrs["reverse"]:
        total = np.flip(total, axis)
    return cast_array(total, out.dtype)


def _ref_pool(kind: str):
    def reference(values, attrs, operand_types, out):
        x = values[0]
        dtype = compute_dtype(out.dtype)
        rows, cols = pooling.geometry(x.shape, attrs)
        result = np.empty(out.shape, dtype=numpy_dtype(dtype))
        for oh in range(rows.out):
            for ow in range(cols.out):
                window = x[:, :, rows.taps(oh)][:, :, :, cols.taps(ow)].astype(numpy_dtype(dtype))
                result[:, :, oh, ow] = _pool_window(kind, window, rows.padded_count(oh) * cols.padded_count(ow),
                                                    attrs, dtype)
        return cast_array(result, out.dtype)

    return reference


def _pool_window(kind: str, window: np.ndarray, padded: int, attrs: dict, dtype: str) -> np.ndarray:
    """One output position of a pool from its window ``[N, C, taps_h, taps_w]``."""
    count = window.shape[2] * window.shape[3]
    with np.errstate(all="ignore"):
        if kind == "max_pool2d":
            if not count:
                least = -np.inf if dtype in FLOATS else np.iinfo(numpy_dtype(dtype)).min
                return np.full(window.shape[:2], least, dtype=numpy_dtype(dtype))
            return np.max(window, axis=(2, 3))  # NaN propagates, as reduce_max
        divisor = padded if attrs["count_include_pad"] else count
        return np.sum(window, axis=(2, 3)) / np.asarray(divisor, dtype=numpy_dtype(dtype))


def _ref_custom(values, attrs, operand_types, out):
    raise NotImplementedError(f"custom op (kind {attrs.get('kind')!r}) has no reference semantics")


# ---------------------------------------------------------------- the registry

REGISTRY: dict[str, OpSpec] = {}


#: Op classes that never fuse: each such op (a gather, a scan, a custom op) is a kernel
#: of its own (``legality``: ``op.never_fuses``).
ALONE_CLASSES = frozenset({"gather", "opaque", "scan"})


def _register(spec: OpSpec) -> None:
    REGISTRY[spec.name] = spec


def _unary(name, fn, dtype_rule=_same_dtype, attrs=None, flops=_flops_per_output):
    _register(OpSpec(name, "elementwise", 1, 1, _infer_map(dtype_rule), _ref_map(fn), flops, attrs or {}, False))


_unary("neg", np.negative, _no_bool("neg", _same_dtype))
_unary("abs", np.abs)
_unary("trunc", _trunc)
_unary("exp", np.exp, _float_result)
_unary("log", np.log, _float_result)
_unary("sqrt", np.sqrt, _float_result)
_unary("rsqrt", lambda x: 1 / np.sqrt(x), _float_result)
_unary("reciprocal", lambda x: 1 / x, _float_result)
_unary("tanh", np.tanh, _float_result)
_unary("sigmoid", _expit, _float_result)
_unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)))
_unary("silu", lambda x: x * _expit(x), _float_result)
_unary("erf", _erf, _float_result)
_unary("sin", np.sin, _float_result)
_unary("cos", np.cos, _float_result)
_unary("square", lambda x: x * x)
_unary("identity", lambda x: x.copy(), flops=_flops_none)
_unary("logical_not", np.logical_not, _bool_result)
_unary("gelu", _gelu, _float_result, {"approximate": Attr("approximate", default="none")})
_unary("leaky_relu", _leaky_relu, _float_result, {"alpha": Attr("number", default=0.01)})
_unary("clamp", _clamp, _clamp_result, {"min": Attr("number"), "max": Attr("number")})
_register(
    OpSpec("cast", "elementwise", 1, 1, _infer_map(_cast_result), _ref_cast, _flops_none,
           {"dtype": Attr("dtype", required=True)}, False)
)


def _binary(name, fn, dtype_rule=_same_dtype, compute_in="result"):
    _register(OpSpec(name, "elementwise", 2, 2, _infer_map(dtype_rule), _ref_map(fn, compute_in), _flops_per_output,
                     compute_in=compute_in))


_binary("add", np.add)
_binary("sub", np.subtract, _no_bool("sub", _same_dtype))
_binary("mul", np.multiply)
_binary("div", np.divide, _div_result)
_binary("pow", _pow)
_binary("maximum", np.maximum)
_binary("minimum", np.minimum)
for _name, _fn in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                   ("gt", np.greater), ("ge", np.greater_equal), ("logical_and", np.logical_and),
                   ("logical_or", np.logical_or)]:
    _binary(_name, _fn, _bool_result, compute_in="operands")
_binary("floor_divide", np.floor_divide, _no_bool("floor_divide", _same_dtype))
_binary("remainder", np.remainder, _no_bool("remainder", _same_dtype))
_binary("fmod", np.fmod, _no_bool("fmod", _same_dtype))
_register(OpSpec("where", "elementwise", 3, 3, _infer_map(_where_result), _ref_where, _flops_per_output))
_register(OpSpec("arange", "elementwise", 0, 0, _infer_arange, _ref_arange, _flops_per_output,
                 {"start": Attr("number", required=True), "limit": Attr("number", required=True),
                  "delta": Attr("number", default=1), "dtype": Attr("dtype")}, False))

_REDUCE_ATTRS = {"axes": Attr("ints"), "keepdims": Attr("bool", default=False)}


def _sum_dtype(dtype):
    """Sums keep a float dtype; integers and bool widen as NumPy's do (uint64 for
    unsigned, int64 otherwise)."""
    return dtype if dtype in FLOATS else accumulator_dtype(dtype)


def _mean_dtype(dtype):
    return dtype if dtype in FLOATS else "float32"


for _name, _fn, _rule, _identity in [
    ("reduce_sum", np.sum, _sum_dtype, False),
    ("reduce_mean", np.mean, _mean_dtype, False),
    ("reduce_prod", np.prod, _sum_dtype, False),
    ("reduce_max", np.max, lambda d: d, True),
    ("reduce_min", np.min, lambda d: d, True),
]:
    _register(OpSpec(_name, "reduction", 1, 1, _infer_reduce(_rule, _identity), _ref_reduce(_name, _fn),
                     _flops_reduce, _REDUCE_ATTRS, False))
for _name, _fn in [("argmax", np.argmax), ("argmin", np.argmin)]:
    _register(OpSpec(_name, "reduction", 1, 1, _infer_arg_reduce, _ref_arg_reduce(_fn), _flops_reduce,
                     _REDUCE_ATTRS, False))

_register(OpSpec("reshape", "injective", 1, 1, _infer_reshape, _ref_reshape, _flops_none,
                 {"shape": Attr("ints", required=True)}, False))
_register(OpSpec("transpose", "injective", 1, 1, _infer_transpose, _ref_transpose, _flops_none,
                 {"perm": Attr("ints")}, False))
_register(OpSpec("broadcast_to", "broadcast", 1, 1, _infer_broadcast_to, _ref_broadcast_to, _flops_none,
                 {"shape": Attr("ints", required=True)}, False))
_register(OpSpec("slice", "injective", 1, 1, _infer_slice, _ref_slice, _flops_none,
                 {"starts": Attr("ints", required=True), "ends": Attr("ints", required=True),
                  "axes": Attr("ints"), "steps": Attr("ints")}, False))
_register(OpSpec("concat", "injective", 1, None, _infer_concat, _ref_concat, _flops_none,
                 {"axis": Attr("int", required=True)}, False))
_register(OpSpec("pad", "injective", 1, 1, _infer_pad, _ref_pad, _flops_none,
                 {"pads": Attr("ints", required=True), "value": Attr("number", default=0)}, False))
_register(OpSpec("matmul", "contraction", 2, 2, _infer_matmul, _ref_matmul, _flops_matmul, {}, False))
_register(OpSpec("conv2d", "contraction", 2, 3, _infer_conv2d, _ref_conv2d, _flops_conv2d,
                 {"strides": Attr("ints", default=[1, 1]), "pads": Attr("ints", default=[0, 0, 0, 0]),
                  "dilations": Attr("ints", default=[1, 1]), "groups": Attr("int", default=1)}, False))
_register(OpSpec("cumsum", "scan", 1, 1, _infer_cumsum, _ref_cumsum, _flops_per_output,
                 {"axis": Attr("int", required=True), "exclusive": Attr("bool", default=False),
                  "reverse": Attr("bool", default=False)}, False))
_POOL_ATTRS = {"kernel_shape": Attr("ints", required=True), "strides": Attr("ints", default=[1, 1]),
               "pads": Attr("ints", default=[0, 0, 0, 0]), "dilations": Attr("ints", default=[1, 1]),
               "ceil_mode": Attr("bool", default=False)}
_register(OpSpec("max_pool2d", "window", 1, 1, _infer_pool("max_pool2d"), _ref_pool("max_pool2d"), _flops_pool,
                 _POOL_ATTRS, False))
_register(OpSpec("avg_pool2d", "window", 1, 1, _infer_pool("avg_pool2d"), _ref_pool("avg_pool2d"), _flops_pool,
                 {**_POOL_ATTRS, "count_include_pad": Attr("bool", default=False)}, False))
_register(OpSpec("gather", "gather", 2, 2, _infer_gather, _ref_gather, _flops_none,
                 {"axis": Attr("int", default=0)}, False))
_register(OpSpec("custom", "opaque", 0, None, _infer_custom, _ref_custom, _flops_none,
                 {"kind": Attr("str", required=True), "onnx": Attr("str")}, False))
