"""Element types of graph format 1.1: names, sizes, promotion and NumPy equivalents.

The promotion rules are those of ``docs/graph-format.md``: tensors promote as
NumPy does, ``bfloat16`` behaves like ``float16`` except that the two half
types together give ``float32``, and a numeric literal is a *weak* scalar.
"""

from __future__ import annotations

import sys

import numpy as np

#: The dtypes format 1.1 adds.
DTYPES_1_1 = ("uint8", "int16", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "bool", *DTYPES_1_1)
#: 8-bit floats as ml_dtypes (and the OCP FP8 specification) define them: e4m3fn has
#: 4 exponent and 3 mantissa bits, no infinities (an overflow is NaN) and a largest
#: value of 448; e5m2 has 5 and 2, infinities, and a largest value of 57,344.
FLOAT8S = frozenset({"float8_e4m3fn", "float8_e5m2"})
FLOATS = frozenset({"float16", "bfloat16", "float32", "float64"}) | FLOAT8S
HALFS = frozenset({"float16", "bfloat16"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTEGERS = frozenset({"int8", "int16", "int32", "int64"}) | UNSIGNED

#: The dtypes NumPy stores through ``ml_dtypes``, with their bytes per element.
_ML_DTYPES = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
_NUMPY = {name: np.dtype(name) for name in DTYPES if name not in _ML_DTYPES}  # ml_dtypes' join on first use
_ITEMSIZE = {**{name: t.itemsize for name, t in _NUMPY.items()}, **_ML_DTYPES}
_ML_NUMPY: set[np.dtype] = set()


def _load_ml_dtypes() -> None:
    """Adds ml_dtypes' types to the NumPy dtypes, once. Imported only when an array of
    them is made (reference execution, emulation, importers): the import costs about
    0.6 s (ml_dtypes 0.7, this machine), more than planning a small graph."""
    if not _ML_NUMPY:
        import ml_dtypes

        for name in _ML_DTYPES:
            _NUMPY[name] = np.dtype(getattr(ml_dtypes, name))
            _ML_NUMPY.add(_NUMPY[name])

Literal = int | float


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that stores ``dtype`` (bfloat16 and the 8-bit floats through
    ``ml_dtypes``). Raises KeyError for a name not in :data:`DTYPES`."""
    if dtype in _ML_DTYPES:
        _load_ml_dtypes()
    return _NUMPY[dtype]


def epsilon(dtype: str) -> float:
    """The machine epsilon of the float ``dtype`` (NumPy's, or ml_dtypes' ``finfo``)."""
    if dtype in _ML_DTYPES:
        import ml_dtypes

        return float(ml_dtypes.finfo(numpy_dtype(dtype)).eps)
    return float(np.finfo(numpy_dtype(dtype)).eps)


def cast_array(array, dtype: str) -> np.ndarray:
    """``array`` converted to ``dtype`` with one round-to-nearest-even.

    NumPy and ml_dtypes convert float64 to bfloat16 through float32, which rounds
    twice (``1 + 2**-8 + 2**-30`` would become 1.0 instead of 1.0078125); here the
    float32 step rounds to odd instead, which makes the second rounding exact. The
    ml_dtypes floats (bfloat16, 8-bit) convert to integers through float32, exactly,
    so NaN and out-of-range values give what NumPy's float32 conversion gives.
    """
    a = np.asarray(array)
    if dtype in _ML_DTYPES or "ml_dtypes" in sys.modules:  # (an array of its types made elsewhere)
        _load_ml_dtypes()
    with np.errstate(all="ignore"):  # overflow to inf and NaN to integer are the conversion's meaning
        if a.dtype in _ML_NUMPY and dtype in INTEGERS:  # through float32 (exact): NumPy's own float->int
            return a.astype(np.float32).astype(_NUMPY[dtype])
        if dtype not in _ML_DTYPES or a.dtype != np.float64:
            return a.astype(_NUMPY[dtype])
        f = a.astype(np.float32)
    back = f.astype(np.float64)
    inexact = np.isfinite(a) & (back != a)
    f = np.where(inexact & (np.abs(back) > np.abs(a)), np.nextafter(f, np.float32(0)), f)
    odd = f.view(np.uint32) | inexact.astype(np.uint32)
    return odd.view(np.float32).astype(_NUMPY[dtype])


def itemsize(dtype: str) -> int:
    """Bytes per element; ``bool`` is stored as one byte."""
    return _ITEMSIZE[dtype]


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic runs in: float32 for half and 8-bit float types, the dtype
    itself otherwise."""
    return "float32" if dtype in HALFS | FLOAT8S else dtype


def accumulator_dtype(dtype: str) -> str:
    """The dtype a sum accumulates ``dtype`` values in (float32, float64 for float64,
    uint64 for unsigned integers and int64 for the others and bool, as NumPy): sums,
    means and products of reductions, scans, and the row sums of attention."""
    if dtype == "float64":
        return "float64"
    if dtype in FLOATS:
        return "float32"
    return "uint64" if dtype in UNSIGNED else "int64"


def reduction_accumulator(kind: str, dtype: str) -> str:
    """The dtype a reduction of ``kind`` over ``dtype`` values accumulates in: a sum
    or product widens (:func:`accumulator_dtype`), and so does a mean of floats; a
    mean of integers or bools accumulates in float64, as NumPy's does (an int64 sum
    of two 2^62 wraps to -2^63); a maximum, minimum or arg comparison is exact in the
    compute dtype."""
    if kind in ("reduce_max", "reduce_min", "argmax", "argmin"):
        return compute_dtype(dtype)
    if kind == "reduce_mean" and dtype not in FLOATS:
        return "float64"
    return accumulator_dtype(dtype)


def product_accumulator(dtype: str) -> str:
    """The dtype a contraction of ``dtype`` operands accumulates in: float32 for float
    types up to float32 (tensor cores accumulate half types in float32), the
    operands' own dtype otherwise (float64, and integers, which wrap)."""
    return "float32" if dtype in HALFS | FLOAT8S | {"float32"} else dtype


def _promote_pair(a: str, b: str) -> str:
    # An 8-bit float with itself or bool stays itself; otherwise it promotes from
    # float16's position, as bfloat16 does (neither has a NumPy promotion of its own).
    if a in FLOAT8S or b in FLOAT8S:
        if a == b or "bool" in (a, b):
            return a if a != "bool" else b
        a, b = ("float16" if a in FLOAT8S else a), ("float16" if b in FLOAT8S else b)
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
