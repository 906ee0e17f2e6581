"""Run a plan's generated kernels on the CPU, through the emulator header.

The very ``.cu`` sources the GPU would run are compiled with g++ against
``emulator/cuda_emulator.h`` (blocks one after another, a block's threads as
cooperative fibers) into one host program per plan, which launches the kernels in
plan order. It is a test tool: practical for graphs at small shapes.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

import numpy as np

from partitioner.dtypes import numpy_dtype

from ..base import BackendError
from .codegen import storage_type
from .compile import cache_dir, publish
from .counters import PROGRAM, KernelCounters, parse
from .kernels.common import environment
from .render import RUNTIME_HEADER, Kernel, Rendered, runtime_header

EMULATOR_PACKAGE = "backends.cuda.emulator"
EMULATOR_HEADER = "cuda_emulator.h"
# -ffp-contract=off: as nvcc's -fmad=false, no multiply-add contracted into one FMA
# (g++ contracts by default wherever the target has FMA, e.g. on aarch64)
CXX_FLAGS = ("-std=c++17", "-O1", "-ffp-contract=off", "-DPARTITION_EMULATOR", "-w")
# the program also counts memory requests and instructions (counters.py); without it the
# PART_LDG/... access macros are the plain accesses and the program runs as fast as ever
PROFILE_FLAGS = ("-DEMU_PROFILE",)
COUNTERS_FILE = "counters.tsv"
TIMEOUT_S = 600


class EmulatorError(BackendError):
    """g++ is missing, the program failed to compile, or a kernel failed while running."""


def compiler() -> str | None:
    """Path of g++, or ``None``."""
    return shutil.which("g++")


def require_compiler() -> None:
    """Raise :class:`EmulatorError` when g++ is not installed."""
    if compiler() is None:
        raise EmulatorError("g++ is not on the PATH; the emulator needs a C++17 compiler")


def _files(rendered: Rendered) -> dict[str, str]:
    """Storage -> file stem (storage names may hold characters a file name cannot)."""
    names: dict[str, str] = {}
    for kernel in rendered.kernels:
        for arg in kernel.args:
            names.setdefault(arg["tensor"], f"t{len(names)}")
    return names


def launch_label(kernel: Kernel) -> str:
    """How failure reports name a kernel: its group, kind, first ops and kernel name
    (a C string literal's contents: op names never hold quotes or backslashes)."""
    ops = ", ".join(kernel.ops[:3]) + (", ..." if len(kernel.ops) > 3 else "")
    return f"group {kernel.index} ({kernel.kind}: {ops}), kernel {kernel.name}"


def program(rendered: Rendered) -> str:
    """C++ source of the host program running every kernel of ``rendered``."""
    g = rendered.plan.graph
    files = _files(rendered)
    sources: dict[str, str] = {}
    launches, written = [], {}
    for kernel in rendered.kernels:
        sources.setdefault(kernel.name, kernel.source)
        args, outputs = [], []
        for arg in kernel.args:
            t = g.tensor(arg["tensor"])
            ctype = storage_type(t.dtype)
            is_input = arg["role"] == "in"
            call = f'buffer("{files[arg["tensor"]]}", {t.nbytes}, {"true" if is_input else "false"})'
            args.append(f"({'const ' if is_input else ''}{ctype}*){call}")
            if not is_input:
                outputs.append({"file": files[arg["tensor"]], "bytes": t.nbytes})
                written[arg["tensor"]] = outputs[-1]
        launches.append({"kernel": kernel.name, "grid": kernel.grid, "block": kernel.block,
                         "smem": kernel.smem_dynamic, "args": args, "label": launch_label(kernel),
                         "outputs": outputs})
    template = environment().get_template("emulator_main.cpp.j2")
    return template.render(sources=list(sources.values()), launches=launches, saved=list(written.values()))


def first_lines(rendered: Rendered) -> dict[str, int]:
    """Line of the host program (:func:`program`) where each kernel's source begins,
    by kernel name (kernels of one name share the first one's source, which differs
    from theirs only in its first line, a comment naming the group)."""
    text = program(rendered)
    first: dict[str, int] = {}
    for k in rendered.kernels:
        if k.name not in first:
            first[k.name] = text.count("\n", 0, text.index(k.source)) + 1
    return first


def build(rendered: Rendered, profile: bool = False) -> Path:
    """Compile the host program of ``rendered`` (cached by content hash); its path.
    ``profile``: a program that also writes the counters (:func:`run_profiled`)."""
    require_compiler()
    source = program(rendered)
    header = resources.files(EMULATOR_PACKAGE).joinpath(EMULATOR_HEADER).read_text()
    flags = CXX_FLAGS + (PROFILE_FLAGS if profile else ())
    key = hashlib.sha256("\0".join([source, runtime_header(), header, " ".join(flags)]).encode()).hexdigest()
    entry = cache_dir() / f"emu-{key[:24]}"
    binary = entry / "plan"
    if binary.exists():
        return binary
    entry.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / RUNTIME_HEADER).write_text(runtime_header())
        (work / EMULATOR_HEADER).write_text(header)
        (work / PROGRAM).write_text(source)
        result = subprocess.run([compiler(), *flags, "-I", str(work), PROGRAM, "-o", "plan"],
                                capture_output=True, text=True, cwd=work)
        if result.returncode != 0:
            (entry / PROGRAM).write_text(source)
            (entry / "g++.log").write_text(result.stderr)
            first = next((ln for ln in result.stderr.splitlines() if "error" in ln), result.stderr[:200])
            raise EmulatorError(f"the emulated program does not compile: {first.strip()} (log: {entry / 'g++.log'})")
        publish(work / "plan", binary)
    return binary


def failure_message(returncode: int, stderr: str) -> str:
    """One line on a failed emulated run: how it ended (exit status or signal) and the
    emulator's own report, which names the kernel, block and thread."""
    if returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"killed by signal {-returncode}"
    else:
        how = f"exit {returncode}"
    reports = [ln.strip() for ln in stderr.splitlines() if ln.startswith(("cuda_emulator:", "emulator:"))]
    detail = reports[-1] if reports else (stderr.strip().splitlines() or ["no message"])[-1]
    return f"the emulated kernels failed ({how}): {detail}"


def run(rendered: Rendered, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every kernel of ``rendered`` on the emulator (``docs/backends.md``).

    Parameters
    ----------
    rendered : Rendered
        From the CUDA backend's ``render``.
    storages : dict of str to numpy.ndarray
        Values of the storages the kernels read and no kernel writes (graph
        inputs, and custom ops' results), by storage name.

    Returns
    -------
    dict of str to numpy.ndarray
        Every storage a kernel writes, by name.

    Raises
    ------
    EmulatorError
        g++ is missing, the build fails, or a kernel faults (the message names the
        kernel and the access).
    """
    return _execute(rendered, storages, profile=False)[0]


def run_profiled(rendered: Rendered, storages: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray],
                                                                               list[KernelCounters]]:
    """Run every kernel of ``rendered`` on the emulator as :func:`run` does, counting.

    The same kernels compiled with ``-DEMU_PROFILE``, so the values are those of
    :func:`run` bit for bit; per kernel it counts global-memory sectors,
    shared-memory wavefronts and warp-level instructions (``counters.py``,
    ``docs/backends.md``).

    Parameters
    ----------
    rendered : Rendered
        From the CUDA backend's ``render``.
    storages : dict of str to numpy.ndarray
        Values of the storages the kernels read and no kernel writes, by name.

    Returns
    -------
    tuple
        The storages :func:`run` returns, and one :class:`KernelCounters` per kernel
        of ``rendered``, in launch order.

    Raises
    ------
    EmulatorError
        As :func:`run`.
    BackendError
        The counters file is malformed.
    """
    return _execute(rendered, storages, profile=True)


def _execute(rendered: Rendered, storages: dict[str, np.ndarray],
             profile: bool) -> tuple[dict[str, np.ndarray], list[KernelCounters]]:
    binary = build(rendered, profile)
    written = {a["tensor"] for k in rendered.kernels for a in k.args if a["role"] == "out"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _write(rendered, work, [name for name in _files(rendered) if name not in written], storages)
        _execute_binary(binary, work)
        out = {name: _read(rendered, work, name) for name in written}
        counted = parse((work / COUNTERS_FILE).read_text(), rendered.kernels, first_lines(rendered)) if profile else []
    return out, counted


def run_alone(rendered: Rendered, launch: int, storages: dict[str, np.ndarray],
              blocks: list[int], fill: int) -> tuple[dict[str, np.ndarray], KernelCounters]:
    """Run kernel number ``launch`` of ``rendered`` alone, on some of its blocks, counting.

    Parameters
    ----------
    rendered : Rendered
        From the CUDA backend's ``render``.
    launch : int
        Position of the kernel in ``rendered.kernels``.
    storages : dict of str to numpy.ndarray
        Values of every storage the kernel reads (those earlier kernels write too).
    blocks : list of int
        Linear indices of the blocks to run (x fastest); empty: every block.
    fill : int
        The byte (0 to 255) every storage the kernel writes starts as.

    Returns
    -------
    tuple
        Every storage the kernel writes, by name, holding ``fill`` bytes wherever
        its blocks wrote nothing; and its :class:`KernelCounters`.

    Raises
    ------
    EmulatorError
        As :func:`run`.
    """
    kernel = rendered.kernels[launch]
    binary = build(rendered, profile=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _write(rendered, work, [a["tensor"] for a in kernel.args if a["role"] == "in"], storages)
        _execute_binary(binary, work, str(launch), str(fill), *map(str, blocks))
        out = {a["tensor"]: _read(rendered, work, a["tensor"]) for a in kernel.args if a["role"] == "out"}
        (counted,) = parse((work / COUNTERS_FILE).read_text(), [kernel], first_lines(rendered))
    return out, counted


def _write(rendered: Rendered, work: Path, names: list[str], storages: dict[str, np.ndarray]) -> None:
    """The input files of storages ``names`` in ``work``."""
    g = rendered.plan.graph
    files = _files(rendered)
    for name in names:
        t = g.tensor(name)
        if t.numel == 0:  # an empty tensor may come from a group that needed no kernel
            (work / f"{files[name]}.bin").write_bytes(b"")
            continue
        array = np.ascontiguousarray(np.asarray(storages[name]).astype(numpy_dtype(t.dtype)))
        (work / f"{files[name]}.bin").write_bytes(array.tobytes())


def _read(rendered: Rendered, work: Path, name: str) -> np.ndarray:
    """Storage ``name`` as the program saved it in ``work``."""
    t = rendered.plan.graph.tensor(name)
    data = (work / f"{_files(rendered)[name]}.out").read_bytes()
    return np.frombuffer(data, dtype=numpy_dtype(t.dtype)).reshape(t.shape).copy()


def _execute_binary(binary: Path, work: Path, *args: str) -> None:
    try:
        result = subprocess.run([str(binary), str(work), *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EmulatorError(f"the emulated kernels ran past {TIMEOUT_S} s (a kernel that never ends, or a plan "
                            "too large to emulate whole: --profile checks a large plan on sampled blocks of each "
                            "kernel, --sample-blocks N)") from None
    if result.returncode != 0:
        raise EmulatorError(failure_message(result.returncode, result.stderr))
