"""NumPy reference semantics of every op, checked against independent computations
(Python's ``math`` on floats, hand-computed values, naive loops)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from partitioner import run_reference
from partitioner.ops import REGISTRY

from .conftest import make_graph, op

VALUES = [-2.5, -1.0, -0.25, 0.0, 0.3, 1.0, 2.0, 3.75]


def run1(kind, values, in_dtype="float32", **attrs):
    """Run one unary op on ``values`` and return (result, graph)."""
    g = make_graph({"x": ([len(values)], in_dtype)}, [op("y", kind, ["x"], **attrs)], ["y"])
    x = np.array(values, dtype=np.float32).astype(ml_dtypes.bfloat16 if in_dtype == "bfloat16" else in_dtype)
    return run_reference(g, {"x": x})["y"], g


def _gelu_tanh(v):
    return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))


UNARY = {
    "neg": lambda v: -v,
    "abs": abs,
    "exp": math.exp,
    "tanh": math.tanh,
    "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
    "relu": lambda v: max(v, 0.0),
    "silu": lambda v: v / (1 + math.exp(-v)),
    "erf": math.erf,
    "sin": math.sin,
    "cos": math.cos,
    "square": lambda v: v * v,
    "identity": lambda v: v,
    "gelu": lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))),
}


@pytest.mark.parametrize("kind", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_unary_matches_math(kind, dtype):
    y, _ = run1(kind, VALUES, dtype)
    x = np.array(VALUES, dtype=np.float32).astype(dtype).astype(np.float64)
    expected = np.array([UNARY[kind](float(v)) for v in x]).astype(dtype)
    assert y.dtype == np.dtype(dtype)
    # float32 math is within a few ulp; float16 rounds a float32 result once
    np.testing.assert_allclose(y.astype(np.float64), expected.astype(np.float64), rtol=1e-6 if dtype == "float32"
                               else 1e-3, atol=1e-7)


@pytest.mark.parametrize("kind,fn", [("log", math.log), ("sqrt", math.sqrt), ("rsqrt", lambda v: 1 / math.sqrt(v)),
                                     ("reciprocal", lambda v: 1 / v)])
def test_positive_domain_unary(kind, fn):
    values = [0.25, 1.0, 2.0, 9.0]
    y, _ = run1(kind, values)
    np.testing.assert_allclose(y, [fn(v) for v in values], rtol=1e-6)


def test_out_of_domain_gives_nan_and_inf():
    y, _ = run1("log", [-1.0, 0.0])
    assert math.isnan(y[0]) and y[1] == -math.inf
    y, _ = run1("rsqrt", [0.0])
    assert y[0] == math.inf


def test_gelu_tanh_leaky_relu_clamp_cast_logical_not():
    y, _ = run1("gelu", VALUES, approximate="tanh")
    np.testing.assert_allclose(y, [_gelu_tanh(v) for v in VALUES], rtol=1e-6, atol=1e-7)
    y, _ = run1("leaky_relu", VALUES, alpha=0.1)
    np.testing.assert_allclose(y, [v if v > 0 else 0.1 * v for v in VALUES], rtol=1e-6)
    y, _ = run1("clamp", VALUES, min=-1.0, max=2.0)
    assert y.tolist() == [-1.0, -1.0, -0.25, 0.0, pytest.approx(0.3), 1.0, 2.0, 2.0]
    y, _ = run1("clamp", VALUES, max=0.0)
    assert y.max() == 0.0 and y.min() == -2.5
    y, _ = run1("cast", [1.7, -1.7, 0.0], dtype="int32")
    assert y.tolist() == [1, -1, 0] and y.dtype == np.int32
    y, _ = run1("logical_not", [0.0, 2.0])
    assert y.tolist() == [True, False]


def test_nan_propagates_through_maximum_minimum_clamp_and_reductions():
    g = make_graph(
        {"a": [3], "b": [3]},
        [op("mx", "maximum", ["a", "b"]), op("mn", "minimum", ["a", "b"]),
         op("cl", "clamp", ["a"], min=0.0, max=1.0), op("rmax", "reduce_max", ["a"]),
         op("rmin", "reduce_min", ["b"]), op("re", "relu", ["a"])],
        ["mx", "mn", "cl", "rmax", "rmin", "re"],
    )
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    out = run_reference(g, {"a": a, "b": b})
    assert np.isnan(out["mx"][:2]).all() and out["mx"][2] == 2.0
    assert np.isnan(out["mn"][:2]).all() and out["mn"][2] == 1.0
    assert np.isnan(out["cl"][0]) and out["cl"][1:].tolist() == [1.0, 1.0]
    assert np.isnan(out["rmax"]) and np.isnan(out["rmin"]) and np.isnan(out["re"][0])


def test_integer_to_float_promotion_with_literals():
    g = make_graph(
        {"i": ([3], "int32"), "j": ([3], "int32"), "m": ([3], "bool")},
        [op("half", "add", ["i", 0.5]), op("twice", "mul", ["i", 2]), op("ratio", "div", ["i", "j"]),
         op("bplus", "add", ["m", 1]), op("cf", "clamp", ["i"], min=0.5), op("ci", "clamp", ["i"], max=1)],
        ["half", "twice", "ratio", "bplus", "cf", "ci"],
    )
    out = run_reference(g, {"i": np.array([1, 2, 7], np.int32), "j": np.array([2, 2, 2], np.int32),
                            "m": np.array([True, False, True])})
    assert out["half"].dtype == np.float32 and out["half"].tolist() == [1.5, 2.5, 7.5]
    assert out["twice"].dtype == np.int32 and out["twice"].tolist() == [2, 4, 14]
    assert out["ratio"].dtype == np.float32 and out["ratio"].tolist() == [0.5, 1.0, 3.5]
    assert out["bplus"].dtype == np.int64 and out["bplus"].tolist() == [2, 1, 2]
    assert out["cf"].dtype == np.float32 and out["cf"].tolist() == [1.0, 2.0, 7.0]
    assert out["ci"].dtype == np.int32 and out["ci"].tolist() == [1, 1, 1]


def test_tensor_promotion_follows_numpy_and_half_pairs_give_float32():
    g = make_graph(
        {"h": ([2], "float16"), "b": ([2], "bfloat16"), "f": ([2], "float32"), "i8": ([2], "int8")},
        [op("hb", "add", ["h", "b"]), op("hf", "add", ["h", "f"]), op("bi", "add", ["b", "i8"]),
         op("hi", "mul", ["h", "i8"])],
        ["hb", "hf", "bi", "hi"],
    )
    assert [g.ops[n].out.dtype for n in ("hb", "hf", "bi", "hi")] == ["float32", "float32", "bfloat16", "float16"]


def test_half_ops_compute_in_float32_and_round_once():
    g = make_graph({"a": ([1], "float16"), "b": ([1], "float16")}, [op("y", "mul", ["a", "b"])], ["y"],
                   dtype="float16")
    a, b = np.float16(1.0009765625), np.float16(1.0009765625)  # 1 + 2^-10
    y = run_reference(g, {"a": np.array([a]), "b": np.array([b])})["y"]
    # exact product 1 + 2^-9 + 2^-20 rounds (to nearest) to 1 + 2^-9 in float16
    assert y[0] == np.float16(1 + 2**-9)


def test_bfloat16_rounds_to_nearest_even():
    y, _ = run1("cast", [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-12], dtype="bfloat16")
    assert y.astype(np.float64).tolist() == [1.0, 1 + 2**-6, 1 + 2**-7]


def test_reductions_accumulate_in_float32_and_round_to_dtype():
    g = make_graph({"x": ([4096], "float16")},
                   [op("s", "reduce_sum", ["x"]), op("m", "reduce_mean", ["x"], keepdims=True)], ["s", "m"])
    out = run_reference(g, {"x": np.ones(4096, np.float16)})
    # float16 accumulation would stall at 2048; float32 accumulation reaches 4096 exactly
    assert out["s"].dtype == np.float16 and float(out["s"]) == 4096.0
    assert out["m"].shape == (1,) and float(out["m"][0]) == 1.0


def test_reduction_axes_keepdims_and_arg_reductions():
    x = np.array([[1.0, 5.0, 5.0], [7.0, 2.0, np.nan]], np.float32)
    g = make_graph({"x": [2, 3]}, [
        op("s", "reduce_sum", ["x"], axes=[0]), op("p", "reduce_prod", ["x"], axes=[-1], keepdims=True),
        op("am", "argmax", ["x"], axes=[1]), op("an", "argmin", ["x"], axes=[0], keepdims=True),
        op("af", "argmax", ["x"])], ["s", "p", "am", "an", "af"])
    out = run_reference(g, {"x": x})
    assert out["s"][:2].tolist() == [8.0, 7.0] and np.isnan(out["s"][2])
    assert out["p"].shape == (2, 1) and out["p"][0, 0] == 25.0
    assert out["am"].tolist() == [1, 2]  # first maximum; NaN counts as the maximum (NumPy)
    assert out["an"].tolist() == [[0, 1, 1]]
    assert out["af"].shape == () and int(out["af"]) == 5


def test_integer_sums_widen_to_int64():
    g = make_graph({"b": ([5], "bool"), "i": ([2], "int8")},
                   [op("n", "reduce_sum", ["b"]), op("t", "reduce_sum", ["i"])], ["n", "t"])
    out = run_reference(g, {"b": np.array([1, 1, 0, 1, 1], bool), "i": np.array([100, 100], np.int8)})
    assert out["n"].dtype == np.int64 and int(out["n"]) == 4
    assert int(out["t"]) == 200


def test_comparisons_logic_and_where():
    g = make_graph({"a": [3], "b": [3]}, [
        op("lt", "lt", ["a", "b"]), op("ge", "ge", ["a", 1.0]), op("eq", "eq", ["a", "b"]),
        op("both", "logical_and", ["lt", "ge"]), op("either", "logical_or", ["lt", "eq"]),
        op("w", "where", ["lt", "a", 0.0]), op("p", "pow", ["a", 2.0]), op("ne", "ne", ["a", "b"]),
        op("le", "le", ["a", 2.0]), op("gt", "gt", ["b", "a"]), op("d", "sub", ["a", "b"])],
        ["both", "either", "w", "p", "ne", "le", "gt", "d"])
    out = run_reference(g, {"a": np.array([0.5, 2.0, 3.0], np.float32), "b": np.array([1.0, 3.0, 3.0], np.float32)})
    assert out["both"].tolist() == [False, True, False]
    assert out["either"].tolist() == [True, True, True]
    assert out["w"].tolist() == [0.5, 2.0, 0.0]
    assert out["p"].tolist() == [0.25, 4.0, 9.0]
    assert out["ne"].tolist() == [True, True, False]
    assert out["le"].tolist() == [True, True, False]
    assert out["gt"].tolist() == [True, True, False]
    assert out["d"].tolist() == [-0.5, -1.0, 0.0]


def test_integer_pow_with_negative_exponent_truncates():
    g = make_graph({"a": ([4], "int32")}, [op("p", "pow", ["a", -1])], ["p"])
    out = run_reference(g, {"a": np.array([1, -1, 2, 5], np.int32)})
    assert out["p"].tolist() == [1, -1, 0, 0]


def test_layout_ops():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    g = make_graph({"x": [2, 3, 4], "i": ([2, 2], "int64"), "t": [5, 2]}, [
        op("r", "reshape", ["x"], shape=[6, -1]),
        op("tr", "transpose", ["x"], perm=[2, 0, 1]),
        op("rev", "transpose", ["x"]),
        op("sl", "slice", ["x"], starts=[-1, 3], ends=[-100, 0], axes=[2, 1], steps=[-2, -1]),
        op("bc", "broadcast_to", ["t"], shape=[3, 5, 2]),
        op("cc", "concat", ["x", "x"], axis=1),
        op("pd", "pad", ["t"], pads=[1, 0, 0, 2], value=-1.0),
        op("ga", "gather", ["t", "i"], axis=0),
    ], ["r", "tr", "rev", "sl", "bc", "cc", "pd", "ga"])
    t = np.arange(10, dtype=np.float32).reshape(5, 2)
    out = run_reference(g, {"x": x, "t": t, "i": np.array([[0, -1], [4, 2]])})
    assert out["r"].shape == (6, 4) and out["r"][5, 3] == 23
    assert out["tr"].shape == (4, 2, 3) and out["tr"][3, 1, 2] == x[1, 2, 3]
    assert out["rev"].shape == (4, 3, 2) and out["rev"][1, 2, 0] == x[0, 2, 1]
    assert out["sl"].shape == (2, 2, 2)  # axis 2: 3,1 ; axis 1 from index 2 down to 1
    assert out["sl"][0, 0].tolist() == [x[0, 2, 3], x[0, 2, 1]]
    assert out["bc"].shape == (3, 5, 2) and out["bc"][2, 4, 1] == 9
    assert out["cc"].shape == (2, 6, 4) and out["cc"][1, 5, 0] == x[1, 2, 0]
    assert out["pd"].shape == (6, 4) and out["pd"][0, 0] == -1 and out["pd"][1, 0] == 0 and out["pd"][5, 3] == -1
    assert out["ga"].shape == (2, 2, 2) and out["ga"][0, 1].tolist() == [8, 9] and out["ga"][1, 0].tolist() == [8, 9]


BOUNDS = (-1000, -6, -5, -4, -1, 0, 1, 4, 5, 6, 1000)


@pytest.mark.parametrize("step", [-3, -2, -1, 1, 2, 3])
def test_every_slice_takes_what_python_slicing_takes(step):
    """Every start and end, far out of range on either side included, against Python's
    own slicing of the same bounds (ONNX clamps alike), with the shape inferred. A
    backward slice starting before the first element (start -1000) took all 5
    elements, reversed, for an inferred shape of 0."""
    x = np.arange(5, dtype=np.float32)
    ops = [op(f"s{i}_{j}", "slice", ["x"], starts=[start], ends=[end], steps=[step])
           for i, start in enumerate(BOUNDS) for j, end in enumerate(BOUNDS)]
    g = make_graph({"x": [5]}, ops, [o["name"] for o in ops])
    out = run_reference(g, {"x": x})
    for i, start in enumerate(BOUNDS):
        for j, end in enumerate(BOUNDS):
            want = x[start:end:step]
            assert g.ops[f"s{i}_{j}"].out.shape == want.shape
            assert out[f"s{i}_{j}"].tolist() == want.tolist(), (start, end, step)


def test_matmul_batched_and_vector_forms():
    g = make_graph({"a": [2, 1, 2, 3], "b": [4, 3, 2], "v": [3], "w": [3, 5]},
                   [op("mm", "matmul", ["a", "b"]), op("vm", "matmul", ["v", "w"])], ["mm", "vm"])
    a = np.arange(12, dtype=np.float32).reshape(2, 1, 2, 3)
    b = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    v = np.array([1, 2, 3], np.float32)
    w = np.arange(15, dtype=np.float32).reshape(3, 5)
    out = run_reference(g, {"a": a, "b": b, "v": v, "w": w})
    assert out["mm"].shape == (2, 4, 2, 2)
    expected = sum(a[1, 0, 1, k] * b[3, k, 0] for k in range(3))
    assert out["mm"][1, 3, 1, 0] == expected
    assert out["vm"].shape == (5,) and out["vm"][4] == 1 * 4 + 2 * 9 + 3 * 14


def _naive_conv(x, w, bias, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    ho = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, ho, wo))
    per = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // per
            for i in range(ho):
                for j in range(wo):
                    acc = bias[oc] if bias is not None else 0.0
                    for cc in range(ci):
                        for p in range(kh):
                            for q in range(kw):
                                y = i * stride[0] - pad[0] + p * dil[0]
                                z = j * stride[1] - pad[1] + q * dil[1]
                                if 0 <= y < h and 0 <= z < wd:
                                    acc += x[b, g * ci + cc, y, z] * w[oc, cc, p, q]
                    out[b, oc, i, j] = acc
    return out


@pytest.mark.parametrize("stride,pad,dil,groups", [((1, 1), (1, 1, 1, 1), (1, 1), 1), ((2, 1), (0, 1, 2, 0), (1, 2), 2)])
def test_conv2d_matches_naive_loops(stride, pad, dil, groups):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4 // groups, 3, 2)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    g = make_graph({"x": [2, 4, 7, 6], "w": list(w.shape), "b": [6]},
                   [op("y", "conv2d", ["x", "w", "b"], strides=list(stride), pads=list(pad), dilations=list(dil),
                       groups=groups)], ["y"])
    y = run_reference(g, {"x": x, "w": w, "b": bias})["y"]
    np.testing.assert_allclose(y, _naive_conv(x, w, bias, stride, pad, dil, groups), rtol=1e-5, atol=1e-5)


def test_layer_norm_on_float16_near_300_stays_finite_and_matches_float32():
    rng = np.random.default_rng(0)
    x = (300 + rng.standard_normal((4, 64)) * 20).astype(np.float16)
    g = make_graph({"x": ([4, 64], "float16")},
                   [op("y", "layer_norm", ["x"], axes=[-1], eps=1e-5)], ["y"])
    y = run_reference(g, {"x": x})["y"]
    assert y.dtype == np.float16 and np.isfinite(y).all()
    xf = x.astype(np.float64)
    mean = xf.mean(-1, keepdims=True)
    ref = (xf - mean) / np.sqrt(((xf - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y.astype(np.float64), ref, atol=4e-3)


def test_softmax_log_softmax_rms_norm_and_linear():
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 1000.0]], np.float32)
    w = np.array([0.5, 1.0, 2.0], np.float32)
    lw = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = make_graph({"x": [2, 3], "w": [3], "lw": [2, 3]}, [
        op("sm", "softmax", ["x"], axis=-1), op("ls", "log_softmax", ["x"], axis=0),
        op("rn", "rms_norm", ["x", "w"], eps=1e-6), op("ln", "linear", ["x", "lw"])], ["sm", "ls", "rn", "ln"])
    out = run_reference(g, {"x": x, "w": w, "lw": lw})
    row = [math.exp(v - 3) for v in (1, 2, 3)]
    np.testing.assert_allclose(out["sm"][0], [r / sum(row) for r in row], rtol=1e-6)
    assert out["sm"][1].tolist() == [0.0, 0.0, 1.0]  # stable under a large logit
    col = [1.0, -1.0]
    lse = math.log(sum(math.exp(v) for v in col))
    np.testing.assert_allclose(out["ls"][:, 0], [v - lse for v in col], rtol=1e-6)
    rms = math.sqrt((1 + 4 + 9) / 3 + 1e-6)
    np.testing.assert_allclose(out["rn"][0], [1 / rms * 0.5, 2 / rms, 3 / rms * 2], rtol=1e-6)
    assert out["ln"][0].tolist() == [0 * 1 + 1 * 2 + 2 * 3, 3 * 1 + 4 * 2 + 5 * 3]


def test_stated_dtype_casts_the_promoted_result():
    g = make_graph({"a": ([2], "float32")}, [{"name": "y", "op": "mul", "inputs": ["a", 3.0], "dtype": "int32"}],
                   ["y"])
    assert run_reference(g, {"a": np.array([0.9, -1.2], np.float32)})["y"].tolist() == [2, -3]


def test_input_values_are_seeded_and_gather_indices_in_range():
    g = make_graph({"t": [5, 2], "i": ([7], "int64")}, [op("y", "gather", ["t", "i"], axis=0)], ["y"])
    a, b = run_reference(g, seed=3), run_reference(g, seed=3)
    assert np.array_equal(a["y"], b["y"]) and a["i"].max() < 5


def test_reference_rejects_custom_and_bad_inputs():
    g = make_graph({"a": [2]}, [{"name": "c", "op": "custom", "inputs": ["a"], "attrs": {"kind": "k"},
                                 "shape": [2], "dtype": "float32"}], ["c"])
    with pytest.raises(NotImplementedError, match="custom"):
        run_reference(g)
    g = make_graph({"a": [2]}, [op("e", "exp", ["a"])], ["e"])
    with pytest.raises(ValueError, match="must be float32"):
        run_reference(g, {"a": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="not a graph input"):
        run_reference(g, {"zz": np.zeros(2, np.float32)})


def test_every_primitive_has_a_tested_reference():
    tested = set(UNARY) | {"log", "sqrt", "rsqrt", "reciprocal", "leaky_relu", "clamp", "cast", "logical_not",
                           "maximum", "minimum", "reduce_max", "reduce_min", "relu", "add", "mul", "div", "sub",
                           "reduce_sum", "reduce_mean", "reduce_prod", "argmax", "argmin", "lt", "ge", "eq",
                           "logical_and", "logical_or", "where", "pow", "reshape", "transpose", "slice",
                           "broadcast_to", "concat", "pad", "gather", "matmul", "conv2d", "custom", "ne", "le",
                           "gt"}
    tested |= {"floor_divide", "remainder", "fmod", "trunc", "arange", "cumsum", "max_pool2d",
               "avg_pool2d"}  # tests/test_new_ops.py
    assert set(REGISTRY) <= tested, set(REGISTRY) - tested


def test_float64_to_bfloat16_rounds_once():
    g = make_graph({"x": ([3], "float64")}, [op("y", "cast", ["x"], dtype="bfloat16")], ["y"])
    x = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, -(1 + 2**-8 + 2**-30)])
    y = run_reference(g, {"x": x})["y"].astype(np.float64)
    assert y.tolist() == [1 + 2**-7, 1.0, -(1 + 2**-7)]


def test_keep_drops_every_other_value_and_changes_none():
    g = make_graph({"x": [4, 8]}, [op("a", "exp", ["x"]), op("b", "neg", ["a"]), op("c", "add", ["a", "b"]),
                                   op("d", "mul", ["c", 2.0])], ["d", "b"])
    everything = run_reference(g, seed=3)
    kept = run_reference(g, seed=3, keep=g.outputs)
    assert set(kept) == {"d", "b"}
    for name in kept:
        np.testing.assert_array_equal(kept[name], everything[name])


def test_drawn_indices_stay_in_range_through_ops_that_move_values():
    """BERT's token types reach an embedding through expand, a torch.gather and a
    broadcast: drawn at random in [0, 16), they once indexed a table of 2 rows."""
    g = make_graph({"types": ([1, 8], "int64"), "pos": ([1, 4], "int64"), "table": [2, 3]},
                   [op("e", "broadcast_to", ["types"], shape=[2, 8]), op("flat", "reshape", ["e"], shape=[16]),
                    op("picked", "gather", ["flat", "pos"], axis=0), op("t", "transpose", ["picked"]),
                    op("rows", "gather", ["table", "t"], axis=0)], ["rows"])
    for seed in range(5):
        values = run_reference(g, seed=seed)
        assert values["types"].max() < 2 and values["pos"].max() < 16
