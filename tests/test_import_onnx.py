"""The ONNX importer: every mapped op, across the opsets where its signature moved,
against onnxruntime on the same inputs; customs, folding, dynamic dimensions, the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed (pip install -e '.[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="the onnx extra is not installed (pip install -e '.[onnx]')")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import partitioner  # noqa: E402
from partitioner import GraphError, cli, partition, run_reference  # noqa: E402
from partitioner.importers import onnx as onnx_importer  # noqa: E402
from partitioner import onnx_semantics  # noqa: E402
from partitioner.values import provenance_text as values_provenance_text  # noqa: E402

F, I64, B, F16 = TP.FLOAT, TP.INT64, TP.BOOL, TP.FLOAT16
NUMPY = {F: np.float32, I64: np.int64, B: np.bool_, F16: np.float16, TP.INT32: np.int32, TP.INT8: np.int8,
         TP.DOUBLE: np.float64}


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


# ---------------------------------------------------------------- pools, normalisations, generators, integer division


def ops_of(result):
    return [o["op"] for o in result.graph["ops"]]


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [0, 1, 2, 0]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    # ceil_mode's last window would start in the end padding: dropped (opset 22 on)
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 1]},
])
def test_max_pool(attrs):
    model = make([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], {"x": (F, [2, 3, 9, 8])}, {"y": (F, None)}, 22)
    assert ops_of(check(model)) == ["max_pool2d"]


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_pool_whose_declared_shape_disagrees_is_custom(op_type):
    """Before opset 22, ONNX's shape inference keeps a ceil_mode window that starts in
    the end padding (here 6 rows), which onnxruntime and the format drop (5 rows):
    the model's own shapes disagree with what runs, so the pool is custom."""
    node = helper.make_node(op_type, ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    result = onnx_importer.convert(make([node], {"x": (F, [2, 3, 9, 8])}, {"y": (F, None)}, 12))
    reason = "stated shape [2, 3, 6, 5] disagrees with the inferred shape [2, 3, 5, 5]"
    assert result.summary.reasons == {op_type: reason}


def test_max_pool_1d_int8_and_unread_indices():
    """A 1-D pool is a 2-D one over a view of height 1; Indices named but read by
    nothing leave the values output mappable."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "unused"], kernel_shape=[3], strides=[2], pads=[1, 1]),
             helper.make_node("MaxPool", ["q"], ["z"], kernel_shape=[2, 2])]
    model = make(nodes, {"x": (F, [2, 3, 10]), "q": (TP.INT8, [1, 2, 5, 5])}, {"y": (F, None), "z": (TP.INT8, None)},
                 12)
    feeds = feeds_for(model)
    feeds["q"] = np.random.default_rng(7).integers(-128, 128, (1, 2, 5, 5)).astype(np.int8)
    result = check(model, feeds)
    assert ops_of(result) == ["reshape", "max_pool2d", "reshape", "max_pool2d"]


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [0, 1, 2, 0], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "strides": [1, 1], "auto_pad": "SAME_LOWER", "count_include_pad": 1},
])
def test_average_pool(attrs):
    model = make([helper.make_node("AveragePool", ["x"], ["y"], **attrs)], {"x": (F, [2, 3, 9, 8])},
                 {"y": (F, None)}, 22)
    assert ops_of(check(model)) == ["avg_pool2d"]


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_dilations_opset_19_and_1d(count_include_pad):
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 0, 1, 2],
                              count_include_pad=count_include_pad),
             helper.make_node("AveragePool", ["r"], ["z"], kernel_shape=[4], pads=[2, 1], strides=[3],
                              count_include_pad=count_include_pad)]
    check(make(nodes, {"x": (F, [2, 3, 9, 8]), "r": (F, [2, 3, 11])}, {"y": (F, None), "z": (F, None)}, 19))


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op_type):
    model = make([helper.make_node(op_type, ["x"], ["y"])], {"x": (F, [2, 3, 5, 4])}, {"y": (F, None)}, 12)
    result = check(model)
    assert result.graph["ops"][0]["attrs"] == {"axes": [2, 3], "keepdims": True}


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size):
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.6, bias=1.5)
    check(make([node], {"x": (F, [2, 7, 4, 3])}, {"y": (F, None)}, 13))


@pytest.mark.parametrize("size, shape", [(2, [2, 6, 5]), (4, [1, 7, 3, 2])])
def test_lrn_even_window_and_other_ranks_follow_the_specification(size, shape):
    """onnxruntime takes only odd sizes and 4-D input (onnx.reference sums over the
    wrong axis): checked against the specification's window, channels
    c - (size - 1) // 2 to c + size // 2."""
    alpha, beta, bias = 0.3, 0.6, 1.5
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    model = make([node], {"x": (F, shape)}, {"y": (F, None)}, 13)
    x = np.random.default_rng(12).standard_normal(shape)
    squares = np.stack([(x[:, max(0, c - (size - 1) // 2):c + size // 2 + 1] ** 2).sum(axis=1)
                        for c in range(shape[1])], axis=1)
    want = x / (bias + alpha / size * squares) ** beta
    got = run_reference(onnx_importer.convert(model).load(), {"x": x.astype(np.float32)})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type", ["Sum", "Mean", "Max", "Min"])
def test_variadic_ops_broadcast(op_type):
    nodes = [helper.make_node(op_type, ["a", "b", "c"], ["y"]), helper.make_node(op_type, ["a"], ["one"])]
    model = make(nodes, {"a": (F, [3, 1]), "b": (F, [4]), "c": (F, [2, 3, 4])}, {"y": (F, None), "one": (F, None)},
                 13)
    check(model)


@pytest.mark.parametrize("op_type", ["Max", "Min"])
@pytest.mark.parametrize("elem", [TP.INT32, I64, TP.INT8])
def test_variadic_max_min_integers(op_type, elem):
    model = make([helper.make_node(op_type, ["a", "b"], ["y"])], {"a": (elem, [3, 4]), "b": (elem, [4])},
                 {"y": (elem, None)}, 13)
    check(model)


def test_mean_float16_and_a_scalar_constant():
    nodes = [helper.make_node("Mean", ["a", "b"], ["m"]), helper.make_node("Sum", ["a", "half", "b"], ["s"])]
    model = make(nodes, {"a": (F16, [3, 4]), "b": (F16, [3, 4])}, {"m": (F16, None), "s": (F16, None)}, 13,
                 {"half": np.array(0.5, np.float16)})
    result = check(model, rtol=1e-3, atol=1e-3)
    assert ["a", 0.5] in [o["inputs"] for o in result.graph["ops"]]  # the known scalar is a literal


def test_constant_of_shape_too_large_to_fold_is_a_broadcast():
    """300 x 300 > 65,536 elements: a broadcast of the one-element value; a small
    result folds."""
    def fill(value):
        return numpy_helper.from_array(np.array([value]))

    nodes = [helper.make_node("ConstantOfShape", ["big"], ["c"], value=fill(np.float32(1.5))),
             helper.make_node("Add", ["x", "c"], ["y"]),
             helper.make_node("ConstantOfShape", ["big"], ["k"], value=fill(np.int64(-3))),
             helper.make_node("ConstantOfShape", ["small"], ["z"]),
             helper.make_node("Add", ["x", "z"], ["w"])]
    init = {"big": np.array([300, 300], np.int64), "small": np.array([300], np.int64)}
    model = make(nodes, {"x": (F, [300, 300])}, {"y": (F, None), "k": (I64, None), "w": (F, None)}, 17, init)
    result = check(model)
    ops = {o["name"]: o for o in result.graph["ops"]}
    assert ops["c"]["op"] == "broadcast_to" and ops["k"]["op"] == "broadcast_to" and "z" not in ops
    assert {"name": "c_value", "shape": [], "dtype": "float32", "value": 1.5} in result.graph["inputs"]


@pytest.mark.parametrize("start, limit, delta, elem", [
    (0, 70000, 1, I64),
    (100000, -40000, -2, TP.INT32),
    (-3.0, 50000.0, 0.5, F),
])
def test_range_too_large_to_fold_is_an_arange(start, limit, delta, elem):
    dtype = NUMPY[elem]
    node = helper.make_node("Range", ["s", "l", "d"], ["y"])
    init = {"s": np.array(start, dtype), "l": np.array(limit, dtype), "d": np.array(delta, dtype)}
    result = check(make([node], {}, {"y": (elem, None)}, 17, init), feeds={})
    op = result.graph["ops"][0]
    assert op["op"] == "arange" and op["attrs"]["dtype"] == np.dtype(dtype).name


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("elem, axis", [(F, 1), (F, -3), (TP.INT32, 0), (I64, -1)])
def test_cumsum(exclusive, reverse, elem, axis):
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    model = make([node], {"x": (elem, [3, 4, 5])}, {"y": (elem, None)}, 14, {"axis": np.array(axis, np.int64)})
    result = check(model)
    assert "cumsum" in ops_of(result)


SIGNED = np.array([[-7, 7, -7, 7, 0, -6, 6, -1, 5, -128 + 1]] * 2)
DIVISORS = np.array([[2, 2, -2, -2, 3, 3, -3, 4, 7, 127]] * 2)


@pytest.mark.parametrize("elem", [TP.INT32, I64, TP.INT8])
def test_integer_div_truncates(elem):
    dtype = NUMPY[elem]
    model = make([helper.make_node("Div", ["a", "b"], ["y"])], {"a": (elem, [2, 10]), "b": (elem, [2, 10])},
                 {"y": (elem, None)}, 14)
    result = check(model, feeds={"a": SIGNED.astype(dtype), "b": DIVISORS.astype(dtype)})
    assert "floor_divide" in ops_of(result)


def test_integer_div_broadcasts_a_scalar_divisor():
    nodes = [helper.make_node("Div", ["a", "three"], ["y"])]
    model = make(nodes, {"a": (I64, [2, 10])}, {"y": (I64, None)}, 14, {"three": np.array(-3, np.int64)})
    check(model, feeds={"a": SIGNED.astype(np.int64)})


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("elem", [TP.INT32, I64, TP.INT8])
def test_integer_mod(fmod, elem):
    dtype = NUMPY[elem]
    model = make([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": (elem, [2, 10]), "b": (elem, [2, 10])},
                 {"y": (elem, None)}, 13)
    result = check(model, feeds={"a": SIGNED.astype(dtype), "b": DIVISORS.astype(dtype)})
    assert "remainder" in ops_of(result)


@pytest.mark.parametrize("elem", [F, F16, TP.DOUBLE])
def test_float_fmod_has_the_dividends_sign(elem):
    dtype = NUMPY[elem]
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, -0.5, 1e-3, -6.0, 3.0], dtype)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0, 0.25, -3.0, 3.0, np.inf], dtype)
    model = make([helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)], {"a": (elem, [10]), "b": (elem, [10])},
                 {"y": (elem, None)}, 13)
    check(model, feeds={"a": a, "b": b}, rtol=0, atol=0)


@pytest.mark.parametrize("attrs, c_shape", [
    ({"transA": 1, "alpha": 0.5, "beta": 2.0}, [5]),
    ({"transB": 1, "beta": -1.0}, [3, 1]),
    ({"transA": 1, "transB": 1}, [1, 5]),
    ({"alpha": 2.0}, []),
    ({"alpha": 2.0, "beta": 0.5}, None),
])
def test_gemm_transposes_scales_and_c_broadcasting(attrs, c_shape):
    rng = np.random.default_rng(8)
    a = [4, 3] if attrs.get("transA") else [3, 4]
    w = [5, 4] if attrs.get("transB") else [4, 5]
    init = {"w": rng.standard_normal(w).astype(np.float32)}
    inputs = ["a", "w"]
    if c_shape is not None:
        init["c"] = rng.standard_normal(c_shape).astype(np.float32)
        inputs.append("c")
    model = make([helper.make_node("Gemm", inputs, ["y"], **attrs)], {"a": (F, a)}, {"y": (F, None)}, 13, init)
    check(model, atol=1e-5)


@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [2, 3, 7]])
@pytest.mark.parametrize("elem", [F, F16])
def test_instance_normalization(shape, elem):
    rng = np.random.default_rng(9)
    dtype = NUMPY[elem]
    init = {"s": rng.standard_normal(shape[1]).astype(dtype), "b": rng.standard_normal(shape[1]).astype(dtype)}
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)
    tolerance = 2e-3 if elem == F16 else 1e-4
    check(make([node], {"x": (elem, shape)}, {"y": (elem, None)}, 13, init), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("opset, elem", [(18, F), (21, F), (21, F16), (21, TP.DOUBLE)])
def test_group_normalization_scale_per_group_or_per_channel(opset, elem):
    """Opset 18 scales per group, opset 21 per channel (after normalising in float32)."""
    rng = np.random.default_rng(10)
    dtype = NUMPY[elem]
    per = 3 if opset == 18 else 6
    init = {"s": rng.standard_normal(per).astype(dtype), "b": rng.standard_normal(per).astype(dtype)}
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-3)
    model = make([node], {"x": (elem, [2, 6, 4, 3])}, {"y": (elem, None)}, opset, init)
    tolerance = 4e-3 if elem == F16 else 1e-4
    feeds = {"x": np.random.default_rng(11).standard_normal((2, 6, 4, 3)).astype(dtype)}
    check(model, feeds, rtol=tolerance, atol=tolerance)


def test_group_normalization_opset_18_half_is_custom():
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    model = make([node], {"x": (F16, [1, 4, 2, 2]), "s": (F16, [2]), "b": (F16, [2])}, {"y": (F16, [1, 4, 2, 2])}, 18)
    result = onnx_importer.convert(model)
    assert result.summary.reasons == {"GroupNormalization": "opset 18 GroupNormalization computes its statistics "
                                                            "in half precision"}


@pytest.mark.parametrize("repeats", [[2, 3], [1, 2], [3, 1], [1, 1], [0, 2]])
def test_tile(repeats):
    node = helper.make_node("Tile", ["x", "r"], ["y"])
    check(make([node], {"x": (F, [2, 3])}, {"y": (F, None)}, 13, {"r": np.array(repeats, np.int64)}))


def test_expand_where_erf_flatten():
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Erf", ["e"], ["f"]),
             helper.make_node("Greater", ["f", "zero"], ["g"]), helper.make_node("Where", ["g", "f", "e"], ["w"]),
             helper.make_node("Flatten", ["w"], ["y"], axis=-1)]
    init = {"shape": np.array([2, 1, 4], np.int64), "zero": np.array(0.0, np.float32)}
    result = check(make(nodes, {"x": (F, [3, 1])}, {"y": (F, None)}, 13, init))
    assert ops_of(result) == ["broadcast_to", "erf", "gt", "where", "reshape"]


# ---------------------------------------------------------------- ONNX's light models

# The nine models of onnx/backend/test/data/light: real architectures whose weights
# are ConstantOfShape nodes filling each one with 0.02 (so a file is a few kB), and
# beside each its output for the input arange(n) / n in the input's shape, as ONNX's
# backend runner feeds it. The large fills are broadcasts, the small ones fold.
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
                "vgg19", "zfnet512"]
# Compared value by value, every tensor, where the NumPy reference runs in a few
# seconds (its 224 x 224 convolutions take 7 to 170 s on the others).
LIGHT_VALUES = {"bvlc_alexnet", "shufflenet", "squeezenet"}
LIGHT_ILP_BUDGET = 0.2  # nominal seconds: a plan, not a proof, keeps CI fast


def light_input(model):
    """ONNX's backend-runner input: arange(n) / n in the (only) input's shape."""
    initializers = {t.name for t in model.graph.initializer}
    (data,) = [v for v in model.graph.input if v.name not in initializers]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    return data.name, (np.arange(np.prod(shape)).reshape(shape) / np.prod(shape)).astype(np.float32)


def every_tensor(model):
    """``model`` with every node output a graph output, so onnxruntime returns them all."""
    inferred = onnx.shape_inference.infer_shapes(model)
    extra = [v for v in inferred.graph.value_info if v.name not in {o.name for o in model.graph.output}]
    inferred.graph.output.extend(extra)
    return inferred


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_imports_without_custom_ops_and_plans(name):
    path = LIGHT / f"light_{name}.onnx"
    result = onnx_importer.convert(path)
    assert not result.summary.custom, result.summary.text(name)
    graph = result.load()
    for strategy in partitioner.STRATEGIES:
        assert partition(graph, strategy, time_limit=LIGHT_ILP_BUDGET).groups
    if name not in LIGHT_VALUES:
        return
    model = every_tensor(onnx.load(str(path)))
    data, x = light_input(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip((o.name for o in model.graph.output), session.run(None, {data: x})))
    got = run_reference(graph, {result.renamed.get(data, data): x})
    compared = [t for t in expected if result.renamed.get(t, t) in got]
    assert len(compared) >= len(model.graph.node) - result.summary.folded
    for tensor in compared:
        np.testing.assert_allclose(got[result.renamed.get(tensor, tensor)], expected[tensor], rtol=1e-4, atol=1e-6,
                                   err_msg=tensor)
    output = model.graph.output[0].name
    stored = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    np.testing.assert_allclose(got[result.renamed.get(output, output)], stored, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------- custom ops, dims, errors


def test_unmappable_ops_become_custom_and_the_graph_plans():
    """An axis computed at run time, and MaxPool's Indices output read: custom."""
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"]), helper.make_node("MaxPool", ["p"], ["v", "i"],
                                                                                 kernel_shape=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make(nodes, {"x": (F, [4, 8]), "axis": (I64, []), "p": (F, [1, 2, 4, 4])},
                 {"y": (F, None), "v": (F, None), "i": (I64, None)})
    result = onnx_importer.convert(model)
    assert dict(result.summary.custom) == {"CumSum": 1, "MaxPool": 1}
    assert "computed at run time" in result.summary.reasons["CumSum"]
    assert result.summary.reasons["MaxPool"] == "MaxPool's Indices output is used"
    assert "custom CumSum x1" in result.summary.text("import")
    custom = {o["name"]: o for o in result.graph["ops"] if o["op"] == "custom"}
    assert custom["c"]["attrs"]["kind"] == "CumSum" and custom["c"]["shape"] == [4, 8]
    assert custom["i"]["dtype"] == "int64" and custom["i"]["shape"] == [1, 2, 3, 3]
    plan = partition(result.load(), "ilp")
    assert plan.solver.status == "OPTIMAL"


def test_custom_ops_keep_their_onnx_node_and_compute_the_models_values(tmp_path):
    """Each custom op keeps its ONNX node: the graph file, loaded again, runs it
    through onnx.reference and gives onnxruntime's values, for a node's first
    output and for a single-output node; and the run report says so."""
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"]),
             helper.make_node("MaxPool", ["p"], ["v", "i"], kernel_shape=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make(nodes, {"x": (F, [4, 8]), "axis": (I64, []), "p": (F, [1, 2, 4, 4])},
                 {"y": (F, None), "v": (F, None), "i": (I64, None)})
    feeds = {**feeds_for(model), "axis": np.array(1, np.int64)}
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    source, path = tmp_path / "customs.onnx", tmp_path / "customs.yaml"
    onnx.save(model, source)
    assert cli.main(["import", str(source), "-o", str(path)]) == 0
    graph = partitioner.load_graph(path)
    assert sorted(graph.hooks) == ["c", "v"]  # onnx.reference's MaxPool Indices are wrong: drawn
    got = run_reference(graph, {**feeds, "i": expected[2]})
    for name, want in zip(["y", "v"], expected):
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    report = values_provenance_text(graph, 0)
    assert "2 run through onnx.reference (their ONNX node): c, v" in report, report
    assert "1 without semantics, whose results were drawn at random (i)" in report, report


def test_without_onnx_a_kept_node_is_drawn_and_the_report_says_so(monkeypatch):
    model = make([helper.make_node("CumSum", ["x", "axis"], ["y"])], {"x": (F, [4, 8]), "axis": (I64, [])},
                 {"y": (F, None)})
    graph = onnx_importer.convert(model).graph
    monkeypatch.setattr(onnx_semantics, "available", lambda: False)
    loaded = partitioner.load_graph(graph)
    assert not loaded.hooks
    report = values_provenance_text(loaded, 0)
    assert "1 without semantics" in report and "1 of them keep an ONNX node that runs once onnx is installed" in report


def test_a_corrupt_onnx_node_fails_the_run_in_one_line(tmp_path):
    model = make([helper.make_node("CumSum", ["x", "axis"], ["y"])], {"x": (F, [4, 8]), "axis": (I64, [])},
                 {"y": (F, None)})
    graph = onnx_importer.convert(model).graph
    graph["ops"][0]["attrs"]["onnx"] = "bm90IGEgbW9kZWw="  # base64 of "not a model"
    loaded = partitioner.load_graph(graph)
    with pytest.raises(ValueError, match=r"^op 'y' \(CumSum\): its 'onnx' attribute is no ONNX model") as caught:
        run_reference(loaded)
    assert "\n" not in str(caught.value)


def test_a_random_node_keeps_no_semantics():
    """A random generator's result has no fixed value: a run draws it, never
    onnx.reference's one sample."""
    model = make([helper.make_node("RandomNormalLike", ["x"], ["y"])], {"x": (F, [4, 8])}, {"y": (F, None)})
    graph = onnx_importer.convert(model).graph
    assert [o["attrs"] for o in graph["ops"]] == [{"kind": "RandomNormalLike"}]


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
    model = make(nodes, {"x": (F, ["batch", 8]), "axis": (I64, [])}, {"y": (F, None)}, 20, init)
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
