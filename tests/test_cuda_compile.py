"""Rendering is deterministic, every kernel compiles with nvcc without spilling, and
the CLI writes, compiles and runs kernels."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from backends.cuda.compile import compile_kernels, parse_ptxas, publish
from backends.cuda.emit import EmitError, write
from backends.cuda.render import render
from partitioner import cli, load_graph, partition

from .conftest import GRAPHS, ROOT, make_graph, op

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: no CUDA toolkit")
HANDWRITTEN = [p for p in GRAPHS if "source: hand-written" in p.read_text()]
EXPORTED = [p for p in GRAPHS if p not in HANDWRITTEN]


@pytest.mark.parametrize("path", GRAPHS, ids=[p.stem for p in GRAPHS])
def test_rendering_is_deterministic(path):
    graph = load_graph(path)
    plan = partition(graph, "greedy")
    first, second = render(plan), render(plan)
    assert [k.source for k in first.kernels] == [k.source for k in second.kernels]
    custom = {op.name for op in graph.ops.values() if op.kind == "custom"}
    assert {n for s in first.skipped for n in s["ops"] if n in custom} == custom


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("path", HANDWRITTEN, ids=[p.stem for p in HANDWRITTEN])
def test_every_plan_of_the_graphs_without_custom_ops_compiles_without_spills(path, arch):
    graph = load_graph(path)
    for strategy in ("none", "greedy", "ilp"):
        rendered = render(partition(graph, strategy))
        compiled = compile_kernels(rendered.kernels, arch)
        assert {k.name for k in rendered.kernels} <= set(compiled.resources)
        assert all(r.spills == 0 for r in compiled.resources.values())


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("path", EXPORTED, ids=[p.stem for p in EXPORTED])
def test_ilp_plans_of_real_models_compile_without_spills(path, arch):
    rendered = render(partition(load_graph(path), "ilp"))
    compiled = compile_kernels(rendered.kernels, arch)
    assert all(r.spills == 0 for r in compiled.resources.values())
    over = [k.index for k in rendered.kernels if compiled.resources[k.name].registers > 255]
    assert not over
    # contractions run two blocks per SM (__launch_bounds__(256, 2)): at most 128 registers
    assert all(compiled.resources[k.name].registers <= 128 for k in rendered.kernels if k.kind == "contraction")


@needs_nvcc
def test_a_horizontal_group_with_64_bit_indices_keeps_to_128_registers_without_spilling():
    """Two products of a 2.2M-row A (64-bit indices) took 152 registers on sm_80 until the
    contraction declared two blocks per SM; now ptxas fits them in 128, spilling nothing."""
    g = make_graph({"x": ([2_200_000, 1024], "float16"), "w0": ([1024, 64], "float16"),
                    "w1": ([1024, 64], "float16")},
                   [op("s0", "matmul", ["x", "w0"]), op("s1", "matmul", ["x", "w1"])], ["s0", "s1"])
    (kernel,) = render(partition(g, "ilp", hardware="a100")).kernels
    assert kernel.kind == "contraction" and "int64_t idx_t" in kernel.source
    used = compile_kernels([kernel], "sm_80").resources[kernel.name]
    assert used.registers <= 128 and used.spills == 0, used


def _ptx(tmp_path, kernel, arch: str) -> str:
    """The PTX nvcc makes of ``kernel`` for ``arch``, with the backend's flags."""
    import subprocess

    from backends.cuda.compile import NVCC_FLAGS
    from backends.cuda.render import RUNTIME_HEADER, runtime_header

    (tmp_path / RUNTIME_HEADER).write_text(runtime_header())
    (tmp_path / "k.cu").write_text(kernel.source)
    flags = [f for f in NVCC_FLAGS if f not in ("-Xptxas", "-v")]
    subprocess.run(["nvcc", f"-arch={arch}", "-ptx", *flags, "-I", str(tmp_path), str(tmp_path / "k.cu"),
                    "-o", str(tmp_path / "k.ptx")], check=True, capture_output=True)
    return (tmp_path / "k.ptx").read_text()


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("layout", ["x_wt", "xt_w"])
def test_half_contractions_pipeline_cp_async_into_ldmatrix_and_mma_sync(tmp_path, arch, layout):
    """Operands read as stored move by 16-byte cp.async copies in commit groups, waited
    for one stage behind (a 3-stage pipeline: ``wait_group 1``); fragments are read by
    ldmatrix, plain where the tile is consecutive along k (x's rows, w's rows in
    ``x @ w.T``), transposed where it is not (``x.T @ w``: both tiles k-major), and
    multiplied by mma.sync m16n8k16 with float32 accumulators; no WMMA is left."""
    if layout == "x_wt":
        g = make_graph({"x": ([256, 64], "float16"), "w": ([128, 64], "float16")},
                       [op("wt", "transpose", ["w"], perm=[1, 0]), op("y", "matmul", ["x", "wt"])], ["y"])
    else:
        g = make_graph({"x": ([64, 256], "float16"), "w": ([64, 128], "float16")},
                       [op("xt", "transpose", ["x"], perm=[1, 0]), op("y", "matmul", ["xt", "w"])], ["y"])
    (kernel,) = render(partition(g, "ilp")).kernels
    ptx = _ptx(tmp_path, kernel, arch)
    assert ptx.count("cp.async.cg.shared.global") > 0
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group 1" in ptx
    plain, transposed = "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    assert (plain in ptx, transposed in ptx) == ((True, False) if layout == "x_wt" else (False, True))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "wmma." not in ptx


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_attention_fragments_of_half_types_load_by_ldmatrix(tmp_path, dtype):
    """Q (x4), K (x2) and V (x2, transposed) fragments: one ldmatrix each instead of 8 or
    4 two-byte shared loads; float32 fragments (CUDA-core products) keep element loads."""
    from .attention_graphs import attention

    (kernel,) = [k for k in render(partition(attention(dtype=dtype), "ilp")).kernels if k.kind == "attention"]
    ptx = _ptx(tmp_path, kernel, "sm_80")
    found = {form: f"ldmatrix.sync.aligned.m8n8.{form}.shared.b16" in ptx for form in ("x4", "x2", "x2.trans")}
    assert found == dict.fromkeys(found, dtype != "float32"), found


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_multiply_then_add_is_not_contracted_into_an_fma(tmp_path, dtype):
    """A fused ``x*3+1`` must round twice, as the unfused plan does: nvcc contracted
    it into one ``fma.rn`` until the backend compiled with ``-fmad=false``."""
    g = make_graph({"x": ([1024], dtype)}, [op("a", "mul", ["x", 3.0]), op("b", "add", ["a", 1.0])], ["b"])
    (kernel,) = render(partition(g, "ilp")).kernels
    assert list(kernel.ops) == ["a", "b"]
    ptx = _ptx(tmp_path, kernel, "sm_90")
    width = "f32" if dtype == "float32" else "f64"
    assert f"fma.rn.{width}" not in ptx
    assert f"mul.rn.{width}" in ptx and f"add.rn.{width}" in ptx


def test_a_conv_with_more_tiles_than_a_grid_dimension_holds_launches_on_x_only():
    """A conv at 32x3x512x512 once rendered grid (1, 65536, 1): past gridDim.y's
    65,535. Tiles go on x (up to 2^31 - 1; beyond, the kernel loops over the rest,
    as the attention test of test_cuda_emulated shows)."""
    g = make_graph({"x": ([32, 3, 512, 512], "float16"), "w": ([64, 3, 3, 3], "float16")},
                   [op("y", "conv2d", ["x", "w"], pads=[1, 1, 1, 1])],
                   ["y"])
    (kernel,) = render(partition(g, "ilp")).kernels
    assert kernel.kind == "contraction"
    assert kernel.grid == (65536, 1, 1)  # 8,388,608 rows in tiles of 128, one n tile


def test_index_width_follows_the_largest_tensor_touched():
    big = make_graph({"x": ([2**31 + 8], "int8")}, [op("s", "slice", ["x"], starts=[0], ends=[16]),
                                                    op("n", "neg", ["s"])], ["n"])
    small = make_graph({"x": ([2**20], "int8")}, [op("s", "slice", ["x"], starts=[0], ends=[16]),
                                                  op("n", "neg", ["s"])], ["n"])
    # a tile's bounds reach past the last element: m0 + 128 overflowed 32 bits in the
    # last tile of a conv of 2^31 - 100 pixels, and the tile read nothing
    near = make_graph({"x": ([1, 1, 1, 2**31 - 100], "float16"), "w": ([1, 1, 1, 1], "float16")},
                      [op("y", "conv2d", ["x", "w"])], ["y"])
    wide, narrow, tiled = (render(partition(g, "ilp")).kernels[0] for g in (big, small, near))
    assert "typedef int64_t idx_t;" in wide.source and wide.index_bits == 64
    assert "typedef int32_t idx_t;" in narrow.source and narrow.index_bits == 32
    assert "typedef int64_t idx_t;" in tiled.source and tiled.index_bits == 64


def test_ptxas_report_parsing():
    log = """ptxas info    : Compiling entry function 'k_1' for 'sm_90'
ptxas info    : Function properties for k_1
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers, 16480 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'k_2' for 'sm_90'
ptxas info    : Function properties for k_2
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 20 registers, used 0 barriers, 380 bytes cmem[0]
"""
    found = parse_ptxas(log)
    assert (found["k_1"].registers, found["k_1"].spills, found["k_1"].static_smem) == (96, 16, 16480)
    assert (found["k_2"].registers, found["k_2"].spills, found["k_2"].static_smem) == (20, 0, 0)


def test_emit_writes_kernels_and_a_manifest_and_never_clobbers_foreign_files(tmp_path):
    graph = load_graph(ROOT / "graphs" / "mlp_gelu_f16.yaml")
    rendered = render(partition(graph, "ilp"))
    files = write(rendered, tmp_path / "k")
    names = sorted(f.name for f in files)
    assert names == ["g000_contraction.cu", "g001_contraction.cu", "manifest.json", "partition_runtime.cuh"]
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    kernel = manifest["kernels"][0]
    assert {"kernel", "grid", "block", "args", "file"} <= set(kernel)
    assert [a["role"] for a in kernel["args"]] == ["in", "in", "in", "out"]
    write(rendered, tmp_path / "k")  # our own earlier output may be replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(EmitError, match="not empty"):
        write(rendered, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@needs_nvcc
def test_cli_emit_compile_report_ptxas_beside_estimates(tmp_path, capsys):
    graph = str(ROOT / "graphs" / "layernorm_f16.yaml")
    assert cli.main([graph, "--emit", "cuda", "--out", str(tmp_path / "k"), "--compile", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["kernels"][0]
    assert row["registers"] > 0 and row["spill_bytes"] == 0 and row["status"] == "OK"
    assert row["shared_memory"] == row["shared_memory_estimate"]  # the estimate is the kernel's layout
    assert (tmp_path / "k" / "g000_reduction.cu").exists()


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the emulator needs it")
def test_cli_run_checks_outputs_on_numpy_and_the_emulator(capsys):
    graph = str(ROOT / "graphs" / "layernorm_f16.yaml")
    assert cli.main([graph, "--run", "--backend", "numpy"]) == 0
    assert "within tolerance" in capsys.readouterr().out
    small = ROOT / "tests" / "data" / "small_block.yaml"
    assert cli.main([str(small), "--run", "--backend", "cuda", "--emulate", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"] and all(c["ok"] for c in data["run"])


@pytest.mark.parametrize("backend", [["numpy"], ["cuda", "--emulate"]])
def test_cli_runs_around_custom_ops_on_drawn_results(tmp_path, capsys, backend):
    """A custom op once made --run refuse the whole graph; now its result is drawn and
    the rest of the plan is checked, and the report says so."""
    if backend[0] == "cuda" and shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH: the emulator needs it")
    custom = tmp_path / "custom.json"
    custom.write_text(json.dumps(CUSTOM))
    assert cli.main([str(custom), "--run", "--backend", *backend]) == 0
    out = capsys.readouterr().out
    assert "custom    1 without semantics, whose results were drawn at random (k)" in out and " NO " not in out


@needs_nvcc
def test_integer_reductions_and_converting_gathers_compile():
    g = make_graph({"i": ([5, 9], "int8"), "b": ([5, 9], "bool"), "t": ([7, 5], "int64"), "k": ([3], "int32")}, [
        op("mx", "reduce_max", ["i"], axes=[1]), op("mn", "reduce_min", ["b"], axes=[0]),
        op("am", "argmax", ["b"], axes=[1]),
        {"name": "g", "op": "gather", "inputs": ["t", "k"], "attrs": {"axis": 0}, "dtype": "bfloat16"}],
        ["mx", "mn", "am", "g"])
    for strategy in ("none", "ilp"):
        compile_kernels(render(partition(g, strategy)).kernels, "sm_80")


def test_emit_only_deletes_its_own_files(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "k"
    out.mkdir()
    rendered = render(partition(load_graph(ROOT / "graphs" / "layernorm_f16.yaml"), "ilp"))
    forged = {**rendered.manifest(), "files": [str(victim), "../victim.txt"]}
    (out / "manifest.json").write_text(json.dumps(forged))
    write(rendered, out)
    assert victim.read_text() == "keep"
    (out / "manifest.json").write_text("{bad")
    with pytest.raises(EmitError, match="not a manifest of this tool"):
        write(rendered, out)


def test_emit_never_replaces_a_file_it_did_not_write(tmp_path, capsys):
    """A graph named manifest.json emitted into its own directory, another program's
    manifest.json, and a kernel-named file an earlier emit's manifest does not list:
    each is refused with one line and exit 2, and left as it was."""
    graph = tmp_path / "g" / "manifest.json"
    graph.parent.mkdir()
    graph.write_text(json.dumps({"inputs": [{"name": "x", "shape": [64, 64]}],
                                 "ops": [{"name": "y", "op": "exp", "inputs": ["x"]}], "outputs": ["y"]}))
    before = graph.read_text()
    assert cli.main([str(graph), "--emit", "cuda", "--out", str(graph.parent)]) == 2
    assert graph.read_text() == before
    err = capsys.readouterr().err
    assert "not a manifest of this tool" in err and err.count("\n") == 1
    app = tmp_path / "app"
    app.mkdir()
    (app / "manifest.json").write_text('{"name": "my web app"}')
    rendered = render(partition(load_graph(ROOT / "graphs" / "layernorm_f16.yaml"), "ilp"))
    with pytest.raises(EmitError, match="not a manifest of this tool"):
        write(rendered, app)
    assert (app / "manifest.json").read_text() == '{"name": "my web app"}'
    out = tmp_path / "k"
    write(rendered, out)
    (out / "manifest.json").write_text(json.dumps({**rendered.manifest(), "files": []}))
    with pytest.raises(EmitError, match="partition_runtime.cuh was not written by an earlier emit"):
        write(rendered, out)
    assert (out / "g000_reduction.cu").exists()


def test_flags_without_their_action_are_rejected(capsys):
    graph = str(ROOT / "graphs" / "layernorm_f16.yaml")
    for args in (["--backend", "cuda"], ["--emulate"], ["--out", "k"], ["--arch", "sm_80"], ["--run", "--seed", "-1"]):
        with pytest.raises(SystemExit) as info:
            cli.main([graph, *args])
        assert info.value.code == 2
        assert capsys.readouterr().err.count("\n") == 1


def test_data_dependent_gather_indices_out_of_range_are_a_clean_error(capsys):
    path = ROOT / "tests" / "data" / "computed_indices.yaml"
    assert cli.main([str(path), "--run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "op 'g'" in err and "out of range" in err


def test_kernels_carry_the_budgets_the_plan_priced_them_with():
    plan = partition(load_graph(ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml"), "greedy", max_ops=8)
    kernels = render(plan).kernels
    assert kernels and all(k.estimate == plan.cost.groups[k.index].budgets for k in kernels)
    assert {k.estimate.ops_limit for k in kernels} == {8} and plan.to_dict()["max_ops"] == 8


CUSTOM = {"inputs": [{"name": "x", "shape": [4, 8]}, {"name": "table", "shape": [6, 8]}], "outputs": ["y"],
          "ops": [{"name": "e", "op": "exp", "inputs": ["x"]},
                  {"name": "k", "op": "custom", "inputs": ["e"], "attrs": {"kind": "topk"}, "shape": [4],
                   "dtype": "int64"},
                  {"name": "rows", "op": "gather", "inputs": ["table", "k"]},
                  {"name": "y", "op": "add", "inputs": ["rows", "e"]}]}


def test_cli_emit_says_why_groups_get_no_kernel(tmp_path, capsys):
    custom = tmp_path / "custom.json"
    custom.write_text(json.dumps(CUSTOM))
    assert cli.main([str(custom), "--strategy", "none", "--emit", "cuda", "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "emitted   3 kernel(s) and a manifest" in out
    assert "; no kernel for 1 group(s) with a custom op (no semantics: not run)" in out
    graph = str(ROOT / "graphs" / "gpt2_2l_b8_s1024_f16.yaml")
    assert cli.main([graph, "--strategy", "greedy", "--emit", "cuda", "--out", str(tmp_path / "k")]) == 0
    out = capsys.readouterr().out
    assert "no kernel for" in out and "of views only (free)" in out
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    first = manifest["kernels"][0]
    assert first["compile"] == f"nvcc -arch=sm_90 -cubin -O3 -std=c++17 -fmad=false -Xptxas -v -I . {first['file']} " \
                               f"-o {first['file'][:-3]}.cubin"


@needs_nvcc
def test_cli_compile_counts_the_groups_it_compiles_no_kernel_for(tmp_path, capsys):
    """--compile once left custom groups out of its table without a word."""
    custom = tmp_path / "custom.json"
    custom.write_text(json.dumps(CUSTOM))
    assert cli.main([str(custom), "--strategy", "none", "--compile"]) == 0
    out = capsys.readouterr().out
    assert "compiled  3 kernel(s); no kernel for 1 group(s) with a custom op (no semantics: not run)" in out


@pytest.mark.skipif(shutil.which("sleep") is None, reason="no sleep program to run")
def test_a_cached_program_is_replaced_while_another_process_runs_it(tmp_path):
    """Two runs that build the same program share its cache entry: the second one's
    copy must not fail on the program the first one is running ("Text file busy"),
    nor may a run see a partial file."""
    running, fresh = tmp_path / "plan", tmp_path / "built"
    shutil.copy(shutil.which("sleep"), running)
    fresh.write_bytes(b"new program")
    process = subprocess.Popen([str(running), "30"])
    try:
        with pytest.raises(OSError, match="Text file busy"):
            shutil.copy(fresh, running)  # what the cache did: it cannot write a running program
        publish(fresh, running)
        assert running.read_bytes() == b"new program"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["built", "plan"]  # no partial file left
    finally:
        process.kill()
        process.wait()


def test_emit_never_writes_through_a_symbolic_link(tmp_path):
    """A manifest.json linked to another emit's, and a kernel-named link to a file that
    does not exist yet: emit wrote through both, outside its directory (the other
    emit's manifest, a new file elsewhere). Both are refused and nothing outside
    changes."""
    rendered = render(partition(load_graph(ROOT / "graphs" / "layernorm_f16.yaml"), "ilp"))
    write(rendered, tmp_path / "a")
    before = (tmp_path / "a" / "manifest.json").read_text()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").symlink_to(tmp_path / "a" / "manifest.json")
    with pytest.raises(EmitError, match="manifest.json is a symbolic link"):
        write(rendered, tmp_path / "b")
    assert (tmp_path / "a" / "manifest.json").read_text() == before
    kernel = rendered.kernels[0].file_name
    write(rendered, tmp_path / "c")
    (tmp_path / "c" / kernel).unlink()
    (tmp_path / "c" / kernel).symlink_to(tmp_path / "elsewhere.cu")
    with pytest.raises(EmitError, match=f"{kernel} is a symbolic link"):
        write(rendered, tmp_path / "c")
    assert not (tmp_path / "elsewhere.cu").exists()


@needs_nvcc
def test_a_rejected_arch_leaves_the_earlier_emit_as_it_was(tmp_path, capsys):
    """`--emit --compile --arch sm_50`: nvcc refuses the arch (one line, exit 2), and the
    emit directory keeps its earlier manifest; it was rewritten for sm_50 first."""
    graph, out = str(ROOT / "graphs" / "mlp_gelu_f16.yaml"), tmp_path / "k"
    assert cli.main([graph, "--emit", "cuda", "--out", str(out)]) == 0
    before = (out / "manifest.json").read_text()
    assert cli.main([graph, "--emit", "cuda", "--out", str(out), "--compile", "--arch", "sm_50"]) == 2
    assert "sm_50" in capsys.readouterr().err and (out / "manifest.json").read_text() == before
