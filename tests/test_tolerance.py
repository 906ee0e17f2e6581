"""The tolerance rule of backends/check.py: correct kernels pass whatever their
summation order, wrong ones fail.

The case is mlp_gelu_f16 at 512 tokens (the graph in graphs/ has 8192; the K
lengths, 1024 and 4096, are the same): matmul, bias, exact GELU, matmul, bias.
"Kernels" here are NumPy executions that sum each dot product in another order,
rounding where every op rounds, as the contraction template does when it blocks K
by 32; the reference is partitioner's unfused execution (BLAS order).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from backends.check import UNIT_ROUNDOFF, RandomRounding, accumulated_terms, compare, rounding_spread, tolerance
from partitioner import run_reference
from partitioner.reference import input_values

from .conftest import make_graph, op

TOKENS, HIDDEN, INTERMEDIATE = 512, 1024, 4096
_erf = np.frompyfunc(math.erf, 1, 1)


def mlp(dtype: str):
    return make_graph({"x": ([TOKENS, HIDDEN], dtype), "w1": ([HIDDEN, INTERMEDIATE], dtype),
                       "b1": ([INTERMEDIATE], dtype), "w2": ([INTERMEDIATE, HIDDEN], dtype),
                       "b2": ([HIDDEN], dtype)},
                      [op("h0", "matmul", ["x", "w1"]), op("h", "add", ["h0", "b1"]), op("a", "gelu", ["h"]),
                       op("y0", "matmul", ["a", "w2"]), op("y", "add", ["y0", "b2"])], ["y"])


def blocked(a: np.ndarray, b: np.ndarray, order: str) -> np.ndarray:
    """``a @ b`` accumulated in float32 over K in another order: blocks of 32 added
    first to last, or last to first, or four split-K partial sums added as a tree."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    k = a.shape[1]
    if order == "split-k tree":
        parts = [a[:, i::4] @ b[i::4] for i in range(4)]
        return (parts[0] + parts[1]) + (parts[2] + parts[3])
    starts = range(0, k, 32) if order == "blocks of 32" else range(k - 32, -1, -32)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for s in starts:
        acc += a[:, s:s + 32] @ b[s:s + 32]
    return acc


def kernel(values: dict, dtype: str, order: str, matmul=None) -> np.ndarray:
    """The MLP computed as a fused kernel would: float32 math, each op's result
    rounded to ``dtype``; GELU through the C library's erf (not the reference's)."""
    t = np.dtype(dtype)
    matmul = matmul or (lambda a, b: blocked(a, b, order))
    h = (matmul(values["x"], values["w1"]).astype(t).astype(np.float32) + values["b1"]).astype(t)
    hf = h.astype(np.float64)
    a = (0.5 * hf * (1.0 + _erf(hf / math.sqrt(2.0)).astype(np.float64))).astype(np.float32).astype(t)
    return (matmul(a, values["w2"]).astype(t).astype(np.float32) + values["b2"]).astype(t)


@pytest.fixture(scope="module", params=["float16", "float32"])
def case(request):
    dtype = request.param
    g = mlp(dtype)
    values = run_reference(g, seed=3)
    return g, dtype, values


@pytest.mark.parametrize("order", ["blocks of 32", "blocks of 32, last first", "split-k tree"])
def test_a_correct_kernel_passes_in_any_summation_order(case, order):
    g, dtype, values = case
    got = kernel(values, dtype, order)
    check = compare("y", dtype, got, values["y"], accumulated_terms(g, "y"))
    assert check.ok, check
    assert check.max_abs_error > 0  # the order did change the result
    if dtype == "float16":
        # ... and elements near zero moved by more than n ulps of themselves: an
        # elementwise-only rule would fail this correct kernel (the false failure of
        # full-size mlp_gelu_f16, 2,726 of 8.4M elements)
        rtol, _ = tolerance(dtype, accumulated_terms(g, "y"))
        want = values["y"].astype(np.float64)
        assert np.any(np.abs(got.astype(np.float64) - want) > rtol * np.abs(want))


def _drop_one_term(a, b):
    return blocked(a[:, 1:], b[1:], "blocks of 32")


def _scale_one_tile(a, b):
    out = blocked(a, b, "blocks of 32")
    out[128:256, 128:256] *= 1.01
    return out


def _rows_off_by_one_in_a_tile(a, b):
    out = blocked(a, b, "blocks of 32")
    out[128:256, :128] = out[129:257, :128]
    return out


@pytest.mark.parametrize("wrong", [_drop_one_term, _scale_one_tile, _rows_off_by_one_in_a_tile],
                         ids=["a dropped K term", "a tile 1% off", "a tile's rows off by one"])
def test_a_wrong_kernel_fails(case, wrong):
    g, dtype, values = case
    got = kernel(values, dtype, "", matmul=wrong)
    check = compare("y", dtype, got, values["y"], accumulated_terms(g, "y"))
    assert not check.ok and check.error_ratio > 1, check


def test_one_element_off_fails(case):
    g, dtype, values = case
    got = kernel(values, dtype, "blocks of 32")
    scale = float(np.max(np.abs(values["y"].astype(np.float64))))
    got[7, 9] = (got[7, 9].astype(np.float64) + 0.05 * scale).astype(dtype)
    assert not compare("y", dtype, got, values["y"], accumulated_terms(g, "y")).ok


def test_terms_are_the_sums_upstream(case):
    g, _, _ = case
    assert accumulated_terms(g, "h") == HIDDEN
    assert accumulated_terms(g, "y") == HIDDEN + INTERMEDIATE
    assert accumulated_terms(g, "x") == 0


def test_tolerance_grows_with_the_square_root_of_the_terms_and_is_exact_for_integers():
    u16, u32 = UNIT_ROUNDOFF["float16"], UNIT_ROUNDOFF["float32"]
    assert tolerance("float16") == (8 * u16, 8 * u16)
    assert tolerance("float32", 4096) == (8 * u32, 8 * u32 + 8 * 64 * u32)
    assert tolerance("float8_e4m3fn") == (4 * 2.0**-4, 4 * 2.0**-4)
    assert tolerance("int32", 10**6) == (0.0, 0.0)
    assert not compare("i", "int32", np.array([1, 2, 4]), np.array([1, 2, 3]), 10**6).ok
    assert compare("i", "int32", np.array([1, 2, 3]), np.array([1, 2, 3])).ok
    # as float64, 2^62 and 2^62 + 1 are one value: a kernel off by one passed
    big = np.array([2**62, -(2**62)], np.int64)
    off = compare("i", "int64", big + np.array([1, 0], np.int64), big)
    assert not off.ok and off.max_abs_error == 1.0
    assert compare("i", "int64", big.copy(), big).ok
    assert not compare("u", "uint64", np.array([2**64 - 1], np.uint64), np.array([2**64 - 2], np.uint64)).ok


def test_specials_must_match_position_for_position():
    want = np.array([1.0, np.inf, np.nan, -np.inf])
    assert compare("y", "float32", want.copy(), want).ok
    assert not compare("y", "float32", np.array([1.0, -np.inf, np.nan, -np.inf]), want).ok
    assert not compare("y", "float32", np.array([1.0, np.inf, 0.0, -np.inf]), want).ok
    assert not compare("y", "float32", np.array([np.nan, np.inf, np.nan, -np.inf]), want).ok


def test_the_memory_estimate_counts_the_comparison():
    """A 100-million-element exp peaked at 6.96 GB resident under --run, against an
    estimate of 1.1 GiB (the comparison's float64 temporaries were left out), so the
    OOM killer could end a run the guard let through."""
    from backends.check import memory_needed
    from partitioner import partition

    g = make_graph({"x": [100_000_000]}, [op("a", "exp", ["x"])], ["a"])
    assert memory_needed(partition(g, "none")) >= 6.96e9


# ---------------------------------------------------------------- ill-conditioned outputs

LOG2E = np.float32(1.4426950408889634)


def hot_softmax():
    """Float32 softmax numerators of scores up to about |400|: exp turns the scores'
    absolute rounding errors (K = 32 products, times 20) into relative ones."""
    return make_graph({"q": [2, 16, 32], "k": [2, 32, 24]},
                      [op("s", "matmul", ["q", "k"]), op("z", "mul", ["s", 20.0]),
                       op("m", "reduce_max", ["z"], axes=[-1], keepdims=True), op("d", "sub", ["z", "m"]),
                       op("e", "exp", ["d"])], ["e"])


def hot_kernel(values: dict, drop: bool = False, other_row: bool = False) -> np.ndarray:
    """The numerators as an attention kernel computes them: the dot products in blocks
    of 8, last first, and exp2 of scores scaled by log2(e) (FlashAttention's form);
    wrong ones drop a K term or take another row's maximum."""
    q, k = (values["q"][..., 1:], values["k"][:, 1:]) if drop else (values["q"], values["k"])
    s = np.zeros((2, 16, 24), np.float32)
    for start in range(q.shape[-1] - 8, -8, -8):
        s += q[..., max(start, 0):start + 8] @ k[:, max(start, 0):start + 8]
    z = s * np.float32(20.0)
    m = z.max(-1, keepdims=True)
    if other_row:
        m = np.roll(m, 1, axis=1)
    with np.errstate(over="ignore"):
        return np.exp2(z * LOG2E - m * LOG2E)


@pytest.fixture(scope="module", params=[0, 1, 2])
def hot(request):
    g = hot_softmax()
    inputs = input_values(g, request.param)
    values = run_reference(g, inputs)
    spread = rounding_spread(g, inputs, ["e"], values, request.param)["e"]
    return g, values, spread


def test_an_ill_conditioned_output_is_checked_against_the_references_spread(hot):
    """A correct kernel of a hot softmax is off by more than the ulp-based rule allows
    (2.7 to 6.4 times it, measured), and well within the reference's own spread under
    random rounding."""
    g, values, spread = hot
    got, terms = hot_kernel(values), accumulated_terms(g, "e")
    assert not compare("e", "float32", got, values["e"], terms).ok
    check = compare("e", "float32", got, values["e"], terms, spread)
    assert check.ok and check.ill_conditioned and check.error_ratio < 0.5, check


@pytest.mark.parametrize("wrong", ["drop", "other_row", "one element"])
def test_a_wrong_kernel_of_an_ill_conditioned_output_still_fails(hot, wrong):
    g, values, spread = hot
    if wrong == "one element":
        got = hot_kernel(values)
        got[1, 3, 5] += 0.01  # 1% of the largest value, 1
    else:
        got = hot_kernel(values, **{wrong: True})
    check = compare("e", "float32", got, values["e"], accumulated_terms(g, "e"), spread)
    assert not check.ok and check.error_ratio > 100, check


def test_random_rounding_moves_what_ops_round_by_an_ulp_or_two():
    g = make_graph({"x": ([64], "float16"), "w": ([64, 8], "float32")},
                   [op("t", "transpose", ["w"], perm=[1, 0]), op("c", "cast", ["x"], dtype="float32"),
                    op("y", "mul", ["x", 3.0]), op("s", "matmul", ["c", "w"]), op("n", "cast", ["s"], dtype="float16"),
                    op("back", "cast", ["n"], dtype="float32"), op("h", "cast", ["back"], dtype="float16")],
                   ["t", "y", "h"])
    values = run_reference(g, seed=1)
    values["y"][:4] = 0
    rounding = RandomRounding(g, np.random.default_rng(0))
    assert np.array_equal(rounding("t", values), values["t"])  # a layout op moves values only
    assert np.array_equal(rounding("c", values), values["c"])  # a cast that changed nothing
    assert np.array_equal(rounding("h", values), values["h"])

    def ulps(name):
        moved, exact = rounding(name, values).astype(np.float64), values[name].astype(np.float64)
        return moved, np.abs(moved - exact) / np.spacing(np.abs(values[name])).astype(np.float64)

    moved, steps = ulps("y")
    assert np.all(moved[:4] == 0) and np.all(np.isin(np.round(steps[4:], 6), [1, 2]))
    assert np.all(np.isin(np.round(ulps("n")[1], 6), [1, 2]))  # a cast that rounded
    # a product of K terms also moves by up to sqrt(K) float32 roundoffs of its terms' magnitudes
    s = values["s"].astype(np.float64)
    bound = np.sqrt(64) * 2.0**-24 * (np.abs(values["c"]) @ np.abs(values["w"])) + 2 * np.spacing(np.abs(values["s"]))
    assert np.all(np.abs(rounding("s", values).astype(np.float64) - s) <= bound)
