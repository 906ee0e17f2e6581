"""The cuda backend on a real GPU (skipped without PyCUDA and a device): every
plan's outputs against the NumPy reference, and fused plans against unfused ones."""

from __future__ import annotations

import numpy as np
import pytest

from backends.check import run_and_check
from backends.cuda import CudaBackend
from backends.cuda.run import gpu_available
from partitioner import load_graph, partition
from partitioner.reference import input_values

from .conftest import GRAPHS, ROOT

AVAILABLE, REASON = gpu_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"no GPU to run on: {REASON}")
HANDWRITTEN = [p for p in GRAPHS if "source: hand-written" in p.read_text()]


@pytest.mark.parametrize("strategy", ["none", "greedy", "ilp"])
@pytest.mark.parametrize("path", [*HANDWRITTEN, ROOT / "tests" / "data" / "small_block.yaml"],
                         ids=lambda p: p.stem)
def test_plans_match_numpy_on_the_gpu(path, strategy):
    checks = run_and_check(partition(load_graph(path), strategy), CudaBackend())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.parametrize("path", HANDWRITTEN, ids=lambda p: p.stem)
def test_gpu_and_emulator_agree_bit_for_bit_on_pointwise_and_reductions(path):
    graph = load_graph(path)
    plan = partition(graph, "ilp")
    if any(g.kind == "contraction" for g in plan.cost.groups):
        pytest.skip("tensor-core accumulation order is the hardware's")
    values = input_values(graph)
    gpu, emulated = CudaBackend(), CudaBackend(emulate=True)
    a = gpu.run(gpu.build(gpu.render(plan)), values)
    if graph.tensor(graph.outputs[0]).numel > 2**22:
        pytest.skip("too large for the emulator")
    b = emulated.run(emulated.build(emulated.render(plan)), values)
    for name in a:
        assert np.array_equal(a[name].view(np.uint8), b[name].view(np.uint8)), name
