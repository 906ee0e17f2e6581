"""Row reductions near the roofline (issue 11): vector loads along contiguous rows,
several loads in flight, one barrier per combine, and ``pow(x, 2)`` as a multiply.

Rendering tests read the generated CUDA source; emulated tests check values against
the NumPy reference (``docs/backends.md``, *The tolerance rule*) and count accesses
with the emulator's counters (``backends/cuda/counters.py``).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from backends.check import run_and_check
from backends.cuda import CudaBackend
from backends.cuda.emulate import run_profiled
from backends.cuda.render import render
from partitioner import partition
from partitioner.reference import input_values

from .conftest import make_graph, op

needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
EMULATOR = CudaBackend(emulate=True)


def _rms_norm(shape, dtype="float16", exponent=2.0):
    """RMSNorm over the last axis, written out as primitives with ``pow(x, exponent)``."""
    return make_graph({"x": (list(shape), dtype), "w": ([shape[-1]], dtype)},
                      [op("sq", "pow", ["x", exponent]), op("ms", "reduce_mean", ["sq"], axes=[-1], keepdims=True),
                       op("me", "add", ["ms", 1e-6]), op("inv", "rsqrt", ["me"]), op("xn", "mul", ["x", "inv"]),
                       op("y", "mul", ["xn", "w"])], ["y"], dtype=dtype)


def _reduction_source(graph) -> str:
    kernels = [k for k in render(partition(graph, "ilp")).kernels if k.kind == "reduction"]
    assert len(kernels) == 1
    return kernels[0].source


def _check(graph, strategies=("none", "ilp"), inputs=None):
    for strategy in strategies:
        bad = [c for c in run_and_check(partition(graph, strategy), EMULATOR, inputs=inputs) if not c.ok]
        assert not bad, f"{strategy}: {bad}"


# ---------------------------------------------------------------- rendered source

def test_a_contiguous_float16_row_of_1024_loads_16_byte_vectors():
    source = _reduction_source(_rms_norm((64, 1024)))
    assert "PART_LDG(*reinterpret_cast<const part_vec<__half, 8>*>" in source
    assert "PART_LDG(in0[" not in source  # no scalar load left along the row


@pytest.mark.parametrize("length", [1023, 1021])
def test_rows_of_an_odd_length_fall_back_to_scalar_loads(length):
    source = _reduction_source(make_graph({"x": ([4, length], "float16")},
                                          [op("s", "reduce_sum", ["x"], axes=[-1])], ["s"]))
    assert "part_vec" not in source
    assert "PART_LDG(in0[" in source


def test_column_reductions_fall_back_to_scalar_loads():
    source = _reduction_source(make_graph({"x": ([1024, 64], "float16")},
                                          [op("s", "reduce_sum", ["x"], axes=[0])], ["s"]))
    assert "part_vec" not in source


def test_a_row_walk_issues_its_loads_before_using_them():
    """The unrolled step loads all its chunks' vectors first: several loads in flight."""
    source = _reduction_source(_rms_norm((8, 8192)))
    load, use = source.index("= PART_LDG("), source.index("part_load(vld")
    assert load < use
    assert "vld2[4]" in source


@pytest.mark.parametrize("graph,barriers", [
    (_rms_norm((64, 1024)), 2),  # one combine, and the barrier that guards its partials
    (make_graph({"x": ([64, 1024], "float16")}, [op("p", "softmax", ["x"], axis=-1)], ["p"], dtype="float16"), 2),
    (make_graph({"x": ([64, 100], "float16")}, [op("p", "softmax", ["x"], axis=-1)], ["p"], dtype="float16"), 0),
])
def test_barriers_per_row(graph, barriers):
    """A team of several warps combines through shared memory once per stage; a warp alone
    needs no barrier at all (rows of at most 128 elements)."""
    assert _reduction_source(graph).count("__syncthreads();") == barriers


def test_pow_of_two_renders_as_a_multiply_and_other_exponents_as_powf():
    assert "part_pow" not in _reduction_source(_rms_norm((4, 64)))
    assert "part_pow" in _reduction_source(_rms_norm((4, 64), exponent=3.0))
    assert "part_ipow" in _reduction_source(_rms_norm((4, 64), dtype="int32", exponent=2))


# ---------------------------------------------------------------- emulated

@needs_gpp
def test_emulated_rms_norm_row_loads_one_16_byte_vector_per_lane_and_chunk():
    g = _rms_norm((16, 1024))
    rendered = render(partition(g, "ilp"))
    _, counted = run_profiled(rendered, input_values(g, 0))
    (kernel,) = [c for c in counted if c.kernel.kind == "reduction"]
    loads = kernel.requests("ldg")
    # x and w: 1024 halves = 128 chunks of 16 bytes = 4 warp requests each, per row
    assert loads.requests == 16 * 2 * 4
    assert loads.bytes == 16 * 2 * 1024 * 2
    assert loads.efficiency == 1.0
    assert kernel.ops["barriers"] == 16 * 8 * 2  # warp-level: 8 warps, 2 barriers per row


@needs_gpp
@pytest.mark.parametrize("length", [1024, 1023, 1020, 1030, 4096, 8, 130])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_emulated_norms_and_softmax_at_any_row_length(length, dtype):
    g = make_graph({"x": ([5, length], dtype), "w": ([length], dtype)},
                   [op("ln", "layer_norm", ["x", "w"]), op("p", "softmax", ["x"], axis=-1),
                    op("sq", "pow", ["x", 2.0]), op("ms", "reduce_mean", ["sq"], axes=[-1], keepdims=True),
                    op("rn", "mul", ["x", "ms"]), op("mx", "argmax", ["x"], axes=[-1])],
                   ["ln", "p", "rn", "mx"], dtype=dtype)
    _check(g)


@needs_gpp
@pytest.mark.parametrize("start", [1, 3, 8])
def test_emulated_reductions_over_views_at_an_offset(start):
    """Rows of a slice that starts ``start`` elements into its storage: misaligned for a
    vector of 8 halves unless ``start`` is a multiple of 8; read by index arithmetic."""
    g = make_graph({"x": ([6, 1024 + start], "float16")},
                   [op("v", "slice", ["x"], starts=[start], ends=[1024 + start], axes=[1]),
                    op("s", "reduce_sum", ["v"], axes=[-1]), op("p", "softmax", ["v"], axis=-1)],
                   ["s", "p"], dtype="float16")
    _check(g)


@needs_gpp
def test_emulated_rows_of_a_view_offset_by_whole_rows_and_a_column_reduction():
    g = make_graph({"x": ([7, 512], "float16")},
                   [op("v", "slice", ["x"], starts=[1], ends=[7], axes=[0]),
                    op("m", "reduce_max", ["v"], axes=[-1]), op("c", "reduce_sum", ["x"], axes=[0])],
                   ["m", "c"], dtype="float16")
    _check(g)


@needs_gpp
def test_emulated_square_is_bit_identical_to_the_reference():
    x = np.random.default_rng(1).standard_normal((3, 257)).astype(np.float32) * 1e19  # squares overflow too
    x.reshape(-1)[::9] = np.nan
    g = make_graph({"x": [3, 257]}, [op("y", "pow", ["x", 2])], ["y"])
    checks = run_and_check(partition(g, "ilp"), EMULATOR, inputs={"x": x})
    assert all(c.ok for c in checks)
    assert all(c.max_abs_error == 0 for c in checks)
