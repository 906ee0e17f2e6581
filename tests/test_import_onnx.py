"""The ONNX importer: every mapped op, across the opsets where its signature moved,
against onnxruntime on the same inputs; customs, folding, dynamic dimensions, the CLI."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed (pip install -e '.[onnx]')")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import partitioner  # noqa: E402
from partitioner import GraphError, cli, partition, run_reference  # noqa: E402
from partitioner.importers import onnx as onnx_importer  # noqa: E402

F, I64, B, F16 = TP.FLOAT, TP.INT64, TP.BOOL, TP.FLOAT16
NUMPY = {F: np.float32, I64: np.int64, B: np.bool_, F16: np.float16, TP.INT32: np.int32}


def value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def make(nodes, inputs, outputs, opset=17, initializers=None):
    """A model from nodes and {name: (elem, shape)} inputs and outputs (None: inferred)."""
    graph = helper.make_graph(
        nodes, "test", [value(n, e, s) for n, (e, s) in inputs.items()],
        [value(n, e, s) for n, (e, s) in outputs.items()],
        initializer=[numpy_helper.from_array(v, n) for n, v in (initializers or {}).items()])
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds_for(model, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in initializers:
            continue
        tt = v.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        dtype = NUMPY[tt.elem_type]
        if dtype == np.bool_:
            feeds[v.name] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            feeds[v.name] = rng.integers(-5, 6, shape).astype(dtype)
        else:
            data = rng.standard_normal(shape)
            feeds[v.name] = (np.abs(data) + 0.5 if positive else data).astype(dtype)
    return feeds


def check(model, feeds=None, rtol=1e-5, atol=1e-5, positive=False, dims=None, ort_model=None):
    """Import ``model``, run it with onnxruntime and with run_reference on the same
    inputs (the graph keeps the weights and constants), and compare every output;
    returns the import result."""
    feeds = feeds_for(model, positive=positive) if feeds is None else feeds
    session = ort.InferenceSession((ort_model or model).SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    result = onnx_importer.convert(model, dims)
    assert not result.summary.custom, result.summary.text("import")
    graph = result.load()
    values = {result.renamed.get(k, k): v for k, v in feeds.items()}  # weights and constants: the graph's own
    got = run_reference(graph, {k: v for k, v in values.items() if k in graph.inputs})
    for out, want in zip((result.renamed.get(o.name, o.name) for o in model.graph.output), expected):
        assert got[out].shape == want.shape, out
        assert got[out].dtype == want.dtype, out
        np.testing.assert_allclose(got[out].astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=out)
    return result


def unary_case(op_type, **attrs):
    return make([helper.make_node(op_type, ["x"], ["y"], **attrs)], {"x": (F, [3, 4])}, {"y": (F, None)},
                opset=20 if op_type == "Gelu" else 17)


@pytest.mark.parametrize("op_type", ["Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Sigmoid", "Relu", "Erf", "Neg",
                                     "Abs", "Sin", "Cos", "Identity"])
def test_unary(op_type):
    check(unary_case(op_type), positive=op_type in ("Sqrt", "Log", "Reciprocal"))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset_20(approximate):
    check(unary_case("Gelu", approximate=approximate))


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_binary_broadcasting(op_type):
    model = make([helper.make_node(op_type, ["a", "b"], ["y"])], {"a": (F, [2, 3, 4]), "b": (F, [4])},
                 {"y": (F, None)})
    check(model, positive=True, rtol=1e-5)


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul"])
def test_integer_binary(op_type):
    model = make([helper.make_node(op_type, ["a", "b"], ["y"])], {"a": (I64, [3, 4]), "b": (I64, [3, 1])},
                 {"y": (I64, None)})
    check(model)


def test_scalar_constant_becomes_a_literal():
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(0.125, np.float32))),
             helper.make_node("Mul", ["x", "c"], ["y"])]
    result = check(make(nodes, {"x": (F, [3, 4])}, {"y": (F, None)}))
    assert result.graph["ops"][0]["inputs"] == ["x", 0.125]
    assert result.summary.folded == 1 and [i["name"] for i in result.graph["inputs"]] == ["x"]


@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons(op_type):
    model = make([helper.make_node(op_type, ["a", "b"], ["y"])], {"a": (I64, [3, 4]), "b": (I64, [4])},
                 {"y": (B, None)})
    check(model)


def test_where_and_logic():
    nodes = [helper.make_node("Greater", ["a", "b"], ["g"]), helper.make_node("Not", ["g"], ["n"]),
             helper.make_node("And", ["n", "m"], ["c"]), helper.make_node("Where", ["c", "a", "b"], ["y"])]
    check(make(nodes, {"a": (F, [3, 4]), "b": (F, [3, 4]), "m": (B, [3, 4])}, {"y": (F, None)}))


@pytest.mark.parametrize("to", [TP.INT32, TP.FLOAT16, I64])
def test_cast(to):
    model = make([helper.make_node("Cast", ["x"], ["y"], to=to)], {"x": (F, [3, 4])}, {"y": (to, None)})
    check(model, feeds={"x": np.array([[0.4, -1.7, 2.5, 3.99]] * 3, np.float32)})


REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]


@pytest.mark.parametrize("op_type", REDUCTIONS)
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_take_axes_as_attribute_or_input(op_type, opset, keepdims):
    """ReduceSum takes its axes as an input from opset 13, the others from opset 18."""
    as_input = opset >= (13 if op_type == "ReduceSum" else 18)
    axes = np.array([0, -1], np.int64)
    if as_input:
        node = helper.make_node(op_type, ["x", "axes"], ["y"], keepdims=keepdims)
        model = make([node], {"x": (F, [2, 3, 4])}, {"y": (F, None)}, opset, {"axes": axes})
    else:
        node = helper.make_node(op_type, ["x"], ["y"], keepdims=keepdims, axes=axes.tolist())
        model = make([node], {"x": (F, [2, 3, 4])}, {"y": (F, None)}, opset)
    result = check(model)
    assert [i["name"] for i in result.graph["inputs"]] == ["x"]  # the axes are read, not an input


def test_reduction_without_axes_reduces_all_or_nothing():
    everything = make([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], {"x": (F, [2, 3])}, {"y": (F, None)},
                      13)
    check(everything)
    nothing = make([helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)], {"x": (F, [2, 3])},
                   {"y": (F, None)}, 13)
    check(nothing)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
def test_arg_reductions(op_type):
    model = make([helper.make_node(op_type, ["x"], ["y"], axis=1, keepdims=0)], {"x": (F, [3, 5])}, {"y": (I64, None)})
    check(model)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_semantics_moved_at_opset_13(op_type, opset, axis):
    """Before opset 13, Softmax normalises over the input flattened at ``axis``."""
    model = make([helper.make_node(op_type, ["x"], ["y"], axis=axis)], {"x": (F, [2, 3, 4])}, {"y": (F, None)}, opset)
    check(model)


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization(axis, bias):
    rng = np.random.default_rng(1)
    normalized = [3, 4] if axis == 1 else [4]
    init = {"scale": rng.standard_normal(normalized).astype(np.float32)}
    if bias:
        init["bias"] = rng.standard_normal(normalized).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "scale"] + (["bias"] if bias else []), ["y"], axis=axis,
                            epsilon=1e-3)
    result = check(make([node], {"x": (F, [2, 3, 4])}, {"y": (F, None)}, 17, init), atol=1e-4)
    assert result.graph["ops"][0]["op"] == "layer_norm"


def test_matmul_and_gemm():
    rng = np.random.default_rng(2)
    init = {"w": rng.standard_normal((5, 4)).astype(np.float32), "c": rng.standard_normal(5).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Gemm", ["x", "w"], ["h"], transB=1)]
    model = make(nodes, {"a": (F, [2, 3, 4]), "b": (F, [4, 6]), "x": (F, [3, 4])},
                 {"m": (F, None), "g": (F, None), "h": (F, None)}, 17, init)
    result = check(model, atol=1e-4)
    assert {"w", "c"} <= {i["name"] for i in result.graph["inputs"]}  # weights are inputs


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [0, 1, 2, 1], "dilations": [1, 2]},
    {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER"},
    {"auto_pad": "VALID"},
])
def test_conv(attrs):
    rng = np.random.default_rng(3)
    groups = attrs.get("group", 1)
    init = {"w": rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32),
            "b": rng.standard_normal(6).astype(np.float32)}
    model = make([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": (F, [2, 4, 9, 8])},
                 {"y": (F, None)}, 17, init)
    check(model, atol=1e-4)


def test_batch_normalization_conv_relu():
    rng = np.random.default_rng(4)
    init = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
            "scale": rng.standard_normal(4).astype(np.float32), "bias": rng.standard_normal(4).astype(np.float32),
            "mean": rng.standard_normal(4).astype(np.float32), "var": rng.random(4).astype(np.float32) + 0.5}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    check(make(nodes, {"x": (F, [2, 3, 8, 8])}, {"y": (F, None)}, 15, init), atol=1e-4)


def test_layout_ops():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Flatten", ["x"], ["f"], axis=2),
             helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
             helper.make_node("Expand", ["col", "eshape"], ["e"])]
    init = {"shape": np.array([0, -1], np.int64), "eshape": np.array([2, 1, 4], np.int64)}
    model = make(nodes, {"x": (F, [2, 3, 4]), "col": (F, [3, 1])},
                 {"r": (F, None), "f": (F, None), "c": (F, None), "e": (F, None)}, 17, init)
    result = check(model)
    ops = {o["name"]: o for o in result.graph["ops"]}
    assert ops["r"]["attrs"]["shape"] == [2, 12] and ops["e"]["shape"] == [2, 3, 4]


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_and_squeeze_axes_attribute_or_input(opset):
    if opset >= 13:
        nodes = [helper.make_node("Unsqueeze", ["x", "ua"], ["u"]), helper.make_node("Squeeze", ["u", "sa"], ["s"])]
        init = {"ua": np.array([0, -1], np.int64), "sa": np.array([0], np.int64)}
    else:
        nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
                 helper.make_node("Squeeze", ["u"], ["s"], axes=[0])]
        init = {}
    check(make(nodes, {"x": (F, [2, 3])}, {"u": (F, None), "s": (F, None)}, opset, init))


@pytest.mark.parametrize("opset", [9, 13])
def test_slice_attributes_or_inputs(opset):
    if opset < 10:
        node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1], axes=[0, 2])
        init = {}
    else:
        node = helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])
        init = {"s": np.array([-1, 0], np.int64), "e": np.array([-100, 4], np.int64),
                "a": np.array([0, 2], np.int64), "st": np.array([-1, 2], np.int64)}
    check(make([node], {"x": (F, [3, 4, 5])}, {"y": (F, None)}, opset, init))


@pytest.mark.parametrize("opset", [11, 18])
def test_pad(opset):
    if opset < 18:
        node = helper.make_node("Pad", ["x", "pads", "v"], ["y"])
        init = {"pads": np.array([0, 1, 2, 0], np.int64), "v": np.array(1.5, np.float32)}
    else:
        node = helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"])
        init = {"pads": np.array([1, 2], np.int64), "v": np.array(-2.0, np.float32), "axes": np.array([-1], np.int64)}
    check(make([node], {"x": (F, [3, 4])}, {"y": (F, None)}, opset, init))


def test_gather_with_tensor_indices_and_with_a_constant_index():
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("Gather", ["x", "one"], ["g"], axis=1)]
    model = make(nodes, {"table": (F, [10, 4]), "ids": (I64, [2, 3]), "x": (F, [2, 3, 4])},
                 {"e": (F, None), "g": (F, None)}, 17, {"one": np.array(-2, np.int64)})
    feeds = feeds_for(model)
    feeds["ids"] = np.array([[0, 9, 3], [2, 2, 7]], np.int64)
    result = check(model, feeds)
    assert [o["op"] for o in result.graph["ops"]] == ["gather", "slice", "reshape"]


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split(opset):
    if opset < 13:
        node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 4])
        init = {}
    elif opset < 18:
        node = helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1)
        init = {"sizes": np.array([3, 2], np.int64)}
    else:
        node = helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2)
        init = {}
    check(make([node], {"x": (F, [2, 5])}, {"a": (F, None), "b": (F, None)}, opset, init))


def test_clip_and_dropout():
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("Dropout", ["c"], ["y"])]
    init = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)}
    check(make(nodes, {"x": (F, [3, 4])}, {"y": (F, None)}, 13, init))


def test_shape_arithmetic_is_folded():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the torch.onnx pattern for x.view(b, -1)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "ax"], ["bu"]),
             helper.make_node("Concat", ["bu", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Cast", ["b"], ["bf"], to=F),
             helper.make_node("Sqrt", ["bf"], ["root"]),
             helper.make_node("Div", ["y", "root"], ["z"])]
    init = {"zero": np.array(0, np.int64), "ax": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    result = check(make(nodes, {"x": (F, [4, 3, 5])}, {"z": (F, None)}, 17, init))
    assert [o["op"] for o in result.graph["ops"]] == ["reshape", "div"]
    assert result.summary.folded == 6 and result.summary.mapped == 2


def test_float16_model():
    rng = np.random.default_rng(5)
    init = {"scale": rng.standard_normal(8).astype(np.float16), "bias": rng.standard_normal(8).astype(np.float16)}
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["n"]),
             helper.make_node("Softmax", ["n"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])]
    check(make(nodes, {"x": (F16, [4, 8])}, {"y": (F16, None)}, 17, init), rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------- custom ops, dims, errors


def test_unmappable_ops_become_custom_and_the_graph_plans():
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"]), helper.make_node("Div", ["i", "j"], ["d"]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make(nodes, {"x": (F, [4, 8]), "i": (I64, [4]), "j": (I64, [4])}, {"y": (F, None), "d": (I64, None)}, 17,
                 {"axis": np.array(1, np.int64)})
    result = onnx_importer.convert(model)
    assert dict(result.summary.custom) == {"CumSum": 1, "Div": 1}
    assert "truncates" in result.summary.reasons["Div"]
    assert "custom CumSum x1" in result.summary.text("import")
    custom = {o["name"]: o for o in result.graph["ops"] if o["op"] == "custom"}
    assert custom["c"]["attrs"] == {"kind": "CumSum"} and custom["c"]["shape"] == [4, 8]
    assert custom["d"]["dtype"] == "int64"
    plan = partition(result.load(), "ilp")
    assert plan.solver.status == "OPTIMAL"


def dynamic_model():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    return make([node], {"x": (F, ["batch", "seq", 8])}, {"y": (F, ["batch", "seq", 8])})


def test_dynamic_dimensions_are_bound_by_name():
    model = dynamic_model()
    graph = partitioner.from_onnx(model, {"batch": 2, "seq": 5}, verbose=False)
    assert graph.inputs["x"].shape == (2, 5, 8) and graph.tensor("y").shape == (2, 5, 8)
    check(model, feeds={"x": np.ones((2, 5, 8), np.float32)}, dims={"batch": 2, "seq": 5})


@pytest.mark.parametrize("dims, message", [
    ({"batch": 2}, "input 'x' has the dynamic dimension 'seq' (axis 1); bind it with --dim seq=VALUE"),
    ({"batch": 2, "seq": 3, "heads": 4}, "no input has a dynamic dimension named 'heads'"),
])
def test_unbound_or_unknown_dimensions_are_clear_errors(dims, message):
    with pytest.raises(GraphError, match=re.escape(message)):
        partitioner.from_onnx(dynamic_model(), dims)


def test_names_are_sanitized_and_unique():
    nodes = [helper.make_node("Relu", ["/in:0"], ["/block.0/Relu_output_0"]),
             helper.make_node("Neg", ["/block.0/Relu_output_0"], ["0out"])]
    model = make(nodes, {"/in:0": (F, [2])}, {"0out": (F, None)})
    result = check(model, feeds={"/in:0": np.array([1.0, -1.0], np.float32)})
    assert [o["name"] for o in result.graph["ops"]] == ["block.0/Relu_output_0", "_0out"]
    assert result.graph["inputs"][0]["name"] == "in_0"
    assert result.renamed == {"/in:0": "in_0", "/block.0/Relu_output_0": "block.0/Relu_output_0", "0out": "_0out"}


def test_import_partitioner_imports_no_framework():
    import subprocess
    import sys

    code = "import sys, partitioner; print(sorted(m for m in ('onnx', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


# ---------------------------------------------------------------- the command line


def test_cli_imports_an_onnx_file(tmp_path, capsys):
    rng = np.random.default_rng(6)
    init = {"w": rng.standard_normal((8, 8)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("CumSum", ["h", "axis"], ["c"]),
             helper.make_node("Gelu", ["c"], ["y"])]
    init["axis"] = np.array(0, np.int64)
    model = make(nodes, {"x": (F, ["batch", 8])}, {"y": (F, None)}, 20, init)
    path, out = tmp_path / "mlp.onnx", tmp_path / "mlp.yaml"
    onnx.save(model, path)
    assert cli.main(["import", str(path), "-o", str(out), "--dim", "batch=16"]) == 0
    err = capsys.readouterr().err
    assert "import mlp: 3 source ops, 2 mapped, 1 custom" in err and "custom CumSum x1" in err
    graph = partitioner.load_graph(out)
    assert graph.inputs["x"].shape == (16, 8) and graph.source.startswith("mlp.onnx: ONNX opset 20")
    text = out.read_text()
    assert "\n  - {name: h, op: matmul, inputs: [x, w], shape: [16, 8], dtype: float32}\n" in text
    assert cli.main([str(out), "--format", "json"]) == 0  # the written file plans

    assert cli.main(["import", str(path), "-o", str(out), "--dim", "batch=16"]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert cli.main(["import", str(path), "-o", str(out), "--dim", "batch=4", "--force"]) == 0
    assert partitioner.load_graph(out).inputs["x"].shape == (4, 8)


@pytest.mark.parametrize("args, message", [
    (["missing.onnx"], "missing.onnx: no such file"),
    (["{model}"], "bind it with --dim batch=VALUE"),
    (["{model}", "--dim", "batch"], "--dim takes NAME=VALUE"),
    (["{model}", "--dim", "batch=2.5"], "--dim batch=2.5: an ONNX dimension takes a non-negative integer"),
    (["{junk}"], "not an ONNX model"),
    (["model.txt"], "SOURCE must be a .onnx file, a .pt2 file or MODULE:FACTORY"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    model, junk = tmp_path / "m.onnx", tmp_path / "junk.onnx"
    onnx.save(dynamic_model(), model)
    junk.write_bytes(b"\x00not a protobuf\xff" * 10)
    args = [a.format(model=model, junk=junk) for a in args]
    try:
        status = cli.main(["import", *args, "-o", str(tmp_path / "out.yaml")])
    except SystemExit as exit_:
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out.yaml").exists()


def test_dropout_is_the_identity_only_at_inference(capsys):
    """Opset 13 exporters name Dropout's mask though nothing reads it: still the
    identity. Training mode with a non-zero ratio draws a random mask: custom."""
    x = {"x": (F, [4, 8])}
    named_mask = make([helper.make_node("Dropout", ["x"], ["y", "mask"])], x, {"y": (F, None)}, 13)
    result = check(named_mask)
    assert [o["op"] for o in result.graph["ops"]] == ["reshape"]
    ratio = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    training = make([helper.make_node("Dropout", ["x", "r", "t"], ["y"])], x, {"y": (F, None)}, 13, ratio)
    result = onnx_importer.convert(training)
    assert result.summary.reasons == {"Dropout": "training-mode Dropout draws a random mask on every run"}
    ratio["r"] = np.array(0.0, np.float32)
    check(make([helper.make_node("Dropout", ["x", "r", "t"], ["y"])], x, {"y": (F, None)}, 13, ratio))
