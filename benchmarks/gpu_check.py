"""GPU check: installs the cuda extra if needed, runs the GPU tests, measures the
device-to-device copy bandwidth, then times every graph in graphs/ unfused (the
``none`` plan) and fused (the ``ilp`` plan) with the same templates.

Run on a machine with an NVIDIA GPU (H100/H200):  python benchmarks/gpu_check.py

Times are measured with CUDA events: 3 warm-up runs, then the median of 20.
Custom ops (no semantics) are not run: their results are filled with seeded random
data before timing, in both plans alike. Sized to finish in under 8 minutes.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPY_BYTES = 1 << 30


def ensure_pycuda() -> bool:
    """Install the cuda extra if PyCUDA is missing; False if that fails."""
    if importlib.util.find_spec("pycuda") is not None:
        return True
    print("installing the cuda extra (pycuda) ...", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", f"{ROOT}[cuda]"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        print("cannot install pycuda (it builds against a CUDA driver):", done.stderr.strip().splitlines()[-1:])
        return False
    return True


def copy_bandwidth_gbps() -> float:
    """Device-to-device copy of 1 GiB, median of 10, counting bytes read plus written."""
    import pycuda.autoinit  # noqa: F401 - creates the context
    import pycuda.driver as cuda

    src, dst = cuda.mem_alloc(COPY_BYTES), cuda.mem_alloc(COPY_BYTES)
    times = []
    for _ in range(12):
        start, end = cuda.Event(), cuda.Event()
        start.record()
        cuda.memcpy_dtod(dst, src, COPY_BYTES)
        end.record()
        end.synchronize()
        times.append(start.time_till(end))
    src.free()
    dst.free()
    median = sorted(times[2:])[len(times[2:]) // 2]
    return 2 * COPY_BYTES / (median * 1e-3) / 1e9


def time_plan(plan):
    """(median ms of the whole plan, per-kernel medians, rendered) on the GPU."""
    from backends.cuda.compile import compile_kernels
    from backends.cuda.render import render
    from backends.cuda.run import GpuPlan
    from partitioner.reference import random_values

    graph = plan.graph
    rendered = render(plan)
    compiled = compile_kernels(rendered.kernels)
    fed = [a["tensor"] for k in rendered.kernels for a in k.args if a["role"] == "in"]
    written = {a["tensor"] for k in rendered.kernels for a in k.args if a["role"] == "out"}
    values = random_values(graph, sorted({t for t in fed if t not in written}), seed=0)
    gpu = GpuPlan(rendered, compiled)
    try:
        gpu.upload(values)
        total, per_kernel = gpu.time_ms()
    finally:
        gpu.close()
    return total, per_kernel, rendered


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-tests", action="store_true", help="do not run the GPU tests first")
    args = parser.parse_args()
    if not ensure_pycuda():
        return 1
    from backends.cuda.run import gpu_available

    ok, device = gpu_available()
    if not ok:
        print(f"no GPU: {device}")
        return 1
    begin = time.perf_counter()
    if not args.skip_tests:
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "tests/test_cuda_gpu.py"], cwd=ROOT)
        if tests.returncode != 0:
            print("GPU tests failed")
            return 1
    from partitioner import load_graph, partition

    copy = copy_bandwidth_gbps()
    print(f"\ndevice: {device}; device-to-device copy: {copy:,.0f} GB/s (read + write, 1 GiB, median of 10)\n")
    print("| graph | unfused ms | fused ms | speed-up | kernels unfused -> fused | "
          "memory-bound fused groups: median GB/s (% of copy) |")
    print("|---|---|---|---|---|---|")
    details = []
    for path in sorted((ROOT / "graphs").glob("*.yaml")):
        graph = load_graph(path)
        unfused_ms, _, unfused = time_plan(partition(graph, "none"))
        fused_plan = partition(graph, "ilp", time_limit=60)
        fused_ms, per_kernel, fused = time_plan(fused_plan)
        rates = []
        for kernel, ms in zip(fused.kernels, per_kernel):
            cost = fused_plan.cost.groups[kernel.index]
            if cost.roofline_time_us <= cost.modeled_time_us * 1.0001:  # memory-bound in the model
                gbps = (cost.bytes_read + cost.bytes_written) / (ms * 1e-3) / 1e9
                rates.append(gbps)
                details.append((graph.name, kernel.index, kernel.kind, cost.bytes_read + cost.bytes_written, ms, gbps))
        rates.sort()
        median = rates[len(rates) // 2] if rates else float("nan")
        print(f"| {graph.name} | {unfused_ms:.3f} | {fused_ms:.3f} | {unfused_ms / fused_ms:.2f}x | "
              f"{len(unfused.kernels)} -> {len(fused.kernels)} | {median:,.0f} ({median / copy:.0%}) |", flush=True)
    print("\nmemory-bound fused groups (bytes are modelled, times measured):")
    print("| graph | group | kind | MB | ms | GB/s | % of copy |")
    print("|---|---|---|---|---|---|---|")
    for name, index, kind, moved, ms, gbps in details:
        print(f"| {name} | {index} | {kind} | {moved / 1e6:,.1f} | {ms:.4f} | {gbps:,.0f} | {gbps / copy:.0%} |")
    print(f"\ntotal {time.perf_counter() - begin:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
