"""The ``cuda`` backend: Jinja2 templates per fusion group, nvcc, and PyCUDA on a GPU
or the CPU emulator (``emulate=True``) without one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partitioner.plan import Plan

from ..base import Backend, BackendError, Emitted
from .compile import DEFAULT_ARCH, Compiled, compile_kernels, require_nvcc
from .emit import write
from .emulate import build as build_emulated
from .emulate import require_compiler
from .emulate import run as run_emulated
from .render import Rendered, render
from .report import resource_rows


@dataclass
class Built:
    """A rendered plan, compiled for a GPU (``compiled``) or for the emulator."""

    rendered: Rendered
    compiled: Compiled | None


class CudaBackend(Backend):
    """CUDA kernels from ``templates/``; ``emulate`` runs them on the CPU emulator,
    ``arch`` is the nvcc target (``sm_90`` by default)."""

    name = "cuda"

    def __init__(self, emulate: bool = False, arch: str = DEFAULT_ARCH):
        self.emulate, self.arch = emulate, arch

    def preflight(self, compile: bool = False, run: bool = False) -> None:
        """g++ to run on the emulator; nvcc to compile, and a GPU with PyCUDA to run on one."""
        if run and self.emulate:
            require_compiler()
        if compile or run and not self.emulate:
            require_nvcc()
        if run and not self.emulate:
            from .run import require_gpu  # imports PyCUDA, an optional extra

            require_gpu()

    def render(self, plan: Plan) -> Rendered:
        return render(plan)

    def build(self, rendered: Rendered) -> Built:
        if self.emulate:
            build_emulated(rendered)
            return Built(rendered, None)
        return Built(rendered, compile_kernels(rendered.kernels, self.arch))

    def run(self, built: Built, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        g = built.rendered.plan.graph
        for skipped in built.rendered.skipped:
            custom = [n for n in skipped["ops"] if g.ops[n].kind == "custom"]
            if custom and custom[0] not in storages:
                raise BackendError(f"op '{custom[0]}' is custom and has no semantics; the cuda backend cannot run it")
        if self.emulate:
            return run_emulated(built.rendered, storages)
        from .run import run_on_gpu

        return run_on_gpu(built.rendered, built.compiled, storages)

    def emit(self, rendered: Rendered, directory) -> Emitted:
        """One ``.cu`` per kernel, the runtime header and ``manifest.json`` (with each
        kernel's nvcc command for this backend's ``arch``) in ``directory``."""
        return Emitted(write(rendered, directory, self.arch), len(rendered.kernels), rendered.skipped)

    def resources(self, built: Built) -> list[dict]:
        """ptxas' registers, spills and shared memory per kernel beside the estimates
        (none on the emulator, which compiles with g++)."""
        return [] if built.compiled is None else resource_rows(built.rendered, built.compiled)
