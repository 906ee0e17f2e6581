"""The ops of format 1.1 (arange, floor_divide, remainder, fmod, trunc, cumsum,
max_pool2d, avg_pool2d) in CUDA kernels, executed on the CPU emulator and checked
against NumPy: within tolerance everywhere, and bit for bit (signs of zero
included) where the reference is exact: integer ops, maximum pools, elementwise
chains and sequential scans.
"""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

from backends.base import load_backend
from backends.check import output_value, run_and_check
from backends.cuda.compile import compile_kernels
from backends.cuda.emulate import run_profiled
from backends.cuda.render import render
from partitioner import GraphError, evaluate, partition
from partitioner.dtypes import DTYPES, numpy_dtype
from partitioner.ops import REGISTRY
from partitioner.reference import input_values, run_reference

from .conftest import make_graph, op

needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: no CUDA toolkit")


class Recording:
    """The emulated CUDA backend, keeping the storages its last run returned."""

    def __init__(self):
        self.backend = load_backend("cuda", emulate=True)
        self.storages = {}

    def render(self, plan):
        return self.backend.render(plan)

    def build(self, rendered):
        return self.backend.build(rendered)

    def run(self, built, storages):
        self.storages = self.backend.run(built, storages)
        return self.storages


def check(graph, inputs=None, exact=(), strategies=("none", "ilp")):
    """Emulate each strategy's plan: every output within tolerance, and the outputs
    named in ``exact`` equal to the reference bit for bit (NaN where it is NaN).
    Returns the plans."""
    plans = [partition(graph, strategy) for strategy in strategies]
    check_plans(plans, inputs, exact)
    return plans


def check_plans(plans, inputs=None, exact=()):
    """:func:`check` for given plans (of one graph)."""
    graph = plans[0].graph
    values = {**input_values(graph), **(inputs or {})}
    want = run_reference(graph, values)
    for plan in plans:
        recording = Recording()
        bad = [c for c in run_and_check(plan, recording, inputs=values) if not c.ok]
        assert not bad, f"{plan.strategy}: {bad}"
        for name in exact:
            got = output_value(graph, {**values, **recording.storages}, name)
            assert_identical(got, want[name], f"{plan.strategy}: {name}")


def assert_identical(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind not in "biu":  # floats, bfloat16 (an ml_dtypes type) included
        got, want = got.astype(np.float64), want.astype(np.float64)
        same = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    else:
        same = got == want
    bad = np.flatnonzero(~same)
    assert not bad.size, f"{what}: {bad.size} differ, first at {bad[0]}: {got.flat[bad[0]]!r} != {want.flat[bad[0]]!r}"


def group_of(plan, name):
    return next(priced.group for priced in plan.cost.groups if name in priced.group.ops)


def pairs(values, dtype):
    """Every (a, b) of ``values`` in ``dtype`` (too large for it: inf), as two flat arrays."""
    with np.errstate(over="ignore"):
        a, b = np.meshgrid(*[np.asarray(values).astype(numpy_dtype(dtype))] * 2)
    return a.ravel(), b.ravel()


# ---------------------------------------------------------------- arange


@needs_gpp
def test_arange_in_pointwise_reduction_and_contraction_groups():
    ops = [
        op("ai", "arange", [], start=-3, limit=17, delta=2),  # int64
        op("ad", "arange", [], start=40, limit=-5, delta=-5, dtype="int32"),
        op("af", "arange", [], start=0.1, limit=1.1, delta=0.1),  # float64 steps, one rounding to float32
        op("ah", "arange", [], start=-1, limit=9, delta=1.1, dtype="float16"),
        op("a64", "arange", [], start=2.5, limit=-1, delta=-0.35, dtype="float64"),
        op("si", "add", ["i", "ai"]), op("sd", "mul", ["d", "ad"]), op("sf", "mul", ["f", "af"]),
        op("sh", "add", ["h", "ah"]), op("s64", "sub", ["g", "a64"]),
        op("ar", "arange", [], start=-2, limit=3, delta=0.5),  # in a reduction group
        op("rows", "add", ["m", "ar"]), op("red", "reduce_sum", ["rows"], axes=[-1]),
        op("ae", "arange", [], start=7, limit=-3, delta=-1, dtype="int32"),  # in a contraction epilogue
        op("mm", "matmul", ["m", "w"]), op("epi", "add", ["mm", "ae"]),
    ]
    g = make_graph({"i": ([10], "int64"), "d": ([9], "int32"), "f": ([10], "float32"), "h": ([10], "float16"),
                    "g": ([10], "float64"), "m": ([3, 10], "float32"), "w": ([10, 10], "float32")},
                   ops, ["ai", "ad", "af", "ah", "a64", "si", "sd", "sf", "sh", "s64", "red", "epi"])
    _, ilp = check(g, exact=("ai", "ad", "af", "ah", "a64", "si", "sd", "sf", "sh", "s64"))
    assert len(group_of(ilp, "af").ops) > 1 and len(group_of(ilp, "ai").ops) > 1  # fused with their consumers
    assert group_of(ilp, "ar").kind == "reduction" and group_of(ilp, "ae").kind == "contraction"


# ---------------------------------------------------------------- floor_divide, remainder


@needs_gpp
def test_integer_floor_divide_and_remainder_by_zero_negatives_and_int_min():
    inputs, ops = {}, []
    for dtype in ("int8", "int32", "int64"):
        info = np.iinfo(dtype)
        a, b = pairs([0, 1, -1, 2, -2, 7, -7, 3, info.min, info.max, info.min + 1], dtype)
        inputs[f"a_{dtype}"], inputs[f"b_{dtype}"] = a, b
        ops += [op(f"q_{dtype}", "floor_divide", [f"a_{dtype}", f"b_{dtype}"]),
                op(f"r_{dtype}", "remainder", [f"a_{dtype}", f"b_{dtype}"]),
                op(f"ql_{dtype}", "floor_divide", [f"a_{dtype}", -3]),
                op(f"rl_{dtype}", "remainder", [5, f"b_{dtype}"])]
    ops += [op("qf", "floor_divide", ["a_int32", 2.5]), op("rf", "remainder", ["a_int8", -0.75])]  # float32 results
    g = make_graph({name: ([v.size], name[2:]) for name, v in inputs.items()}, ops, [o["name"] for o in ops])
    check(g, inputs, exact=[o["name"] for o in ops])


@needs_gpp
def test_float_floor_divide_and_remainder_with_inf_nan_and_signed_zeros():
    specials = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, -7.0, 0.1, 1e30, -1e-30, np.inf, -np.inf, np.nan]
    inputs, ops = {}, []
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        a, b = pairs(specials, dtype)
        inputs[f"a_{dtype}"], inputs[f"b_{dtype}"] = a, b
        ops += [op(f"q_{dtype}", "floor_divide", [f"a_{dtype}", f"b_{dtype}"]),
                op(f"r_{dtype}", "remainder", [f"a_{dtype}", f"b_{dtype}"]),
                # fused after another op: the half chain rounds at every step as the unfused one does
                op(f"e_{dtype}", "mul", [f"a_{dtype}", 1.7]), op(f"qe_{dtype}", "floor_divide", [f"e_{dtype}", 0.3]),
                op(f"re_{dtype}", "remainder", [f"e_{dtype}", -0.3])]
    g = make_graph({name: ([v.size], name[2:]) for name, v in inputs.items()}, ops,
                   [o["name"] for o in ops if not o["name"].startswith("e_")])
    check(g, inputs, exact=g.outputs)


# ---------------------------------------------------------------- fmod, trunc


@needs_gpp
def test_integer_fmod_and_trunc_by_zero_minus_one_and_the_extremes_of_every_integer_dtype():
    inputs, ops = {}, []
    for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        info = np.iinfo(dtype)
        # an unsigned divisor of all ones (uint32's 2^32 - 1) is a divisor like any other, not -1
        edges = {0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.min, info.min + 1,
                 *([-1, -2, -7] if info.min else [])}
        a, b = pairs(np.array(sorted(edges), dtype), dtype)  # as a dtype array: a list would hold uint64 as floats
        inputs[f"a_{dtype}"], inputs[f"b_{dtype}"] = a, b
        ops += [op(f"r_{dtype}", "fmod", [f"a_{dtype}", f"b_{dtype}"]),
                op(f"rl_{dtype}", "fmod", [f"a_{dtype}", 3]), op(f"lr_{dtype}", "fmod", [100, f"b_{dtype}"]),
                op(f"t_{dtype}", "trunc", [f"r_{dtype}"])]
    ops += [op("rf", "fmod", ["a_int32", -2.5]), op("tf", "trunc", ["rf"])]  # float32 results
    g = make_graph({name: ([v.size], name[2:]) for name, v in inputs.items()}, ops, [o["name"] for o in ops])
    check(g, inputs, exact=[o["name"] for o in ops])


@needs_gpp
def test_float_fmod_and_trunc_with_inf_nan_signed_zeros_and_subnormals():
    specials = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, -2.5, 3.0, -7.0, 0.1, 1e30, -1e-30, 1e-40, 5e-324, 1e308,
                np.inf, -np.inf, np.nan]
    inputs, ops = {}, []
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        a, b = pairs(specials, dtype)
        inputs[f"a_{dtype}"], inputs[f"b_{dtype}"] = a, b
        ops += [op(f"r_{dtype}", "fmod", [f"a_{dtype}", f"b_{dtype}"]), op(f"t_{dtype}", "trunc", [f"a_{dtype}"]),
                # fused after another op: the half chain rounds at every step as the unfused one does
                op(f"e_{dtype}", "mul", [f"a_{dtype}", 1.7]), op(f"re_{dtype}", "fmod", [f"e_{dtype}", -0.3]),
                op(f"te_{dtype}", "trunc", [f"e_{dtype}"]),
                # truncating division as the torch importer writes it
                op(f"d_{dtype}", "div", [f"a_{dtype}", f"b_{dtype}"]), op(f"td_{dtype}", "trunc", [f"d_{dtype}"])]
    g = make_graph({name: ([v.size], name[2:]) for name, v in inputs.items()}, ops,
                   [o["name"] for o in ops if o["name"][0] in "rt"])
    check(g, inputs, exact=g.outputs)


@needs_gpp
def test_fmod_and_trunc_fuse_into_reduction_and_contraction_kernels():
    rng = np.random.default_rng(11)
    # multiples of 0.75 times integers: the matmul's sums are exact in any order, so its epilogue is too
    m = rng.integers(-9, 10, (6, 16)).astype(np.float32) * np.float32(0.75)
    w = rng.integers(-9, 10, (16, 8)).astype(np.float32)
    g = make_graph({"m": ([6, 16], "float32"), "w": ([16, 8], "float32")}, [
        op("rows", "fmod", ["m", 2.5]), op("red", "reduce_max", ["rows"], axes=[-1]),
        op("tr", "trunc", ["m"]), op("rt", "reduce_min", ["tr"], axes=[0]),
        op("mm", "matmul", ["m", "w"]), op("q", "div", ["mm", 7.0]), op("tq", "trunc", ["q"]),
        op("fm", "fmod", ["mm", -5.0])], ["red", "rt", "tq", "fm"])
    _, ilp = check(g, {"m": m, "w": w}, exact=g.outputs)
    assert {"rows", "red"} <= set(group_of(ilp, "red").ops) and group_of(ilp, "red").kind == "reduction"
    assert {"tr", "rt"} <= set(group_of(ilp, "rt").ops)
    assert {"mm", "q", "tq", "fm"} <= set(group_of(ilp, "mm").ops) and group_of(ilp, "mm").kind == "contraction"


# ---------------------------------------------------------------- pools

POOLS = {
    "3x3/2 pad 1": dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "2x3 ceil, uneven pads": dict(kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=True),
    "dilated 2x2 ceil": dict(kernel_shape=[2, 2], strides=[3, 1], pads=[1, 0, 1, 1], dilations=[2, 3], ceil_mode=True),
    "windows of padding only": dict(kernel_shape=[2, 2], strides=[1, 2], pads=[3, 0, 0, 3]),
    "3x3/1 same size": dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
}


@needs_gpp
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pools_of_every_geometry_fused_with_their_producers_and_consumers(dtype):
    ops, outputs = [], []
    for k, attrs in enumerate(POOLS.values()):
        ops += [op(f"r{k}", "relu", ["x"]), op(f"mx{k}", "max_pool2d", [f"r{k}"], **attrs),
                op(f"mxs{k}", "mul", [f"mx{k}", 2.0]),
                op(f"n{k}", "neg", ["x"]), op(f"av{k}", "avg_pool2d", [f"n{k}"], **attrs, count_include_pad=False),
                op(f"avp{k}", "avg_pool2d", ["x"], **attrs, count_include_pad=True),
                op(f"avs{k}", "add", [f"avp{k}", 1.0])]
        outputs += [f"mxs{k}", f"av{k}", f"avs{k}"]
    g = make_graph({"x": ([2, 3, 7, 8], dtype)}, ops, outputs, dtype=dtype)
    x = np.random.default_rng(5).standard_normal((2, 3, 7, 8)).astype(dtype)
    x.reshape(-1)[::23] = np.nan  # NaN propagates through the maximum as through NumPy's
    x.reshape(-1)[5::29] = -np.inf
    _, ilp = check(g, {"x": x}, exact=[o for o in outputs if o.startswith("mx")])
    for k in range(len(POOLS)):  # every pool computes its input at each tap, and its consumer after it
        assert {f"r{k}", f"mx{k}", f"mxs{k}"} <= set(group_of(ilp, f"mx{k}").ops)
        assert f"n{k}" in group_of(ilp, f"av{k}").ops and f"avs{k}" in group_of(ilp, f"avp{k}").ops


@needs_gpp
def test_integer_and_float64_pools_and_pools_of_layout_ops_and_of_pools():
    ops = [op("mi", "max_pool2d", ["i"], **POOLS["dilated 2x2 ceil"]),
           op("mw", "max_pool2d", ["i"], **POOLS["windows of padding only"]),  # the int32 minimum
           op("ad", "avg_pool2d", ["d"], **POOLS["2x3 ceil, uneven pads"], count_include_pad=True),
           {**op("ah", "avg_pool2d", ["d"], **POOLS["dilated 2x2 ceil"]), "dtype": "float16"},  # stated dtype
           op("p", "pad", ["d"], pads=[0, 0, 2, 1, 0, 0, 0, 2], value=-1.5),
           op("t", "transpose", ["p"], perm=[0, 1, 3, 2]),
           op("mp", "max_pool2d", ["t"], **POOLS["3x3/2 pad 1"]),  # of a padded, transposed tensor
           op("ap", "avg_pool2d", ["mp"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),  # a pool of a pool
           op("out", "relu", ["ap"])]
    g = make_graph({"i": ([2, 2, 9, 7], "int32"), "d": ([1, 3, 6, 5], "float64")}, ops, ["mi", "mw", "ad", "ah", "out"])
    rng = np.random.default_rng(9)
    i = rng.integers(-2**31, 2**31, (2, 2, 9, 7)).astype(np.int32)
    _, ilp = check(g, {"i": i}, exact=("mi", "mw"))
    assert {"p", "t", "mp", "ap", "out"} <= set(group_of(ilp, "out").ops)


@needs_gpp
def test_conv_relu_max_pool_mul_runs_in_the_ilp_plan_with_the_pool_in_a_pointwise_group():
    g = make_graph({"x": [2, 3, 9, 9], "w": [4, 3, 3, 3]}, [
        op("conv", "conv2d", ["x", "w"], pads=[1, 1, 1, 1]), op("relu", "relu", ["conv"]),
        op("pool", "max_pool2d", ["relu"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        op("mul", "mul", ["pool", 0.5])], ["mul"])
    _, ilp = check(g)
    pool = group_of(ilp, "pool")
    assert pool.kind == "pointwise" and "mul" in pool.ops and "conv" not in pool.ops
    assert "relu" in pool.ops or "relu" in group_of(ilp, "conv").ops


# ---------------------------------------------------------------- cumsum


@needs_gpp
def test_cumsum_along_any_axis_exclusive_reverse_of_floats_halves_and_integers():
    ops = [op("c0", "cumsum", ["x"], axis=0), op("c1", "cumsum", ["x"], axis=-1, exclusive=True, reverse=True),
           op("c2", "cumsum", ["x"], axis=1, reverse=True), op("c3", "cumsum", ["x"], axis=1, exclusive=True),
           op("ci", "cumsum", ["i"], axis=-1, exclusive=True), op("ci0", "cumsum", ["i"], axis=0, reverse=True),
           op("ch", "cumsum", ["h"], axis=1), op("chr", "cumsum", ["h"], axis=0, exclusive=True, reverse=True),
           op("cb", "cumsum", ["b"], axis=0), op("cd", "cumsum", ["d"], axis=0, reverse=True),
           {**op("cs", "cumsum", ["x"], axis=0), "dtype": "float16"},  # a stated dtype converts the sums
           op("s", "mul", ["c1", 3.0]), op("after", "add", ["ch", 1.0])]
    g = make_graph({"x": ([5, 7, 3], "float32"), "i": ([4, 9], "int32"), "h": ([6, 33], "float16"),
                    "b": ([11], "bool"), "d": ([1, 4], "float64")}, ops,
                   ["c0", "c1", "c2", "c3", "ci", "ci0", "ch", "chr", "cb", "cd", "cs", "s", "after"])
    i = np.random.default_rng(4).integers(-2**31, 2**31, (4, 9)).astype(np.int32)  # sums past int32: int64 results
    h = (np.random.default_rng(6).standard_normal((6, 33)) * 300).astype(np.float16)
    _, ilp = check(g, {"i": i, "h": h}, exact=g.outputs)
    assert all(len(group_of(ilp, c).ops) == 1 for c in ("c0", "c1", "ch"))  # a scan never fuses


@needs_gpp
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, True), (True, False), (False, True)])
def test_cumsum_along_long_last_axis_rows_is_sequential_and_coalesced(exclusive, reverse):
    """Rows along the last axis take a warp each, lanes at consecutive elements: the
    loads are whole sectors and the sums still NumPy's order, bit for bit (a length
    that is no multiple of 32, float16 sums in float32, int64 position ids)."""
    attrs = {"axis": -1, "exclusive": exclusive, "reverse": reverse}
    g = make_graph({"h": ([5, 1000], "float16"), "i": ([8, 1024], "int64")},
                   [op("ch", "cumsum", ["h"], **attrs), op("ci", "cumsum", ["i"], **attrs)], ["ch", "ci"])
    h = (np.random.default_rng(7).standard_normal((5, 1000)) * 30).astype(np.float16)
    check(g, {"h": h}, exact=g.outputs, strategies=("ilp",))
    _, counted = run_profiled(render(partition(g, "ilp")), {**input_values(g, 0), "h": h})
    efficiency = {k.kernel.ops[0]: (k.requests("ldg").efficiency, k.requests("stg").efficiency) for k in counted}
    assert efficiency["ci"] == (1.0, 1.0)
    # rows of 1000 halves start mid-sector; a thread per row read 2 bytes of each sector
    assert min(efficiency["ch"]) > 0.75, efficiency


@needs_gpp
def test_cumsum_of_empty_tensors_needs_no_kernel():
    g = make_graph({"x": [0, 5], "y": [3, 0]}, [op("cx", "cumsum", ["x"], axis=1), op("cy", "cumsum", ["y"], axis=1),
                                                op("e", "exp", ["cx"])], ["cx", "cy", "e"])
    check(g, strategies=("ilp",))
    assert not render(partition(g, "ilp")).kernels


# ---------------------------------------------------------------- nvcc


@needs_nvcc
def test_every_new_op_kernel_compiles_with_nvcc():
    g = make_graph({"x": ([2, 3, 7, 8], "float16"), "i": ([4, 9], "int8"), "d": ([5, 9], "float64"),
                    "u": ([4, 9], "uint32"), "s": ([4, 9], "int16")}, [
        op("mx", "max_pool2d", ["x"], **POOLS["dilated 2x2 ceil"]),
        op("av", "avg_pool2d", ["x"], **POOLS["3x3/2 pad 1"], count_include_pad=True),
        op("mi", "max_pool2d", ["r"], kernel_shape=[2, 2]), op("r", "reshape", ["i"], shape=[1, 4, 3, 3]),
        op("a", "arange", [], start=0.5, limit=9.5, delta=1.0, dtype="float64"),
        op("ai", "arange", [], start=0, limit=9, dtype="int8"),
        op("q", "floor_divide", ["d", "a"]), op("m", "remainder", ["i", "ai"]),
        op("qi", "floor_divide", ["i", "ai"]), op("mf", "remainder", ["x", 0.75]),
        op("c", "cumsum", ["i"], axis=0, exclusive=True, reverse=True), op("cx", "cumsum", ["x"], axis=-1),
        op("fd", "fmod", ["d", "a"]), op("fi", "fmod", ["i", "ai"]), op("fx", "fmod", ["x", 0.75]),
        op("td", "trunc", ["fd"]), op("ti", "trunc", ["i"]), op("tx", "trunc", ["x"]),
        # the integer dtypes of format 1.1 (every elementwise op of every integer dtype: the sweep below)
        op("qu", "floor_divide", ["u", 4294967295]), op("mu", "remainder", ["s", "u"]), op("fu", "fmod", ["u", 7]),
        op("pu", "pow", ["u", "u"]), op("ps", "pow", ["s", 3]), op("tu", "trunc", ["u"])],
        ["mx", "av", "mi", "q", "m", "qi", "mf", "c", "cx", "td", "fi", "fx", "ti", "tx", "qu", "mu", "fu", "pu",
         "ps", "tu"])
    for strategy in ("none", "ilp"):
        rendered = render(partition(g, strategy))
        compiled = compile_kernels(rendered.kernels, "sm_90")
        assert {k.name for k in rendered.kernels} <= set(compiled.resources)
        assert all(r.spills == 0 for r in compiled.resources.values())


# ---------------------------------------------------------------- the dtypes of format 1.1


def _float8_probes(dtype: str) -> np.ndarray:
    """Every finite value of an 8-bit float, the midpoints between neighbours (ties to
    even), values a hair to each side, and the special values: float64."""
    values = np.arange(256, dtype=np.uint8).view(numpy_dtype(dtype)).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    middles = (finite[1:] + finite[:-1]) / 2
    beyond = [finite.max() * 1.04, finite.max() * 1.1, 1e6, np.inf, -np.inf, np.nan, -0.0, 1e-30]
    return np.concatenate([finite, middles, np.nextafter(middles, np.inf), np.nextafter(middles, -np.inf), beyond])


@needs_gpp
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_kernels_round_once_to_nearest_even_bit_for_bit(dtype):
    x = _float8_probes(dtype)
    n = x.size
    g = make_graph({"x": ([n], "float64"), "h": ([n], "float32")},
                   [op("q", "cast", ["x"], dtype=dtype), op("r", "cast", ["h"], dtype=dtype),
                    op("s", "mul", ["r", 2.0]), op("t", "cast", ["s"], dtype="float32"),
                    op("u", "cast", ["q"], dtype="int32")], ["q", "r", "s", "t", "u"])
    check(g, {"x": x, "h": x.astype(np.float32)}, exact=("q", "r", "s", "t", "u"))


@needs_gpp
def test_unsigned_and_16_bit_integer_kernels_wrap_and_convert_as_numpy():
    info = {d: np.iinfo(d) for d in ("uint8", "int16", "uint16", "uint32", "uint64")}
    edges = {d: np.array([0, 1, i.max, i.max - 1, i.min, 7, 200, 3], dtype=d) for d, i in info.items()}
    floats = np.array([300.5, -1.5, np.nan, 1e20, -1e20, 70000.7, 2.0**63, 4e9], np.float64)
    inputs = {f"x_{d}": (list(v.shape), d) for d, v in edges.items()}
    ops = []
    for d in info:
        ops += [op(f"add_{d}", "add", [f"x_{d}", f"x_{d}"]), op(f"mul_{d}", "mul", [f"x_{d}", 3]),
                op(f"sum_{d}", "reduce_sum", [f"x_{d}"]), op(f"max_{d}", "reduce_max", [f"x_{d}"]),
                op(f"from_{d}", "cast", ["f"], dtype=d), op(f"to_f_{d}", "cast", [f"x_{d}"], dtype="float64")]
    g = make_graph({**inputs, "f": ([8], "float64")}, ops, [o["name"] for o in ops])
    check(g, {**{f"x_{d}": v for d, v in edges.items()}, "f": floats}, exact=[o["name"] for o in ops])


@needs_nvcc
def test_kernels_of_the_new_dtypes_compile():
    g = make_graph({"a": ([32, 16], "float8_e5m2"), "b": ([16, 24], "float8_e4m3fn"), "u": ([32, 24], "uint16"),
                    "i": ([32, 24], "int16"), "w": ([32, 24], "uint64")},
                   [op("m", "matmul", ["a", "b"]), op("c", "cast", ["m"], dtype="float8_e4m3fn"),
                    op("e", "add", ["u", "i"]), op("f", "cast", ["c"], dtype="uint32"),
                    op("s", "reduce_sum", ["w"], axes=[0]), op("x", "reduce_max", ["u"], axes=[1]),
                    op("p", "pow", ["u", "u"]), op("q", "floor_divide", ["w", "w"]), op("r", "remainder", ["i", -1]),
                    op("n", "neg", ["u"]), op("ab", "abs", ["i"]), op("sq", "square", ["u"]),
                    op("bf", "cast", ["w"], dtype="bfloat16")],
                   ["c", "e", "f", "s", "x", "p", "q", "r", "n", "ab", "sq", "bf"])
    for strategy in ("none", "ilp"):
        rendered = render(partition(g, strategy))
        compiled = compile_kernels(rendered.kernels, "sm_90")
        assert {k.name for k in rendered.kernels} <= set(compiled.resources)
        assert all(r.spills == 0 for r in compiled.resources.values())


@needs_gpp
def test_a_resnet_stem_runs_with_its_pool_fused():
    """conv -> batch norm -> ReLU -> max-pool, ResNet's stem at a small size: the pool
    shares a kernel with the norm and the ReLU (or they ride the conv's epilogue and
    the pool fuses with nothing it cannot), and every output matches the reference."""
    g = make_graph({"x": ([2, 3, 20, 20], "float16"), "w": ([8, 3, 7, 7], "float16"), "mean": ([8, 1, 1], "float32"),
                    "inv": ([8, 1, 1], "float32"), "gamma": ([8, 1, 1], "float32"), "beta": ([8, 1, 1], "float32")},
                   [op("conv", "conv2d", ["x", "w"], strides=[2, 2], pads=[3, 3, 3, 3]),
                    op("c32", "cast", ["conv"], dtype="float32"), op("xc", "sub", ["c32", "mean"]),
                    op("xn", "mul", ["xc", "inv"]), op("sc", "mul", ["xn", "gamma"]), op("bn", "add", ["sc", "beta"]),
                    op("bn16", "cast", ["bn"], dtype="float16"), op("relu", "relu", ["bn16"]),
                    op("pool", "max_pool2d", ["relu"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                   ["pool"])
    ilp = check(g)[1]  # the conv sums in another order than NumPy: within tolerance, not bit for bit
    assert len(ilp.groups) == 2  # the conv with or without its epilogue, then the pool's kernel
    # the pool fused with the norm and the ReLU it recomputes at each tap: as cheap, modelled
    norm = ["c32", "xc", "xn", "sc", "bn", "bn16", "relu", "pool"]
    cost = evaluate(g, [["conv"], norm])
    assert cost.groups[1].group.kind == "pointwise"
    assert cost.modeled_time_us == pytest.approx(ilp.cost.modeled_time_us)
    fused = dataclasses.replace(ilp, strategy="hand", groups=[["conv"], norm], cost=cost)
    assert all(c.ok for c in run_and_check(fused, load_backend("cuda", emulate=True)))


# ---------------------------------------------------------------- every elementwise op on every integer dtype

INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: Float results of transcendental functions, which NumPy and CUDA round differently:
#: within tolerance; every other result of the sweep is checked bit for bit.
TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sigmoid", "silu", "erf", "sin", "cos", "gelu"})
#: The elementwise ops whose inference refuses a bool operand (or dtype): the only forms the sweep leaves out.
NOT_ON_BOOL = frozenset({"neg", "sub", "floor_divide", "remainder", "fmod", "arange"})


def integer_edges(dtype: str, seed: int = 0) -> np.ndarray:
    """Values of ``dtype`` where integer kernels go wrong: 0, 1, -1, the extremes and
    their neighbours, the all-ones value (-1, or the unsigned maximum), the top bit
    alone, integers just past rounding boundaries of the float conversions (2^24 + 1
    and 2^24 + 3 for float32, 2^24 + 2^16 + 1 and 2^62 + 2^54 + 1 a hair above a
    bfloat16 tie, 2^53 + 1 for float64), and random ones, small and of any size."""
    if dtype == "bool":
        return np.array([False, True])
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    probes = [2**24 + 1, 2**24 + 3, 2**24 + 2**16 + 1, 2**53 + 1, 2**62 + 2**54 + 1]
    values = {0, 1, 2, 3, 7, hi, hi - 1, lo, lo + 1, (hi >> 1) + 1, *probes}
    if lo:
        values |= {-1, -2, -7, *(-p for p in probes)}
    rng = np.random.default_rng(seed)
    values |= {int(v) for v in rng.integers(lo, hi, 3, dtype=dtype, endpoint=True)}
    values |= {int(v) for v in rng.integers(max(lo, -20), 21, 2)}
    return np.array(sorted(v for v in values if lo <= v <= hi), dtype)  # a dtype array: exact for uint64


def elementwise_forms(kind: str, dtype: str, operands: list[str], edges: np.ndarray) -> list[tuple[list, dict]]:
    """(inputs, attrs) of every way the sweep applies elementwise op ``kind`` to the
    tensors ``operands`` of ``dtype``: binary ops also with a literal, the all-ones
    value on the right (a divisor of -1, or of the unsigned maximum) and the lowest
    (signed) or highest (unsigned) value on the left; casts to every dtype."""
    a, b = operands
    if kind == "arange":  # integer bounds: the dtype's own arange, counting from each end
        lo, hi = int(edges[0]), int(edges[-1])
        return [([], dict(start=lo, limit=lo + 12, dtype=dtype)),
                ([], dict(start=hi, limit=hi - 12, delta=-1, dtype=dtype))]
    if kind == "cast":
        return [([a], dict(dtype=target)) for target in DTYPES]
    if kind == "clamp":  # integer bounds keep the dtype, float ones give float32
        return [([a], dict(min=int(edges[1]), max=int(edges[-2]))), ([a], dict(min=-2.5, max=300.5))]
    if kind == "gelu":
        return [([a], {}), ([a], dict(approximate="tanh"))]
    spec = REGISTRY[kind]
    if spec.max_inputs == 1:
        return [([a], {})]
    if dtype == "bool":  # an int literal would make it int64
        literals = []
    else:
        info = np.iinfo(dtype)
        ones, left = (-1, int(info.min)) if info.min else (int(info.max), int(info.max))
        literals = [[a, ones], [left, b]]
    if kind == "where":
        return [([a, a, b], {})] + [([b, *pair], {}) for pair in literals]
    return [([a, b], {})] + [(pair, {}) for pair in literals]


def elementwise_sweep(dtypes) -> tuple:
    """One graph applying every elementwise op of the registry (:func:`elementwise_forms`)
    to every pair of :func:`integer_edges` of each dtype, as tensors ``a_<dtype>`` and
    ``b_<dtype>``: the graph, its input values, and the op kinds whose inference
    refused some form, by dtype."""
    inputs, values, ops, refused = {}, {}, [], {}
    for dtype in dtypes:
        edges = integer_edges(dtype)
        a, b = f"a_{dtype}", f"b_{dtype}"
        values[a], values[b] = pairs(edges, dtype)
        inputs[a] = inputs[b] = ([values[a].size], dtype)
        for kind, spec in REGISTRY.items():
            if spec.op_class != "elementwise":
                continue
            for k, (operands, attrs) in enumerate(elementwise_forms(kind, dtype, [a, b], edges)):
                entry = op(f"{kind}{k}_{dtype}", kind, operands, **attrs)
                try:
                    make_graph({a: inputs[a], b: inputs[b]}, [entry], [entry["name"]])
                except GraphError:
                    refused.setdefault(dtype, set()).add(kind)
                    continue
                ops.append(entry)
    return make_graph(inputs, ops, [o["name"] for o in ops]), values, refused


def fused_plan(graph, size: int = 32):
    """A hand plan of ``graph``'s elementwise ops in groups of up to ``size`` siblings:
    ops of one output shape reading the same first tensor (a group must be connected),
    each group a multi-output kernel loading its inputs once. An op of no tensor is a
    group of its own."""
    siblings = {}
    for name, o in graph.ops.items():
        siblings.setdefault((o.out.shape, o.tensor_inputs[0] if o.tensor_inputs else name), []).append(name)
    groups = [names[i:i + size] for names in siblings.values() for i in range(0, len(names), size)]
    return dataclasses.replace(partition(graph, "none"), strategy="fused by hand", groups=groups,
                               cost=evaluate(graph, groups))


@needs_gpp
@pytest.mark.parametrize("dtype", [*INTEGER_DTYPES, "bool"])
def test_every_elementwise_op_of_every_integer_dtype_is_numpys_bit_for_bit_at_the_edge_values(dtype):
    """Every elementwise op of the registry on every (a, b) of the dtype's edge values
    (divisors 0, -1 and the maximum among them), in a kernel of its own and fused
    with its siblings: NumPy's value bit for bit, wrapping in the operand dtype."""
    g, values, refused = elementwise_sweep([dtype])
    assert refused.get(dtype, set()) == (NOT_ON_BOOL if dtype == "bool" else set())  # nothing else left out
    exact = [name for name in g.outputs if g.ops[name].kind not in TRANSCENDENTAL]
    check_plans([partition(g, "none"), fused_plan(g)], values, exact)


def _mixed_values(dtype: str) -> np.ndarray:
    """Eight edge values of ``dtype`` (bool: alternating)."""
    if dtype == "bool":
        return np.array([False, True] * 4)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    extra = 2**24 + 2**16 + 1 if hi > 2**25 else hi - 1
    values = [0, 1, -1, lo, hi, 7, lo + 1, extra] if lo else [0, 1, 2, hi, hi - 1, (hi >> 1) + 1, 7, extra]
    return np.array(values, dtype)


#: Binary ops of two dtypes: for each ordered pair, and (symmetric in their conversions) for each unordered one.
MIXED_ORDERED = ("sub", "pow", "floor_divide", "remainder", "fmod", "lt")
MIXED_UNORDERED = ("add", "mul", "div", "maximum", "eq", "logical_and")


@needs_gpp
def test_elementwise_ops_mixing_integer_dtypes_promote_and_convert_as_numpy():
    """Every pair of distinct integer (and bool) dtypes, in both orders where an op is
    not symmetric, eight edge values of each broadcast against the other's: the
    promoted compute dtype (int16 for int8 with uint8, int64 for int32 with uint32,
    float64 for int64 with uint64) and the conversions into it, bit for bit."""
    dtypes = [*INTEGER_DTYPES, "bool"]
    inputs = {f"c_{d}": ([8, 1], d) for d in dtypes} | {f"r_{d}": ([1, 8], d) for d in dtypes}
    values = {f"c_{d}": _mixed_values(d).reshape(8, 1) for d in dtypes}
    values |= {f"r_{d}": _mixed_values(d)[::-1].reshape(1, 8) for d in dtypes}
    ordered = [(d, e) for d in dtypes for e in dtypes if d != e]
    ops = [op(f"{kind}_{d}_{e}", kind, [f"c_{d}", f"r_{e}"]) for d, e in ordered for kind in MIXED_ORDERED]
    ops += [op(f"{kind}_{d}_{e}", kind, [f"c_{d}", f"r_{e}"]) for d, e in ordered if d < e for kind in MIXED_UNORDERED]
    ops += [op(f"where_{d}_{e}", "where", [f"c_{d}", f"c_{d}", f"r_{e}"]) for d, e in ordered]
    g = make_graph(inputs, ops, [o["name"] for o in ops])
    check_plans([fused_plan(g, 64)], values, g.outputs)


@needs_nvcc
def test_every_elementwise_op_of_every_integer_dtype_compiles_with_nvcc():
    g, _, _ = elementwise_sweep([*INTEGER_DTYPES, "bool"])
    rendered = render(fused_plan(g, 64))
    compiled = compile_kernels(rendered.kernels, "sm_90")
    assert {k.name for k in rendered.kernels} <= set(compiled.resources)
