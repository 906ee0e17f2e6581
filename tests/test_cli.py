"""The ``partition`` command: reports, JSON, hardware choice, exit codes."""

from __future__ import annotations

import json
import os

import pytest

from partitioner import cli, load_graph, partition, yamlio

from .conftest import ROOT

GRAPH = str(ROOT / "graphs" / "mlp_gelu_f16.yaml")


def test_report_shows_groups_budgets_and_comparison(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # wide enough for every budget column
    assert cli.main([GRAPH, "--report"]) == 0
    out = capsys.readouterr().out
    for text in ("Fusion groups of the ilp plan", "contraction", "smem B", "regs", "params B",
                 "Strategies compared", "none", "greedy", "OPTIMAL", "not measured", "measured on this machine"):
        assert text in out, text


def test_json_has_the_documented_fields(capsys):
    assert cli.main([GRAPH, "--format", "json", "--report"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"graph", "hardware", "strategy", "groups", "totals", "solver"} <= set(data)
    assert all(isinstance(g["ops"], list) for g in data["groups"])
    assert {"bytes_read", "bytes_written", "launches", "modeled_time_us"} <= set(data["totals"])
    assert {"status", "wall_s", "gap"} <= set(data["solver"])
    assert [c["strategy"] for c in data["comparison"]] == ["none", "greedy", "ilp"]


def test_plan_to_json_is_the_clis_json_object(capsys):
    """docs/api.md says so; it lacked ``dead_ops``."""
    assert cli.main([GRAPH, "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    made = json.loads(partition(load_graph(GRAPH), "ilp").to_json())
    for data in (printed, made):  # less the times measured
        data["solver"] = {k: v for k, v in data["solver"].items() if not k.endswith("_s")}
    assert made == printed and made["dead_ops"] == []


def test_strategy_and_hardware_choices(capsys, tmp_path):
    assert cli.main([GRAPH, "--strategy", "greedy", "--hardware", "a100", "--format", "json"]) == 0
    a100 = json.loads(capsys.readouterr().out)
    assert a100["strategy"] == "greedy" and a100["hardware"] == "a100"
    profile = tmp_path / "slow.yaml"
    profile.write_text("base: h100\nname: slow\nhbm_bandwidth_gb_per_s: 1000\nsources: {hbm_bandwidth_gb_per_s: test}\n")
    assert cli.main([GRAPH, "--hardware", str(profile), "--format", "json"]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert slow["hardware"] == "slow"
    assert cli.main([GRAPH, "--format", "json"]) == 0
    h100 = json.loads(capsys.readouterr().out)
    assert slow["totals"]["modeled_time_us"] > h100["totals"]["modeled_time_us"]


@pytest.mark.parametrize("args", [["--hardware", "tpu"], ["--hardware", "missing.yaml"]])
def test_bad_hardware_exits_2_with_one_line(capsys, args):
    assert cli.main([GRAPH, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hardware" in err.lower()


def test_a_graph_too_large_to_run_here_exits_2_with_its_size(capsys, monkeypatch):
    """--run holds every tensor of the graph for the comparison; when NumPy cannot
    allocate them the answer says so in one line (the 2^31-row attention graph of the
    new-user report needed 352 GiB)."""
    from backends import check

    def no_memory(*_args, **_kwargs):
        raise MemoryError

    monkeypatch.setattr(check, "run_reference", no_memory)
    assert cli.main([GRAPH, "--run", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GiB estimated at its peak" in err and "ran out of memory" in err
    # where the estimate is already beyond what the system has, nothing runs: Linux's OOM killer
    # would otherwise end the process without a word (exit 137, as Llama 2L once did beside another run)
    monkeypatch.setattr(check, "memory_available", lambda: 2**20)
    monkeypatch.setattr(check, "run_reference", lambda *a, **k: pytest.fail("ran past the memory check"))
    assert cli.main([GRAPH, "--run", "--backend", "numpy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than the 0.0 GiB available" in err


@pytest.mark.parametrize("limit", ["0", "nan", "1.8e303"])  # the last was an internal OverflowError (exit 1)
def test_bad_arguments_exit_2(capsys, limit):
    with pytest.raises(SystemExit) as info:
        cli.main([GRAPH, "--time-limit", limit])
    assert info.value.code == 2 and "--time-limit must be a number of seconds above 0 and at most 1e+09" in \
        _one_line(capsys)
    assert cli.main([GRAPH, "--time-limit", "1e9"]) == 0


def test_internal_failure_exits_1_without_traceback(capsys, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(cli, "partition", boom)
    assert cli.main([GRAPH]) == 1
    err = capsys.readouterr().err
    assert err == "partition: internal error: RuntimeError: solver exploded\n"


def test_progress_goes_to_stderr_only_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    assert cli._progress_printer() is None
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    show = cli._progress_printer()
    show("solving", 110.0, 100.0, 0.5)
    assert capsys.readouterr().err == ""  # quiet during the first second
    show("solving", 110.0, 100.0, 2.0)
    err = capsys.readouterr().err
    assert "best 110.0 us" in err and "bound 100.0 us" in err and "gap 9.09%" in err


def test_a_report_without_compare_names_greedy_as_the_only_heuristic_compared(capsys):
    """Without --compare only greedy is planned beside the ilp: the saving line says
    so, rather than calling greedy the best heuristic."""
    assert cli.main([GRAPH, "--report"]) == 0
    out = capsys.readouterr().out
    assert "ilp vs greedy (the only heuristic compared)" in out and "best heuristic" not in out


def test_compare_reports_every_strategy_and_the_ilp_advantage(capsys):
    assert cli.main([GRAPH, "--report", "--compare"]) == 0
    out = capsys.readouterr().out
    for name in ("none", "greedy", "xla", "xla-fmha", "tvm", "inductor", "ilp", "vs ilp", "ilp vs best heuristic",
                 "ilp vs best compiler baseline"):
        assert name in out, name
    assert cli.main([GRAPH, "--report", "--compare", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["strategy"] for c in data["comparison"]] == ["none", "greedy", "xla", "xla-fmha", "tvm", "inductor", "ilp"]
    adv = data["ilp_advantage"]
    times = {c["strategy"]: c["modeled_time_us"] for c in data["comparison"]}
    assert adv["best_value"] == min(times[s] for s in ("greedy", "xla", "xla-fmha", "tvm", "inductor"))
    assert adv["ilp_value"] == times["ilp"] and 0 <= adv["saving"] < 1 and adv["unit"] == "us"
    assert data["ilp_advantage_compilers"]["best_value"] == min(times[s] for s in ("xla", "xla-fmha", "tvm", "inductor"))


def test_a_tie_with_a_heuristic_is_no_negative_saving(capsys):
    """mlp_gelu on h200 by traffic: the ilp plan is greedy's and xla's, its groups
    summed in another order (40.449920000000006 against 40.44992 us)."""
    assert cli.main([str(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "--compare", "--hardware", "h200",
                     "--objective", "traffic", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for adv in (data["ilp_advantage"], data["ilp_advantage_compilers"]):
        assert adv["saving"] == 0.0 and adv["ilp_value"] == adv["best_value"], adv
    assert cli.main([str(ROOT / "graphs" / "mlp_gelu_f16.yaml"), "--compare", "--hardware", "h200",
                     "--objective", "traffic"]) == 0
    out = capsys.readouterr().out
    assert "-0.00%" not in out and "0.00% less modelled traffic time" in out


def test_report_with_a_strategy_outside_the_default_comparison(capsys):
    assert cli.main([GRAPH, "--report", "--strategy", "tvm", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["strategy"] == "tvm" and [c["strategy"] for c in data["comparison"]][-1] == "tvm"


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_reports_fit_any_width_and_never_cut_a_number(width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli.main([GRAPH, "--report", "--compare"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= width
    assert "…" not in out
    plan = partition(load_graph(GRAPH), "ilp")
    for group in plan.cost.groups:
        if group.kind != "view":
            assert f"{group.modeled_time_us:,.2f}" in out  # each group's time, whole, on one line


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_the_run_table_fits_any_width_with_its_headers_whole(width, monkeypatch, capsys):
    """Headers of columns that never wrap count whole: ``tol. dtype`` once pushed the
    full table one column past the piped width, and at 80 the output names vanished."""
    monkeypatch.setenv("COLUMNS", str(width))
    assert cli.main([str(ROOT / "graphs" / "layernorm_f16.yaml"), "--run"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= width
    table = out[out.index("Plan run on"):]
    assert "within tolerance" in table and "tol. dtype" in table and " y " in table.replace(";", " ")


def test_a_name_wider_than_the_line_folds_and_a_tiny_width_is_no_error(tmp_path, monkeypatch, capsys):
    """The plain layout (what is left when no table fits) folds a name longer than
    the line instead of running past it, and 1 to 4 columns once left it a negative
    width to wrap at (an internal error)."""
    long = "an_output_whose_name_is_longer_than_forty_columns"
    graph = tmp_path / "long.yaml"
    graph.write_text(json.dumps({"format": 1, "inputs": [{"name": "x", "shape": [64, 256]}],
                                 "ops": [{"name": long, "op": "exp", "inputs": ["x"]}], "outputs": [long]}))
    for args in (["--run"], ["--report"]):
        monkeypatch.setenv("COLUMNS", "40")
        assert cli.main([str(graph), *args]) == 0
        out = capsys.readouterr().out
        assert max(len(line) for line in out.splitlines()) <= 40 and long[:30] in out.replace("\n", "")
        monkeypatch.setenv("COLUMNS", "2")  # laid out at 40: 1 to 10 columns once split numbers mid-number
        assert cli.main([str(graph), *args]) == 0
        assert max(len(line) for line in capsys.readouterr().out.splitlines()) == 40


SIBLINGS = {"format": 1, "inputs": [{"name": "x", "shape": [64, 256]}],
            "ops": [o for i in range(6) for o in ({"name": f"s{i}", "op": "reduce_sum", "inputs": ["x"],
                                                   "attrs": {"axes": [-1]}},
                                                  {"name": f"e{i}", "op": "exp", "inputs": [f"s{i}"]})],
            "outputs": [f"e{i}" for i in range(6)]}


NEEDS_THE_SOLVER = {"format": 1, "inputs": [{"name": "x", "shape": [64, 256]}], "outputs": ["c", "e"], "ops": [
    {"name": "m", "op": "reduce_mean", "inputs": ["x"], "attrs": {"axes": [-1], "keepdims": True}},
    {"name": "d", "op": "sub", "inputs": ["x", "m"]},
    {"name": "c", "op": "reduce_sum", "inputs": ["d"], "attrs": {"axes": [0]}},
    {"name": "e", "op": "exp", "inputs": ["d"]}]}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_sizes_beyond_the_exact_cost_arithmetic_exit_2_in_one_line(capsys, tmp_path):
    """A 1e29-row tensor once reached CP-SAT, which rejected the model (exit 1)."""
    graph = tmp_path / "big.yaml"
    graph.write_text(json.dumps({**SIBLINGS, "inputs": [{"name": "x", "shape": [10**29, 256]}]}))
    assert cli.main([str(graph)]) == 2
    assert f"{graph}: input 'x': float32[{10**29}, 256] is 1.02e+32 bytes, above the format's limit" in _one_line(capsys)
    # a view-free op may make a tensor too large from a small one
    graph.write_text(json.dumps({"inputs": [{"name": "x", "shape": [4]}], "outputs": ["y"], "ops": [
        {"name": "b", "op": "broadcast_to", "inputs": ["x"], "attrs": {"shape": [2**39, 4]}},
        {"name": "y", "op": "exp", "inputs": ["b"]}]}))
    assert cli.main([str(graph)]) == 2
    assert "op 'b': float32[549755813888, 4] is 8.8e+12 bytes" in _one_line(capsys)
    # a stated shape beside such a result: the overflow is the problem, not the shape
    graph.write_text(json.dumps({"inputs": [], "outputs": ["r"], "ops": [
        {"name": "r", "op": "arange", "attrs": {"start": 0, "limit": 1e30, "delta": 1}, "shape": [0]}]}))
    assert cli.main([str(graph)]) == 2
    assert f"{graph}: op 'r': float32[{int(1e30)}] is 4e+30 bytes, above the format's limit" in _one_line(capsys)
    # tensors within the limit, but a profile whose launch costs 10^9 s (the largest
    # number a profile may give), on a graph whose best heuristic plan the structural
    # bound cannot prove (the solver runs): its costs sum to past 2^62
    graph.write_text(json.dumps(NEEDS_THE_SOLVER))
    profile = tmp_path / "slow.yaml"
    profile.write_text("base: h100\nname: slow\nlaunch_overhead_us: 1.0e+15\nsources: {launch_overhead_us: test}\n")
    assert cli.main([str(graph), "--hardware", str(profile)]) == 2
    err = _one_line(capsys)
    assert f"{graph}: the exact integer objective over" in err and "--strategy greedy" in err
    assert "hardware profile 'slow'" in err
    assert cli.main([str(graph), "--hardware", str(profile), "--strategy", "greedy"]) == 0
    # the error's advice holds: --explain with --strategy greedy; not --report, which runs the ilp
    assert "--report and --compare run the ilp too" in err
    assert cli.main([str(graph), "--hardware", str(profile), "--strategy", "greedy", "--explain", "m", "e"]) == 0


def test_a_closed_pipe_ends_the_output_quietly():
    """`partition G --format json | head -c 10` once ended in an internal BrokenPipeError."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "partitioner.cli", str(ROOT / "graphs" / "gpt2_12l_b8_s1024_f16.yaml"),
               "--strategy", "greedy", "--format", "json"]  # 138 kB: more than a pipe holds
    reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert reader.stdout.read(10) == b'{\n  "graph'
    reader.stdout.close()
    assert reader.stderr.read() == b""
    assert reader.wait() == 141


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
@pytest.mark.parametrize("flag", [None, "--hardware"])
def test_an_endless_file_is_refused_before_it_fills_memory(tmp_path, capsys, monkeypatch, flag):
    """A graph or profile linked to /dev/zero was read until memory ran out (an
    internal MemoryError under a memory limit, the machine's memory without one);
    a device is refused before a byte is read, and a long file at a length."""
    monkeypatch.setattr(yamlio, "MAX_TEXT_BYTES", 1 << 20)  # the same rule, without writing 256 MiB
    endless, long = tmp_path / "endless.yaml", tmp_path / "long.yaml"
    endless.symlink_to("/dev/zero")
    long.write_text("#" * (1 << 20) + "\n")
    for path, problem in [(endless, "cannot read the file: it is a device, not a file"),
                          (long, "cannot read the file: longer than 1 MiB")]:
        args = [str(ROOT / "graphs" / "softmax_f16.yaml"), flag, str(path)] if flag else [str(path)]
        assert cli.main(args) == 2
        err = _one_line(capsys)
        assert str(path) in err and problem in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--format", "json"], [], ["--explain", "h:matmul", "h"]])
def test_a_full_stdout_is_one_line_and_exit_2(args):
    """`partition G --format json > /dev/full` once ended in an internal OSError."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "partitioner.cli", str(ROOT / "graphs" / "mlp_gelu_f16.yaml"),
               "--strategy", "greedy", *args]
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, cwd=ROOT, timeout=300)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err == "partition: error: cannot write the output to stdout: No space left on device\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("stdout", [None, "/dev/full"])
def test_bad_input_is_exit_2_even_where_stderr_cannot_take_the_line(stdout):
    """`partition missing.yaml 2>/dev/full` exited 1: printing the error failed too,
    inside the handler."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "partitioner.cli", "missing.yaml"]
    with open("/dev/full", "w") as full:
        done = subprocess.run(command, stdout=full if stdout else subprocess.DEVNULL, stderr=full, cwd=ROOT,
                              timeout=300)
    assert done.returncode == 2


@pytest.mark.parametrize("closed, graph, status", [
    ("stdout", "mlp_gelu_f16.yaml", 2),  # AttributeError (exit 1): no sys.stdout to write the report to
    ("stderr", "mlp_gelu_f16.yaml", 0),  # AttributeError (exit 1), its line written to stdout
    ("stderr", "missing.yaml", 2),  # the error line went to stdout
])
def test_a_closed_stdout_or_stderr_never_makes_an_internal_error(tmp_path, closed, graph, status):
    import subprocess
    import sys

    out = tmp_path / "out.txt"
    redirect = ">&-" if closed == "stdout" else f"2>&- >{out}"
    command = f"{sys.executable} -m partitioner.cli {ROOT / 'graphs' / graph} --strategy greedy {redirect}"
    done = subprocess.run(["bash", "-c", command], stderr=subprocess.PIPE, cwd=ROOT, timeout=300)
    assert done.returncode == status, done.stderr.decode()
    if closed == "stdout":
        assert done.stderr.decode() == "partition: error: cannot write the output to stdout: it is closed\n"
    else:
        assert "error" not in out.read_text() and (status == 2) == (out.read_text() == "")


@pytest.mark.parametrize("args, message", [
    (["--draw", "/missing/dir/plan.dot"], "cannot draw to '/missing/dir/plan.dot': no directory '/missing/dir'"),
    (["--draw", "{file}/plan.dot"], "is not a directory"),
    (["--emit", "cuda", "--out", "{file}"], "--out: '{file}' is a file"),
    (["--emit", "cuda", "--out", "{file}/kernels"], "--out: '{file}' is not a directory"),
])
def test_unusable_output_paths_exit_2_before_planning(capsys, monkeypatch, tmp_path, args, message):
    file = tmp_path / "a_file"
    file.write_text("kept")
    monkeypatch.setattr(cli, "partition", lambda *a, **k: pytest.fail("planned before checking the output path"))
    try:
        status = cli.main([GRAPH, *(a.format(file=file) for a in args)])
    except SystemExit as exit_:
        status = exit_.code
    assert status == 2 and message.format(file=file) in _one_line(capsys)
    assert file.read_text() == "kept"


def test_import_to_a_missing_directory_exits_2(capsys):
    assert cli.main(["import", "model.onnx", "-o", "/missing/dir/g.yaml"]) == 2
    assert "/missing/dir/g.yaml: no directory '/missing/dir'" in _one_line(capsys)


@pytest.mark.parametrize("args, hide, message", [
    ([], "matplotlib", "the figure needs matplotlib"),
    (["--figure", "/missing/dir/results.png"], None, "cannot write /missing/dir/results.png: no directory"),
])
def test_compare_benchmark_checks_what_it_needs_before_planning(args, hide, message):
    """benchmarks/compare.py once planned for a minute, then died on a missing matplotlib."""
    import subprocess
    import sys

    hidden = f"sys.modules[{hide!r}] = None; " if hide else ""
    code = (f"import runpy, sys; {hidden}sys.argv = ['compare.py', *{args!r}]; "
            "import partitioner; partitioner.compare = None; "  # planning first would raise TypeError
            "runpy.run_path('benchmarks/compare.py', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_run_this_machine_cannot_do_is_refused_before_planning(capsys, monkeypatch):
    """--run --backend cuda without a GPU once planned first and failed after."""
    from backends.cuda.run import gpu_available

    if gpu_available()[0]:
        pytest.skip("this machine has a usable GPU")
    monkeypatch.setattr(cli, "partition", lambda *a, **k: pytest.fail("planned before checking the GPU"))
    assert cli.main([GRAPH, "--run", "--backend", "cuda"]) == 2
    assert "cannot run on a GPU" in _one_line(capsys)
    monkeypatch.setattr("shutil.which", lambda name: None)  # no nvcc, no g++
    assert cli.main([GRAPH, "--compile"]) == 2
    assert "nvcc is not on the PATH" in _one_line(capsys)
    assert cli.main([GRAPH, "--run", "--backend", "cuda", "--emulate"]) == 2
    assert "g++ is not on the PATH" in _one_line(capsys)


def test_a_time_limit_for_a_strategy_that_has_none_is_refused(capsys):
    """It was ignored without a word, as --recompute is refused."""
    with pytest.raises(SystemExit) as bad:
        cli.main([GRAPH, "--strategy", "greedy", "--time-limit", "5"])
    assert bad.value.code == 2 and "--time-limit applies to the ilp only" in _one_line(capsys)
    assert cli.main([GRAPH, "--strategy", "greedy", "--time-limit", "5", "--report"]) == 0  # the report's ilp takes it


def test_a_reference_that_cannot_run_names_the_graph_file(tmp_path, capsys):
    """A constant gather index past its axis: the line named the op, not the file (and
    blamed "these inputs", which a constant index does not depend on)."""
    path = tmp_path / "gather.yaml"
    path.write_text("format: 1.1\ninputs: [{name: x, shape: [5, 3]}]\nops:\n"
                    "  - {name: i, op: arange, inputs: [], attrs: {start: 0, limit: 9, delta: 3}}\n"
                    "  - {name: a, op: gather, inputs: [x, i], attrs: {axis: 0}}\noutputs: [a]\n")
    assert cli.main([str(path), "--run"]) == 2
    assert _one_line(capsys).startswith(f"partition: error: {path}: the reference cannot run: op 'a': gather index out of range")


def test_a_kernel_cache_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    """PARTITIONER_CACHE naming a file was a NotADirectoryError (exit 1)."""
    from backends.base import BackendError
    from backends.cuda.compile import cache_dir

    (tmp_path / "a_file").write_text("kept")
    monkeypatch.setenv("PARTITIONER_CACHE", str(tmp_path / "a_file"))
    with pytest.raises(BackendError, match="a_file/cuda cannot be made: Not a directory"):
        cache_dir()
    assert (tmp_path / "a_file").read_text() == "kept"
