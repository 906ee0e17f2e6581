"""GPU check: the GPU tests, then every graph unfused and fused, timed on the GPU.

    python benchmarks/gpu_check.py                 # on a machine with an NVIDIA GPU
    python benchmarks/gpu_check.py --dry-run       # anywhere: small graphs on the CPU emulator

On a GPU it runs ``tests/test_cuda_gpu.py`` (every kernel template against NumPy),
measures the device-to-device copy bandwidth, and then, per graph in ``graphs/``,
plans the ``none`` (unfused) and ``ilp`` (fused) plans for the hardware profile of the
GPU it finds, and reports:

- each plan's GPU time: CUDA events around one CUDA-graph launch of the plan (its
  kernels back to back, no Python between them), L2 flushed before every repeat,
  median of the repeats after 3 warm-ups; beside it the cost model's times;
- per memory-bound fused group (memory-bound in the cost model), the achieved GB/s
  on the bytes the cost model counts for it (``GroupCost.bytes_read + bytes_written``:
  the distinct storages it reads and writes), against the copy bandwidth;
- per contraction group, TFLOP/s on ``2·batch·M·N·K`` (``partitioner.cost.contraction_dims``)
  against ``torch.matmul`` on the same GEMM shapes and dtype (when PyTorch sees the GPU),
  and per attention group TFLOP/s on the cost model's FLOP count;
- per graph exported from a PyTorch model (the corpus, by ``graphs/export_models.py``),
  the fused plan's time against PyTorch eager and ``torch.compile`` on that model: the
  same transformers config, precision and input shape, random weights (needs the
  ``corpus`` extra's transformers; the GPU machine's image has it).

It uses whichever GPU runner is installed (``backends.cuda.run``: PyCUDA, cuda-python or
CuPy) and installs nothing. A graph that fails is reported in one line and the next
one runs; a time guard stops the run within ``--budget`` seconds (7.5 minutes by
default), saying which graphs it skipped. Custom ops are not run: their results are
seeded random data, in both plans alike.

``--dry-run`` runs the same steps on this machine with the CPU emulator in place of
the GPU, on small instances (the hand-written graphs with every dimension over 4
shrunk, the test fixture ``tests/data/small_block.yaml``, and a 1-layer GPT-2 of width
64 exported from PyTorch, :data:`DRY_RUN_MODEL`, timed against PyTorch on the CPU too), checks every output
of both plans against NumPy (``backends.check``), and labels every time as emulator
wall time: it shows that the script works, not how fast the kernels are.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from importlib.util import find_spec, module_from_spec, spec_from_file_location
from pathlib import Path
from statistics import median

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the GPU machine cannot pip-install: run from the checkout as it is


def _templates_from_checkout() -> None:
    """Make ``backends.templates`` importable where the project is not installed.

    pyproject.toml maps ``templates/`` to that package only on install, so a bare
    checkout (the GPU machine's) has no such module, and every kernel's render
    failed with ModuleNotFoundError before this.
    """
    if find_spec("backends.templates") is not None:
        return
    spec = spec_from_file_location("backends.templates", ROOT / "templates" / "__init__.py",
                                   submodule_search_locations=[str(ROOT / "templates")])
    module = module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


_templates_from_checkout()

from backends.base import BackendError  # noqa: E402
from backends.check import run_and_check  # noqa: E402
from backends.cuda.run import RUNNERS  # noqa: E402
from partitioner import load_graph, partition  # noqa: E402
from partitioner.cost import contraction_dims  # noqa: E402
from partitioner.hardware import PROFILES, load_hardware  # noqa: E402
from partitioner.reference import random_values  # noqa: E402
from partitioner.yamlio import parse_yaml  # noqa: E402

BUDGET_S = 450  # 7.5 minutes: the whole check stays under 8
MIN_GRAPH_S = 20  # a graph is not started with less time left than this
TESTS_S = 200  # the GPU tests' share of the budget at most
WARMUP = 3
GPU_REPEATS, EMULATOR_REPEATS = 20, 1
COPY_BYTES = 1 << 30
HOST_COPY_BYTES = 64 << 20
# Sizes the dry run gives a hand-written graph's distinct input dimensions over 4, in
# order (so equal sizes stay equal, and the order of sizes is kept); sizes up to 4,
# such as a 3x3 window, stay as they are. Tiny, because the emulator runs a block's
# threads one after another: a 3x3 conv at 8x24x17x17 already takes seconds.
DRY_RUN_DIMS = (5, 6, 7, 9, 11)
DRY_RUN_PROFILE = "h200"
DRY_RUN_FIXTURES = (ROOT / "tests" / "data" / "small_block.yaml",)
# The dry run's graph exported from PyTorch (graphs/export_models.py): a 1-layer GPT-2
# small enough for the emulator, so that the PyTorch eager and torch.compile path runs too.
DRY_RUN_MODEL = dict(name="gpt2_tiny_1l_b2_s16_f16", model_class="GPT2Model", config_class="GPT2Config",
                     config={"n_layer": 1, "n_embd": 64, "n_head": 2, "vocab_size": 96, "n_positions": 32,
                             "bos_token_id": 0, "eos_token_id": 0, "use_cache": False},
                     input_shape=(2, 16), input_dtype="int64", dtype="float16")
_PROFILE_NAMES = (("h200", r"\bH200\b"), ("h100", r"\bH100\b"), ("a100", r"\bA100\b"))
TORCH_DTYPES = ("float16", "bfloat16", "float32", "float64")


class TimeGuard(Exception):
    """The run's time budget ran out."""


def hardware_profile(device: str) -> tuple[str, str]:
    """The built-in hardware profile to plan for on a GPU, from its name.

    Parameters
    ----------
    device : str
        The device name the driver reports (``NVIDIA H200``, ``NVIDIA A100-SXM4-80GB``).

    Returns
    -------
    tuple of (str, str)
        The profile (``h200``, ``h100`` or ``a100``) and a sentence saying why: the
        model the name gives, or that it gives none and ``h100`` stands in.

    Examples
    --------
    >>> hardware_profile("NVIDIA H100 80GB HBM3")[0]
    'h100'
    >>> hardware_profile("NVIDIA GH200 480GB")
    ('h100', "'NVIDIA GH200 480GB' names no GPU with a built-in profile (h200, h100, a100): planning for h100")
    """
    for profile, pattern in _PROFILE_NAMES:
        if re.search(pattern, device, re.IGNORECASE):
            return profile, f"'{device}' is an {profile.upper()}"
    known = ", ".join(name for name, _ in _PROFILE_NAMES)
    return "h100", f"'{device}' names no GPU with a built-in profile ({known}): planning for h100"


def shrunk(path: Path):
    """A small instance of a hand-written graph for the emulator, and what was shrunk.

    Parameters
    ----------
    path : Path
        A graph file whose inputs' shapes alone fix every size (no shape attribute).

    Returns
    -------
    tuple of (Graph, str)
        The graph with its distinct input dimensions over 4 replaced, smallest
        first, by :data:`DRY_RUN_DIMS`, and the mapping as text (``512->24``).

    Raises
    ------
    ValueError
        The graph has more distinct dimensions than there are small sizes.
    """
    data = yaml.safe_load(path.read_text())
    sizes = sorted({d for spec in data["inputs"] for d in spec["shape"] if d > 4})
    if len(sizes) > len(DRY_RUN_DIMS):
        raise ValueError(f"{path.name}: {len(sizes)} distinct dimensions, more than the {len(DRY_RUN_DIMS)} small sizes")
    small = dict(zip(sizes, DRY_RUN_DIMS))
    for spec in data["inputs"]:
        spec["shape"] = [small.get(d, d) for d in spec["shape"]]
    return load_graph(data), ", ".join(f"{big}->{to}" for big, to in small.items())


def fed_values(rendered) -> dict[str, np.ndarray]:
    """Seeded random values for every storage the kernels read and none writes."""
    written = {a["tensor"] for k in rendered.kernels for a in k.args if a["role"] == "out"}
    fed = sorted({a["tensor"] for k in rendered.kernels for a in k.args if a["tensor"] not in written})
    return random_values(rendered.plan.graph, fed, seed=0)


def memory_bound(cost) -> bool:
    """Whether the cost model finds a group memory-bound: its modelled (roofline)
    time, the larger of memory and compute time, is its memory time."""
    return cost.modeled_time_us <= cost.traffic_time_us * (1 + 1e-9)


def gemm_of(cost) -> tuple[tuple[int, int, int, int], str]:
    """(batch, M, N, K) of a contraction group as the cost model and the contraction
    template see it, and the dtype its products run in."""
    op = next(op for op in cost.group.compute if op.op_class == "contraction")
    return contraction_dims(cost.group), op.promoted


class TorchMatmul:
    """``torch.matmul`` on given GEMM shapes, timed where the plans are timed: on the GPU
    with CUDA events and the same L2 flush, or by the host clock on the CPU (dry run)."""

    def __init__(self, device: str, repeats: int):
        self.device, self.repeats, self.cache = device, repeats, {}
        self.torch, self.missing = None, None
        try:
            import torch
        except ImportError:
            self.missing = "PyTorch is not installed"
            return
        if device == "cuda" and not torch.cuda.is_available():
            self.missing = "PyTorch does not see the GPU"
            return
        self.torch = torch

    def ms(self, gemm: tuple[int, int, int, int], dtype: str) -> float | None:
        """Median milliseconds of one ``(batch, M, K) @ (batch, K, N)`` product, or
        ``None`` where PyTorch is missing or ``dtype`` is no float."""
        if self.torch is None or dtype not in TORCH_DTYPES:
            return None
        if (gemm, dtype) not in self.cache:
            self.cache[gemm, dtype] = self._measure(gemm, getattr(self.torch, dtype))
        return self.cache[gemm, dtype]

    def _measure(self, gemm, dtype) -> float:
        torch = self.torch
        batch, m, n, k = gemm
        a = torch.randn(batch, m, k, device=self.device).to(dtype)
        b = torch.randn(batch, k, n, device=self.device).to(dtype)
        ms = torch_ms(torch, lambda: torch.matmul(a, b), self.device, self.repeats)
        del a, b
        if self.device == "cuda":
            torch.cuda.empty_cache()
        return ms


def dry_run_model(export_models):
    """:data:`DRY_RUN_MODEL` as an ``export_models.Model``."""
    return export_models.Model(**DRY_RUN_MODEL)


def torch_ms(torch, run, device: str, repeats: int) -> float:
    """Median milliseconds of ``run()`` (PyTorch work) after :data:`WARMUP` calls: CUDA
    events with L2 flushed by a 256 MiB memset before each repeat on the GPU (as the
    plans are timed), the host clock on the CPU."""
    for _ in range(WARMUP):
        run()
    if device != "cuda":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
        return median(times)
    from backends.cuda.run import FLUSH_BYTES

    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:  # queued back to back: the flush covers the host's launch of the work
        flush.zero_()
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    del flush
    return median(start.elapsed_time(end) for start, end in events)


class TorchModel:
    """PyTorch eager and ``torch.compile`` (default options) on the model a graph was
    exported from, where it came from ``graphs/export_models.py``: the same
    transformers model class, config, precision and input shape, eager attention, with
    its config's random weights and a seeded random input (``export_models.build``),
    timed by :func:`torch_ms` as the plans are timed, under ``torch.no_grad``."""

    def __init__(self, device: str, repeats: int):
        self.device, self.repeats, self.specs, self.missing = device, repeats, {}, None
        try:
            import torch
            import transformers  # noqa: F401 - export_models builds its models from it
        except ImportError as exc:
            self.missing = f"{exc.name} is not installed (pip install -e '.[corpus]')"
            return
        if device == "cuda" and not torch.cuda.is_available():
            self.missing = "PyTorch does not see the GPU"
            return
        sys.path.insert(0, str(ROOT / "graphs"))
        import export_models

        self.torch, self.export_models = torch, export_models
        self.specs = {m.name: m for m in (*export_models.MODELS, *export_models.LADDER, dry_run_model(export_models))}

    def ms(self, name: str) -> tuple[float, float]:
        """(eager ms, torch.compile ms) of one forward pass of the model graph ``name``
        was exported from (a name of :attr:`specs`); the compiled model's warm-ups
        compile it."""
        torch = self.torch
        model, (x,) = self.export_models.build(self.specs[name], self.device)
        try:
            with torch.no_grad():
                eager = torch_ms(torch, lambda: model(x), self.device, self.repeats)
                compiled = torch.compile(model)
                return eager, torch_ms(torch, lambda: compiled(x), self.device, self.repeats)
        finally:
            del model, x
            torch._dynamo.reset()
            if self.device == "cuda":
                torch.cuda.empty_cache()


class GpuBench:
    """Times plans on the GPU through a :class:`backends.cuda.run.Runner`."""

    emulated = False
    unit = "GPU ms"

    def __init__(self, runner, repeats: int):
        major, minor = runner.compute_capability()
        self.runner, self.repeats, self.arch = runner, repeats, f"sm_{major}{minor}"
        self.how = (f"GPU time: CUDA events around one CUDA-graph launch per repeat (kernels back to back, no "
                    f"Python between them), L2 flushed by a 256 MiB memset before each repeat, {_runs(repeats)} "
                    f"after {WARMUP} warm-ups")
        self.matmul = TorchMatmul("cuda", repeats)
        self.model = TorchModel("cuda", repeats)

    def copy_gbps(self) -> tuple[float, str]:
        """Device-to-device copy bandwidth (read plus written bytes, 1e9 bytes/s) and
        how it was measured."""
        runner = self.runner
        src, dst = runner.alloc(COPY_BYTES), runner.alloc(COPY_BYTES)
        try:
            graph = runner.capture(lambda: runner.copy(dst, src, COPY_BYTES))
            ms = median(runner.time_graph(graph, WARMUP, self.repeats))
        finally:
            runner.free(src)
            runner.free(dst)
        return 2 * COPY_BYTES / (ms * 1e-3) / 1e9, (f"GPU: device-to-device copy of 1 GiB in a CUDA graph, CUDA "
                                                    f"events, read + write bytes, {_runs(self.repeats)}")

    def prepare(self, unfused, fused) -> None:
        """Nothing to prepare: each plan compiles as it is timed (nvcc caches)."""

    def time(self, rendered, per_kernel: bool) -> tuple[float, list[float]]:
        """(plan ms, per-kernel ms) of ``rendered`` on seeded random inputs."""
        from backends.cuda.compile import compile_kernels
        from backends.cuda.run import GpuPlan

        plan = GpuPlan(rendered, compile_kernels(rendered.kernels, self.arch), self.runner)
        try:
            plan.upload(fed_values(rendered))
            return plan.time_ms(WARMUP, self.repeats, per_kernel)
        finally:
            plan.close()

    def check(self, plan) -> tuple[bool | None, str]:
        """Not checked: the timed runs are full size, beyond a NumPy reference's minutes."""
        return None, "-"

    def close(self) -> None:
        self.runner.close()


class EmulatorBench:
    """Runs plans on the CPU emulator and times them by the host clock (dry run)."""

    emulated = True
    unit = "emulator ms"

    def __init__(self, repeats: int):
        self.repeats = repeats
        self.how = (f"EMULATOR wall time, not GPU time: a host program running the kernels on the CPU emulator "
                    f"(blocks one after another; process start and file I/O included), {_runs(repeats)}")
        self.matmul = TorchMatmul("cpu", repeats)
        self.model = TorchModel("cpu", repeats)

    def copy_gbps(self) -> tuple[float, str]:
        """Host memory copy bandwidth (read plus written bytes, 1e9 bytes/s) and how it
        was measured."""
        src = np.ones(HOST_COPY_BYTES, dtype=np.uint8)
        dst = np.empty_like(src)
        times = []
        for _ in range(WARMUP + 5):
            start = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - start)
        return 2 * HOST_COPY_BYTES / median(times[WARMUP:]) / 1e9, (
            "HOST memory, not GPU: numpy.copyto of 64 MiB, read + write bytes, wall time, median of 5")

    def prepare(self, unfused, fused) -> None:
        """Compile every emulator program the timing needs (both plans, and each fused
        kernel alone) at once, on every CPU: g++ takes about a second per program."""
        from backends.cuda import emulate

        programs = {}
        for part in [unfused, fused, *self._alone(fused)]:
            programs.setdefault(emulate.program(part), part)
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(emulate.build, programs.values()))

    @staticmethod
    def _alone(rendered) -> list:
        """One rendering per kernel, holding that kernel alone."""
        return [replace(rendered, kernels=[kernel], skipped=[]) for kernel in rendered.kernels]

    def _wall_ms(self, rendered, storages) -> tuple[float, dict]:
        from backends.cuda import emulate

        times, out = [], {}
        for _ in range(self.repeats):
            start = time.perf_counter()
            out = emulate.run(rendered, storages)
            times.append((time.perf_counter() - start) * 1e3)
        return median(times), out

    def time(self, rendered, per_kernel: bool) -> tuple[float, list[float]]:
        """(plan ms, per-kernel ms) of emulator wall time on seeded random inputs; a
        kernel alone reads what the whole plan computed before it."""
        values = fed_values(rendered)
        total, written = self._wall_ms(rendered, values)
        storages = {**values, **written}
        kernels = [self._wall_ms(part, storages)[0] for part in self._alone(rendered)] if per_kernel else []
        return total, kernels

    def check(self, plan) -> tuple[bool | None, str]:
        """Every output on the emulator against the NumPy reference (``backends.check``)."""
        from backends.cuda import CudaBackend

        checks = run_and_check(plan, CudaBackend(emulate=True))
        bad = [c.name for c in checks if not c.ok]
        return not bad, f"FAIL: {', '.join(bad)}" if bad else f"pass ({len(checks)} output(s))"

    def close(self) -> None:
        """Nothing is held between graphs."""


@dataclass
class GraphResult:
    """What one graph gave: its plans' kernel counts, measured and modelled times and
    checks (unfused, fused), and per fused kernel (its GroupCost, group index, ms)."""

    name: str
    instance: str
    kernels: tuple[int, int]
    measured_ms: tuple[float, float]
    modelled_ms: tuple[float, float]
    checks: tuple[tuple[bool | None, str], tuple[bool | None, str]]
    groups: list = field(default_factory=list)


def measure_graph(bench, graph, instance: str, profile: str) -> GraphResult:
    """Plan ``graph`` unfused and fused for ``profile``, check (on the emulator) and
    time both plans, and every fused kernel alone."""
    from backends.cuda.render import render

    plans = [partition(graph, "none", hardware=profile), partition(graph, "ilp", hardware=profile)]
    unfused, fused = (render(plan) for plan in plans)
    bench.prepare(unfused, fused)
    checks = tuple(bench.check(plan) for plan in plans)
    unfused_ms, _ = bench.time(unfused, per_kernel=False)
    fused_ms, per_kernel = bench.time(fused, per_kernel=True)
    groups = [(plans[1].cost.groups[kernel.index], kernel.index, ms) for kernel, ms in zip(fused.kernels, per_kernel)]
    return GraphResult(graph.name, instance, (len(unfused.kernels), len(fused.kernels)), (unfused_ms, fused_ms),
                       (plans[0].cost.modeled_time_us / 1e3, plans[1].cost.modeled_time_us / 1e3), checks, groups)


def graph_files(dry_run: bool) -> list[Path]:
    """The graphs a run measures: every file in graphs/, or for a dry run the
    hand-written ones (the others are too large to shrink by their inputs) and
    :data:`DRY_RUN_FIXTURES`."""
    paths = sorted((ROOT / "graphs").glob("*.yaml"))
    if not dry_run:
        return paths
    # the header line, not the parsed file: the corpus files take seconds to parse
    return [p for p in paths if re.search(r"^source:\s*hand-written", p.read_text(), re.MULTILINE)] + list(
        DRY_RUN_FIXTURES)


def instances(paths: list[Path], dry_run: bool, torch_model: "TorchModel | None" = None) -> list[tuple[object, str]]:
    """(graph, what it is) per file: at full size, fewest ops first; for a dry run the
    graphs of graphs/ shrunk and the fixtures as they are, then :data:`DRY_RUN_MODEL`
    exported from PyTorch when ``torch_model`` can build it."""
    if not dry_run:
        graphs = [(load_graph(path), f"graphs/{path.name}, full size") for path in paths]
        return sorted(graphs, key=lambda pair: len(pair[0].ops))
    out = []
    for path in paths:
        if path in DRY_RUN_FIXTURES:
            out.append((load_graph(path), f"{path.relative_to(ROOT)} as it is"))
        else:
            graph, mapping = shrunk(path)
            out.append((graph, f"graphs/{path.name}, dims {mapping}"))
    if torch_model is not None and torch_model.missing is None:
        spec = dry_run_model(torch_model.export_models)
        try:
            graph = load_graph(parse_yaml(torch_model.export_models.export(spec)))
        except Exception as exc:  # noqa: BLE001 - a failed export is one line; the other graphs run
            print(f"{spec.name}: not exported: {_one_line(exc)}")
        else:
            out.append((graph, f"exported by graphs/export_models.py: {spec.model_class} {spec.config}, input "
                               f"{list(spec.input_shape)} {spec.input_dtype}, {spec.dtype}"))
    return out


def run_gpu_tests(seconds: float) -> tuple[bool, str]:
    """Run tests/test_cuda_gpu.py; (passed, pytest's summary line)."""
    if find_spec("pytest") is None:
        return False, "not run: pytest is not installed"
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_gpu.py"],
                              cwd=ROOT, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return False, f"stopped after {seconds:.0f} s (their share of the time budget)"
    lines = done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["no output"]
    return done.returncode == 0, lines[-1]


def _runs(repeats: int) -> str:
    return f"median of {repeats} runs" if repeats > 1 else "one run"


def _num(x: float) -> str:
    """A figure with three significant digits at least, thousands separated."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """Print a Markdown table under its title (one row saying none when empty)."""
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows or [["none", *[""] * (len(header) - 1)]]:
        print("| " + " | ".join(row) + " |")


def plan_rows(results: list[GraphResult]) -> list[list[str]]:
    """Per graph: kernels, measured and modelled times of both plans, and checks."""
    return [[r.name, r.instance, f"{r.kernels[0]} -> {r.kernels[1]}", _num(r.measured_ms[0]), _num(r.measured_ms[1]),
             f"{r.measured_ms[0] / r.measured_ms[1]:.2f}x", _num(r.modelled_ms[0]), _num(r.modelled_ms[1]),
             f"{r.modelled_ms[0] / r.modelled_ms[1]:.2f}x", r.checks[0][1], r.checks[1][1]] for r in results]


def memory_rows(results: list[GraphResult], copy: float) -> list[list[str]]:
    """Per memory-bound fused group: modelled bytes over measured time, against ``copy``."""
    rows = []
    for r in results:
        for cost, index, ms in r.groups:
            if memory_bound(cost):
                rate = cost.bytes / (ms * 1e-3) / 1e9
                rows.append([r.name, str(index), cost.kind, _num(cost.bytes / 1e6), _num(ms), _num(rate),
                             _num(100 * rate / copy) + "%"])
    return rows


def compute_rows(results: list[GraphResult], matmul: TorchMatmul) -> list[list[str]]:
    """Contraction groups on 2·b·M·N·K beside torch.matmul; attention groups on the
    cost model's FLOP count."""
    rows = []
    for r in results:
        for cost, index, ms in r.groups:
            if cost.kind == "contraction":
                gemm, dtype = gemm_of(cost)
                flop, what = 2 * math.prod(gemm), "2*b*M*N*K, b M N K = " + " ".join(map(str, gemm))
                theirs = matmul.ms(gemm, dtype)
            elif cost.kind == "attention":
                flop, what, dtype, theirs = cost.flops, "the cost model's count", "", None
            else:
                continue
            torch_cells = ["-", "-", "-"] if theirs is None else [
                _num(theirs), _num(flop / (theirs * 1e-3) / 1e12), _num(theirs / ms)]
            rows.append([r.name, str(index), cost.kind, what, dtype, _num(ms), _num(flop / (ms * 1e-3) / 1e12),
                         *torch_cells])
    return rows


def report(results: list[GraphResult], bench, copy: float) -> None:
    """The tables: plans, memory-bound fused groups, compute groups."""
    unit = bench.unit
    checked = ("checks: each plan's outputs on the emulator against NumPy (backends.check)" if bench.emulated else
               "checks: none on these full-size runs; tests/test_cuda_gpu.py above checks the kernels on this GPU")
    _table(f"Plans ({bench.how}; modelled = the cost model's estimate, not measured; {checked}):",
           ["graph", "instance", "kernels unfused -> fused", f"unfused {unit}", f"fused {unit}", "speed-up",
            "modelled unfused ms", "modelled fused ms", "modelled speed-up", "check unfused", "check fused"],
           plan_rows(results))
    rate = "emulator GB/s" if bench.emulated else "GPU GB/s"
    _table(f"Memory-bound fused groups (memory-bound in the cost model; MB: the cost model's bytes, the distinct "
           f"storages the group reads and writes, not measured; {unit}: the kernel alone, {bench.how}; % of the "
           "copy bandwidth above):",
           ["graph", "group", "kind", "MB (modelled)", unit, rate, "% of copy"], memory_rows(results, copy))
    where = "on the CPU, wall time" if bench.emulated else "on the GPU, CUDA events, L2 flushed by a 256 MiB memset"
    _table(f"Compute groups of the fused plans ({unit}: the kernel alone, {bench.how}; torch.matmul: the same GEMM "
           f"shapes and dtype {where}, {_runs(bench.repeats)}; ratio = torch.matmul time / ours):",
           ["graph", "group", "kind", "FLOP", "dtype", unit, "TFLOP/s", "torch.matmul ms", "torch TFLOP/s", "ratio"],
           compute_rows(results, bench.matmul))
    if bench.matmul.missing:
        print(f"\ntorch.matmul: not measured: {bench.matmul.missing}")


def open_bench(args):
    """The bench to measure on, and the profile to plan for with the reason; prints
    the device line. Raises BackendError without a usable GPU."""
    if args.dry_run:
        profile = args.profile or DRY_RUN_PROFILE
        print(f"DRY RUN on the CPU emulator: no GPU is used; every time is emulator or host wall time.\n"
              f"planning for the {profile} profile ({'--profile' if args.profile else 'the machine this check is for'})")
        return EmulatorBench(args.repeats or EMULATOR_REPEATS), profile
    from backends.cuda.run import open_runner, select_runner

    cls, device = select_runner(args.runner)
    profile, why = (args.profile, "--profile") if args.profile else hardware_profile(device)
    bench = GpuBench(open_runner(cls.name), args.repeats or GPU_REPEATS)
    print(f"device: {device} (runner: {cls.name}, nvcc -arch={bench.arch})\n"
          f"planning for the {profile} profile: {why} ({load_hardware(profile).sources['hbm_bandwidth_gb_per_s']})")
    return bench, profile


def _alarm(_signum, _frame):
    raise TimeGuard


def _one_line(exc: Exception) -> str:
    """An exception as one line: its type and its message's first line."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"


def guarded(seconds: float, work):
    """``work()``, stopped by SIGALRM after ``seconds``: (its result, None), or (None,
    one line saying why it did not finish). One graph's failure must not end the check."""
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return work(), None
    except TimeGuard:
        return None, "stopped by the time guard (--budget)"
    except Exception as exc:  # noqa: BLE001 - reported in one line, the next graph runs
        return None, f"error: {_one_line(exc)}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def measure_all(bench, graphs: list, profile: str, begin: float, deadline: float) -> tuple[list[GraphResult], bool]:
    """Measure every graph in turn, each within the time left (SIGALRM at the
    deadline); a failing graph is one line. Returns the results and whether every
    graph was measured and passed its checks."""
    results, ok = [], True
    signal.signal(signal.SIGALRM, _alarm)
    print("progress (host clock):")
    for position, (graph, instance) in enumerate(graphs):
        left = deadline - time.perf_counter()
        if left < MIN_GRAPH_S:
            skipped = ", ".join(g.name for g, _ in graphs[position:])
            print(f"time guard: {left:.0f} s of the budget left, under {MIN_GRAPH_S} s: skipped {skipped}")
            return results, False
        started = time.perf_counter()
        result, failed = guarded(left, lambda: measure_graph(bench, graph, instance, profile))
        if failed:
            ok, outcome = False, failed
        else:
            results.append(result)
            ok &= all(passed is not False for passed, _ in result.checks)
            outcome = f"measured in {time.perf_counter() - started:.1f} s ({instance})"
        print(f"[{time.perf_counter() - begin:5.0f} s] {graph.name}: {outcome}", flush=True)
    return results, ok


def measure_torch(bench, results: list[GraphResult], begin: float, deadline: float) -> list[list[str]]:
    """Per measured graph exported from a PyTorch model (``TorchModel.specs``): the fused
    plan's time against PyTorch eager and torch.compile on that model, each graph
    within the time left; a graph without the time or whose model fails is one row."""
    rows = []
    for r in results:
        if r.name not in bench.model.specs:
            continue
        left = deadline - time.perf_counter()
        if left < MIN_GRAPH_S:
            found, failed = None, f"not started: {left:.0f} s of the budget left, under {MIN_GRAPH_S} s"
        else:
            found, failed = guarded(left, lambda: bench.model.ms(r.name))
        fused = r.measured_ms[1]
        cells = ["-"] * 4 if failed else [_num(found[0]), _num(found[1]), f"{found[0] / fused:.2f}x",
                                         f"{found[1] / fused:.2f}x"]
        rows.append([r.name, _num(fused), *cells, failed or "measured"])
        print(f"[{time.perf_counter() - begin:5.0f} s] {r.name}: PyTorch eager and torch.compile "
              f"{failed or 'measured'}", flush=True)
    return rows


def report_torch(rows: list[list[str]], bench) -> None:
    """The table of :func:`measure_torch`, or why there is none."""
    if bench.model.missing:
        print(f"\nPyTorch eager and torch.compile: not measured: {bench.model.missing}")
        return
    where = ("on the CPU, host clock" if bench.emulated else
             "on the GPU, CUDA events, L2 flushed by a 256 MiB memset")
    _table(f"The fused plan against PyTorch on the model the graph was exported from (graphs/export_models.py: the "
           f"same transformers config, precision and input shape, eager attention, random weights; one forward "
           f"pass under torch.no_grad, {where}, {_runs(bench.repeats)} after {WARMUP} warm-ups, torch.compile's "
           f"default options, compiled in its warm-ups; ours: the fused plan's {bench.unit} above; speed-up = "
           "theirs / ours; hand-written graphs have no PyTorch model and are not listed):",
           ["graph", f"fused {bench.unit}", "eager ms", "torch.compile ms", "vs eager", "vs torch.compile", "status"],
           rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="small graphs on the CPU emulator instead of a GPU")
    parser.add_argument("--skip-tests", action="store_true", help="do not run tests/test_cuda_gpu.py first")
    parser.add_argument("--runner", choices=[cls.name for cls in RUNNERS], help="the GPU runner to use")
    parser.add_argument("--profile", choices=sorted(PROFILES), help="plan for this profile, whatever the device")
    parser.add_argument("--graphs", nargs="+", metavar="NAME", help="only these graphs (file names without .yaml)")
    parser.add_argument("--repeats", type=int, help="timed repeats (default 20 on a GPU, 1 on the emulator)")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds the whole run may take (default 450)")
    args = parser.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be at least 1")
    paths = graph_files(args.dry_run)
    known = [p.stem for p in paths] + ([DRY_RUN_MODEL["name"]] if args.dry_run else [])
    unknown = sorted(set(args.graphs or []) - set(known))
    if unknown:
        parser.error(f"no graph {', '.join(unknown)} in this run; it has {', '.join(known)}")
    paths = [p for p in paths if not args.graphs or p.stem in args.graphs]
    exported = not args.graphs or DRY_RUN_MODEL["name"] in args.graphs  # the dry run's PyTorch model
    begin = time.perf_counter()
    deadline = begin + args.budget
    try:
        bench, profile = open_bench(args)
    except BackendError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 1
    try:
        ok = True
        if args.dry_run or args.skip_tests:
            print("GPU tests: not run (" + ("dry run: no GPU" if args.dry_run else "--skip-tests") + ")")
        else:
            ok, summary = run_gpu_tests(max(1.0, min(TESTS_S, deadline - time.perf_counter() - MIN_GRAPH_S)))
            print(f"GPU tests (tests/test_cuda_gpu.py, kernels against NumPy on the GPU): {summary}", flush=True)
        copy, copy_how = bench.copy_gbps()
        print(f"copy bandwidth: {_num(copy)} GB/s ({copy_how})\n", flush=True)
        graphs = instances(paths, args.dry_run, bench.model if exported else None)
        results, measured = measure_all(bench, graphs, profile, begin, deadline)
        torch_rows = measure_torch(bench, results, begin, deadline)
        report(results, bench, copy)
        report_torch(torch_rows, bench)
    finally:
        try:
            bench.close()
        except BackendError as exc:  # a kernel's fault poisons the context: its last call fails too
            print(f"gpu_check: closing the device: {exc}", file=sys.stderr)
    ok &= measured
    print(f"\ntotal {time.perf_counter() - begin:.0f} s (host clock); "
          + ("every graph measured, every check passed" if ok else "NOT every graph measured and passed"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
