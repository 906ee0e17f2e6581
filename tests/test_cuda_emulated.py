"""Every CUDA template, executed on the CPU emulator and checked against NumPy.

The kernels are the very sources the GPU would run; only their launcher differs.
Shapes are small and odd on purpose (1, 31, 33, 127, 1023, primes).
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from re import compile as re_compile

import ml_dtypes
import numpy as np
import pytest

from backends.check import run_and_check
from backends.cuda import CudaBackend
from backends.cuda.emulate import EmulatorError
from backends.cuda.emulate import run as run_emulated
from backends.cuda.kernels.common import environment
from backends.cuda.render import render
from backends.numpy_backend import NumpyBackend
from partitioner import load_graph, partition, run_reference
from partitioner.ops import conv2d_output
from partitioner.reference import input_values

from .conftest import ROOT, make_graph, op

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
EMULATOR = CudaBackend(emulate=True)


def check(graph, strategies=("none", "ilp"), inputs=None):
    """Emulate each strategy's plan and assert every output matches the reference."""
    for strategy in strategies:
        checks = run_and_check(partition(graph, strategy), EMULATOR, inputs=inputs)
        bad = [c for c in checks if not c.ok]
        assert not bad, f"{strategy}: {bad}"


def with_specials(shape, dtype="float32", seed=0):
    """Normal values with NaN, +inf, -inf and zeros sprinkled in."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[3::11] = np.inf
    flat[5::13] = -np.inf
    flat[1::17] = 0.0
    return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_unary_ops_in_chains(dtype):
    chain = ["exp", "tanh", "sigmoid", "silu", "erf", "gelu", "sin", "cos", "square", "neg", "abs", "relu",
             "identity"]
    ops, prev = [], "x"
    for k in chain:
        ops.append(op(f"u_{k}", k, [prev]))
        prev = f"u_{k}"
    ops += [op("a", "abs", ["x"]), op("a1", "add", ["a", 1.0]), op("sq", "sqrt", ["a1"]), op("lg", "log", ["sq"]),
            op("rs", "rsqrt", ["lg"]), op("rc", "reciprocal", ["rs"]), op("ln", "logical_not", ["x"]),
            op("gt", "gelu", ["x"], approximate="tanh"), op("lr", "leaky_relu", ["x"], alpha=0.2),
            op("cl", "clamp", ["x"], min=-0.5, max=0.75)]
    outputs = [o["name"] for o in ops]
    g = make_graph({"x": ([31, 33], dtype)}, ops, outputs, dtype=dtype)
    check(g)
    check(g, ("ilp",), inputs={"x": with_specials((31, 33), dtype)})


def test_binary_ops_broadcast_in_every_position_with_nan_and_inf():
    shapes = {"y0": [5], "y1": [31, 1], "y2": [3, 1, 1], "y3": [1, 31, 5], "y4": [3, 31, 1], "y5": []}
    ops = []
    for k, name in enumerate(shapes):
        kind = ["add", "sub", "mul", "div", "maximum", "minimum"][k]
        ops.append(op(f"b{k}", kind, ["x", name]))
    ops += [op("p", "pow", ["x", 2.0]), op("lt", "lt", ["x", "y3"]), op("ge", "ge", ["y1", "x"]),
            op("eq", "eq", ["x", "y0"]), op("ne", "ne", ["x", 0.5]), op("le", "le", ["x", "y4"]),
            op("gt", "gt", ["x", "y2"]), op("and", "logical_and", ["lt", "ge"]), op("or", "logical_or", ["eq", "ne"]),
            op("w", "where", ["and", "x", "y1"]), op("w2", "where", ["or", 1.5, "y0"])]
    inputs = {"x": [3, 31, 5], **shapes}
    g = make_graph(inputs, ops, [o["name"] for o in ops])
    check(g)
    specials = {name: with_specials(s or (), seed=k) for k, (name, s) in enumerate({"x": [3, 31, 5], **shapes}.items())}
    check(g, ("none",), inputs=specials)


def test_integer_arithmetic_wraps_and_promotes_like_numpy():
    g = make_graph({"i": ([37], "int8"), "j": ([37], "int32"), "k": ([37], "int64")}, [
        op("s8", "add", ["i", 120]), op("m8", "mul", ["i", "i"]), op("d", "div", ["j", "k"]),
        op("p", "pow", ["j", 3]), op("n", "neg", ["k"]), op("h", "add", ["j", 0.5]), op("mx", "maximum", ["i", "j"]),
        op("c", "cast", ["h"], dtype="int32"), op("b", "cast", ["j"], dtype="bool"), op("bs", "add", ["b", 1])],
        ["s8", "m8", "d", "p", "n", "h", "mx", "c", "b", "bs"])
    rng = np.random.default_rng(3)
    check(g, inputs={"i": rng.integers(-128, 128, 37).astype(np.int8), "j": rng.integers(-50, 50, 37).astype(np.int32),
                     "k": rng.integers(1, 9, 37)})


def test_casts_round_once_at_every_step():
    g = make_graph({"x": ([33], "float64")}, [
        op("h", "cast", ["x"], dtype="float16"), op("b", "cast", ["h"], dtype="bfloat16"),
        op("f", "cast", ["x"], dtype="bfloat16"), op("i", "cast", ["b"], dtype="int32"),
        op("back", "cast", ["i"], dtype="float64"), op("s", "mul", ["b", "f"])], ["h", "b", "f", "back", "s"])
    x = np.concatenate([np.random.default_rng(1).standard_normal(30) * 100, [1 + 2**-8 + 2**-30, 65519.0, -70000.0]])
    check(g, inputs={"x": x})


@pytest.mark.parametrize("shape,axes", [((7, 1023), [-1]), ((5, 127), [1]), ((33, 31), [0]), ((4, 9, 6), [0, 2]),
                                        ((1, 31), None), ((31, 1), [1])])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_rows_columns_and_whole_tensors(shape, axes, keepdims):
    kinds = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"]
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    ops = [op(k, k, ["x"], **attrs) for k in kinds]
    if axes is None or len(axes) == 1:
        arg_attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
        ops += [op("amax", "argmax", ["x"], **arg_attrs), op("amin", "argmin", ["x"], **arg_attrs)]
    g = make_graph({"x": list(shape)}, ops, [o["name"] for o in ops])
    check(g)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::5] = np.nan  # NaN propagates through max/min and wins argmax/argmin
    check(g, ("ilp",), inputs={"x": x})


def test_half_reductions_accumulate_in_float32():
    g = make_graph({"x": ([3, 1023], "float16"), "b": ([3, 200], "bfloat16")},
                   [op("s", "reduce_sum", ["x"], axes=[-1]), op("m", "reduce_mean", ["b"], axes=[1], keepdims=True)],
                   ["s", "m"])
    check(g, inputs={"x": np.ones((3, 1023), np.float16), "b": np.full((3, 200), 0.1, ml_dtypes.bfloat16)})


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_log_softmax_rows_and_columns(axis):
    g = make_graph({"x": ([33, 127], "float16")}, [op("s", "softmax", ["x"], axis=axis),
                                                   op("l", "log_softmax", ["x"], axis=axis)], ["s", "l"],
                   dtype="float16")
    check(g)


def test_a_float32_softmax_of_scores_near_400_passes_against_the_references_spread():
    """exp turns the scores' absolute rounding errors into relative ones: the kernels
    were at 7.1 times the ulp-based tolerance (a false failure), and are at 0.23 of
    the reference's spread under random rounding (backends/check.py)."""
    from .test_tolerance import hot_softmax

    g = hot_softmax()
    for strategy in ("none", "ilp"):
        checks = run_and_check(partition(g, strategy), EMULATOR)
        assert all(c.ok for c in checks) and any(c.ill_conditioned for c in checks), checks


def _erf_of_shifted_products():
    """erf's slope at 0 passes the products' absolute rounding errors (K = 64, values
    near 58) on to a result of at most 1 (found by a kernel fuzz: 1.07 of the ulp rule
    unfused, 1.82 in a greedy plan of its original graph)."""
    return make_graph({"a": [2, 32, 64], "b": [2, 64, 16]},
                      [op("s", "matmul", ["a", "b"]), op("s2", "mul", ["s", 2.0]),
                       op("m", "reduce_max", ["s2"], axes=[-1], keepdims=True), op("d", "sub", ["s2", "m"]),
                       op("y", "erf", ["d"])], ["y"])


def _mean_of_a_layer_norm():
    """The mean of normalised values is 0 up to rounding (about 1e-8), the scale the
    ulp rule took: 4.96e5 times it, for an error of 5.6e-8 (found by a kernel fuzz)."""
    return make_graph({"x": [1, 64]}, [op("ln", "layer_norm", ["x"]), op("m", "reduce_mean", ["ln"], axes=[1],
                                                                          keepdims=True)], ["m"])


@pytest.mark.parametrize("graph", [_erf_of_shifted_products, _mean_of_a_layer_norm], ids=["erf", "mean"])
def test_outputs_whose_rounding_errors_carry_far_pass_against_the_references_spread(graph):
    checks = run_and_check(partition(graph(), "none"), EMULATOR)
    assert all(c.ok and c.ill_conditioned for c in checks), checks


def test_layer_norm_on_float16_values_near_300_stays_finite():
    g = make_graph({"x": ([6, 200], "float16"), "w": ([200], "float16"), "b": ([200], "float16")},
                   [op("y", "layer_norm", ["x", "w", "b"], eps=1e-5)], ["y"], dtype="float16")
    x = (300 + np.random.default_rng(4).standard_normal((6, 200)) * 20).astype(np.float16)
    plan = partition(g, "ilp")
    assert [c.kind for c in plan.cost.groups] == ["reduction"]
    check(g, inputs={"x": x})
    out = EMULATOR.run(EMULATOR.build(EMULATOR.render(plan)), {**input_values(g), "x": x})["y"].astype(np.float64)
    xf = x.astype(np.float64)
    ref = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5)
    w = input_values(g)["w"].astype(np.float64)
    b = input_values(g)["b"].astype(np.float64)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref * w + b, atol=2e-2, rtol=1e-2)


def test_rms_norm_and_silu_gated_mlp_in_bfloat16():
    g = make_graph({"x": ([9, 64], "bfloat16"), "w": ([64], "bfloat16"), "up": ([96, 64], "bfloat16"),
                    "gate": ([96, 64], "bfloat16"), "down": ([64, 96], "bfloat16")},
                   [op("n", "rms_norm", ["x", "w"], eps=1e-6), op("g", "linear", ["n", "gate"]),
                    op("u", "linear", ["n", "up"]), op("s", "silu", ["g"]), op("h", "mul", ["s", "u"]),
                    op("y", "linear", ["h", "down"]), op("r", "add", ["y", "x"])], ["r"], dtype="bfloat16")
    check(g)


def test_layout_ops_fused_as_index_arithmetic():
    g = make_graph({"x": [4, 31, 6], "y": [6, 31], "v": [5]}, [
        op("t", "transpose", ["x"], perm=[2, 1, 0]), op("e", "exp", ["t"]),
        op("s", "slice", ["e"], starts=[-1, 2], ends=[-7, 29], axes=[0, 1], steps=[-2, 3]),
        op("r", "reshape", ["x"], shape=[124, 6]), op("rt", "transpose", ["r"]),
        op("c", "concat", ["y", "rt", "y"], axis=1), op("p", "pad", ["c"], pads=[1, 0, 2, 3], value=-2.0),
        op("vb", "broadcast_to", ["v"], shape=[3, 5]), op("vn", "neg", ["vb"]),
        op("n", "mul", ["p", 0.5])], ["s", "n", "vn"])
    check(g)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_matmul_with_prologue_and_epilogue(dtype):
    g = make_graph({"x": ([33, 37], dtype), "w": ([31, 37], dtype), "b": ([31], dtype), "res": ([33, 31], dtype)}, [
        op("xs", "mul", ["x", 0.5]), op("wt", "transpose", ["w"]), op("mm", "matmul", ["xs", "wt"]),
        op("a", "add", ["mm", "b"]), op("g", "gelu", ["a"]), op("y", "add", ["g", "res"])], ["y"], dtype=dtype)
    plan = partition(g, "ilp")
    assert [c.kind for c in plan.cost.groups] == ["contraction"]
    check(g)


def test_batched_broadcast_and_vector_matmuls():
    g = make_graph({"a": ([2, 1, 17, 33], "float16"), "b": ([3, 33, 19], "float16"), "v": ([33], "float16"),
                    "i": ([5, 7], "int32"), "j": ([7, 3], "int32")},
                   [op("mm", "matmul", ["a", "b"]), op("vm", "matmul", ["v", "b"]), op("ii", "matmul", ["i", "j"])],
                   ["mm", "vm", "ii"], dtype="float16")
    check(g)


@pytest.mark.parametrize("dtype,attrs", [
    ("float16", {"strides": [2, 1], "pads": [1, 2, 0, 1], "dilations": [1, 2], "groups": 2}),
    ("float32", {"pads": [1, 1, 1, 1]}),
])
def test_conv2d_with_bias_and_epilogue(dtype, attrs):
    g = make_graph({"x": ([2, 4, 9, 11], dtype), "w": ([6, 4 // attrs.get("groups", 1), 3, 2], dtype),
                    "bias": ([6], dtype), "scale": ([6, 1, 1], dtype)},
                   [op("c", "conv2d", ["x", "w", "bias"], **attrs), op("s", "mul", ["c", "scale"]),
                    op("r", "relu", ["s"])], ["r"], dtype=dtype)
    check(g)


# Convs whose A tile is staged as input rows (cost.ConvRows) and whose output tile is
# stored run by run (cost.ConvOutRuns): several M tiles whose images straddle them,
# several K tiles, windows in the padding, rows wider than a tile, groups.
STAGED_CONVS = {
    "1x1_flattened_images": ((5, 36, 7, 7), (20, 36, 1, 1), {}, "float32"),
    "1x1_stride_2": ((2, 48, 14, 14), (32, 48, 1, 1), {"strides": [2, 2]}, "float16"),
    "stem_7x7_stride_2": ((2, 3, 38, 38), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, "float16"),
    "dilated_rows_wider_than_a_tile": ((1, 4, 5, 150), (8, 4, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]},
                                       "float16"),
    "depthwise": ((2, 8, 6, 6), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "groups": 8}, "bfloat16"),
    # whole images in a tile, stored as one run over their channels, in two N tiles
    "whole_images_two_n_tiles": ((3, 16, 5, 5), (200, 16, 1, 1), {}, "float16"),
    "3x3_images": ((20, 16, 3, 3), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, "float32"),
}


@pytest.mark.parametrize("case", sorted(STAGED_CONVS))
def test_staged_conv_rows_and_output_runs(case):
    """A prologue (a per-channel scale and a ReLU) is applied to the staged rows, and an
    epilogue (a residual add of the output's shape and a ReLU) to the stored runs."""
    x, w, attrs, dtype = STAGED_CONVS[case]
    out = conv2d_output(x, w, {"strides": [1, 1], "pads": [0] * 4, "dilations": [1, 1], "groups": 1, **attrs})
    g = make_graph({"x": (list(x), dtype), "s": ([x[1], 1, 1], dtype), "w": (list(w), dtype), "r": (list(out), dtype)},
                   [op("xs", "mul", ["x", "s"]), op("xr", "relu", ["xs"]), op("c", "conv2d", ["xr", "w"], **attrs),
                    op("y", "add", ["c", "r"]), op("z", "relu", ["y"])], ["z"], dtype=dtype)
    plan = partition(g, "ilp")
    (conv,) = [k for k in render(plan).kernels if k.kind == "contraction"]
    assert "run_span" in conv.source and "out_tile" in conv.source  # both staged, or the case tests nothing
    check(g, strategies=("ilp",), inputs=input_values(g, 1))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_an_8_bit_float_conv_fits_the_shared_memory_it_is_given(dtype):
    """Its tiles hold float32 registers, not bytes: the estimate counted 1 byte per
    element and the kernel overran its shared memory by 4x (the emulator aborted)."""
    g = make_graph({"x": [2, 8, 9, 11], "w": [16, 8, 3, 3]}, [op("y", "conv2d", ["x", "w"], pads=[1, 1, 1, 1])],
                   ["y"], dtype=dtype)
    check(g, strategies=("ilp",), inputs=input_values(g, 1))


def test_gather_single_op_kernel():
    g = make_graph({"t": ([13, 6], "float16"), "i": ([4, 3], "int64")},
                   [op("g", "gather", ["t", "i"], axis=0), op("e", "exp", ["g"])], ["e"], dtype="float16")
    check(g, inputs={"i": np.array([[0, -1, 5], [12, -13, 3], [1, 1, 1], [7, 8, 9]])})


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_fused_half_chains_are_bit_identical_to_unfused(dtype):
    chain = [("mul", 0.7978845608028654), ("add", 0.044715), ("tanh", None), ("mul", "x"), ("exp", None),
             ("sub", 1.0), ("sigmoid", None), ("div", "x")]
    ops, prev = [], "x"
    for k, (kind, arg) in enumerate(chain):
        ops.append(op(f"o{k}", kind, [prev] if arg is None else [prev, arg]))
        prev = f"o{k}"
    g = make_graph({"x": ([3, 257], dtype)}, ops, [prev], dtype=dtype)
    values = input_values(g, 5)
    outs = []
    for strategy in ("none", "ilp"):
        plan = partition(g, strategy)
        out = EMULATOR.run(EMULATOR.build(EMULATOR.render(plan)), values)[prev]
        outs.append(out.view(np.uint16))
    assert partition(g, "ilp").cost.launches == 1 and partition(g, "none").cost.launches == len(chain)
    assert np.array_equal(outs[0], outs[1])


def _shrunk(path, sizes):
    """The graph file with every listed dimension replaced (the ops are size-agnostic)."""
    import yaml

    data = yaml.safe_load(path.read_text())
    for entry in data["inputs"]:
        entry["shape"] = [sizes.get(d, d) for d in entry["shape"]]
    return load_graph(data)


@pytest.mark.parametrize("name,sizes", [
    ("layernorm_f16", {8192: 33, 4096: 130}),
    ("softmax_f16", {16: 2, 12: 3, 512: 37}),
    ("mlp_gelu_f16", {8192: 35, 1024: 40, 4096: 72}),
    ("residual_block_f16", {32: 2, 64: 8, 56: 9}),
])
def test_handwritten_graphs_at_reduced_shapes_match_numpy_backend(name, sizes):
    g = _shrunk(ROOT / "graphs" / f"{name}.yaml", sizes)
    for strategy in ("greedy", "ilp"):
        plan = partition(g, strategy)
        values = input_values(g, 1)
        emulated = EMULATOR.run(EMULATOR.build(EMULATOR.render(plan)), values)
        numpy_run = NumpyBackend().run(plan, values)
        for out in g.outputs:
            got, want = emulated[g.storage[out]], numpy_run[g.storage[out]]
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-2)
        check(g, (strategy,))


def test_kernels_run_only_what_crosses_group_boundaries():
    g = make_graph({"x": [31]}, [op("a", "exp", ["x"]), op("b", "neg", ["a"]), op("c", "abs", ["b"])], ["c"])
    rendered = render(partition(g, "ilp"))
    written = run_emulated(rendered, input_values(g))
    assert set(written) == {"c"}  # a and b stay in registers


def test_empty_tensors_need_no_kernel_and_empty_means_are_nan():
    g = make_graph({"x": [0, 5], "w": [5, 3], "r": [4, 0]},
                   [op("m", "matmul", ["x", "w"]), op("e", "exp", ["m"]), op("s", "reduce_sum", ["r"], axes=[1]),
                    op("mean", "reduce_mean", ["r"], axes=[1])], ["e", "s", "mean"])
    check(g)


# ---------------------------------------------------------------- regressions from a break-it pass


def test_stated_integer_dtypes_of_layout_ops_convert_like_numpy():
    g = make_graph({"x": [3]}, [
        {"name": "p", "op": "pad", "inputs": ["x"], "attrs": {"pads": [1, 0], "value": 127}, "dtype": "int8"},
        op("a", "add", ["x", 127.0]),
        {"name": "c", "op": "concat", "inputs": ["a"], "attrs": {"axis": 0}, "dtype": "int8"},
        {"name": "big", "op": "pad", "inputs": ["x"], "attrs": {"pads": [1, 0], "value": 1.0e10}, "dtype": "int32"}],
        ["p", "c", "big"])
    check(g, ("none", "ilp"), inputs={"x": np.array([0.2, -3.7, 9.9], np.float32)})


def test_pad_values_round_to_the_tensor_dtype_and_fuse_bit_identically():
    g = make_graph({"x": ([4], "float16")}, [op("p", "pad", ["x"], pads=[1, 0], value=70000),
                                             op("q", "pad", ["x"], pads=[0, 2], value=0.1),
                                             op("y", "mul", ["p", 0.5]), op("z", "mul", ["q", 3.0])], ["y", "z"],
                   dtype="float16")
    check(g, ("none", "greedy", "ilp"))
    values = input_values(g, 2)
    bits = [EMULATOR.run(EMULATOR.build(EMULATOR.render(partition(g, s))), values)["z"].view(np.uint16)
            for s in ("none", "ilp")]
    assert np.array_equal(bits[0], bits[1])


def test_where_with_a_literal_rounds_the_literal_like_the_reference():
    g = make_graph({"c": ([4], "bool"), "x": ([4], "float16")}, [op("w", "where", ["c", "x", 65519.999])], ["w"],
                   dtype="float16")
    check(g)


def test_empty_computed_tensors_feeding_non_empty_results():
    g = make_graph({"x": [4]}, [op("s", "slice", ["x"], starts=[2], ends=[2]),
                                op("p", "pad", ["s"], pads=[1, 1], value=3.0), op("e", "exp", ["s"]),
                                op("r", "reduce_sum", ["e"])], ["p", "r"])
    check(g, ("none", "ilp"))


def test_deep_layout_chains_render_linear_not_exponential_code():
    ops, prev = [], "x"
    for k in range(12):
        ops += [op(f"s{k}", "slice", [prev], starts=[1], ends=[1000]), op(f"p{k}", "pad", [f"s{k}"], pads=[0, 1]),
                op(f"v{k}", "add", [prev, f"p{k}"])]
        prev = f"v{k}"
    g = make_graph({"x": [64]}, ops, [prev])
    kernels = render(partition(g, "greedy")).kernels
    assert sum(len(k.source) for k in kernels) < 100_000
    check(g, ("greedy",))


def test_integer_and_bool_max_min_and_half_gathers_of_int64_data():
    g = make_graph({"i": ([5, 9], "int8"), "b": ([5, 9], "bool"), "t": ([7, 5], "int64"), "k": ([3], "int32")}, [
        op("mx", "reduce_max", ["i"], axes=[1]), op("mn", "reduce_min", ["b"], axes=[0]),
        op("am", "argmax", ["b"], axes=[1]),
        {"name": "g", "op": "gather", "inputs": ["t", "k"], "attrs": {"axis": 0}, "dtype": "float16"}],
        ["mx", "mn", "am", "g"])
    check(g, inputs={"k": np.array([0, -1, 3], np.int32)})


# ---------------------------------------------------------------- layout chains in contraction operands
# Every index of a prologue chain comes from one kernel-wide namespace (codegen.Names): a
# chain that regroups batch axes once declared a variable reading itself (exit -11, inf).

LAYOUT_CHAINS = {
    # grouped-query K: 2 heads expanded to 4 through a reshape that merges the broadcast axis
    "gqa_expand_on_b": ({"q": [1, 4, 8, 16], "k": [1, 2, 8, 16]}, [
        op("k5", "reshape", ["k"], shape=[1, 2, 1, 8, 16]), op("kb", "broadcast_to", ["k5"], shape=[1, 2, 2, 8, 16]),
        op("k4", "reshape", ["kb"], shape=[1, 4, 8, 16]), op("kt", "transpose", ["k4"], perm=[0, 1, 3, 2]),
        op("s", "matmul", ["q", "kt"])]),
    "gqa_expand_on_a": ({"q": [1, 2, 8, 16], "k": [1, 4, 16, 8]}, [
        op("q5", "reshape", ["q"], shape=[1, 2, 1, 8, 16]), op("qb", "broadcast_to", ["q5"], shape=[1, 2, 2, 8, 16]),
        op("q4", "reshape", ["qb"], shape=[1, 4, 8, 16]), op("s", "matmul", ["q4", "k"])]),
    "expand_inner_axis": ({"a": [2, 5, 16], "k": [2, 8, 1, 16]}, [
        op("kb", "broadcast_to", ["k"], shape=[2, 8, 3, 16]), op("k3", "reshape", ["kb"], shape=[2, 24, 16]),
        op("kt", "transpose", ["k3"], perm=[0, 2, 1]), op("s", "matmul", ["a", "kt"])]),
    "expand_transpose_reshape": ({"a": [5, 16], "x": [1, 16, 4]}, [
        op("xb", "broadcast_to", ["x"], shape=[3, 16, 4]), op("xt", "transpose", ["xb"], perm=[1, 0, 2]),
        op("xr", "reshape", ["xt"], shape=[16, 12]), op("s", "matmul", ["a", "xr"])]),
    # a compute op feeding the right operand through reshape -> transpose, with batch dims
    "compute_reshape_transpose_on_b": ({"a": [2, 4, 16, 32], "x": [2, 16, 128]}, [
        op("e", "exp", ["x"]), op("r", "reshape", ["e"], shape=[2, 16, 4, 32]),
        op("t", "transpose", ["r"], perm=[0, 2, 3, 1]), op("s", "matmul", ["a", "t"])]),
    "compute_reshape_transpose_on_a": ({"x": [2, 16, 128], "b": [2, 4, 32, 8]}, [
        op("e", "exp", ["x"]), op("r", "reshape", ["e"], shape=[2, 16, 4, 32]),
        op("t", "transpose", ["r"], perm=[0, 2, 1, 3]), op("s", "matmul", ["t", "b"])]),
    "weight_reshape_transpose_no_batch": ({"a": [5, 16], "w": [3, 8, 16]}, [
        op("w2", "reshape", ["w"], shape=[24, 16]), op("wt", "transpose", ["w2"]), op("s", "matmul", ["a", "wt"])]),
    "both_operands_with_batch_broadcast": ({"a": [2, 1, 8, 16], "k": [3, 16, 1, 4]}, [
        op("an", "neg", ["a"]), op("kb", "broadcast_to", ["k"], shape=[3, 16, 2, 4]),
        op("kr", "reshape", ["kb"], shape=[3, 16, 8]), op("s", "matmul", ["an", "kr"])]),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(LAYOUT_CHAINS))
def test_layout_chains_in_contraction_operands(case, dtype):
    inputs, ops = LAYOUT_CHAINS[case]
    g = make_graph({name: (shape, dtype) for name, shape in inputs.items()}, ops, ["s"], dtype=dtype)
    fused = partition(g, "ilp")
    assert [c.kind for c in fused.cost.groups if c.kind != "view"] == ["contraction"]
    check(g)


# Operands read as they are stored move into shared memory by 16-byte cp.async copies:
# (graph inputs, ops, which operands are copied). A row-major operand is consecutive
# along k of A or n of B, a transposed one (a weight as Llama stores it, an activation
# transposed) along m of A or k of B, whose tile is then column-major. M, N and K are no
# multiples of the 128 x 128 x 32 tile, so the copies' bounds checks zero-fill.
COPIED_OPERANDS = {
    "rows_rows": ({"x": [200, 72], "w": [72, 136]}, [op("s", "matmul", ["x", "w"])], "ab"),
    "rows_transposed_weight": ({"x": [200, 72], "w": [136, 72]}, [
        op("wt", "transpose", ["w"], perm=[1, 0]), op("s", "matmul", ["x", "wt"])], "ab"),
    "transposed_activation": ({"x": [72, 200], "w": [72, 136]}, [
        op("xt", "transpose", ["x"], perm=[1, 0]), op("s", "matmul", ["xt", "w"])], "ab"),
    "batched_broadcast_weight": ({"x": [3, 40, 32], "w": [2, 3, 32, 24]}, [
        op("xr", "reshape", ["x"], shape=[3, 40, 32]), op("s", "matmul", ["xr", "w"])], "ab"),
    # K = 60: a run of 8 would straddle the end of a row, so A and the transposed B load by element
    "k_not_a_multiple_of_8": ({"x": [50, 60], "w": [40, 60]}, [
        op("wt", "transpose", ["w"], perm=[1, 0]), op("s", "matmul", ["x", "wt"])], ""),
    "computed_prologue": ({"x": [50, 64], "w": [64, 40]}, [
        op("xs", "mul", ["x", 0.5]), op("s", "matmul", ["xs", "w"])], "b"),
    # a transpose of batch axes keeps each row of A consecutive along k (x[m, bz, k])
    "transposed_batch_axes": ({"x": [4, 24, 16], "w": [24, 16, 8]}, [
        op("xt", "transpose", ["x"], perm=[1, 0, 2]), op("s", "matmul", ["xt", "w"])], "ab"),
    # a copy (clone) of a head-split permute, GPT-2's and Llama's attention output into the
    # output projection: rows of 64 consecutive elements per head along k
    "clone_of_head_permute": ({"x": [2, 4, 16, 64], "w": [256, 48]}, [
        op("xp", "transpose", ["x"], perm=[0, 2, 1, 3]), op("xc", "identity", ["xp"]),
        op("xr", "reshape", ["xc"], shape=[32, 256]), op("s", "matmul", ["xr", "w"])], "ab"),
    # a slice of the fused q/k/v projection's output, offset by a multiple of 8 and not
    "slice_at_16": ({"x": [40, 96], "w": [32, 24]}, [
        op("xs", "slice", ["x"], axes=[1], starts=[16], ends=[48]), op("s", "matmul", ["xs", "w"])], "ab"),
    "slice_at_3": ({"x": [40, 96], "w": [32, 24]}, [
        op("xs", "slice", ["x"], axes=[1], starts=[3], ends=[35]), op("s", "matmul", ["xs", "w"])], "b"),
    "conv_weight": ({"x": [2, 16, 10, 10], "w": [24, 16, 3, 3]}, [
        op("s", "conv2d", ["x", "w"], pads=[1, 1, 1, 1])], "b"),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(COPIED_OPERANDS))
def test_operands_read_as_stored_are_copied_16_bytes_at_a_time(case, dtype):
    inputs, ops, copied = COPIED_OPERANDS[case]
    g = make_graph({name: (shape, dtype) for name, shape in inputs.items()}, ops, ["s"], dtype=dtype)
    (kernel,) = [k for k in render(partition(g, "ilp")).kernels if k.kind == "contraction"]
    # A's loops (two where a conv stages its input rows, then gathers the tile), then B's
    *a_loops, b_loop = kernel.source.split("auto load_tiles")[1].split("auto epilogue")[0].split("for (int e")[1:]
    for which, loop in [("a", loop) for loop in a_loops] + [("b", b_loop)]:
        assert ("part_cp_async16(" in loop) == (which in copied), (which, loop)
    check(g, strategies=("ilp",), inputs=input_values(g, 3))


_DECLARED = re_compile(r"\b(?:idx_t|int8_t|int32_t|int64_t|float|double|bool)\s+([a-z]+\d+)\s*[=;\[]")


def test_no_generated_name_is_declared_twice_in_a_kernel(graph_path):
    """Names the emitters generate are unique in a kernel (the contraction template's
    own, a tile's origin ``m0`` and ``n0``, are declared once per part of a horizontal
    group, each in its own scope)."""
    graph = load_graph(graph_path)
    per_part = set(_DECLARED.findall(environment().loader.get_source(environment(), "contraction.cu.j2")[0]))
    assert {"m0", "n0"} <= per_part
    for strategy in ("none", "ilp"):
        for kernel in render(partition(graph, strategy)).kernels:
            names = [n for n in _DECLARED.findall(kernel.source) if n not in per_part]
            assert len(names) == len(set(names)), (kernel.name, sorted({n for n in names if names.count(n) > 1}))


def test_kernels_that_run_past_the_time_limit_are_a_clean_error(monkeypatch):
    """A full-size plan emulated whole (mlp_gelu_f16 without --profile) ran past the
    limit and ended in an internal TimeoutExpired; it is an EmulatorError naming the
    limit and the sampled check."""
    from backends.cuda import emulate

    g = make_graph({"x": [64]}, [op("y", "exp", ["x"])], ["y"])
    rendered = render(partition(g, "ilp"))
    monkeypatch.setattr(emulate, "TIMEOUT_S", 1e-9)
    with pytest.raises(EmulatorError, match=r"ran past 1e-09 s .* --profile checks a large plan on sampled blocks"):
        run_emulated(rendered, input_values(g))


def test_a_crashing_kernel_is_named_with_its_signal_and_thread():
    inputs, ops = LAYOUT_CHAINS["compute_reshape_transpose_on_b"]
    g = make_graph(inputs, ops, ["s"])
    rendered = render(partition(g, "ilp"))
    kernel = rendered.kernels[0]
    # read one whole tensor past the end of the input: the guard page after it faults
    rendered.kernels[0] = replace(kernel, source=kernel.source.replace("PART_LDG(in0[", "PART_LDG(in0[4096 + "))
    with pytest.raises(EmulatorError) as failure:
        run_emulated(rendered, input_values(g))
    message = str(failure.value)
    assert "killed by SIGSEGV" in message and "invalid memory access" in message
    assert f"group 0 (contraction: e, r, t, ...), kernel {kernel.name}" in message
    assert "in block (0,0,0) thread (" in message


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_tile_kernels_loop_when_their_tiles_outnumber_the_grid(monkeypatch, dtype):
    """More output tiles than the grid's x limit (2^31 - 1: a 6M-row conv, a batch of
    65536 products, a 2^31-row attention) is no reason to fail: the blocks loop over
    the tiles. The limit is lowered to 3 blocks so that each block takes several tiles
    of a batched product with an epilogue, a grouped conv and an attention layer."""
    from backends.cuda.kernels import common

    from .attention_graphs import attention

    monkeypatch.setattr(common, "MAX_GRID_X", 3)
    graphs = [
        make_graph({"a": [5, 70, 40], "b": [5, 40, 150], "r": [5, 70, 150]},
                   [op("mm", "matmul", ["a", "b"]), op("y", "add", ["mm", "r"])], ["y"], dtype=dtype),
        make_graph({"x": [2, 4, 9, 11], "w": [6, 2, 3, 3]}, [op("c", "conv2d", ["x", "w"], groups=2, pads=[1, 1, 1, 1]),
                                                            op("y", "relu", ["c"])], ["y"], dtype=dtype),
        attention(batch=2, heads=3, sq=130, sk=70, dtype=dtype),
    ]
    for g in graphs:
        plan = partition(g, "ilp")
        kernels = render(plan).kernels
        tiled = [k for k in kernels if k.kind in ("contraction", "attention")]
        assert tiled and all(k.grid == (3, 1, 1) and "gridDim.x" in k.source for k in tiled), \
            [(k.kind, k.grid) for k in kernels]
        check(g, strategies=("ilp",))


def test_an_attention_layer_of_two_billion_query_tiles_renders_at_the_grid_limit():
    g = make_graph({"q": [2**31, 1, 8], "k": [2**31, 2, 8], "v": [2**31, 2, 8]}, [
        op("kt", "transpose", ["k"], perm=[0, 2, 1]), op("s", "matmul", ["q", "kt"]), op("p", "softmax", ["s"]),
        op("o", "matmul", ["p", "v"])], ["o"], dtype="float16")
    (kernel,) = render(partition(g, "ilp")).kernels
    assert kernel.kind == "attention" and kernel.grid == (2**31 - 1, 1, 1) and "gridDim.x" in kernel.source


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int8", "bool"])
def test_transposes_of_the_innermost_axis_are_staged_through_tiles(dtype):
    """A transpose that moves the innermost axis runs as a tiled transpose (partial
    tiles at 70 x 45, two written values of different dtypes, a broadcast operand);
    a rotation in the style of RoPE written transposed for the scores as well."""
    g = make_graph({"x": ([3, 70, 45], dtype), "c": ([70, 45], dtype)}, [
        op("m", "maximum", ["x", "c"]), op("t", "transpose", ["m"], perm=[0, 2, 1]),
        op("f", "cast", ["t"], dtype="float32"), op("n", "logical_not", ["t"])], ["f", "n"], dtype=dtype)
    (kernel,) = render(partition(g, "ilp")).kernels
    assert "tile0" in kernel.source and "tile1" in kernel.source
    check(g, strategies=("ilp",))
    if dtype in ("float16", "bfloat16"):
        r = make_graph({"k": ([2, 33, 3, 40], dtype), "cos": ([33, 40], dtype), "sin": ([33, 40], dtype)}, [
            op("kp", "transpose", ["k"], perm=[0, 2, 1, 3]), op("lo", "slice", ["kp"], axes=[3], starts=[0], ends=[20]),
            op("hi", "slice", ["kp"], axes=[3], starts=[20], ends=[40]), op("nh", "neg", ["hi"]),
            op("rot", "concat", ["nh", "lo"], axis=-1), op("a", "mul", ["kp", "cos"]), op("b", "mul", ["rot", "sin"]),
            op("s", "add", ["a", "b"]), op("st", "transpose", ["s"], perm=[0, 1, 3, 2])], ["st"], dtype=dtype)
        (kernel,) = render(partition(r, "ilp")).kernels
        assert "tile0" in kernel.source
        check(r, strategies=("ilp",))


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 1, 4), (3, 70, 45)])
@pytest.mark.parametrize("after", [None, "exp"])
def test_values_of_other_layouts_written_by_one_kernel(shape, after):
    """Two transposes of one input, in one pointwise group (one iteration space: their
    element count), written side by side: each value is computed at its own
    multi-index of the element's linear position, staged through tiles or not. Each
    was computed at the other's multi-index (out of bounds at 2 x 3 x 4, wrong values
    at 2 x 1 x 4)."""
    ops = [op("t1", "transpose", ["c"], perm=[2, 1, 0]), op("t2", "transpose", ["c"], perm=[1, 2, 0])]
    outputs = ["t1", "t2"]
    if after:
        ops += [op("e1", after, ["t1"]), op("e2", after, ["t2"])]
        outputs = ["e1", "e2"]
    g = make_graph({"c": list(shape)}, ops, outputs)
    plan = partition(g, "ilp")
    assert len(plan.cost.groups) == 1
    check(g, strategies=("ilp",))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape,view", [([4], [-1]), ([4, 3], [4, 3]), ([4, 3], [2, 6]), ([33, 31], [33, 31])])
def test_a_row_read_through_a_view_is_staged_from_its_storage(shape, view, dtype):
    """A reduction group reading an input through a reshape (a free view of its own) to
    the input's own shape stages the input's rows in shared memory for the later
    stages: the row is written there from the storage itself, which the kernel read
    only through the view (a KeyError before)."""
    for reduce in (lambda r: [op("s", "softmax", [r])],
                   lambda r: [op("m", "reduce_max", [r], axes=[-1], keepdims=True), op("s", "sub", [r, "m"])]):
        g = make_graph({"b": (shape, dtype)}, [op("r", "reshape", ["b"], shape=view), *reduce("r")], ["s"],
                       dtype=dtype)
        check(g, strategies=("ilp",))


@pytest.mark.parametrize("x", [[2, 2, 4], [5, 4], [3, 2, 16], [2, 2, 2, 16]])
def test_an_epilogue_over_more_axes_than_the_rows_is_not_read_along_the_row(x):
    """``x * sum(y)`` (and a dead ``x + exp(y)`` beside ``min(exp(y))``), where ``x``
    ends in ``y``'s length but has more axes: the row walk gave ``x`` a vector load,
    indexed by the row's one axis (an IndexError at rank 3 and up; at rank 2 a load
    of the wrong element, never used)."""
    y = [x[-1]]
    check(make_graph({"x": x, "y": y}, [op("m", "reduce_sum", ["y"], keepdims=True), op("o", "mul", ["x", "m"])],
                     ["o"]), strategies=("greedy", "ilp", "inductor"))
    check(make_graph({"x": x, "y": y}, [op("e", "exp", ["y"]), op("a", "add", ["x", "e"]),
                                        op("m", "reduce_min", ["e"])], ["m"]), strategies=("greedy", "ilp", "xla"))


@pytest.mark.parametrize("dtype, value", [("int64", 2**62), ("uint64", 2**63), ("int64", -(2**62) - 7)])
def test_an_integer_mean_accumulates_in_float64(dtype, value):
    """The kernels summed an integer mean in int64 (uint64), which wrapped: the mean
    of two 2^62 came out -2^62, of two 2^63 unsigned 0. NumPy's mean accumulates in
    float64, and so does the format (``dtypes.reduction_accumulator``)."""
    g = load_graph({"format": 1.1, "name": "mean", "inputs": [
        {"name": "x", "shape": [2, 3], "dtype": dtype, "value": [[value, value, value], [value, 1, value]]}],
        "ops": [{"name": "m", "op": "reduce_mean", "inputs": ["x"], "attrs": {"axes": [-1]}}], "outputs": ["m"]})
    assert run_reference(g)["m"][0] == np.float32(value)
    check(g, strategies=("none", "ilp"))


@pytest.mark.parametrize("source,to,stated,values", [
    ("int32", "int8", "int32", [300, 9, 2049, -129]),
    ("int32", "float16", "int32", [2049, 3, -2049, 65519]),
    ("int32", "bfloat16", "int64", [257, 3, -257, 16777217]),
    ("float32", "float16", "float32", [2049.0, 1.0 / 3.0, 65519.0, -1e-8]),
    ("float32", "int8", "float32", [1.5, -1.5, 100.9, -100.9]),
])
def test_a_cast_with_a_stated_dtype_converts_twice(source, to, stated, values):
    """``cast`` to ``to`` whose result the file states as ``stated``: the value goes
    through ``to`` first (int8 wraps 300 to 44; float16 rounds 2049 to 2048), then to
    ``stated``, as the reference does. The kernels skipped the first conversion."""
    g = make_graph({"i": ([4], source)}, [{"name": "o", "op": "cast", "inputs": ["i"], "attrs": {"dtype": to},
                                          "dtype": stated}], ["o"])
    check(g, strategies=("none",), inputs={"i": np.array(values, dtype=source)})


POOL_THEN_LAYOUT = {
    "reversed channels": (
        [1, 3, 4, 4], [op("s", "slice", ["mp"], starts=[-1], ends=[-1000], steps=[-1], axes=[1])]),
    "reversed images": (
        [3, 2, 6, 6], [op("s", "slice", ["mp"], starts=[-1], ends=[-1000], steps=[-1], axes=[0])]),
    "swapped channel halves": (
        [2, 4, 6, 6], [op("hi", "slice", ["mp"], starts=[2], ends=[4], axes=[1]),
                       op("lo", "slice", ["mp"], starts=[0], ends=[2], axes=[1]),
                       op("s", "concat", ["hi", "lo"], axis=1)]),
    "relu": ([2, 3, 7, 7], [op("s", "relu", ["mp"])]),
}


@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("case", sorted(POOL_THEN_LAYOUT))
def test_a_pool_stages_its_plane_only_where_each_output_needs_that_plane(case, pool):
    """A pool in one kernel with a slice or concat that reorders images or channels:
    an output element needs the window over another plane than its own, so the
    kernel stages no rows (it did, and read outside what it staged). After
    elementwise ops alone it still does."""
    shape, after = POOL_THEN_LAYOUT[case]
    g = make_graph({"x": shape}, [op("mp", pool, ["x"], kernel_shape=[2, 2]), *after], ["s"])
    plan = partition(g, "ilp")
    assert [len(group) for group in plan.groups if "mp" in group] == [len(after) + 1]
    (kernel,) = render(plan).kernels
    assert (" rows[" in kernel.source) == (case == "relu")
    check(g, strategies=("ilp", "greedy"))
