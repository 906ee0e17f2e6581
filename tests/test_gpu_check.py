"""benchmarks/gpu_check.py and the GPU runners of backends/cuda/run.py, without a GPU:
the dry run end to end on the CPU emulator, the device-name -> profile mapping, the
choice among PyCUDA, cuda-python and CuPy (fake modules stand in for them), and the
timing protocol and the GPU path of the check on a recording runner."""

from __future__ import annotations

import enum
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import numpy as np
import pytest

from backends.base import BackendError
from backends.cuda import run
from backends.cuda.compile import Compiled
from backends.cuda.render import render
from partitioner import partition

from .conftest import ROOT, make_graph, op

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
DRY_RUN_GRAPHS = ["layernorm_f16", "mlp_gelu_f16", "residual_block_f16", "softmax_f16", "small_block"]
# the dry run's graph exported from a PyTorch model, where the corpus extra is installed
HAS_MODELS = all(importlib.util.find_spec(name) for name in ("torch", "transformers"))
DRY_RUN_MODEL = "gpt2_tiny_1l_b2_s16_f16"


def _load_script():
    """benchmarks/gpu_check.py as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("benchmarks_gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_check = _load_script()


# ---------------------------------------------------------------- the dry run


def _dry_run(*graphs: str) -> str:
    """The dry run's output over ``graphs``; it must exit 0."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--graphs", *graphs], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "DRY RUN on the CPU emulator" in done.stdout and "every check passed" in done.stdout
    return done.stdout


def _plan_rows(out: str) -> dict[str, str]:
    """The plans table's rows by graph; each must have both plans checked against NumPy."""
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines()
            if line.startswith("| ") and " -> " in line and "instance" not in line}
    for name, row in rows.items():
        assert row.count("| pass (") == 2, row
        assert f"{name}: measured in" in out
    return rows


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")


@needs_gxx
def test_the_dry_run_measures_and_checks_every_graph_on_the_emulator():
    out = _dry_run(*DRY_RUN_GRAPHS)
    for header in ("| graph | instance | kernels unfused -> fused | unfused emulator ms | fused emulator ms |",
                   "| graph | group | kind | MB (modelled) | emulator ms | emulator GB/s | % of copy |",
                   "| graph | group | kind | FLOP | dtype | emulator ms | TFLOP/s | torch.matmul ms |"):
        assert header in out
    assert sorted(_plan_rows(out)) == sorted(DRY_RUN_GRAPHS)
    assert "graphs/softmax_f16.yaml, dims 12->5, 16->6, 512->7" in out  # says what it ran
    # every figure is labelled as the emulator's or the host's, none as the GPU's
    assert "GPU ms" not in out and "GPU GB/s" not in out and "CUDA events" not in out
    assert "EMULATOR wall time, not GPU time" in out and "HOST memory, not GPU" in out
    # the fused small block has an attention group and contractions: both in the compute table
    assert re.search(r"\| small_block \| \d+ \| attention \|", out)
    assert re.search(r"\| small_block \| \d+ \| contraction \| 2\*b\*M\*N\*K", out)


@needs_gxx
def test_the_dry_run_times_a_model_exported_from_pytorch_against_eager_and_torch_compile():
    """A 1-layer GPT-2 exported by graphs/export_models.py, run on the emulator and
    checked, and its fused plan beside PyTorch eager and torch.compile on that model
    (on the CPU); without torch or transformers the run says so."""
    out = _dry_run(DRY_RUN_MODEL)
    if not HAS_MODELS:
        assert "PyTorch eager and torch.compile: not measured: " in out
        return
    assert sorted(_plan_rows(out)) == [DRY_RUN_MODEL]
    assert "exported by graphs/export_models.py: GPT2Model" in out
    assert re.search(rf"^\| {DRY_RUN_MODEL} \| [\d.,]+ \| [\d.,e-]+ \| [\d.,e-]+ \| [\d.]+x \| [\d.]+x \| measured \|$",
                     out, re.MULTILINE), out[-2000:]


@needs_gxx
def test_the_check_runs_from_a_checkout_that_is_not_installed(tmp_path):
    """The GPU machine cannot pip-install, so the check runs from the bare checkout,
    where ``backends.templates`` (pyproject's name for ``templates/``) does not exist.
    ``python -S`` skips the .pth files, and with them the editable install's finder;
    site-packages on PYTHONPATH still gives the dependencies."""
    site_packages = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    done = subprocess.run([sys.executable, "-S", str(SCRIPT), "--dry-run", "--graphs", "layernorm_f16"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sorted(site_packages))})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(_plan_rows(done.stdout)) == ["layernorm_f16"]


def test_an_unknown_graph_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(["--dry-run", "--graphs", "gpt2_2l_b8_s1024_f16"])  # a corpus graph: not shrinkable
    assert stop.value.code == 2
    assert "no graph gpt2_2l_b8_s1024_f16 in this run" in capsys.readouterr().err


def test_shrunk_keeps_equal_sizes_equal_and_small_ones_as_they_are():
    graph, mapping = gpu_check.shrunk(ROOT / "graphs" / "residual_block_f16.yaml")
    assert mapping == "32->5, 56->6, 64->7"
    assert graph.tensor("x").shape == (5, 7, 6, 6) and graph.tensor("w1").shape == (7, 7, 3, 3)
    assert graph.tensor("y").shape == (5, 7, 6, 6)


# ---------------------------------------------------------------- device name -> profile


@pytest.mark.parametrize("device, profile", [
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200"), ("nvidia h200", "h200"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100"),
])
def test_a_known_device_plans_for_its_profile(device, profile):
    assert gpu_check.hardware_profile(device) == (profile, f"'{device}' is an {profile.upper()}")


@pytest.mark.parametrize("device", ["NVIDIA GH200 480GB", "Tesla V100-SXM2-16GB", "NVIDIA H2000", ""])
def test_an_unknown_device_plans_for_h100_and_says_so(device):
    profile, why = gpu_check.hardware_profile(device)
    assert profile == "h100" and "no GPU with a built-in profile" in why and "planning for h100" in why


# ---------------------------------------------------------------- choosing a runner


def _fake_pycuda(devices: int = 1, name: str = "NVIDIA H100 80GB HBM3") -> dict:
    driver = types.ModuleType("pycuda.driver")
    driver.Error = type("Error", (Exception,), {})
    driver.init = lambda: None

    class Device:
        count = staticmethod(lambda: devices)

        def __init__(self, ordinal):
            pass

        def name(self):
            return name

    driver.Device = Device
    package = types.ModuleType("pycuda")
    package.driver = driver
    return {"pycuda": package, "pycuda.driver": driver}


def _fake_cupy(devices: int = 1, error: str | None = None) -> dict:
    cupy = types.ModuleType("cupy")
    runtime_error = type("CUDARuntimeError", (RuntimeError,), {})

    def count():
        if error:
            raise runtime_error(error)
        return devices

    runtime = types.SimpleNamespace(getDeviceCount=count, CUDARuntimeError=runtime_error,
                                    getDeviceProperties=lambda ordinal: {"name": b"NVIDIA H200"})
    cupy.cuda = types.SimpleNamespace(runtime=runtime)
    return {"cupy": cupy}


class _CUresult(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100


def _fake_cuda_python(init: _CUresult = _CUresult.CUDA_SUCCESS) -> dict:
    """cuda-python before 12.6: ``from cuda import cuda`` (``cuda.bindings`` absent)."""
    ok = _CUresult.CUDA_SUCCESS
    driver = types.SimpleNamespace(
        CUresult=_CUresult, cuInit=lambda flags: (init,), cuDeviceGetCount=lambda: (ok, 1),
        cuDeviceGet=lambda ordinal: (ok, 0), cuDeviceGetName=lambda length, device: (ok, b"NVIDIA A100-SXM4-80GB\0\0"),
        cuGetErrorString=lambda error: (ok, b"no CUDA-capable device is detected"))
    package = types.ModuleType("cuda")
    package.cuda = driver
    return {"cuda": package, "cuda.cuda": driver, "cuda.bindings": None}


@pytest.fixture
def installed(monkeypatch):
    """Which runners' packages exist: none, until a test installs fakes."""
    for name in ("pycuda", "pycuda.driver", "cuda", "cuda.cuda", "cuda.bindings", "cuda.bindings.driver", "cupy"):
        monkeypatch.setitem(sys.modules, name, None)

    def install(modules: dict) -> None:
        for name, module in modules.items():
            monkeypatch.setitem(sys.modules, name, module)

    return install


def test_without_any_runner_the_reason_names_each_and_how_to_install_it(installed):
    ok, reason = run.gpu_available()
    assert not ok
    assert "pycuda: not installed (pip install -e '.[cuda]')" in reason
    assert "cuda-python: not installed (pip install cuda-python)" in reason
    assert "cupy: not installed" in reason
    with pytest.raises(BackendError, match="cannot run on a GPU: no GPU runner can be used .*--emulate"):
        run.require_gpu()


def test_the_first_runner_that_sees_a_device_is_chosen(installed):
    installed(_fake_cupy())
    assert run.select_runner() == (run.CupyRunner, "NVIDIA H200")
    installed(_fake_pycuda())
    assert run.select_runner() == (run.PycudaRunner, "NVIDIA H100 80GB HBM3")  # PyCUDA comes first
    assert run.select_runner("cupy") == (run.CupyRunner, "NVIDIA H200")
    assert run.gpu_available() == (True, "NVIDIA H100 80GB HBM3")


def test_a_runner_without_a_device_gives_way_and_says_why(installed):
    installed(_fake_pycuda(devices=0))
    installed(_fake_cuda_python(init=_CUresult.CUDA_ERROR_NO_DEVICE))
    installed(_fake_cupy())
    assert run.select_runner() == (run.CupyRunner, "NVIDIA H200")
    with pytest.raises(BackendError) as error:
        run.select_runner("pycuda")
    assert "pycuda: no CUDA device found" in str(error.value)
    with pytest.raises(BackendError) as error:
        run.select_runner("cuda-python")
    assert "the CUDA driver is unusable" in str(error.value) and "no CUDA-capable device" in str(error.value)


def test_cuda_python_is_found_under_its_old_module_name(installed):
    installed(_fake_cuda_python())
    assert run.select_runner() == (run.CudaPythonRunner, "NVIDIA A100-SXM4-80GB")


def test_a_broken_driver_and_an_unknown_runner_are_one_line_errors(installed):
    installed(_fake_cupy(error="cudaErrorInsufficientDriver: CUDA driver version is insufficient"))
    ok, reason = run.gpu_available()
    assert not ok and "cupy: the CUDA driver is unusable: cudaErrorInsufficientDriver" in reason
    with pytest.raises(BackendError, match="unknown GPU runner 'torch': use one of pycuda, cuda-python, cupy"):
        run.select_runner("torch")


# ---------------------------------------------------------------- the timing protocol


class _Buffer:
    def __init__(self, nbytes):
        self.nbytes = nbytes


class RecordingRunner(run.Runner):
    """A runner that runs nothing: it logs what would be queued, and a capture holds
    the work it recorded instead of a CUDA graph."""

    name = "recording"

    def __init__(self, elapsed_ms: float = 0.5):
        super().__init__()
        self.log, self.elapsed, self._recording = [], elapsed_ms, None

    @classmethod
    def probe(cls):
        return "NVIDIA H200"

    def _queue(self, entry):
        (self.log if self._recording is None else self._recording).append(entry)

    def compute_capability(self):
        return 9, 0

    def function(self, cubin, name, smem_dynamic):
        self.log.append(("function", name, smem_dynamic))
        return name

    def alloc(self, nbytes):
        return _Buffer(nbytes)

    def free(self, buffer):
        self.log.append(("free", buffer.nbytes))

    def upload(self, buffer, array):
        self.log.append(("upload", buffer.nbytes, array.dtype.name, array.nbytes))

    def download(self, buffer, array):
        array[...] = 1

    def fill(self, buffer, nbytes):
        self._queue(("fill", nbytes))

    def copy(self, dst, src, nbytes):
        self._queue(("copy", nbytes))

    def launch(self, function, kernel, buffers):
        self._queue(("launch", function, kernel.grid, kernel.block, kernel.smem_dynamic, tuple(buffers)))

    def stream_handle(self):
        return 0

    def new_event(self):
        return object()

    def record(self, event):
        self._queue(("record", event))

    def elapsed_ms(self, start, end):
        return self.elapsed

    def synchronize(self):
        self.log.append(("synchronize",))

    def _release(self):
        self.log.append(("release",))

    def capture(self, work):
        self._recording = []
        work()
        graph, self._recording = tuple(self._recording), None
        return graph

    def replay(self, graph):
        self._queue(("replay", graph))


def _two_kernel_plan():
    g = make_graph({"x": ([64, 48], "float16"), "w": ([48, 32], "float16")},
                   [op("m", "matmul", ["x", "w"]), op("r", "reduce_sum", ["m"], axes=[-1]), op("e", "exp", ["r"])],
                   ["e", "m"], dtype="float16")
    rendered = render(partition(g, "ilp"))
    assert len(rendered.kernels) == 2, [k.kind for k in rendered.kernels]
    return rendered, Compiled("sm_90", Path("plan.cubin"), {})


def test_a_repeat_is_one_replay_between_events_after_an_l2_flush():
    rendered, compiled = _two_kernel_plan()
    runner = RecordingRunner()
    plan = run.GpuPlan(rendered, compiled, runner)
    total, per_kernel = plan.time_ms(warmup=2, repeats=3)
    assert (total, per_kernel) == (0.5, [0.5, 0.5])
    replays = [entry[1] for entry in runner.log if entry[0] == "replay"]
    whole, *alone = dict.fromkeys(replays)  # the graphs, in the order first replayed
    assert [entry[1] for entry in whole] == [k.name for k in rendered.kernels]  # every kernel, in plan order
    assert [len(graph) for graph in alone] == [1, 1] and [g[0][1] for g in alone] == [k.name for k in rendered.kernels]
    for graph in (whole, *alone):
        at = runner.log.index(("replay", graph))
        timed = runner.log[at + 2:at + 2 + 4 * 3]  # after 2 warm-ups, 3 repeats
        for k in range(3):
            fill, start, replay, end = timed[4 * k:4 * k + 4]
            assert fill == ("fill", run.FLUSH_BYTES) and replay == ("replay", graph)
            assert start[0] == end[0] == "record" and start[1] is not end[1]
    plan.close()
    assert ("release",) not in runner.log  # a runner the plan was given stays open


def test_kernels_get_their_launch_shape_and_buffers_in_argument_order():
    rendered, compiled = _two_kernel_plan()
    runner = RecordingRunner()
    plan = run.GpuPlan(rendered, compiled, runner)
    plan.launch_all()
    launches = [entry for entry in runner.log if entry[0] == "launch"]
    for kernel, (_, name, grid, block, smem, buffers) in zip(rendered.kernels, launches):
        assert (name, grid, block, smem) == (kernel.name, kernel.grid, kernel.block, kernel.smem_dynamic)
        assert buffers == tuple(plan.buffers[a["tensor"]] for a in kernel.args)
    assert [e for e in runner.log if e[0] == "function"] == [("function", k.name, k.smem_dynamic)
                                                              for k in rendered.kernels]


def test_run_on_gpu_uploads_in_the_storage_dtype_and_returns_what_the_kernels_write(monkeypatch):
    rendered, compiled = _two_kernel_plan()
    runner = RecordingRunner()
    monkeypatch.setattr(run, "open_runner", lambda name=None: runner)
    out = run.run_on_gpu(rendered, compiled, {"x": np.ones((64, 48)), "w": np.ones((48, 32))})
    assert {e for e in runner.log if e[0] == "upload"} == {("upload", 64 * 48 * 2, "float16", 64 * 48 * 2),
                                                           ("upload", 48 * 32 * 2, "float16", 48 * 32 * 2)}
    assert sorted(out) == ["e", "m"] and out["m"].shape == (64, 32) and out["m"].dtype == np.float16
    assert runner.log[-1] == ("release",)  # the runner it opened is closed


class _FakeLibcuda:
    """libcuda's graph entry points: out-parameters get handles, ``fail`` names the
    one call that returns an error."""

    def __init__(self, fail: str | None = None):
        self.calls, self.fail = [], fail

    def __getattr__(self, function):
        def call(*args):
            self.calls.append(function)
            if function == self.fail:
                return 700  # CUDA_ERROR_ILLEGAL_ADDRESS
            for arg in args:
                if type(arg).__name__ == "CArgObject":  # byref(out): the driver writes a handle there
                    arg._obj.value = b"an illegal memory access" if function == "cuGetErrorString" else 0x1000
            return 0
        return call


def _graphs(lib):
    graphs = object.__new__(run._DriverGraphs)  # without loading the real libcuda
    graphs.lib = lib
    return graphs


def test_a_capture_ends_even_when_the_work_fails_and_driver_errors_are_words():
    lib = _FakeLibcuda()
    executable = _graphs(lib).capture(7, lambda: lib.calls.append("work"))
    assert executable.value == 0x1000
    assert lib.calls == ["cuStreamBeginCapture_v2", "work", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
                         "cuGraphDestroy"]

    def failing():
        raise BackendError("launch refused")

    lib = _FakeLibcuda()
    with pytest.raises(BackendError, match="launch refused"):
        _graphs(lib).capture(7, failing)
    assert lib.calls == ["cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphDestroy"]
    lib = _FakeLibcuda(fail="cuGraphLaunch")
    with pytest.raises(BackendError, match="^cuGraphLaunch failed: an illegal memory access$"):
        _graphs(lib).launch(executable, 7)


# ---------------------------------------------------------------- the GPU path of the check


@pytest.fixture
def fake_gpu(monkeypatch):
    """gpu_check's GPU path on a RecordingRunner, compiling nothing."""
    runner = RecordingRunner()
    monkeypatch.setattr(run, "select_runner", lambda name=None: (RecordingRunner, "NVIDIA H200"))
    monkeypatch.setattr(run, "open_runner", lambda name=None: runner)
    monkeypatch.setattr("backends.cuda.compile.compile_kernels",
                        lambda kernels, arch: Compiled(arch, Path("plan.cubin"), {}))
    return runner


def test_the_gpu_path_labels_every_figure_as_gpu_time(fake_gpu, capsys):
    assert gpu_check.main(["--skip-tests", "--graphs", "layernorm_f16", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "device: NVIDIA H200 (runner: recording, nvcc -arch=sm_90)" in out
    assert "planning for the h200 profile: 'NVIDIA H200' is an H200 (NVIDIA H200 Tensor Core GPU datasheet" in out
    assert "copy bandwidth: " in out and "GPU: device-to-device copy of 1 GiB in a CUDA graph, CUDA events" in out
    assert "GPU time: CUDA events around one CUDA-graph launch per repeat" in out
    assert "L2 flushed by a 256 MiB memset before each repeat, median of 2 runs after 3 warm-ups" in out
    assert "| layernorm_f16 | graphs/layernorm_f16.yaml, full size | 8 -> 1 | 0.5 | 0.5 | 1.00x |" in out
    # 2 x 8192 x 4096 half floats and 4096 floats (134 MB) in 0.5 ms, against 2 GiB in 0.5 ms
    assert "| layernorm_f16 | 0 | reduction | 134 | 0.5 | 268 | 6.25% |" in out
    assert "emulator" not in out.lower() and fake_gpu.log[-1] == ("release",)


def test_a_failing_graph_is_one_line_and_the_next_one_runs(fake_gpu, monkeypatch, capsys):
    def compile_or_fail(kernels, arch):
        if any("probs" in k.ops for k in kernels):
            raise BackendError("nvcc rejected the softmax kernel")
        return Compiled(arch, Path("plan.cubin"), {})

    monkeypatch.setattr("backends.cuda.compile.compile_kernels", compile_or_fail)
    assert gpu_check.main(["--skip-tests", "--graphs", "softmax_f16", "layernorm_f16", "--repeats", "1"]) == 1
    out = capsys.readouterr().out
    assert "softmax_f16: error: BackendError: nvcc rejected the softmax kernel\n" in out
    assert "| layernorm_f16 | graphs/layernorm_f16.yaml, full size |" in out
    assert "NOT every graph measured and passed" in out


def test_the_time_guard_skips_the_graphs_it_has_no_time_for(fake_gpu, capsys):
    assert gpu_check.main(["--skip-tests", "--graphs", "softmax_f16", "layernorm_f16", "--budget", "5"]) == 1
    out = capsys.readouterr().out
    assert "time guard: " in out and "skipped layernorm_f16, softmax_f16" in out
    assert "| graph | instance |" in out  # the tables still come, empty
