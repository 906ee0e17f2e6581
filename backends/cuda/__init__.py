"""The ``cuda`` backend: Jinja2 templates per fusion group, nvcc, and a GPU runner
(PyCUDA, cuda-python or CuPy: ``run.select_runner``) on a GPU
or the CPU emulator (``emulate=True``) without one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partitioner.plan import Plan
from partitioner.report import PIPED_WIDTH

from ..base import Backend, BackendError, Counters, Emitted
from .compile import DEFAULT_ARCH, Compiled, compile_kernels, require_nvcc
from .counters import KernelCounters, counters_text
from .emit import write
from .emulate import build as build_emulated
from .emulate import require_compiler
from .emulate import run as run_emulated
from .emulate import run_profiled
from .render import Rendered, render
from .report import resource_rows
from .sampled import SampledCheck, check_sampled


@dataclass
class Built:
    """A rendered plan, compiled for a GPU (``compiled``) or for the emulator."""

    rendered: Rendered
    compiled: Compiled | None


class CudaBackend(Backend):
    """CUDA kernels from ``templates/``; ``emulate`` runs them on the CPU emulator,
    ``arch`` is the nvcc target (``sm_90`` by default), and ``profile`` makes the
    emulator count memory requests and instructions per kernel (:meth:`counters`).

    Raises
    ------
    BackendError
        ``profile`` without ``emulate``: the counters come from the emulator.
    """

    name = "cuda"

    def __init__(self, emulate: bool = False, arch: str = DEFAULT_ARCH, profile: bool = False):
        if profile and not emulate:
            raise BackendError("the cuda backend counts on the CPU emulator only: profile needs emulate")
        self.emulate, self.arch, self.profile = emulate, arch, profile
        self.counted: list[KernelCounters] = []

    def preflight(self, compile: bool = False, run: bool = False) -> None:
        """g++ to run on the emulator; nvcc to compile, and a GPU with a runner
        (PyCUDA, cuda-python or CuPy) to run on one."""
        if run and self.emulate:
            require_compiler()
        if compile or run and not self.emulate:
            require_nvcc()
        if run and not self.emulate:
            from .run import require_gpu  # imports a GPU binding, an optional extra

            require_gpu()

    def render(self, plan: Plan) -> Rendered:
        return render(plan)

    def build(self, rendered: Rendered) -> Built:
        if self.emulate:
            build_emulated(rendered, self.profile)
            return Built(rendered, None)
        return Built(rendered, compile_kernels(rendered.kernels, self.arch))

    def run(self, built: Built, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        g = built.rendered.plan.graph
        for skipped in built.rendered.skipped:
            custom = [n for n in skipped["ops"] if g.ops[n].kind == "custom"]
            if custom and custom[0] not in storages:
                raise BackendError(f"op '{custom[0]}' is custom and has no semantics; the cuda backend cannot run it")
        if self.emulate and self.profile:
            out, self.counted = run_profiled(built.rendered, storages)
            return out
        if self.emulate:
            return run_emulated(built.rendered, storages)
        from .run import run_on_gpu

        return run_on_gpu(built.rendered, built.compiled, storages)

    def emit(self, rendered: Rendered, directory) -> Emitted:
        """One ``.cu`` per kernel, the runtime header and ``manifest.json`` (with each
        kernel's nvcc command for this backend's ``arch``) in ``directory``."""
        return Emitted(write(rendered, directory, self.arch), len(rendered.kernels), rendered.skipped)

    def check_sampled(self, plan: Plan, seed: int, blocks: int) -> list[SampledCheck]:
        """Run every kernel alone on a sample of its blocks, counting, and check it.

        For plans too large to emulate whole (``sampled.py``); the counters are then
        those of :meth:`counters`.

        Parameters
        ----------
        plan : Plan
            The plan to run.
        seed : int
            Seed of the NumPy reference's inputs (as ``--run``'s).
        blocks : int
            Blocks per kernel (at least 1): the first, the last, evenly spaced between.

        Returns
        -------
        list of SampledCheck
            One per storage each kernel writes: the elements its blocks wrote,
            against the reference.

        Raises
        ------
        BackendError
            Not made with ``profile``; the reference cannot run; a kernel fails.
        """
        if not self.profile:
            raise BackendError("sampled runs count: make the cuda backend with emulate and profile")
        checks, self.counted = check_sampled(plan, self.render(plan), seed, blocks)
        return checks

    def counters(self, width: int = PIPED_WIDTH) -> Counters | None:
        """What the last run counted per kernel (``counters.py``).

        Parameters
        ----------
        width : int
            Columns the text tables may take.

        Returns
        -------
        Counters or None
            Global-memory efficiency, shared-memory wavefronts and instruction
            counts per kernel; ``None`` unless made with ``profile``.
        """
        if not self.profile:
            return None
        return Counters([c.to_dict() for c in self.counted], counters_text(self.counted, width))

    def resources(self, built: Built) -> list[dict]:
        """ptxas' registers, spills and shared memory per kernel beside the estimates
        (none on the emulator, which compiles with g++)."""
        return [] if built.compiled is None else resource_rows(built.rendered, built.compiled)
