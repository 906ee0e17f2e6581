"""Run compiled kernels on a GPU, and time plans with CUDA events.

Three runners reach the GPU, each through another Python binding of the CUDA
driver: PyCUDA (``pip install -e '.[cuda]'``), cuda-python (``cuda.bindings.driver``,
or ``cuda.cuda`` in releases before 12.6) and CuPy. :func:`select_runner` takes the
first of them, in that order, that imports and sees a device; everything else in the
project imports and tests without any of them (:func:`gpu_available` says why not).

Every runner works on device 0's primary context (the one PyTorch and CuPy use, so
their kernels can be timed beside ours) and puts all its work on one stream of its
own. Timing (:meth:`Runner.time_graph`) replays a CUDA graph: the work of one repeat
(a whole plan, or one kernel) is captured once, so its kernels run back to back with
no Python between them; before each repeat a memset of :data:`FLUSH_BYTES` evicts
whatever the previous one left in L2, and CUDA events around the graph launch time
it. Graphs are captured through libcuda itself (ctypes): PyCUDA has no graph API,
and one capture path then serves all three runners alike.
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any, ClassVar

import numpy as np

from partitioner.dtypes import numpy_dtype

from ..base import BackendError
from .compile import Compiled
from .render import Kernel, Rendered

# Bytes written before each timed repeat: over five times the L2 of an H100 or H200
# (50 MB) and six times an A100's (40 MB), so that no repeat finds its inputs in L2.
FLUSH_BYTES = 256 * 2**20
# cuStreamBeginCapture's CU_STREAM_CAPTURE_MODE_RELAXED: the capture forbids no API
# call of other threads or libraries (only the stream's own work is recorded).
_CAPTURE_RELAXED = 2


class RunnerUnavailable(Exception):
    """A runner cannot be used here; the message says why (one line)."""


def _import_error(package: str, hint: str, exc: ImportError) -> RunnerUnavailable:
    """A missing package says how to install it; a broken one says what failed."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == package.split(".")[0]:
        return RunnerUnavailable(f"not installed ({hint})")
    return RunnerUnavailable(f"cannot be imported: {exc}")


class _DriverGraphs:
    """CUDA graphs through libcuda's own entry points (ctypes), for any runner's stream."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise BackendError(f"cannot load the CUDA driver library for graph capture: {exc}") from None

    def _call(self, function: str, *args) -> None:
        code = getattr(self.lib, function)(*args)
        if code:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(code, ctypes.byref(text))
            raise BackendError(f"{function} failed: {(text.value or b'error %d' % code).decode()}")

    def capture(self, stream: int, work: Callable[[], None]) -> ctypes.c_void_p:
        """An executable graph of what ``work`` puts on ``stream``."""
        graph, executable = ctypes.c_void_p(), ctypes.c_void_p()
        self._call("cuStreamBeginCapture_v2", ctypes.c_void_p(stream), ctypes.c_int(_CAPTURE_RELAXED))
        try:
            work()
        except BaseException:  # end the capture, so the stream stays usable; the work's error is the one to tell
            if self.lib.cuStreamEndCapture(ctypes.c_void_p(stream), ctypes.byref(graph)) == 0 and graph:
                self.lib.cuGraphDestroy(graph)
            raise
        self._call("cuStreamEndCapture", ctypes.c_void_p(stream), ctypes.byref(graph))
        try:
            self._call("cuGraphInstantiateWithFlags", ctypes.byref(executable), graph, ctypes.c_ulonglong(0))
        finally:
            self._call("cuGraphDestroy", graph)
        return executable

    def launch(self, executable: ctypes.c_void_p, stream: int) -> None:
        self._call("cuGraphLaunch", executable, ctypes.c_void_p(stream))

    def destroy(self, executable: ctypes.c_void_p) -> None:
        self._call("cuGraphExecDestroy", executable)


class Runner(ABC):
    """One Python binding of the CUDA driver, on device 0's primary context.

    A runner holds one stream, and every asynchronous call below is queued on it.
    Subclasses implement the primitives; capture, replay and timing are common.
    Buffers and functions are the binding's own objects, opaque to callers.

    Raises
    ------
    BackendError
        From any call the driver refuses (the message names it).
    """

    name: ClassVar[str]

    def __init__(self):
        self._graphs: _DriverGraphs | None = None  # loaded at the first capture: running needs no graphs
        self._captured: list = []
        self._events: list = []
        self._flush = None

    @classmethod
    @abstractmethod
    def probe(cls) -> str:
        """Device 0's name; raises :class:`RunnerUnavailable` saying why not."""

    @abstractmethod
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor) of device 0."""

    @abstractmethod
    def function(self, cubin: Path, name: str, smem_dynamic: int) -> Any:
        """Kernel ``name`` of ``cubin`` (each cubin loaded once), allowed
        ``smem_dynamic`` bytes of dynamic shared memory where that is over 0."""

    @abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes`` bytes."""

    @abstractmethod
    def free(self, buffer: Any) -> None:
        """Release a buffer from :meth:`alloc`."""

    @abstractmethod
    def upload(self, buffer: Any, array: np.ndarray) -> None:
        """Copy the contiguous ``array`` into ``buffer`` (returns when done)."""

    @abstractmethod
    def download(self, buffer: Any, array: np.ndarray) -> None:
        """Copy ``buffer`` into the contiguous ``array`` after all queued work."""

    @abstractmethod
    def fill(self, buffer: Any, nbytes: int) -> None:
        """Queue a memset of the first ``nbytes`` of ``buffer`` to 0."""

    @abstractmethod
    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        """Queue a device-to-device copy of ``nbytes``."""

    @abstractmethod
    def launch(self, function: Any, kernel: Kernel, buffers: list) -> None:
        """Queue ``function`` with ``kernel``'s grid, block and dynamic shared memory;
        ``buffers`` are its arguments, in the order of ``kernel.args``."""

    @abstractmethod
    def stream_handle(self) -> int:
        """The runner's stream as a ``CUstream`` address."""

    @abstractmethod
    def new_event(self) -> Any:
        """A CUDA event that records time."""

    @abstractmethod
    def record(self, event: Any) -> None:
        """Queue ``event``."""

    @abstractmethod
    def elapsed_ms(self, start: Any, end: Any) -> float:
        """Milliseconds between two completed events."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for everything queued."""

    @abstractmethod
    def _release(self) -> None:
        """Free the binding's own resources (modules, events, stream, context)."""

    def capture(self, work: Callable[[], None]) -> ctypes.c_void_p:
        """A CUDA graph of the work ``work`` queues (launches, memsets, copies),
        replayed by :meth:`replay` and destroyed by :meth:`close`."""
        if self._graphs is None:
            self._graphs = _DriverGraphs()
        executable = self._graphs.capture(self.stream_handle(), work)
        self._captured.append(executable)
        return executable

    def replay(self, graph: ctypes.c_void_p) -> None:
        """Queue one run of a captured graph."""
        self._graphs.launch(graph, self.stream_handle())

    def time_graph(self, graph: ctypes.c_void_p, warmup: int = 3, repeats: int = 20) -> list[float]:
        """GPU time of each replay of a captured graph.

        Every repeat is queued before any is waited for, as: an L2 flush (a memset
        of :data:`FLUSH_BYTES`), an event, the replay, an event. The flush keeps the
        GPU busy while the host queues the replay, so no host time falls between the
        events, and the flush itself falls outside them.

        Parameters
        ----------
        graph : ctypes.c_void_p
            From :meth:`capture`.
        warmup : int
            Untimed replays first.
        repeats : int
            Timed replays.

        Returns
        -------
        list of float
            Milliseconds of each timed replay, by CUDA events, in order.
        """
        if self._flush is None:
            self._flush = self.alloc(FLUSH_BYTES)
        for _ in range(warmup):
            self.replay(graph)
        while len(self._events) < 2 * repeats:
            self._events.append(self.new_event())
        for k in range(repeats):
            self.fill(self._flush, FLUSH_BYTES)
            self.record(self._events[2 * k])
            self.replay(graph)
            self.record(self._events[2 * k + 1])
        self.synchronize()
        return [self.elapsed_ms(self._events[2 * k], self._events[2 * k + 1]) for k in range(repeats)]

    def close(self) -> None:
        """Destroy the captured graphs and release the device."""
        self.synchronize()
        for executable in self._captured:  # none unless a capture loaded the graphs
            self._graphs.destroy(executable)
        self._captured.clear()
        if self._flush is not None:
            self.free(self._flush)
            self._flush = None
        self._release()


class PycudaRunner(Runner):
    """PyCUDA (``pip install -e '.[cuda]'``)."""

    name = "pycuda"

    @classmethod
    def probe(cls) -> str:
        try:
            import pycuda.driver as cuda
        except ImportError as exc:
            raise _import_error("pycuda", "pip install -e '.[cuda]'", exc) from None
        try:
            cuda.init()
            if cuda.Device.count() == 0:
                raise RunnerUnavailable("no CUDA device found")
            return cuda.Device(0).name()
        except cuda.Error as exc:
            raise RunnerUnavailable(f"the CUDA driver is unusable: {exc}") from None

    def __init__(self):
        import pycuda.driver as cuda

        cuda.init()
        self.cuda = cuda
        self.device = cuda.Device(0)
        self.context = self.device.retain_primary_context()
        self.context.push()
        self.stream = cuda.Stream()
        self.modules: dict[Path, Any] = {}
        super().__init__()

    def compute_capability(self) -> tuple[int, int]:
        return tuple(self.device.compute_capability())

    def function(self, cubin: Path, name: str, smem_dynamic: int) -> Any:
        if cubin not in self.modules:
            self.modules[cubin] = self.cuda.module_from_file(str(cubin))
        function = self.modules[cubin].get_function(name)
        if smem_dynamic:  # only kernels over the 48 KiB default take it dynamically
            function.set_attribute(self.cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_dynamic)
        return function

    def alloc(self, nbytes: int) -> Any:
        return self.cuda.mem_alloc(nbytes)

    def free(self, buffer: Any) -> None:
        buffer.free()

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        self.stream.synchronize()
        self.cuda.memcpy_htod(buffer, array)

    def download(self, buffer: Any, array: np.ndarray) -> None:
        self.stream.synchronize()
        self.cuda.memcpy_dtoh(array, buffer)

    def fill(self, buffer: Any, nbytes: int) -> None:
        self.cuda.memset_d8_async(buffer, 0, nbytes, self.stream)

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        self.cuda.memcpy_dtod_async(dst, src, nbytes, self.stream)

    def launch(self, function: Any, kernel: Kernel, buffers: list) -> None:
        function(*buffers, block=kernel.block, grid=kernel.grid, shared=kernel.smem_dynamic, stream=self.stream)

    def stream_handle(self) -> int:
        return self.stream.handle

    def new_event(self) -> Any:
        return self.cuda.Event()

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return start.time_till(end)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _release(self) -> None:
        self.modules.clear()
        self.context.pop()


def _cuda_python_driver():
    """The driver module of cuda-python: ``cuda.bindings.driver`` (12.6 and later)
    or ``cuda.cuda`` (earlier releases)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver
    return driver


class CudaPythonRunner(Runner):
    """cuda-python's driver bindings (``pip install cuda-python``)."""

    name = "cuda-python"

    @classmethod
    def probe(cls) -> str:
        try:
            driver = _cuda_python_driver()
        except ImportError as exc:
            raise _import_error("cuda", "pip install cuda-python", exc) from None
        try:
            _check(driver, driver.cuInit(0))
            if _check(driver, driver.cuDeviceGetCount()) == 0:
                raise RunnerUnavailable("no CUDA device found")
            return _device_name(driver, _check(driver, driver.cuDeviceGet(0)))
        except RuntimeError as exc:  # BackendError from _check, or the bindings found no libcuda
            raise RunnerUnavailable(f"the CUDA driver is unusable: {exc}") from None

    def __init__(self):
        driver = self.driver = _cuda_python_driver()
        _check(driver, driver.cuInit(0))
        self.device = _check(driver, driver.cuDeviceGet(0))
        _check(driver, driver.cuCtxSetCurrent(_check(driver, driver.cuDevicePrimaryCtxRetain(self.device))))
        self.stream = _check(driver, driver.cuStreamCreate(0))
        self.modules: dict[Path, Any] = {}
        super().__init__()

    def _do(self, result: tuple) -> Any:
        return _check(self.driver, result)

    def compute_capability(self) -> tuple[int, int]:
        attribute = self.driver.CUdevice_attribute
        return (self._do(self.driver.cuDeviceGetAttribute(
                    attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device)),
                self._do(self.driver.cuDeviceGetAttribute(
                    attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device)))

    def function(self, cubin: Path, name: str, smem_dynamic: int) -> Any:
        if cubin not in self.modules:
            self.modules[cubin] = self._do(self.driver.cuModuleLoad(str(cubin).encode()))
        function = self._do(self.driver.cuModuleGetFunction(self.modules[cubin], name.encode()))
        if smem_dynamic:
            self._do(self.driver.cuFuncSetAttribute(
                function, self.driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem_dynamic))
        return function

    def alloc(self, nbytes: int) -> Any:
        return self._do(self.driver.cuMemAlloc(nbytes))

    def free(self, buffer: Any) -> None:
        self._do(self.driver.cuMemFree(buffer))

    def upload(self, buffer: Any, array: np.ndarray) -> None:
        self.synchronize()
        self._do(self.driver.cuMemcpyHtoD(buffer, array, array.nbytes))

    def download(self, buffer: Any, array: np.ndarray) -> None:
        self.synchronize()
        self._do(self.driver.cuMemcpyDtoH(array, buffer, array.nbytes))

    def fill(self, buffer: Any, nbytes: int) -> None:
        self._do(self.driver.cuMemsetD8Async(buffer, 0, nbytes, self.stream))

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        self._do(self.driver.cuMemcpyDtoDAsync(dst, src, nbytes, self.stream))

    def launch(self, function: Any, kernel: Kernel, buffers: list) -> None:
        # (values, types): a type of None passes each CUdeviceptr as a pointer
        params = (tuple(buffers), (None,) * len(buffers))
        self._do(self.driver.cuLaunchKernel(function, *kernel.grid, *kernel.block, kernel.smem_dynamic,
                                            self.stream, params, 0))

    def stream_handle(self) -> int:
        return int(self.stream)

    def new_event(self) -> Any:
        return self._do(self.driver.cuEventCreate(0))

    def record(self, event: Any) -> None:
        self._do(self.driver.cuEventRecord(event, self.stream))

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return self._do(self.driver.cuEventElapsedTime(start, end))

    def synchronize(self) -> None:
        self._do(self.driver.cuStreamSynchronize(self.stream))

    def _release(self) -> None:
        for event in self._events:
            self._do(self.driver.cuEventDestroy(event))
        for module in self.modules.values():
            self._do(self.driver.cuModuleUnload(module))
        self._do(self.driver.cuStreamDestroy(self.stream))
        self._do(self.driver.cuDevicePrimaryCtxRelease(self.device))


def _check(driver, result: tuple) -> Any:
    """The value of a cuda-python call's ``(error, value...)`` result; raise
    :class:`BackendError` with the driver's words for an error."""
    error, *values = result
    if error != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(error)
        raise BackendError(f"the CUDA driver failed: {text.decode() if isinstance(text, bytes) else text}")
    return values[0] if len(values) == 1 else tuple(values) or None


def _device_name(driver, device) -> str:
    return _check(driver, driver.cuDeviceGetName(256, device)).split(b"\0")[0].decode()


class CupyRunner(Runner):
    """CuPy (``pip install cupy-cuda12x``, or the wheel matching the CUDA driver)."""

    name = "cupy"

    @classmethod
    def probe(cls) -> str:
        try:
            import cupy
        except ImportError as exc:
            raise _import_error("cupy", "pip install cupy-cuda12x", exc) from None
        try:
            if cupy.cuda.runtime.getDeviceCount() == 0:
                raise RunnerUnavailable("no CUDA device found")
            name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            raise RunnerUnavailable(f"the CUDA driver is unusable: {exc}") from None
        return name.decode() if isinstance(name, bytes) else name

    def __init__(self):
        import cupy

        self.cupy = cupy
        cupy.cuda.Device(0).use()
        # non-blocking: work on the legacy default stream (CuPy's own) never joins a capture
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.modules: dict[Path, Any] = {}
        super().__init__()

    def compute_capability(self) -> tuple[int, int]:
        digits = self.cupy.cuda.Device(0).compute_capability  # e.g. "90"
        return int(digits[:-1]), int(digits[-1])

    def function(self, cubin: Path, name: str, smem_dynamic: int) -> Any:
        if cubin not in self.modules:
            self.modules[cubin] = self.cupy.RawModule(path=str(cubin))
        function = self.modules[cubin].get_function(name)
        if smem_dynamic:
            function.max_dynamic_shared_size_bytes = smem_dynamic
        return function

    def alloc(self, nbytes: int) -> Any:
        # a Memory of its own, not the pool's: it is freed when the plan lets it go
        memory = self.cupy.cuda.memory
        return memory.MemoryPointer(memory.Memory(nbytes), 0)

    def free(self, buffer: Any) -> None:
        """Nothing to do: CuPy frees a Memory once nothing refers to it."""

    # on the runner's stream: a copy on the legacy default stream would not be ordered
    # with a non-blocking stream's kernels
    def upload(self, buffer: Any, array: np.ndarray) -> None:
        buffer.copy_from_host_async(ctypes.c_void_p(array.ctypes.data), array.nbytes, self.stream)
        self.stream.synchronize()

    def download(self, buffer: Any, array: np.ndarray) -> None:
        buffer.copy_to_host_async(ctypes.c_void_p(array.ctypes.data), array.nbytes, self.stream)
        self.stream.synchronize()

    def fill(self, buffer: Any, nbytes: int) -> None:
        buffer.memset_async(0, nbytes, self.stream)

    def copy(self, dst: Any, src: Any, nbytes: int) -> None:
        dst.copy_from_device_async(src, nbytes, self.stream)

    def launch(self, function: Any, kernel: Kernel, buffers: list) -> None:
        # a uint64 argument is passed as its 8 bytes: the buffer's address
        function(kernel.grid, kernel.block, tuple(np.uint64(b.ptr) for b in buffers),
                 shared_mem=kernel.smem_dynamic, stream=self.stream)

    def stream_handle(self) -> int:
        return self.stream.ptr

    def new_event(self) -> Any:
        return self.cupy.cuda.Event()

    def record(self, event: Any) -> None:
        event.record(self.stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return self.cupy.cuda.get_elapsed_time(start, end)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _release(self) -> None:
        self.modules.clear()


RUNNERS: tuple[type[Runner], ...] = (PycudaRunner, CudaPythonRunner, CupyRunner)


def select_runner(name: str | None = None) -> tuple[type[Runner], str]:
    """The runner to use: the first of :data:`RUNNERS` that imports and sees a device.

    Parameters
    ----------
    name : str, optional
        Consider only this runner (``pycuda``, ``cuda-python`` or ``cupy``).

    Returns
    -------
    tuple of (type of Runner, str)
        The runner class and device 0's name as the runner reports it.

    Raises
    ------
    BackendError
        ``name`` names no runner, or no runner can be used (the message gives
        each one's reason).
    """
    known = [cls.name for cls in RUNNERS]
    if name is not None and name not in known:
        raise BackendError(f"unknown GPU runner {name!r}: use one of {', '.join(known)}")
    reasons = []
    for cls in RUNNERS:
        if name is None or cls.name == name:
            try:
                return cls, cls.probe()
            except RunnerUnavailable as exc:
                reasons.append(f"{cls.name}: {exc}")
    raise BackendError("no GPU runner can be used (" + "; ".join(reasons) + ")")


def gpu_available() -> tuple[bool, str]:
    """Whether a GPU can run kernels here.

    Returns
    -------
    tuple of (bool, str)
        ``(True, device name)``, or ``(False, why not)``: every runner's reason.
    """
    try:
        return True, select_runner()[1]
    except BackendError as exc:
        return False, str(exc)


def require_gpu() -> None:
    """Raise :class:`BackendError` unless a GPU can run kernels here.

    Raises
    ------
    BackendError
        No runner can be used; the message gives every runner's reason.
    """
    ok, reason = gpu_available()
    if not ok:
        raise BackendError(f"cannot run on a GPU: {reason}; use --emulate to run the kernels on the CPU")


def open_runner(name: str | None = None) -> Runner:
    """An open :class:`Runner`: the one :func:`select_runner` picks.

    Parameters
    ----------
    name : str, optional
        The runner to use instead of the first available one.

    Returns
    -------
    Runner
        On device 0; ``close()`` it when done.

    Raises
    ------
    BackendError
        No runner can be used, or opening the device failed.
    """
    cls, _ = select_runner(name)
    return cls()


class GpuPlan:
    """A compiled plan loaded on the GPU.

    It holds a device buffer for every storage its kernels touch.

    Parameters
    ----------
    rendered : Rendered
        From the CUDA backend's ``render``.
    compiled : Compiled
        Its cubin, built for this device's architecture.
    runner : Runner, optional
        An open runner to use (and leave open); by default one is opened, and
        :meth:`close` closes it.

    Raises
    ------
    BackendError
        No GPU, or the driver refused the cubin or an allocation.
    """

    def __init__(self, rendered: Rendered, compiled: Compiled, runner: Runner | None = None):
        self.runner = runner if runner is not None else open_runner()
        self._owns_runner = runner is None
        self.rendered = rendered
        graph = rendered.plan.graph
        self.buffers: dict[str, Any] = {}
        try:
            for kernel in rendered.kernels:
                for arg in kernel.args:
                    if arg["tensor"] not in self.buffers:
                        nbytes = max(1, graph.tensor(arg["tensor"]).nbytes)  # an empty tensor still needs an address
                        self.buffers[arg["tensor"]] = self.runner.alloc(nbytes)
            self.launches = [(self.runner.function(compiled.cubin, k.name, k.smem_dynamic), k,
                              [self.buffers[a["tensor"]] for a in k.args]) for k in rendered.kernels]
        except BaseException:
            self.close()
            raise

    def upload(self, storages: dict[str, np.ndarray]) -> None:
        """Copy the given storages' values (cast to their dtypes) to their buffers;
        storages not given keep what the buffers hold."""
        graph = self.rendered.plan.graph
        for name, buffer in self.buffers.items():
            if name in storages and graph.tensor(name).numel:
                dtype = numpy_dtype(graph.tensor(name).dtype)
                self.runner.upload(buffer, np.ascontiguousarray(np.asarray(storages[name]).astype(dtype)))

    def launch_all(self) -> None:
        """Queue every kernel, in plan order."""
        for function, kernel, buffers in self.launches:
            self.runner.launch(function, kernel, buffers)

    def download(self, names: set[str]) -> dict[str, np.ndarray]:
        """The values of storages ``names`` after all queued work."""
        graph = self.rendered.plan.graph
        out = {}
        for name in names:
            t = graph.tensor(name)
            out[name] = np.empty(t.shape, dtype=numpy_dtype(t.dtype))
            if t.numel:
                self.runner.download(self.buffers[name], out[name])
        return out

    def time_ms(self, warmup: int = 3, repeats: int = 20, per_kernel: bool = True) -> tuple[float, list[float]]:
        """GPU time of the plan and of each kernel, milliseconds.

        Parameters
        ----------
        warmup : int
            Untimed runs before the timed ones.
        repeats : int
            Timed runs; the median is returned.
        per_kernel : bool
            Also time every kernel alone.

        Returns
        -------
        tuple of (float, list of float)
            The median of the whole plan (its kernels back to back in one CUDA graph,
            L2 flushed before each repeat, CUDA events around it), and each kernel's
            median measured the same way with the kernel alone, in plan order
            (empty unless ``per_kernel``).
        """
        total = median(self.runner.time_graph(self.runner.capture(self.launch_all), warmup, repeats))
        kernels = []
        if per_kernel:
            for launch in self.launches:
                graph = self.runner.capture(lambda launch=launch: self.runner.launch(*launch))
                kernels.append(median(self.runner.time_graph(graph, warmup, repeats)))
        return total, kernels

    def close(self) -> None:
        """Free the buffers (and close the runner this plan opened)."""
        self.runner.synchronize()
        for buffer in self.buffers.values():
            self.runner.free(buffer)
        self.buffers.clear()
        self.launches = []  # they hold buffers too, which CuPy frees only when unreferenced
        if self._owns_runner:
            self.runner.close()


def run_on_gpu(rendered: Rendered, compiled: Compiled, storages: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run every kernel of ``rendered`` on the GPU.

    Parameters
    ----------
    rendered : Rendered
        From the CUDA backend's ``render``.
    compiled : Compiled
        Its cubin.
    storages : dict of str to numpy.ndarray
        Values of the storages the kernels read and no kernel writes.

    Returns
    -------
    dict of str to numpy.ndarray
        Every storage a kernel writes, by name.

    Raises
    ------
    BackendError
        No GPU, or the driver refused a step.
    """
    plan = GpuPlan(rendered, compiled)
    try:
        plan.upload(storages)
        plan.launch_all()
        return plan.download({a["tensor"] for k in rendered.kernels for a in k.args if a["role"] == "out"})
    finally:
        plan.close()
