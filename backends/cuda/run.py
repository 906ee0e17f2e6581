"""Run compiled kernels on a GPU through PyCUDA, and time plans with CUDA events.

Needs ``pip install -e '.[cuda]'`` and an NVIDIA GPU; everything else in the
project imports and tests without either (``gpu_available`` says why not).
"""

from __future__ import annotations

import statistics

import numpy as np

from partitioner.dtypes import numpy_dtype

from ..base import BackendError
from .compile import Compiled
from .render import Rendered



def gpu_available() -> tuple[bool, str]:
    """(True, device name), or (False, the reason no GPU can be used)."""
    try:
        import pycuda.driver as cuda
    except ImportError:
        return False, "PyCUDA is not installed (pip install -e '.[cuda]')"
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return False, "no CUDA device found"
        return True, cuda.Device(0).name()
    except cuda.Error as exc:
        return False, f"the CUDA driver is unusable: {exc}"


def require_gpu() -> None:
    """Raise :class:`BackendError` unless a GPU can run kernels here."""
    ok, reason = gpu_available()
    if not ok:
        raise BackendError(f"cannot run on a GPU: {reason}; use --emulate to run the kernels on the CPU")


class GpuPlan:
    """A compiled plan loaded on the GPU, with device buffers for every storage."""

    def __init__(self, rendered: Rendered, compiled: Compiled):
        require_gpu()
        import pycuda.driver as cuda

        self.cuda = cuda
        self.context = cuda.Device(0).make_context()
        self.rendered = rendered
        graph = rendered.plan.graph
        self.module = cuda.module_from_file(str(compiled.cubin))
        self.buffers = {}
        for kernel in rendered.kernels:
            for arg in kernel.args:
                if arg["tensor"] not in self.buffers:
                    self.buffers[arg["tensor"]] = cuda.mem_alloc(max(1, graph.tensor(arg["tensor"]).nbytes))
        self.launches = []
        for kernel in rendered.kernels:
            function = self.module.get_function(kernel.name)
            if kernel.smem_dynamic:  # only kernels over the default limit take it dynamically
                function.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, kernel.smem_dynamic)
            args = [self.buffers[a["tensor"]] for a in kernel.args]
            self.launches.append((function, args, kernel))

    def upload(self, storages: dict[str, np.ndarray]) -> None:
        graph = self.rendered.plan.graph
        for name, buffer in self.buffers.items():
            if name in storages and graph.tensor(name).numel:
                data = np.ascontiguousarray(np.asarray(storages[name]).astype(numpy_dtype(graph.tensor(name).dtype)))
                self.cuda.memcpy_htod(buffer, data)

    def launch_all(self) -> None:
        for function, args, kernel in self.launches:
            function(*args, block=kernel.block, grid=kernel.grid, shared=kernel.smem_dynamic)

    def download(self, names: set[str]) -> dict[str, np.ndarray]:
        graph = self.rendered.plan.graph
        out = {}
        for name in names:
            t = graph.tensor(name)
            array = np.empty(t.shape, dtype=numpy_dtype(t.dtype))
            self.cuda.memcpy_dtoh(array, self.buffers[name])
            out[name] = array
        return out

    def time_ms(self, warmup: int = 3, repeats: int = 20) -> tuple[float, list[float]]:
        """Median wall time of the whole plan, milliseconds, by CUDA events around each
        repeat (after ``warmup`` runs); also every group's median, in plan order."""
        cuda = self.cuda
        for _ in range(warmup):
            self.launch_all()
        cuda.Context.synchronize()
        totals, per_group = [], [[] for _ in self.launches]
        for _ in range(repeats):
            events = [cuda.Event() for _ in range(len(self.launches) + 1)]
            events[0].record()
            for k, (function, args, kernel) in enumerate(self.launches):
                function(*args, block=kernel.block, grid=kernel.grid, shared=kernel.smem_dynamic)
                events[k + 1].record()
            events[-1].synchronize()
            totals.append(events[0].time_till(events[-1]))
            for k in range(len(self.launches)):
                per_group[k].append(events[k].time_till(events[k + 1]))
        return statistics.median(totals), [statistics.median(ms) for ms in per_group]

    def close(self) -> None:
        for buffer in self.buffers.values():
            buffer.free()
        self.context.pop()


def run_on_gpu(rendered: Rendered, compiled: Compiled, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Upload ``storages``, launch every kernel in plan order, and return every storage
    the kernels write."""
    plan = GpuPlan(rendered, compiled)
    try:
        plan.upload(storages)
        plan.launch_all()
        plan.cuda.Context.synchronize()
        return plan.download({a["tensor"] for k in rendered.kernels for a in k.args if a["role"] == "out"})
    finally:
        plan.close()
