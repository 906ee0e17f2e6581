"""Compile rendered kernels with nvcc, cache the results by content hash, and read
ptxas' resource report (registers, spills, static shared memory) per kernel."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from ..base import BackendError
from .render import RUNTIME_HEADER, Kernel, runtime_header

DEFAULT_ARCH = "sm_90"
# -fmad=false: nvcc would otherwise contract a multiply and a dependent add into one
# FMA (one rounding where the unfused plan rounds twice), breaking the bit-identity of
# fused elementwise chains; kernels that want an FMA write fmaf() explicitly.
NVCC_FLAGS = ("-O3", "-std=c++17", "-fmad=false", "-Xptxas", "-v")
_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


class CompileError(BackendError):
    """nvcc is missing or rejected a kernel; the message is one line, the log a file."""


@dataclass(frozen=True)
class Resources:
    """ptxas' report for one kernel: registers per thread, spill bytes, static
    shared memory and stack frame, bytes."""

    registers: int
    spill_stores: int
    spill_loads: int
    static_smem: int
    stack_frame: int

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class Compiled:
    """A cubin holding every kernel of a plan, and ptxas' report per kernel name."""

    arch: str
    cubin: Path
    resources: dict[str, Resources]


def nvcc() -> str | None:
    """Path of nvcc, or ``None`` when it is not installed."""
    return shutil.which("nvcc")


def require_nvcc() -> None:
    """Raise :class:`CompileError` when nvcc is not installed."""
    if nvcc() is None:
        raise CompileError("nvcc is not on the PATH; install the CUDA toolkit to compile kernels")


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    out = subprocess.run([nvcc(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def cache_dir() -> Path:
    """``$PARTITIONER_CACHE``, else ``~/.cache/partitioner/cuda``.

    Raises
    ------
    BackendError
        The folder cannot be made there (``PARTITIONER_CACHE`` names a file, or a
        place that cannot be written)."""
    root = os.environ.get("PARTITIONER_CACHE") or Path.home() / ".cache" / "partitioner"
    path = Path(root) / "cuda"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendError(f"the kernel cache {path} cannot be made: {exc.strerror or exc} "
                           "(set PARTITIONER_CACHE to a folder that can be written)") from None
    return path


def publish(source: Path, target: Path) -> None:
    """Put file ``source`` at ``target`` in the cache atomically: copied beside it, then
    renamed over it. A concurrent run then never reads or executes a partial file, and
    replacing a program that another process is running does not fail ("Text file
    busy"), as copying over it does."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.copy(source, partial)
    os.replace(partial, target)


def parse_ptxas(log: str) -> dict[str, Resources]:
    """Kernel name -> :class:`Resources` from ``nvcc -Xptxas -v`` output."""
    found: dict[str, Resources] = {}
    current = None
    numbers = {}
    for line in log.splitlines():
        entry = _ENTRY.search(line)
        if entry:
            current, numbers = entry.group(1), {}
            continue
        if current is None:
            continue
        spills = _SPILLS.search(line)
        if spills:
            numbers.update(stack=int(spills.group(1)), stores=int(spills.group(2)), loads=int(spills.group(3)))
        used = _USED.search(line)
        if used:
            smem = _SMEM.search(line)
            found[current] = Resources(int(used.group(1)), numbers.get("stores", 0), numbers.get("loads", 0),
                                       int(smem.group(1)) if smem else 0, numbers.get("stack", 0))
            current = None
    return found


def nvcc_command(source: str, output: str, arch: str = DEFAULT_ARCH, include: str = ".",
                 nvcc_path: str = "nvcc") -> list[str]:
    """The nvcc command line that compiles ``source`` into the cubin ``output`` for
    ``arch``, with ``include`` on the include path: the one command every kernel of
    this backend is compiled with (and that ``manifest.json`` records)."""
    return [nvcc_path, f"-arch={arch}", "-cubin", *NVCC_FLAGS, "-I", include, source, "-o", output]


def bundle(kernels: list[Kernel]) -> str:
    """One translation unit with every distinct kernel (identical groups share one)."""
    sources = {}
    for k in kernels:
        sources.setdefault(k.name, k.source.split("\n", 1)[1])  # without the group comment
    return "\n".join(sources[name] for name in sorted(sources))


def compile_kernels(kernels: list[Kernel], arch: str = DEFAULT_ARCH) -> Compiled:
    """Compile ``kernels`` into one cubin, from the cache when compiled before.

    The cache key is the sources, the runtime header, the flags and nvcc's version.

    Parameters
    ----------
    kernels : list of Kernel
        Rendered kernels; identical ones are compiled once.
    arch : str
        The target, e.g. ``sm_90``.

    Returns
    -------
    Compiled
        The cubin's path and each kernel's registers, spills and static shared
        memory, as ptxas reports them.

    Raises
    ------
    CompileError
        nvcc is not installed or fails (the full log is kept in the cache).
    """
    require_nvcc()
    source = bundle(kernels)
    header = runtime_header()
    key = hashlib.sha256("\0".join([source, header, arch, " ".join(NVCC_FLAGS), nvcc_version()]).encode()).hexdigest()
    entry = cache_dir() / key[:24]
    cubin, report = entry / "kernels.cubin", entry / "resources.json"
    if cubin.exists() and report.exists():
        data = json.loads(report.read_text())
        return Compiled(arch, cubin, {name: Resources(**r) for name, r in data.items()})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / RUNTIME_HEADER).write_text(header)
        (work / "kernels.cu").write_text(source)
        result = subprocess.run(nvcc_command("kernels.cu", "kernels.cubin", arch, str(work), nvcc()),
                                capture_output=True, text=True, cwd=work)
        entry.mkdir(parents=True, exist_ok=True)
        (entry / "nvcc.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            (entry / "kernels.cu").write_text(source)
            first = next((ln for ln in result.stderr.splitlines() if "error" in ln), result.stderr.strip()[:200])
            raise CompileError(f"nvcc failed for {arch}: {first.strip()} (log: {entry / 'nvcc.log'})")
        resources = parse_ptxas(result.stdout + result.stderr)
        (work / report.name).write_text(json.dumps({name: asdict(r) for name, r in resources.items()}))
        publish(work / "kernels.cubin", cubin)
        publish(work / report.name, report)  # last: a run that sees the report finds the cubin whole
    return Compiled(arch, cubin, resources)
