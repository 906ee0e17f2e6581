"""Element types of graph format v1: names, sizes, promotion and NumPy equivalents.

The promotion rules are those of ``docs/graph-format.md``: tensors promote as
NumPy does, ``bfloat16`` behaves like ``float16`` except that the two half
types together give ``float32``, and a numeric literal is a *weak* scalar.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "bool")
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"})
HALFS = frozenset({"float16", "bfloat16"})
INTEGERS = frozenset({"int8", "int32", "int64"})

_NUMPY = {name: np.dtype(name) for name in DTYPES if name != "bfloat16"}
_NUMPY["bfloat16"] = np.dtype(ml_dtypes.bfloat16)

Literal = int | float


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that stores ``dtype`` (bfloat16 through ``ml_dtypes``)."""
    return _NUMPY[dtype]


def cast_array(array, dtype: str) -> np.ndarray:
    """``array`` converted to ``dtype`` with one round-to-nearest-even.

    NumPy and ml_dtypes convert float64 to bfloat16 through float32, which rounds
    twice (``1 + 2**-8 + 2**-30`` would become 1.0 instead of 1.0078125); here the
    float32 step rounds to odd instead, which makes the second rounding exact.
    """
    a = np.asarray(array)
    with np.errstate(all="ignore"):  # overflow to inf and NaN to integer are the conversion's meaning
        if dtype != "bfloat16" or a.dtype != np.float64:
            return a.astype(_NUMPY[dtype])
        f = a.astype(np.float32)
    back = f.astype(np.float64)
    inexact = np.isfinite(a) & (back != a)
    f = np.where(inexact & (np.abs(back) > np.abs(a)), np.nextafter(f, np.float32(0)), f)
    odd = f.view(np.uint32) | inexact.astype(np.uint32)
    return odd.view(np.float32).astype(_NUMPY["bfloat16"])


def itemsize(dtype: str) -> int:
    """Bytes per element; ``bool`` is stored as one byte."""
    return _NUMPY[dtype].itemsize


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic runs in: float32 for half types, the dtype itself otherwise."""
    return "float32" if dtype in HALFS else dtype


def accumulator_dtype(dtype: str) -> str:
    """The dtype a sum accumulates ``dtype`` values in (float32, float64 for float64,
    int64 for integers and bool): sums, means and products of reductions, and the
    row sums of attention."""
    if dtype == "float64":
        return "float64"
    if dtype in FLOATS:
        return "float32"
    return "int64"


def reduction_accumulator(kind: str, dtype: str) -> str:
    """The dtype a reduction of ``kind`` over ``dtype`` values accumulates in: a sum,
    mean or product widens (:func:`accumulator_dtype`); a maximum, minimum or arg
    comparison is exact in the compute dtype."""
    if kind in ("reduce_max", "reduce_min", "argmax", "argmin"):
        return compute_dtype(dtype)
    return accumulator_dtype(dtype)


def product_accumulator(dtype: str) -> str:
    """The dtype a contraction of ``dtype`` operands accumulates in: float32 for float
    types up to float32 (tensor cores accumulate half types in float32), the
    operands' own dtype otherwise (float64, and integers, which wrap)."""
    return "float32" if dtype in ("float16", "bfloat16", "float32") else dtype


def _promote_pair(a: str, b: str) -> str:
    # bfloat16 has no NumPy promotion of its own; it follows float16's lattice position.
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    na = "float16" if a == "bfloat16" else a
    nb = "float16" if b == "bfloat16" else b
    result = np.result_type(np.dtype(na), np.dtype(nb)).name
    if result == "float16" and "bfloat16" in (a, b):
        return "bfloat16"
    return result


def promote(tensor_dtypes: list[str], literals: list[Literal]) -> str:
    """Result dtype of an elementwise op over tensors and weak scalar literals.

    Tensors promote as NumPy does.  A literal takes the tensors' dtype when both are
    integers or both are floats; a float literal with integer or bool tensors gives
    float32 and an int literal with bool tensors gives int64 (as PyTorch does).  With
    no tensor at all, literals follow NumPy: int64 or float64.
    """
    has_float_literal = any(isinstance(v, float) for v in literals)
    if not tensor_dtypes:
        return "float64" if has_float_literal else "int64"
    result = tensor_dtypes[0]
    for dtype in tensor_dtypes[1:]:
        result = _promote_pair(result, dtype)
    if result in FLOATS or not literals:
        return result
    if has_float_literal:
        return "float32"
    return "int64" if result == "bool" else result
