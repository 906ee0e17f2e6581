"""Constant values (format 1.1): inline values and the .npz side file, in the loader,
the reference, the run report and the import command."""

from __future__ import annotations

import json
import re
import zipfile

import ml_dtypes
import numpy as np
import pytest

from partitioner import GraphError, cli, load_graph, run_reference
from partitioner.ops import TensorType
from partitioner.values import constants, parse_inline, to_inline, write_side_file

GRAPH = {"format": 1.1, "name": "affine", "values": "affine.npz",
         "inputs": [{"name": "x", "shape": [2, 3]}, {"name": "w", "shape": [3, 4]},
                    {"name": "b", "shape": [4], "dtype": "bfloat16"},
                    {"name": "k", "shape": [2], "dtype": "int64", "value": [3, -1]},
                    {"name": "on", "shape": [], "dtype": "bool", "value": True}],
         "ops": [{"name": "h", "op": "matmul", "inputs": ["x", "w"]}, {"name": "y", "op": "add", "inputs": ["h", "b"]}],
         "outputs": ["y", "k", "on"]}
W = np.arange(12, dtype=np.float32).reshape(3, 4)
B = np.array([0.5, -1, 2, 0.1], dtype=ml_dtypes.bfloat16)


@pytest.fixture
def graph_file(tmp_path):
    path = tmp_path / "affine.json"
    path.write_text(json.dumps(GRAPH))
    write_side_file(tmp_path / "affine.npz", {"w": W, "b": B})
    return path


def test_the_reference_computes_with_the_graphs_values(graph_file):
    graph = load_graph(graph_file)
    x = np.ones((2, 3), np.float32)
    values = run_reference(graph, {"x": x})
    assert values["k"].tolist() == [3, -1] and values["on"].dtype == bool and values["on"]
    assert values["b"].dtype == B.dtype and values["b"].tobytes() == B.tobytes()  # bf16 through its bits
    want = (x @ W + B.astype(np.float32)).astype(np.float32)
    np.testing.assert_array_equal(values["y"], want)
    assert constants(graph).from_file == ("w", "b") and constants(graph).inline == ("k", "on")


def test_without_its_side_file_a_graph_runs_on_drawn_values_and_says_so(graph_file, capsys):
    (graph_file.parent / "affine.npz").unlink()
    assert cli.main([str(graph_file), "--run"]) == 0
    out = capsys.readouterr().out
    assert "inputs    2 constant value(s) in the graph, 3 drawn at random (seed 0); " in out
    assert "affine.npz is missing, so the values it holds were drawn at random" in out
    assert cli.main([str(graph_file), "--run", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)["run_inputs"]
    assert data["inline"] == ["k", "on"] and data["seeded"] == ["x", "w", "b"] and data["missing"]


def test_with_its_side_file_the_run_report_counts_each_source(graph_file, capsys):
    assert cli.main([str(graph_file), "--run"]) == 0
    assert "inputs    2 constant value(s) in the graph, 2 from affine.npz, 1 drawn at random (seed 0)\n" in \
        capsys.readouterr().out


@pytest.mark.parametrize("arrays, message", [
    ({"w": W.astype(np.float16)}, "array 'w' is float16[3, 4]; its input is float32[3, 4]"),
    ({"w": W[:2]}, "array 'w' is float32[2, 4]"),
    ({"z": W}, "array 'z' names no graph input"),
    ({"k": np.array([1, 2])}, "input 'k' has a value in the graph file too"),
])
def test_a_side_file_that_does_not_match_is_one_line(graph_file, arrays, message, capsys):
    write_side_file(graph_file.parent / "affine.npz", arrays)
    with pytest.raises(GraphError, match=re.escape(message)):
        run_reference(load_graph(graph_file))
    assert cli.main([str(graph_file), "--run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_side_file_that_is_no_npz_is_one_line(graph_file):
    (graph_file.parent / "affine.npz").write_bytes(b"not a zip")
    with pytest.raises(GraphError, match="affine.npz: not a NumPy .npz file"):
        run_reference(load_graph(graph_file))


def _corrupt_member(path):
    data = bytearray(path.read_bytes())
    data[60] ^= 0xFF
    data[61] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-30])


def _garbage_tail(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2:] = bytes(len(data) - len(data) // 2)
    path.write_bytes(bytes(data))


def _member_not_npy(path):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("w.npy", b"garbage")  # NumPy hands back bytes for it: an AttributeError (exit 1)


@pytest.mark.parametrize("spoil", [_corrupt_member, _truncate, _garbage_tail, _member_not_npy])
def test_a_compressed_side_file_with_corrupt_data_is_one_line_and_exit_2(graph_file, spoil, capsys):
    side = graph_file.parent / "affine.npz"
    np.savez_compressed(side, w=W, b=B.view(np.uint16))
    spoil(side)
    with pytest.raises(GraphError, match="affine.npz: not a NumPy .npz file"):
        run_reference(load_graph(graph_file))
    assert cli.main([str(graph_file), "--run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "affine.npz" in err and "internal error" not in err


@pytest.mark.parametrize("shape, value", [([0, 2], []), ([2, 0], []), ([2, 0], [[], []]), ([0], []),
                                          ([3, 0, 2], [])])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "bfloat16"])
def test_an_empty_constant_is_written_and_read_as_an_empty_list(shape, value, dtype):
    t = TensorType(tuple(shape), dtype)
    array = parse_inline(value, t)
    assert array.shape == tuple(shape) and array.size == 0
    assert to_inline(array) == []
    assert parse_inline(to_inline(array), t).shape == tuple(shape)
    graph = load_graph({"inputs": [{"name": "a", "shape": [3, *shape[1:]], "dtype": dtype},
                                   {"name": "e", "shape": shape, "dtype": dtype, "value": value}],
                        "ops": [{"name": "y", "op": "concat", "inputs": ["a", "e"], "attrs": {"axis": 0}}],
                        "outputs": ["y"]}) if shape[0] == 0 and len(shape) > 1 else None
    if graph is not None:
        a = np.ones((3, *shape[1:]), dtype=graph.values["e"].dtype)
        np.testing.assert_array_equal(run_reference(graph, {"a": a})["y"], a)


def test_an_empty_constant_in_the_side_file_is_read(tmp_path):
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"format": 1.1, "values": "e.npz",
                                "inputs": [{"name": "a", "shape": [3, 2]}, {"name": "e", "shape": [0, 2]}],
                                "ops": [{"name": "y", "op": "concat", "inputs": ["a", "e"], "attrs": {"axis": 0}}],
                                "outputs": ["y"]}))
    write_side_file(tmp_path / "e.npz", {"e": np.zeros((0, 2), np.float32)})
    graph = load_graph(path)
    assert constants(graph).from_file == ("e",) and constants(graph).values["e"].shape == (0, 2)
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(run_reference(graph, {"a": a})["y"], a)


def test_an_empty_input_with_a_value_of_another_size_is_still_rejected():
    with pytest.raises(ValueError, match=re.escape("value has shape [1], the input's shape is [0, 2]")):
        parse_inline([1.0], TensorType((0, 2), "float32"))
    with pytest.raises(ValueError, match=re.escape("value has shape [0], the input's shape is [2]")):
        parse_inline([], TensorType((2,), "float32"))


@pytest.mark.parametrize("entry, message", [
    ({"shape": [2], "dtype": "int64", "value": [1, 2, 3]}, "value has shape [3], the input's shape is [2]"),
    ({"shape": [2], "dtype": "int8", "value": [1, 300]}, "300 is not an integer that int8 holds"),
    ({"shape": [2], "dtype": "int64", "value": [1, 1.5]}, "1.5 is not an integer that int64 holds"),
    ({"shape": [2], "dtype": "float32", "value": [1, "a"]}, "a value holds numbers only"),
    ({"shape": [], "dtype": "bool", "value": 1}, "a bool value holds true and false only"),
    ({"shape": [2, 2], "value": [[1, 2], [3]]}, "value[1] has 1 element where the input's shape [2, 2] has 2"),
    ({"shape": [2, 2, 1], "value": [[[1], [2]], [[3], 4]]},
     "value[1][1] is one element where the input's shape [2, 2, 1] has a list of 1"),
    ({"shape": [2, 2], "value": [[1, 2, 3], [4]]}, "value[0] has 3 elements where the input's shape [2, 2] has 2"),
])
def test_a_bad_inline_value_is_one_line_naming_the_input(entry, message):
    graph = {"inputs": [{"name": "c", **entry}], "ops": [{"name": "y", "op": "neg", "inputs": ["c"]}],
             "outputs": ["y"]}
    with pytest.raises(GraphError, match=re.escape(f"input 'c': {message}")):
        load_graph(graph)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_inline_floats_read_back_bit_for_bit_with_the_fewest_digits(dtype):
    rng = np.random.default_rng(7)
    array = rng.standard_normal(200).astype(np.float32).astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    array[:4] = [np.inf, -np.inf, -0.0, 0.1]
    back = parse_inline(to_inline(array), TensorType((200,), dtype))
    assert back.dtype == array.dtype and back.tobytes() == array.tobytes()
    assert to_inline(array)[3] == 0.1 or dtype == "bfloat16"


def test_format_1_files_and_newer_versions():
    plain = {"format": 1, "inputs": [{"name": "x", "shape": [2]}], "ops": [{"name": "y", "op": "neg", "inputs": ["x"]}],
             "outputs": ["y"]}
    assert load_graph(plain).values == {}
    with pytest.raises(GraphError, match="format 2 is newer than this reader"):
        load_graph({**plain, "format": 2})
    with pytest.raises(GraphError, match="format 1.05 is no version of the format"):
        load_graph({**plain, "format": 1.05})


def test_import_writes_weights_beside_the_graph(tmp_path, capsys):
    onnx = pytest.importorskip("onnx", reason="the onnx extra imports ONNX models")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    source, out = tmp_path / "mlp.onnx", tmp_path / "mlp.yaml"
    onnx.save(model, source)
    assert cli.main(["import", str(source), "-o", str(out)]) == 0
    assert f"1 constant(s) of 0.0 MB in {tmp_path / 'mlp.npz'}" in capsys.readouterr().err
    graph = load_graph(out)
    assert graph.values_file == "mlp.npz" and "format: 1.1\n" in out.read_text()
    x = np.ones((8, 64), np.float32)
    np.testing.assert_allclose(run_reference(graph, {"x": x})["y"], np.maximum(x @ w, 0), rtol=1e-5)
    # the side file is never overwritten without --force; --no-values leaves it out
    out.unlink()
    assert cli.main(["import", str(source), "-o", str(out)]) == 2
    assert "mlp.npz: exists; pass --force" in capsys.readouterr().err
    assert cli.main(["import", str(source), "-o", str(out), "--no-values"]) == 0
    assert "not written (--no-values)" in capsys.readouterr().err
    assert load_graph(out).values_file is None


def test_side_files_hold_every_dtype_bit_for_bit(tmp_path):
    from partitioner.dtypes import DTYPES, numpy_dtype
    from partitioner.reference import random_values

    inputs = [{"name": f"t_{d}", "shape": [3, 5], "dtype": d} for d in DTYPES]
    graph = {"format": 1.1, "values": "all.npz", "inputs": inputs,
             "ops": [{"name": "y", "op": "neg", "inputs": ["t_float32"]}], "outputs": ["y"]}
    (tmp_path / "all.json").write_text(json.dumps(graph))
    loaded = load_graph(tmp_path / "all.json")
    arrays = random_values(loaded, list(loaded.inputs), seed=5)
    write_side_file(tmp_path / "all.npz", arrays)
    back = constants(load_graph(tmp_path / "all.json")).values
    for name, array in arrays.items():
        assert back[name].dtype == numpy_dtype(loaded.inputs[name].dtype) and back[name].tobytes() == array.tobytes()


@pytest.mark.parametrize("change, message", [
    ({"ops": [{"name": "y", "op": "cumsum", "inputs": ["x"], "attrs": {"axis": 0}}]}, "op 'y' (cumsum) is format 1.1"),
    ({"ops": [{"name": "y", "op": "trunc", "inputs": ["x"]}]}, "op 'y' (trunc) is format 1.1"),
    ({"ops": [{"name": "y", "op": "fmod", "inputs": ["x", 2.0]}]}, "op 'y' (fmod) is format 1.1"),
    ({"inputs": [{"name": "x", "shape": [2], "dtype": "uint8"}]}, "dtype uint8 is format 1.1"),
    ({"inputs": [{"name": "x", "shape": [2], "value": [1.0, 2.0]}]}, "constant values is format 1.1"),
])
def test_a_file_that_says_format_1_uses_nothing_of_1_1(change, message):
    """A new user's `format: 1` file with 1.1's ops once loaded without a word."""
    plain = {"format": 1, "inputs": [{"name": "x", "shape": [2]}], "ops": [{"name": "y", "op": "neg", "inputs": ["x"]}],
             "outputs": ["y"]}
    with pytest.raises(GraphError, match=re.escape(f"{message}, but the file says format: 1")) as refused:
        load_graph({**plain, **change})
    assert "\n" not in str(refused.value)
    load_graph({**plain, **change, "format": 1.1})
    unversioned = {**plain, **change}
    del unversioned["format"]
    load_graph(unversioned)  # no format key: the newest this reader knows


def test_values_names_an_npz():
    graph = {**GRAPH, "values": "/etc/passwd"}
    with pytest.raises(GraphError, match=r"'values' names an .npz side file, got '/etc/passwd'"):
        load_graph(graph)


def test_inline_integers_hold_every_value_of_their_dtype():
    """uint64 values above 2^63 once went inline through int64 and came back negative."""
    from partitioner.values import to_inline

    for dtype in ("uint64", "int64", "uint8", "int16"):
        info = np.iinfo(dtype)
        array = np.array([info.min, info.max, 0], dtype=dtype)
        assert parse_inline(to_inline(array), TensorType((3,), dtype)).tolist() == array.tolist()
