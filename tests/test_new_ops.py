"""The ops of format 1.1 in the registry: shapes, errors and NumPy semantics, each
against an independent reference (Python's own arithmetic, a loop over windows,
and PyTorch where it is installed)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from partitioner import GraphError, load_graph, run_reference
from partitioner.dtypes import DTYPES, FLOATS, epsilon, itemsize, numpy_dtype

from .conftest import ROOT, make_graph, op


def _run(inputs, ops, outputs, values=None):
    return run_reference(make_graph(inputs, ops, outputs), values)


# ---------------------------------------------------------------- floor_divide, remainder


def test_integer_floor_divide_and_remainder_are_pythons_with_zero_divisors_zero():
    a = np.array([7, -7, 7, -7, 0, 5, -9223372036854775808, 3], dtype=np.int64)
    b = np.array([2, 2, -2, -2, 3, 0, -1, -5], dtype=np.int64)
    got = _run({"a": ([8], "int64"), "b": ([8], "int64")},
               [op("q", "floor_divide", ["a", "b"]), op("r", "remainder", ["a", "b"])], ["q", "r"], {"a": a, "b": b})
    want_q = [x // y if y else 0 for x, y in zip(a.tolist(), b.tolist())]
    want_r = [x % y if y else 0 for x, y in zip(a.tolist(), b.tolist())]
    want_q[6] = -9223372036854775808  # wraps, as NumPy and two's complement do
    assert got["q"].tolist() == want_q and got["r"].tolist() == want_r


def test_float_floor_divide_and_remainder_follow_pythons_divmod():
    a = np.array([7.5, -7.5, 7.5, -0.0, 1e308, 3.0, 1.0], dtype=np.float64)
    b = np.array([2.0, 2.0, -2.0, 3.0, 1e-308, 0.0, np.inf], dtype=np.float64)
    got = _run({"a": ([7], "float64"), "b": ([7], "float64")},
               [op("q", "floor_divide", ["a", "b"]), op("r", "remainder", ["a", "b"])], ["q", "r"], {"a": a, "b": b})
    for k in range(5):  # Python raises on 0.0 and returns inf differently: those two are NumPy's own
        q, r = divmod(float(a[k]), float(b[k]))
        assert got["q"][k] == q and got["r"][k] == r and math.copysign(1, got["r"][k]) == math.copysign(1, r)
    assert np.isinf(got["q"][5]) and np.isnan(got["r"][5])


def test_floor_divide_rejects_bool():
    with pytest.raises(GraphError, match="floor_divide"):
        make_graph({"a": ([2], "bool")}, [op("q", "floor_divide", ["a", "a"])], ["q"])


# ---------------------------------------------------------------- fmod, trunc

INTEGER_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def _c_fmod(x: int, y: int) -> int:
    """C's integer ``%`` (the dividend's sign) in Python's exact integers, with NumPy's
    0 for a zero divisor."""
    return 0 if y == 0 else (abs(x) % abs(y)) * (1 if x >= 0 else -1)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_integer_fmod_has_the_dividends_sign_zero_divisors_zero_and_int_min_by_minus_one_zero(dtype):
    info = np.iinfo(dtype)
    edges = sorted({0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.min, info.min + 1,
                    *([-1, -2, -3, -7, -100] if info.min else [])})
    a, b = (v.ravel() for v in np.meshgrid(np.array(edges, dtype), np.array(edges, dtype)))
    got = _run({"a": ([a.size], dtype), "b": ([a.size], dtype)}, [op("r", "fmod", ["a", "b"])], ["r"],
               {"a": a, "b": b})["r"]
    assert got.dtype == np.dtype(dtype)
    assert got.tolist() == [_c_fmod(x, y) for x, y in zip(a.tolist(), b.tolist())]


FLOAT_SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, -7.0, 0.1, 1e30, -1e-30, 5e-324, 1e308,
                  np.inf, -np.inf, np.nan]


def _c_fmod_float(x: float, y: float) -> float:
    """C's fmod of two floats: exact, with the dividend's sign (so -0.0 stays -0.0);
    ``math.fmod`` raises where C gives NaN (an infinite dividend, a zero divisor)."""
    try:
        return math.fmod(x, y)
    except ValueError:
        return math.nan


def _c_trunc(x: float) -> float:
    """C's trunc: toward zero, keeping the sign of a zero result; inf and NaN unchanged."""
    return math.copysign(float(math.trunc(x)), x) if math.isfinite(x) else x


def _same_floats(got: np.ndarray, want: list[float]) -> bool:
    want = np.array(want, np.float64)
    got = got.astype(np.float64)
    return bool(np.all((np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_float_fmod_and_trunc_are_cs_bit_for_bit(dtype):
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):  # 1e30 and 1e308 are inf in the half types: specials too
        special = np.array(FLOAT_SPECIALS).astype(numpy_dtype(dtype))
        a, b = (v.ravel() for v in np.meshgrid(special, special))
        scaled = (rng.standard_normal(200) * 10.0 ** rng.integers(-3, 4, 200)).astype(numpy_dtype(dtype))
    a, b = np.concatenate([a, scaled]), np.concatenate([b, scaled[::-1]])
    got = _run({"a": ([a.size], dtype), "b": ([a.size], dtype)},
               [op("r", "fmod", ["a", "b"]), op("t", "trunc", ["a"])], ["r", "t"], {"a": a, "b": b})
    assert got["r"].dtype == got["t"].dtype == numpy_dtype(dtype)
    x, y = a.astype(np.float64).tolist(), b.astype(np.float64).tolist()  # exact: fmod and trunc do not round
    assert _same_floats(got["r"], [_c_fmod_float(p, q) for p, q in zip(x, y)])
    assert _same_floats(got["t"], [_c_trunc(p) for p in x])


@pytest.mark.parametrize("dtype", [*INTEGER_DTYPES, "bool"])
def test_trunc_of_integers_and_bool_is_the_identity(dtype):
    values = np.array([0, 1, 1, 0], bool) if dtype == "bool" else \
        np.array([0, 1, np.iinfo(dtype).max, np.iinfo(dtype).min, np.iinfo(dtype).max - 1], dtype)
    got = _run({"x": ([values.size], dtype)}, [op("t", "trunc", ["x"])], ["t"], {"x": values})["t"]
    assert got.dtype == values.dtype and got.tolist() == values.tolist()  # int64's extremes: no float64 trip


def test_fmod_rejects_bool_and_takes_the_promoted_dtype():
    with pytest.raises(GraphError, match="fmod is not defined on bool"):
        make_graph({"a": ([2], "bool")}, [op("r", "fmod", ["a", "a"])], ["r"])
    g = make_graph({"i": ([3], "int32")}, [op("r", "fmod", ["i", -2.5]), op("s", "fmod", [7, "i"])], ["r", "s"])
    assert g.tensor("r").dtype == "float32" and g.tensor("s").dtype == "int32"
    got = run_reference(g, {"i": np.array([3, -4, 0], np.int32)})
    assert got["r"].tolist() == [0.5, -1.5, 0.0] and got["s"].tolist() == [1, 3, 0]


# ---------------------------------------------------------------- arange


@pytest.mark.parametrize("start, limit, delta", [(0, 10, 1), (2, 11, 3), (10, -3, -4), (5, 5, 1), (0.5, 2.0, 0.25),
                                                 (1.0, -1.0, -0.3)])
def test_arange_is_onnx_range(start, limit, delta):
    values = _run({}, [op("a", "arange", [], start=start, limit=limit, delta=delta)], ["a"])["a"]
    count = max(math.ceil((limit - start) / delta), 0)
    want = [start + k * delta for k in range(count)]
    assert values.dtype == (np.int64 if isinstance(start, int) else np.float32)
    np.testing.assert_array_equal(values, np.array(want).astype(values.dtype))


@pytest.mark.parametrize("attrs, message", [
    ({"start": 0, "limit": 4, "delta": 0}, "delta must not be 0"),
    ({"start": 0, "limit": 4.5, "dtype": "int32"}, "an int32 arange needs integer start, limit and delta"),
    ({"start": 0, "limit": 300, "dtype": "int8"}, "int8"),
    ({"start": 0, "limit": 4, "dtype": "bool"}, "arange has no bool dtype"),
])
def test_arange_errors_are_one_line(attrs, message):
    with pytest.raises(GraphError, match=message):
        make_graph({}, [op("a", "arange", [], **attrs)], ["a"])


# ---------------------------------------------------------------- cumsum


@pytest.mark.parametrize("axis, exclusive, reverse", list(itertools.product([0, -1], [False, True], [False, True])))
def test_cumsum_is_a_running_sum_per_row(axis, exclusive, reverse):
    x = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    got = _run({"x": ([3, 4], "int32")}, [op("c", "cumsum", ["x"], axis=axis, exclusive=exclusive, reverse=reverse)],
               ["c"], {"x": x})["c"]
    moved = np.moveaxis(x, axis, -1).astype(np.int64)
    want = np.zeros_like(moved)
    for row in np.ndindex(moved.shape[:-1]):
        n = moved.shape[-1]
        for k in range(n):
            span = range(k + 1, n) if reverse and exclusive else range(k, n) if reverse else \
                range(k) if exclusive else range(k + 1)
            want[row + (k,)] = sum(int(moved[row + (j,)]) for j in span)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.moveaxis(want, -1, axis))


def test_cumsum_of_float16_accumulates_in_float32():
    x = np.full(4096, 0.1, dtype=np.float16)
    got = _run({"x": ([4096], "float16")}, [op("c", "cumsum", ["x"], axis=0)], ["c"], {"x": x})["c"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.cumsum(x.astype(np.float32)).astype(np.float16))


# ---------------------------------------------------------------- pools


def _window_reference(x, kind, k, s, p, d, ceil, include_pad):
    """Pools by their definition, one output at a time in Python."""
    n, c, h, w = x.shape

    def size(length):
        span = length + 2 * p - d * (k - 1) - 1
        out = (-(-span // s) if ceil else span // s) + 1
        return out - 1 if ceil and (out - 1) * s >= length + p else out

    oh, ow = size(h), size(w)
    out = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [i * s - p + t * d for t in range(k)]
        cols = [j * s - p + t * d for t in range(k)]
        inside = [(r, q) for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
        padded = sum(1 for r in rows for q in cols if -p <= r < h + p and -p <= q < w + p)
        taps = np.array([x[:, :, r, q] for r, q in inside])
        if kind == "max_pool2d":
            out[:, :, i, j] = taps.max(axis=0)
        else:
            out[:, :, i, j] = taps.sum(axis=0) / (padded if include_pad else len(inside))
    return out


@pytest.mark.parametrize("kind", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("k, s, p, d, ceil", [(3, 2, 1, 1, False), (3, 2, 1, 1, True), (2, 2, 0, 1, True),
                                              (3, 1, 1, 2, False), (2, 3, 1, 1, True), (5, 2, 2, 1, True)])
def test_pools_match_their_definition(kind, k, s, p, d, ceil):
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 8)).astype(np.float32)
    for include_pad in ([False, True] if kind == "avg_pool2d" else [False]):
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "dilations": [d, d], "ceil_mode": ceil}
        if kind == "avg_pool2d":
            attrs["count_include_pad"] = include_pad
        got = _run({"x": [2, 3, 9, 8]}, [op("y", kind, ["x"], **attrs)], ["y"], {"x": x})["y"]
        want = _window_reference(x.astype(np.float64), kind, k, s, p, d, ceil, include_pad)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_pools_match_pytorch():
    torch = pytest.importorskip("torch", reason="the torch extra compares pools with PyTorch's")
    x = np.random.default_rng(4).standard_normal((2, 3, 11, 10)).astype(np.float32)
    for k, s, p, ceil, include_pad in itertools.product([2, 3], [1, 2], [0, 1], [False, True], [False, True]):
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "ceil_mode": ceil}
        got = _run({"x": [2, 3, 11, 10]}, [op("m", "max_pool2d", ["x"], **attrs),
                                            op("a", "avg_pool2d", ["x"], **attrs, count_include_pad=include_pad)],
                   ["m", "a"], {"x": x})
        t = torch.from_numpy(x)
        np.testing.assert_array_equal(got["m"], torch.nn.functional.max_pool2d(t, k, s, p, ceil_mode=ceil).numpy())
        np.testing.assert_allclose(got["a"], torch.nn.functional.avg_pool2d(
            t, k, s, p, ceil_mode=ceil, count_include_pad=include_pad).numpy(), rtol=1e-6, atol=1e-7)


def test_max_pool_propagates_nan_and_a_padding_only_window_is_minus_inf():
    x = np.array([[[[1.0, np.nan], [2.0, 3.0]]]], dtype=np.float32)
    got = _run({"x": [1, 1, 2, 2]}, [op("y", "max_pool2d", ["x"], kernel_shape=[1, 1], strides=[2, 2],
                                        pads=[1, 1, 1, 1])], ["y"], {"x": x})["y"]
    assert np.isneginf(got[0, 0, 0, 0]) and got[0, 0, 1, 1] == 3.0
    nan = _run({"x": [1, 1, 2, 2]}, [op("y", "max_pool2d", ["x"], kernel_shape=[2, 2])], ["y"], {"x": x})["y"]
    assert np.isnan(nan).all()


@pytest.mark.parametrize("entry, message", [
    (op("y", "max_pool2d", ["x"], kernel_shape=[3]), "kernel_shape must have 2 numbers"),
    (op("y", "max_pool2d", ["x"], kernel_shape=[9, 9]), "does not fit the padded input"),
    (op("y", "avg_pool2d", ["i"], kernel_shape=[2, 2]), "avg_pool2d needs a float tensor"),
    (op("y", "max_pool2d", ["v"], kernel_shape=[2, 2]), "NCHW input of rank 4"),
    (op("y", "max_pool2d", ["x"], kernel_shape=[2, 2], strides=[0, 1]), ">= 1"),
])
def test_pool_errors_name_the_op(entry, message):
    with pytest.raises(GraphError, match=message) as raised:
        load_graph({"inputs": [{"name": "x", "shape": [1, 2, 4, 4]}, {"name": "v", "shape": [4, 4]},
                               {"name": "i", "shape": [1, 2, 4, 4], "dtype": "int32"}],
                    "ops": [entry], "outputs": ["y"]})
    assert "op 'y'" in str(raised.value)


# ---------------------------------------------------------------- dtypes of format 1.1


@pytest.mark.parametrize("a, b, result", [
    ("uint8", "int8", "int16"), ("uint8", "int16", "int16"), ("uint16", "int16", "int32"),
    ("uint32", "int32", "int64"), ("uint64", "int64", "float64"), ("uint16", "uint32", "uint32"),
    ("float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn"), ("float8_e4m3fn", "bool", "float8_e4m3fn"),
    ("float8_e4m3fn", "float8_e5m2", "float16"), ("float8_e5m2", "int8", "float16"),
    ("float8_e5m2", "bfloat16", "float32"), ("float8_e4m3fn", "float32", "float32"),
])
def test_new_dtypes_promote_as_documented(a, b, result):
    g = make_graph({"a": ([4], a), "b": ([4], b)}, [op("c", "add", ["a", "b"])], ["c"])
    assert g.tensor("c").dtype == result
    if "float8" not in a + b:  # NumPy's own lattice
        assert np.result_type(np.dtype(a), np.dtype(b)).name == result


def test_sums_of_unsigned_integers_are_uint64_and_a_negative_literal_is_refused():
    g = make_graph({"u": ([4], "uint8")}, [op("s", "reduce_sum", ["u"]), op("c", "cumsum", ["u"], axis=0)], ["s", "c"])
    assert g.tensor("s").dtype == g.tensor("c").dtype == "uint64"
    values = run_reference(g, {"u": np.array([250, 10, 3, 0], np.uint8)})
    assert values["s"] == 263 and values["c"].tolist() == [250, 260, 263, 263]
    with pytest.raises(GraphError, match="literal -1 does not fit uint8"):
        make_graph({"u": ([4], "uint8")}, [op("d", "add", ["u", -1])], ["d"])


def test_float8_rounds_once_to_nearest_even_and_e4m3fn_overflows_to_nan():
    import ml_dtypes

    x = np.array([1 + 2**-4 + 2**-30, 1 + 2**-4, 500.0, 448.0, -2**-10], dtype=np.float64)
    g = make_graph({"x": ([5], "float64")}, [op("e", "cast", ["x"], dtype="float8_e4m3fn"),
                                             op("f", "cast", ["x"], dtype="float8_e5m2")], ["e", "f"])
    values = run_reference(g, {"x": x})
    e = values["e"].astype(np.float64)
    assert e[0] == 1.125 and e[1] == 1.0 and np.isnan(e[2]) and e[3] == 448.0  # 1.0625 ties to even
    assert values["f"].dtype == np.dtype(ml_dtypes.float8_e5m2) and values["f"].astype(np.float64)[2] == 512.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_dtype_has_numpys_itemsize_and_epsilon(dtype):
    import ml_dtypes

    assert itemsize(dtype) == numpy_dtype(dtype).itemsize
    if dtype in FLOATS:
        info = ml_dtypes.finfo if dtype in ("bfloat16", "float8_e4m3fn", "float8_e5m2") else np.finfo
        assert epsilon(dtype) == float(info(numpy_dtype(dtype)).eps)


def test_planning_imports_neither_ml_dtypes_nor_scipy(tmp_path):
    """Their imports cost about 0.75 s of every ``partition`` run; only reference
    execution, emulation, the importers and values stored in their types (a
    bfloat16 constant) need them."""
    code = ("import sys; from partitioner import load_graph, partition; "
            f"partition(load_graph({str(ROOT / 'graphs' / 'gpt2_2l_b8_s1024_f16.yaml')!r}), 'greedy'); "
            "print(sorted(m for m in ('ml_dtypes', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]"
