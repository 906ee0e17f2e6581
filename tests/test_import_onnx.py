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


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1, 1, 1]},
    {"strides": [2, 1, 2], "pads": [1, 0, 2, 0, 1, 1], "dilations": [2, 1, 1], "kernel_shape": [2, 3, 3]},
    {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2, 1]},
    {"auto_pad": "SAME_LOWER", "strides": [3, 1, 1]},
    {"auto_pad": "VALID"},
])
def test_conv3d(attrs):
    rng = np.random.default_rng(4)
    groups = attrs.get("group", 1)
    kernel = attrs.get("kernel_shape", [3, 3, 3])
    init = {"w": rng.standard_normal((6, 4 // groups, *kernel)).astype(np.float32),
            "b": rng.standard_normal(6).astype(np.float32)}
    model = make([helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)], {"x": (F, [2, 4, 7, 9, 8])},
                 {"y": (F, None)}, 17, init)
    result = check(model, atol=1e-4)
    assert ops_of(result).count("conv2d") == 1


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1]},
    {"strides": [2], "pads": [0, 2], "dilations": [2]},
    {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2]},
    {"auto_pad": "SAME_LOWER", "strides": [3]},
    {"auto_pad": "VALID", "dilations": [3], "bias": False},
])
def test_conv1d_is_one_conv2d_over_views_of_height_1(attrs):
    """A rank-3 Conv (``partitioner.importers.conv1d``, shared with the torch importer):
    [N, C, L] and the kernel viewed with a height of 1, a conv2d, and a view back."""
    attrs = dict(attrs)
    bias = attrs.pop("bias", True)
    rng = np.random.default_rng(13)
    groups = attrs.get("group", 1)
    init = {"w": rng.standard_normal((6, 4 // groups, 3)).astype(np.float32)}
    if bias:
        init["b"] = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["y"], **attrs)
    result = check(make([node], {"x": (F, [2, 4, 11])}, {"y": (F, None)}, 17, init), atol=1e-4)
    assert ops_of(result) == ["reshape", "reshape", "conv2d", "reshape"]


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


@pytest.mark.parametrize("pads", [[1, -1, 0, -1, 2, 1], [-1, 0, -2, 0, -1, -1], [0, -3, 0, 0, 2, 0],
                                  [-4, 0, 0, 2, 0, 0]],
                         ids=["crop and pad", "crop only", "an axis cropped away, then padded",
                              "a crop into the other side's padding"])
def test_a_negative_constant_pad_crops(pads):
    """A negative pad crops, as onnxruntime reads it: the node was a custom op whose
    kept onnx.reference semantics failed on it, so --run could not run the graph."""
    node = helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")
    init = {"pads": np.array(pads, np.int64), "v": np.array(7.0, np.float32)}
    result = check(make([node], {"x": (F, [3, 4, 5])}, {"y": (F, None)}, 21, init), rtol=0, atol=0)
    assert set(ops_of(result)) <= {"slice", "pad"}


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
@pytest.mark.parametrize("shape, pads", [([5], [4, 3]), ([3, 4], [2, 0, 1, 3]), ([2, 3, 4], [0, 2, 3, 1, 1, 2]),
                                         ([2, 3], [0, 0, 0, 0])])
def test_reflect_edge_and_wrap_pad_are_slices_and_concats(mode, shape, pads):
    """Bit for bit, as onnxruntime pads (reflect at most size - 1, wrap at most size
    along an axis)."""
    if mode == "reflect":
        pads = [min(p, shape[i % len(shape)] - 1) for i, p in enumerate(pads)]
    elif mode == "wrap":
        pads = [min(p, shape[i % len(shape)]) for i, p in enumerate(pads)]
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)
    model = make([node], {"x": (F, shape)}, {"y": (F, None)}, 19, {"pads": np.array(pads, np.int64)})
    result = check(model, rtol=0, atol=0)
    assert set(ops_of(result)) <= {"slice", "broadcast_to", "concat", "reshape"}


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
    assert ops_of(result) == ["fmod" if fmod else "remainder"]


@pytest.mark.parametrize("elem", [F, F16, TP.DOUBLE])
def test_float_fmod_is_fmod_with_the_dividends_sign_bit_for_bit(elem):
    """Against onnxruntime, signs of zero included: -0.0 and -4.0 fmod 2.0 are -0.0."""
    dtype = NUMPY[elem]
    special = np.array([0.0, -0.0, -4.3, 7.2, 5.0, -4.0, 2.0, -3.4, 0.25, 1e-3, np.inf, -np.inf, np.nan], dtype)
    a, b = (v.ravel() for v in np.meshgrid(special, special))
    model = make([helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)], {"a": (elem, [a.size]), "b": (elem, [a.size])},
                 {"y": (elem, None)}, 13)
    result = check(model, feeds={"a": a, "b": b}, rtol=0, atol=0)
    assert ops_of(result) == ["fmod"]
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})
    got = run_reference(result.load(), {"a": a, "b": b})["y"]
    numbers = ~np.isnan(want)  # a NaN's sign is IEEE's to leave open
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got[numbers]),
                                                                        np.signbit(want[numbers]))


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


def test_an_expand_to_its_own_shape_is_a_view():
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Erf", ["e"], ["y"])]
    result = check(make(nodes, {"x": (F, [2, 3])}, {"y": (F, None)}, 13, {"shape": np.array([1, 3], np.int64)}))
    assert ops_of(result) == ["reshape", "erf"]


# ---------------------------------------------------------------- activations, rounding, and once-custom ops

# Edge values: signed zeros, NaN, infinities, subnormals, ties, exp's overflow, the
# largest float32 magnitudes (inf in float16).
EDGES = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 1e-7, -1e-7, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 20.0, -20.0,
         88.0, -88.0, 89.0, -89.0, 100.0, -100.0, 3.4e38, -3.4e38]


def spread(dtype, count=4000, seed=30, limit=1e3):
    """The edge values, then ``count`` values of every magnitude from 1e-6 to
    ``limit``, both signs."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        edges = np.array(EDGES).astype(dtype)
    magnitudes = np.exp(rng.uniform(np.log(1e-6), np.log(limit), count)) * rng.choice([-1.0, 1.0], count)
    return np.concatenate([edges, magnitudes.astype(dtype)])


def assert_same_values(got, want, ulps=0, atol=0.0):
    """NaN exactly where ``want`` has NaN, its infinities, zeros of its sign where both
    are zero; every other value within ``ulps`` units in the last place of ``want``
    plus ``atol`` (0, 0: bit for bit but for NaN's payload)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    g, w = got[~nan], want[~nan]
    np.testing.assert_array_equal(g[np.isinf(w) | np.isinf(g)], w[np.isinf(w) | np.isinf(g)])
    zeros = (g == 0) & (w == 0)
    np.testing.assert_array_equal(np.signbit(g[zeros]), np.signbit(w[zeros]))
    finite = np.isfinite(w)
    w = w[finite]
    ulp = np.abs(w - np.nextafter(w, np.zeros_like(w))).astype(np.float64)  # toward 0: finite at the largest
    error = np.abs(g[finite].astype(np.float64) - w.astype(np.float64))
    bad = error > ulps * ulp + atol
    assert not bad.any(), [(float(a), float(b)) for a, b in zip(g[finite][bad][:8], w[bad][:8])]


def run_ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def unary(op_type, elem, n, opset, out=None, **attrs):
    return make([helper.make_node(op_type, ["x"], ["y"], **attrs)], {"x": (elem, [n])}, {"y": (out or elem, None)},
                opset)


def imported(model, feeds):
    """``model`` imported with no custom op, and its outputs by run_reference."""
    result = onnx_importer.convert(model)
    assert not result.summary.custom, result.summary.text("import")
    return result, run_reference(result.load(), feeds)


EPS = np.finfo(np.float32).eps
# op, opset, attrs, ulps and atol against onnxruntime's float32 kernel. Elu, Selu and
# Celu compute exp(x) - 1 as the specification writes it (and onnxruntime computes
# it): near 0 that difference cancels, and an exp an ulp apart leaves up to an ulp
# of 1 (times alpha, gamma). Mish's subnormal results (x < -87) are onnxruntime's
# flushed to 0. Softsign divides, where onnxruntime multiplies by a reciprocal
# estimate (1.0000001 at 3.4e38, where x / (1 + |x|) is 1).
ACTIVATIONS = [
    ("Elu", 6, {}, 4, 2 * EPS), ("Elu", 6, {"alpha": 0.3}, 4, EPS),
    ("Selu", 6, {}, 4, 4 * EPS), ("Selu", 6, {"alpha": 2.0, "gamma": 3.0}, 4, 12 * EPS),
    ("Celu", 12, {}, 4, 2 * EPS), ("Celu", 12, {"alpha": 2.0}, 4, 4 * EPS),
    ("Softplus", 1, {}, 6, 0.0), ("Softsign", 1, {}, 4, 0.0), ("Mish", 18, {}, 8, np.finfo(np.float32).tiny),
    ("HardSigmoid", 6, {}, 0, 0.0), ("HardSigmoid", 6, {"alpha": 0.3, "beta": 0.6}, 0, 0.0),
    ("HardSwish", 14, {}, 0, 0.0),
    ("ThresholdedRelu", 10, {}, 0, 0.0), ("ThresholdedRelu", 10, {"alpha": -0.5}, 0, 0.0),
    ("Shrink", 9, {}, 0, 0.0), ("Shrink", 9, {"lambd": 1.5, "bias": 0.25}, 0, 0.0),
    ("LeakyRelu", 16, {}, 0, 0.0), ("LeakyRelu", 16, {"alpha": -2.0}, 0, 0.0),
]


@pytest.mark.parametrize("op_type, opset, attrs, ulps, atol", ACTIVATIONS,
                         ids=[f"{c[0]}-{c[2]}" for c in ACTIVATIONS])
@pytest.mark.parametrize("elem", [F, F16])
def test_activations_against_onnxruntime_at_edge_values(op_type, opset, attrs, ulps, atol, elem):
    """Float32 against onnxruntime's kernel; float16 computed in float32 and rounded
    once, so against onnxruntime's float32 result rounded to float16 (its own float16
    kernels, where it has them, round Mish's steps in half precision: 17 ulps off)."""
    dtype = NUMPY[elem]
    x = spread(dtype)
    _, got = imported(unary(op_type, elem, x.size, opset, **attrs), {"x": x})
    (want,) = run_ort(unary(op_type, F, x.size, opset, **attrs), {"x": x.astype(np.float32)})
    if elem == F16:
        ulps, atol = ulps + 1, atol * 2**13  # float16's ulp of 1 is 2^13 float32 ones
    assert_same_values(got["y"], want.astype(dtype), ulps, atol)


@pytest.mark.parametrize("x_shape, slope, opset", [
    ([2, 3, 4, 5], np.array([-0.5, 0.25, 2.0], np.float32).reshape(3, 1, 1), 16),
    ([2, 3, 4, 5], np.array([-0.25], np.float32), 16),
    ([2, 3, 4, 5], np.linspace(-1, 1, 5).astype(np.float32), 9),
    ([2, 3, 4], np.array([-0.5, 0.25, 2.0], np.float32), 6),  # before opset 7: per channel
    ([2, 4, 3], np.array([-3, 2, 0], np.int32), 16),
    ([6], np.array([-3], np.int64), 16),
])
def test_prelu_slope_broadcasts_to_x(x_shape, slope, opset):
    """``slope * x`` where x < 0, else x: zeros keep their sign whatever the slope's
    (onnx.reference's ``where(x > 0, ...)`` gives -0 * -0.5 = +0). Unidirectional
    broadcasting from opset 7; before it a slope of C values is per channel, as
    PyTorch exported PReLU(C), which onnx.reference runs (onnxruntime cannot)."""
    elem = {np.float32: F, np.int32: TP.INT32, np.int64: I64}[slope.dtype.type]
    rng = np.random.default_rng(31)
    x = rng.standard_normal(x_shape) * 4
    x = x.astype(slope.dtype)
    if elem == F:
        x.flat[:4] = [0.0, -0.0, np.nan, -np.inf]
    model = make([helper.make_node("PRelu", ["x", "slope"], ["y"])], {"x": (elem, x_shape)}, {"y": (elem, None)},
                 opset, {"slope": slope})
    _, got = imported(model, {"x": x})
    want = (onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0] if opset < 7 else
            run_ort(model, {"x": x})[0])
    if opset < 7:  # onnx.reference's where(x > 0, ...): -0 for a +0 times a negative slope
        zeros = x == 0
        want[zeros] = x[zeros]
    assert_same_values(got["y"], want)


def all_values(dtype):
    """Every float16, or the edge values, spread values and random bit patterns."""
    if dtype == np.float16:
        return np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    bits = {np.float32: np.uint32, np.float64: np.uint64}[dtype]
    random = np.random.default_rng(32).integers(0, np.iinfo(bits).max, 20000, dtype=bits, endpoint=True).view(dtype)
    ties = (np.arange(-4000, 4000) / 4).astype(dtype)  # halves, quarters: Round's ties
    with np.errstate(over="ignore"):
        large = np.array([2**23 - 0.5, -(2**23 - 0.5), 2**23 + 1, 2**52 + 0.5, 2**53, -(2**52 + 0.5)]).astype(dtype)
    return np.concatenate([spread(dtype, limit=1e8), random, ties, large])


@pytest.mark.parametrize("op_type, opset, attrs", [
    ("Floor", 13, {}), ("Ceil", 13, {}), ("Round", 11, {}), ("Sign", 13, {}), ("IsNaN", 20, {}), ("IsInf", 20, {}),
    ("IsInf", 20, {"detect_negative": 0}), ("IsInf", 20, {"detect_positive": 0}),
    ("IsInf", 20, {"detect_negative": 0, "detect_positive": 0}),
])
@pytest.mark.parametrize("elem", [F, F16, TP.DOUBLE])
def test_rounding_and_classification_bit_for_bit(op_type, opset, attrs, elem):
    """Floor and Ceil from ``trunc``, Round half to even (``trunc``, its fraction and
    parity), Sign, IsNaN, IsInf: every bit as onnxruntime gives it, signed zeros
    included (Round(-0.5) is -0, Floor(-0.0) is -0), over every float16 and over
    ties, large magnitudes and random bit patterns of float32 and float64.
    onnxruntime's float16 Sign gives 0 for NaN, its float32 kernel (and the
    specification, NumPy's sign) NaN: float16 is compared with the latter."""
    dtype = NUMPY[elem]
    x = all_values(dtype)
    out = B if op_type in ("IsNaN", "IsInf") else elem
    _, got = imported(unary(op_type, elem, x.size, opset, out, **attrs), {"x": x})
    if op_type == "Sign" and elem == F16:
        (want,) = run_ort(unary(op_type, F, x.size, opset), {"x": x.astype(np.float32)})
        want = want.astype(np.float16)
    else:
        (want,) = run_ort(unary(op_type, elem, x.size, opset, out, **attrs), {"x": x})
    if out == B:
        np.testing.assert_array_equal(got["y"], want)
    else:
        assert_same_values(got["y"], want)


@pytest.mark.parametrize("elem", [TP.INT8, TP.INT32, I64, TP.UINT8])
def test_integer_sign(elem):
    dtype = {TP.UINT8: np.uint8}.get(elem) or NUMPY[elem]
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -5, -1, 0, 1, 7, info.max], dtype=np.int64).clip(info.min, info.max)
    x = x.astype(dtype)
    _, got = imported(unary("Sign", elem, x.size, 13), {"x": x})
    np.testing.assert_array_equal(got["y"], run_ort(unary("Sign", elem, x.size, 13), {"x": x})[0])


def test_where_onnxruntime_departs_from_the_specification_the_import_follows_it():
    """float64 Shrink (onnxruntime rounds its result to float32: -2.1e78 becomes
    -inf), float64 Mish (onnxruntime's is float32-accurate and 0 below -50) and
    Swish beyond |x| of 4 (onnxruntime's sigmoid loses its relative precision there:
    1e-3 at -10, 4x at -20) are the specification's formulas, as onnx.reference
    computes them, to its ulps."""
    x = spread(np.float64, limit=1e80)
    for op_type, opset, attrs, ulps in [("Shrink", 9, {"lambd": 1.5, "bias": 0.25}, 0), ("Mish", 18, {}, 8),
                                        ("Swish", 24, {"alpha": 0.7}, 8)]:
        model = unary(op_type, TP.DOUBLE, x.size, opset, **attrs)
        _, got = imported(model, {"x": x})
        with np.errstate(all="ignore"):
            want = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})[0]
        assert_same_values(got["y"], want, ulps, np.finfo(np.float64).tiny * 2**20)
    x = spread(np.float32)
    model = unary("Swish", F, x.size, 24, alpha=0.7)
    _, got = imported(model, {"x": x})
    small = np.abs(x) <= 4
    (ort_swish,) = run_ort(model, {"x": x})
    assert_same_values(got["y"][small], ort_swish[small], 16)
    with np.errstate(all="ignore"):
        scaled = (np.float32(0.7) * x).astype(np.float64)  # rounded to float32, as both compute it
        exact = (x.astype(np.float64) / (1 + np.exp(-scaled))).astype(np.float32)
    assert_same_values(got["y"], exact, 4, np.finfo(np.float32).tiny * 16)  # sigmoid's underflow below -125


SHAPED = [  # op, inputs (elem, shape), the run-time operand's value, the stated output shape, opset
    ("Expand", [(F, [1, 3, 1]), (I64, [4])], np.array([3, 3, 1, 3]), [3, 3, 3, 3], 13),
    ("Expand", [(F, [1, 3, 1]), (I64, [2])], np.array([3, 1]), [1, 3, 1], 13),
    ("Unsqueeze", [(F, [3, 4]), (I64, [2])], np.array([0, -1]), [1, 3, 4, 1], 13),
    ("Squeeze", [(F, [1, 3, 1, 4]), (I64, [1])], np.array([2]), [1, 3, 4], 13),
    ("Tile", [(F, [2, 3]), (I64, [2])], np.array([3, 2]), [6, 6], 13),
    ("ConstantOfShape", [(I64, [2])], np.array([3, 5]), [3, 5], 13),
]


@pytest.mark.parametrize("op_type, inputs, value, shape, opset", SHAPED, ids=[c[0] for c in SHAPED])
def test_a_shape_operand_computed_at_run_time_takes_the_stated_result_shape(op_type, inputs, value, shape, opset):
    """The model states the result's shape (ONNX's backend data and exporters do),
    which fixes the result as it fixes Reshape's: X broadcast, viewed or tiled to it."""
    names = ["x", "s"][-len(inputs):] if len(inputs) == 1 else ["x", "s"]
    model = make([helper.make_node(op_type, names, ["y"])], dict(zip(names, inputs)),
                 {"y": (F, shape)}, opset)
    feeds = {n: (value if n == "s" else np.random.default_rng(33).standard_normal(t[1]).astype(np.float32))
             for n, t in zip(names, inputs)}
    result = check(model, feeds, rtol=0, atol=0)
    assert op_type != "Tile" or "broadcast_to" in ops_of(result)


def test_split_sizes_computed_at_run_time_are_the_outputs_stated_sizes():
    model = make([helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=1)],
                 {"x": (F, [2, 7]), "sizes": (I64, [3])}, {"a": (F, [2, 1]), "b": (F, [2, 4]), "c": (F, [2, 2])}, 13)
    feeds = {"x": np.arange(14, dtype=np.float32).reshape(2, 7), "sizes": np.array([1, 4, 2])}
    assert ops_of(check(model, feeds, rtol=0, atol=0)) == ["slice"] * 3


@pytest.mark.parametrize("bounds", ["both", "min", "max", "static min", "static min only", "none"])
@pytest.mark.parametrize("elem", [F, F16, TP.INT32])
def test_clip_bounds_computed_at_run_time_or_absent(bounds, elem):
    """``maximum`` by the lower bound, then ``minimum`` by the upper: min > max gives
    max; NaN stays NaN. An absent bound of a float is its dtype's largest finite
    magnitude, as the specification and onnxruntime have it: ±inf become ±max."""
    dtype = NUMPY[elem]
    x = np.arange(-6, 6).astype(dtype)
    if elem != TP.INT32:
        x[:4] = [np.nan, -np.inf, -0.0, np.inf]
    inputs, init = {"x": (elem, [12])}, {}
    names = {"both": ["x", "lo", "hi"], "min": ["x", "lo"], "max": ["x", "", "hi"], "static min": ["x", "lo", "hi"],
             "static min only": ["x", "lo"], "none": ["x"]}[bounds]
    if bounds.startswith("static"):
        init["lo"] = np.array(-2, dtype)
    inputs.update({n: (elem, []) for n in names[1:] if n and n not in init})
    model = make([helper.make_node("Clip", names, ["y"])], inputs, {"y": (elem, None)}, 13, init)
    for lo, hi in [(-2, 3), (4, 1)]:
        feeds = {"x": x, **{k: np.array(v, dtype) for k, v in (("lo", lo), ("hi", hi)) if k in inputs}}
        result, got = imported(model, feeds)
        assert_same_values(got["y"], run_ort(model, feeds)[0])
    assert ("clamp" in ops_of(result)) == (bounds in ("static min only", "none"))  # bounds all known


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
@pytest.mark.parametrize("elem", [F, I64, B])
def test_trilu_with_a_known_diagonal(upper, k, elem):
    """X where column - row >= k (upper) or <= k (lower), from two ``arange``s: the
    mask is elementwise, no constant."""
    dtype = NUMPY[elem]
    x = np.random.default_rng(34).standard_normal((2, 4, 5)) * 3
    x = (x > 0) if elem == B else x.astype(dtype)
    if elem == F:
        x[0, 0, :3] = [np.nan, -0.0, np.inf]
    init = {} if k is None else {"k": np.array(k, np.int64)}
    node = helper.make_node("Trilu", ["x"] + ([] if k is None else ["k"]), ["y"], upper=upper)
    model = make([node], {"x": (elem, [2, 4, 5])}, {"y": (elem, None)}, 14, init)
    result, got = imported(model, {"x": x})
    assert_same_values(got["y"], run_ort(model, {"x": x})[0]) if elem == F else \
        np.testing.assert_array_equal(got["y"], run_ort(model, {"x": x})[0])
    assert "arange" in ops_of(result) and not [i for i in result.graph["inputs"] if i["name"] != "x"]


@pytest.mark.parametrize("axis, shape, index_shape", [(0, [4, 3], [2, 3]), (1, [3, 5], [3, 4]),
                                                      (-1, [2, 3, 4], [2, 2, 6]), (1, [2, 3, 4], [1, 5, 2])])
@pytest.mark.parametrize("index_elem", [I64, TP.INT32])
def test_gather_elements_is_one_gather_at_a_linear_index(axis, shape, index_shape, index_elem):
    rng = np.random.default_rng(35)
    size = shape[axis]
    x = rng.standard_normal(shape).astype(np.float32)
    indices = rng.integers(-size, size, index_shape).astype(NUMPY[index_elem])
    model = make([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
                 {"x": (F, shape), "i": (index_elem, index_shape)}, {"y": (F, None)}, 13)
    result = check(model, {"x": x, "i": indices}, rtol=0, atol=0)
    assert ops_of(result).count("gather") == 1
    indices.flat[0] = size  # out of range: the run fails, as onnxruntime's does
    with pytest.raises(ValueError, match="gather index out of range"):
        run_reference(result.load(), {"x": x, "i": indices})


@pytest.mark.parametrize("op_type, mode, shape, opset", [("DepthToSpace", "DCR", [2, 8, 3, 2], 13),
                                                         ("DepthToSpace", "CRD", [1, 12, 2, 3], 13),
                                                         ("SpaceToDepth", None, [2, 3, 4, 6], 13)])
def test_depth_to_space_and_back_are_views_and_a_transpose(op_type, mode, shape, opset):
    attrs = {"blocksize": 2, **({"mode": mode} if mode else {})}
    model = make([helper.make_node(op_type, ["x"], ["y"], **attrs)], {"x": (F, shape)}, {"y": (F, None)}, opset)
    result = check(model, rtol=0, atol=0)
    assert ops_of(result) == ["reshape", "transpose", "reshape"]


@pytest.mark.parametrize("k, dtype", [(0, None), (1, TP.INT32), (-2, F)])
def test_eye_like(k, dtype):
    attrs = {"k": k, **({"dtype": dtype} if dtype else {})}
    model = make([helper.make_node("EyeLike", ["x"], ["y"], **attrs)], {"x": (I64, [4, 6])},
                 {"y": (dtype or I64, None)}, 9)
    check(model, rtol=0, atol=0)


@pytest.mark.parametrize("op_type", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum"])
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("elem, keepdims", [(F, 1), (F, 0), (F16, 1), (TP.INT32, 0)])
def test_norm_reductions(op_type, opset, elem, keepdims):
    """A ``reduce_sum`` between elementwise ops; float16 is computed in float32 and
    rounded once (onnxruntime runs these on float32 and integers: float16 is
    compared with its float32 result, rounded)."""
    if elem == TP.INT32 and op_type in ("ReduceL2", "ReduceLogSum"):
        pytest.skip("integer L2 and LogSum are custom")
    axes = [0, -1]
    node = (helper.make_node(op_type, ["x", "axes"], ["y"], keepdims=keepdims) if opset >= 18 else
            helper.make_node(op_type, ["x"], ["y"], keepdims=keepdims, axes=axes))
    init = {"axes": np.array(axes, np.int64)} if opset >= 18 else {}
    model = make([node], {"x": (elem, [3, 4, 5])}, {"y": (elem, None)}, opset, init)
    feeds = feeds_for(model, positive=op_type == "ReduceLogSum")
    if elem != F16:
        check(model, feeds, rtol=1e-6, atol=0)
        return
    _, got = imported(model, feeds)
    model32 = make([node], {"x": (F, [3, 4, 5])}, {"y": (F, None)}, opset, init)
    (want,) = run_ort(model32, {"x": feeds["x"].astype(np.float32)})
    assert_same_values(got["y"], want.astype(np.float16), 1)


def test_xor_and_swish():
    nodes = [helper.make_node("Xor", ["a", "b"], ["x"]), helper.make_node("Swish", ["f"], ["s"])]
    model = make(nodes, {"a": (B, [3, 4]), "b": (B, [4]), "f": (F, [3, 4])}, {"x": (B, None), "s": (F, None)}, 24)
    assert ops_of(check(model)) == ["ne", "sigmoid", "mul"]


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


def test_inception_v2_is_proven_optimal_with_default_options():
    """Issue 10's case: ONNX Inception-v2 (1,181 ops) ended FEASIBLE with a 14.1% gap,
    its enumeration stopped by the default budget at 378,014 candidates. Its 69 batch
    norms' ``rsqrt(var + eps)`` are input prologues (``cost.input_prologues``) that
    each norm's group takes in: 68,262 candidates, proven, at 131.905 modelled us
    (the old plan: 131.916 us, so the true gap was 0.008%). About 40 CPU s."""
    graph = onnx_importer.convert(LIGHT / "light_inception_v2.onnx").load()
    plan = partition(graph, "ilp")
    assert plan.solver.status == "OPTIMAL" and plan.solver.gap == 0
    assert plan.solver.details["candidates"] == 68_262
    assert plan.cost.modeled_time_us == pytest.approx(131.905228, abs=1e-5)


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
    # a trailing '/' names a directory: the file without it was written before
    assert cli.main(["import", str(path), "-o", f"{tmp_path}/other.yaml/", "--dim", "batch=4"]) == 2
    assert "ends in '/': it names a directory" in capsys.readouterr().err and not (tmp_path / "other.yaml").exists()


@pytest.mark.parametrize("args, message", [
    (["missing.onnx"], "missing.onnx: no such file"),
    (["{model}"], "bind it with --dim batch=VALUE"),
    (["{model}", "--dim", "batch"], "--dim takes NAME=VALUE"),
    (["{model}", "--dim", "batch=2.5"], "--dim batch=2.5: an ONNX dimension takes an integer from 0 to 2^40"),
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


def test_nodes_out_of_topological_order_are_sorted_as_onnxruntime_runs_them():
    nodes = [helper.make_node("Relu", ["t"], ["Y"]), helper.make_node("Add", ["u", "X"], ["t"]),
             helper.make_node("Exp", ["X"], ["u"])]
    result = check(make(nodes, {"X": (F, [3, 4])}, {"Y": (F, None)}))
    assert [o["op"] for o in result.graph["ops"]] == ["exp", "add", "relu"]


@pytest.mark.parametrize("nodes, message", [
    ([helper.make_node("Relu", ["t"], ["Y"], name="r"), helper.make_node("Exp", ["Y"], ["t"], name="e")],
     "node 'r' (Relu) reads tensor 't', which is computed on a cycle of nodes"),
    ([helper.make_node("Relu", ["Y"], ["Y"], name="self")],
     "node 'self' (Relu) reads tensor 'Y', which is computed on a cycle of nodes"),
    ([helper.make_node("Add", ["X", "nowhere"], ["Y"], name="a")],
     "node 'a' (Add) reads tensor 'nowhere', which no node produces and which is no graph input or initializer"),
])
def test_a_cycle_or_a_missing_producer_is_one_line_naming_node_and_tensor(tmp_path, capsys, nodes, message):
    path = tmp_path / "bad.onnx"
    graph = helper.make_graph(nodes, "bad", [value("X", F, [2])], [value("Y", F, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert cli.main(["import", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: {message}" in err, err
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.parametrize("shape, axis", [((0, 2), 0), ((3, 0), 1)])
def test_an_empty_initializer_imports_and_round_trips_through_the_written_file(tmp_path, capsys, shape, axis):
    model = make([helper.make_node("Concat", ["X", "E"], ["Y"], axis=axis)], {"X": (F, [3, 2])},
                 {"Y": (F, None)}, initializers={"E": np.zeros(shape, np.float32)})
    check(model)
    path, out = tmp_path / "concat.onnx", tmp_path / "concat.yaml"
    onnx.save(model, path)
    assert cli.main(["import", str(path), "-o", str(out)]) == 0
    assert f"{{name: E, shape: {list(shape)}, dtype: float32, value: []}}" in out.read_text()
    graph = partitioner.load_graph(out)
    assert graph.values["E"].shape == shape
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(run_reference(graph, {"X": x})["Y"], x)
    capsys.readouterr()
    assert cli.main([str(out), "--run"]) == 0


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


# ---------------------------------------------------------------- ai.onnx.ml: linear models, preprocessing, ZipMap


def ml_node(op_type, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, domain="ai.onnx.ml", **attrs)


def ml_make(nodes, inputs, outputs):
    """``make`` at opset 17 with the ai.onnx.ml domain (version 1) imported too."""
    model = make(nodes, inputs, outputs)
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    return model


def ml_feeds(shape, elem=F, seed=20):
    """Inputs of magnitude about 2, so that the scores give several classes."""
    data = np.random.default_rng(seed).standard_normal(shape) * 2
    return {"x": (np.round(data) if elem in (I64, TP.INT32) else data).astype(NUMPY[elem])}


def classifier(post_transform, labels, classes=3, features=4, elem=F, rows=8, seed=21, coefficients=None):
    rng = np.random.default_rng(seed)
    coefficients = rng.standard_normal(classes * features) if coefficients is None else coefficients
    node = ml_node("LinearClassifier", ["x"], ["label", "scores"], classlabels_ints=labels,
                   coefficients=[float(c) for c in coefficients],
                   intercepts=rng.standard_normal(classes).tolist(), post_transform=post_transform)
    return ml_make([node], {"x": (elem, [rows, features])}, {"label": (I64, None), "scores": (F, None)})


def ml_reasons(model):
    return onnx_importer.convert(model).summary.reasons


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("labels", [[0, 1, 2], [3, -7, 9]])
def test_linear_classifier(post_transform, labels):
    """Labels ``classlabels_ints[argmax]`` of the raw scores: the argmax itself for
    labels 0, 1, 2, else a gather from the labels."""
    model = classifier(post_transform, labels)
    feeds = ml_feeds([8, 4])
    result = check(model, feeds)
    label = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert len(set(label.tolist())) == 3  # every class occurs: the argmax is tested
    assert ("gather" in ops_of(result)) == (labels != [0, 1, 2])
    assert not result.summary.notes


def test_linear_classifier_labels_from_the_raw_scores():
    """Scores 20 and 25 both have the LOGISTIC probability 1.0 in float32: the label
    is 25's class, as onnxruntime gives it (onnx.reference's argmax of the
    probabilities picks the first)."""
    node = ml_node("LinearClassifier", ["x"], ["label", "scores"], classlabels_ints=[0, 1], coefficients=[20.0, 25.0],
                   intercepts=[0.0, 0.0], post_transform="LOGISTIC")
    model = ml_make([node], {"x": (F, [1, 1])}, {"label": (I64, None), "scores": (F, None)})
    feeds = {"x": np.ones((1, 1), np.float32)}
    got = run_reference(check(model, feeds).load(), feeds)
    assert got["label"].tolist() == [1] != onnx.reference.ReferenceEvaluator(model).run(None, feeds)[0].tolist()


@pytest.mark.parametrize("elem", [TP.DOUBLE, I64, TP.INT32])
def test_linear_classifier_casts_its_input_to_float(elem):
    """onnxruntime computes in float32 whatever the input: the scores are float."""
    result = check(classifier("LOGISTIC", [0, 1, 2], elem=elem), ml_feeds([8, 4], elem))
    assert ops_of(result)[0] == "cast"


def test_binary_linear_classifier_is_the_pair_of_minus_and_plus_the_score():
    """One class score, two labels: probabilities [sigmoid(-s), sigmoid(s)] (as
    onnx.reference; onnxruntime's [1 - p, p] agree) and the label of s > 0: a score
    of exactly 0 (the zero row) is the first label, in both runtimes."""
    node = ml_node("LinearClassifier", ["x"], ["label", "scores"], classlabels_ints=[4, 2],
                   coefficients=[0.5, -1.0, 2.0], intercepts=[0.0], post_transform="LOGISTIC")
    model = ml_make([node], {"x": (F, [6, 3])}, {"label": (I64, None), "scores": (F, None)})
    feeds = ml_feeds([6, 3])
    feeds["x"][0] = 0
    check(model, feeds)
    got = run_reference(onnx_importer.convert(model).load(), feeds)
    label, scores = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got["label"], label)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-6, atol=1e-7)
    assert got["label"][0] == 4 and set(got["label"].tolist()) == {2, 4}


@pytest.mark.parametrize("post_transform, labels, classes, reason", [
    ("SOFTMAX_ZERO", [0, 1, 2], 3, "onnxruntime and onnx.reference disagree on SOFTMAX_ZERO"),
    ("PROBIT", [0, 1, 2], 3, "onnxruntime and onnx.reference disagree on PROBIT"),
    ("NONE", [0, 1], 1, "binary scores with post_transform NONE: onnxruntime gives [1 - s, s]"),
    ("SOFTMAX", [0, 1], 1, "binary scores with post_transform SOFTMAX: onnxruntime gives [1 - s, s]"),
    ("LOGISTIC", [5], 1, "one class score without two labels"),
])
def test_linear_classifiers_the_runtimes_disagree_on_are_custom(post_transform, labels, classes, reason):
    reasons = ml_reasons(classifier(post_transform, labels, classes))
    assert list(reasons) == ["ai.onnx.ml.LinearClassifier"] and reason in reasons["ai.onnx.ml.LinearClassifier"]


def test_a_custom_linear_classifier_runs_through_onnx_reference():
    """SOFTMAX_ZERO's scores [0, -1, -2]: onnxruntime labels class 0, onnx.reference
    class 1 (whose probability is the largest); the custom op computes the latter."""
    node = ml_node("LinearClassifier", ["x"], ["label", "scores"], classlabels_ints=[0, 1, 2],
                   coefficients=[1.0, 0.0, 0.0], intercepts=[0.0, -1.0, -2.0], post_transform="SOFTMAX_ZERO")
    model = ml_make([node], {"x": (F, [1, 1])}, {"label": (I64, None), "scores": (F, None)})
    feeds = {"x": np.zeros((1, 1), np.float32)}
    got = run_reference(onnx_importer.convert(model).load(), feeds)
    label, scores = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got["label"], label)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-6)
    assert ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0].tolist() == [0] != label.tolist()


def test_a_linear_classifier_with_string_labels_is_a_one_line_error():
    node = ml_node("LinearClassifier", ["x"], ["label", "scores"], classlabels_strings=["a", "b"],
                   coefficients=[1.0, 2.0, 3.0, 4.0], intercepts=[0.0, 1.0])
    model = ml_make([node], {"x": (F, [3, 2])}, {"label": (TP.STRING, None), "scores": (F, None)})
    with pytest.raises(GraphError, match=r"tensor 'label' is STRING, which format v1 has no dtype for$"):
        onnx_importer.convert(model)


@pytest.mark.parametrize("coefficients, labels, message", [
    (5, [0, 1, 2], "5 coefficients for 3 classes x 2 features"),
    (6, [0, 1], "2 class labels for 3 intercepts"),
])
def test_an_inconsistent_linear_classifier_is_a_one_line_error(coefficients, labels, message):
    model = classifier("NONE", labels, 3, features=2, coefficients=np.ones(coefficients))
    with pytest.raises(GraphError, match=re.escape(f"op 'label' (ai.onnx.ml.LinearClassifier): {message}")) as caught:
        onnx_importer.convert(model)
    assert "\n" not in str(caught.value)


def test_more_coefficients_than_classes_x_features_use_the_first_as_onnxruntime():
    """logreg_iris's case: 12 coefficients for 3 classes of 2 features. onnxruntime's
    GEMM reads the first 6, row-major (not the first 2 columns of [3, 4]); the
    summary says so."""
    coefficients = np.random.default_rng(22).standard_normal(12)
    result = check(classifier("SOFTMAX", [0, 1, 2], 3, features=2, coefficients=coefficients), ml_feeds([8, 2]))
    weights = next(i for i in result.graph["inputs"] if i["name"] == "label_coefficients")
    np.testing.assert_allclose(np.array(weights["value"]).T, coefficients[:6].reshape(3, 2), rtol=1e-7)
    assert result.summary.notes == ["op 'label' (ai.onnx.ml.LinearClassifier): 12 coefficients for 3 classes x 2 "
                                    "features: the first 6 are used, row-major, as onnxruntime does (onnx.reference "
                                    "rejects the model)"]


@pytest.mark.parametrize("targets, intercepts", [(1, True), (3, True), (3, False)])
def test_linear_regressor(targets, intercepts):
    rng = np.random.default_rng(23)
    attrs = {"targets": targets, "coefficients": rng.standard_normal(targets * 4).tolist()}
    if intercepts:
        attrs["intercepts"] = rng.standard_normal(targets).tolist()
    model = ml_make([ml_node("LinearRegressor", ["x"], ["y"], **attrs)], {"x": (F, [5, 4])}, {"y": (F, None)})
    result = check(model, ml_feeds([5, 4]))
    assert ops_of(result) == (["matmul", "add"] if intercepts else ["matmul"])


@pytest.mark.parametrize("attrs, elem, reason", [
    ({"post_transform": "LOGISTIC"}, F, "post_transform LOGISTIC: onnx.reference computes only NONE"),
    ({"targets": 2, "intercepts": [1.0]}, F,
     "1 intercepts for 2 targets: onnxruntime ignores them, onnx.reference broadcasts them"),
    ({}, TP.DOUBLE, "float64 input: onnxruntime runs LinearRegressor on float only"),
])
def test_linear_regressors_the_runtimes_disagree_on_are_custom(attrs, elem, reason):
    """Custom where the model states the output's shape (ONNX infers none)."""
    targets = attrs.get("targets", 1)
    node = ml_node("LinearRegressor", ["x"], ["y"], coefficients=[1.0] * (2 * targets), **attrs)
    model = ml_make([node], {"x": (elem, [3, 2])}, {"y": (F, [3, targets])})
    assert ml_reasons(model) == {"ai.onnx.ml.LinearRegressor": reason}


# rows: positive, one whose largest magnitude is negative (MAX: onnxruntime divides by
# the largest value, 1.0; onnx.reference by the magnitude, 4), all negative, all zero
NORMALIZER_ROWS = np.array([[0.5, 2.0, 1.5], [-4.0, 1.0, 0.5], [-1.0, -3.0, -0.5], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("shape", [[4, 3], [3]])
def test_normalizer(norm, shape):
    model = ml_make([ml_node("Normalizer", ["x"], ["y"], norm=norm)], {"x": (F, shape)}, {"y": (F, None)})
    x = NORMALIZER_ROWS.astype(np.float32)
    check(model, {"x": x if len(shape) == 2 else x[1]})


@pytest.mark.parametrize("norm, elem", [("MAX", I64), ("L1", TP.INT32), ("L2", TP.DOUBLE)])
def test_normalizer_casts_its_input_to_float(norm, elem):
    model = ml_make([ml_node("Normalizer", ["x"], ["y"], norm=norm)], {"x": (elem, [4, 3])}, {"y": (F, None)})
    check(model, {"x": (NORMALIZER_ROWS * 2).astype(NUMPY[elem])})


def test_integer_l2_normalizer_is_custom():
    model = ml_make([ml_node("Normalizer", ["x"], ["y"], norm="L2")], {"x": (I64, [4, 3])}, {"y": (F, [4, 3])})
    assert ml_reasons(model) == {"ai.onnx.ml.Normalizer": "L2 of int64 input: onnxruntime squares it in int64"}


@pytest.mark.parametrize("scale, offset, elem", [
    ([2.0, -0.5, 0.25], [1.0, 0.0, -3.0], F),
    ([1.5], [-0.5], F),
    ([2.0, -0.5, 0.25], [1.0, 0.0, -3.0], TP.DOUBLE),
    ([0.5], [2.0], I64),
])
def test_scaler(scale, offset, elem):
    model = ml_make([ml_node("Scaler", ["x"], ["y"], scale=scale, offset=offset)], {"x": (elem, [4, 3])},
                    {"y": (F, None)})
    check(model, ml_feeds([4, 3], elem))


def test_a_scaler_of_mismatched_lengths_is_a_one_line_error():
    model = ml_make([ml_node("Scaler", ["x"], ["y"], scale=[1.0, 2.0], offset=[0.0, 1.0])], {"x": (F, [4, 3])},
                    {"y": (F, None)})
    with pytest.raises(GraphError, match=re.escape("(ai.onnx.ml.Scaler): 2 scales and 2 offsets for 3 features")):
        onnx_importer.convert(model)


@pytest.mark.parametrize("attrs", [{}, {"threshold": 0.3}, {"threshold": -1.25}])
def test_binarizer(attrs):
    model = ml_make([ml_node("Binarizer", ["x"], ["y"], **attrs)], {"x": (F, [4, 5])}, {"y": (F, None)})
    feeds = ml_feeds([4, 5])
    feeds["x"][0, :3] = [0.0, 0.3, -1.25]  # at each threshold: not above it
    check(model, feeds, rtol=0, atol=0)


def test_double_binarizer_is_custom():
    model = ml_make([ml_node("Binarizer", ["x"], ["y"])], {"x": (TP.DOUBLE, [4, 5])}, {"y": (TP.DOUBLE, None)})
    assert ml_reasons(model) == {"ai.onnx.ml.Binarizer": "float64 input: onnxruntime binarizes float only"}


def zip_map_model(key, labels):
    """LinearClassifier -> Normalizer -> ZipMap, as sklearn-onnx writes a classifier."""
    rng = np.random.default_rng(24)
    nodes = [ml_node("LinearClassifier", ["x"], ["label", "p"], classlabels_ints=[0, 1, 2],
                     coefficients=rng.standard_normal(12).tolist(), intercepts=rng.standard_normal(3).tolist(),
                     post_transform="LOGISTIC"),
             ml_node("Normalizer", ["p"], ["pn"], norm="L1"),
             ml_node("ZipMap", ["pn"], ["probabilities"], **{key: labels})]
    maps = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TP.INT64 if key == "classlabels_int64s" else TP.STRING, helper.make_tensor_type_proto(F, [])))
    model = ml_make(nodes, {"x": (F, [6, 4])}, {"label": (I64, None)})
    model.graph.output.append(helper.make_value_info("probabilities", maps))
    return model


def as_table(maps, labels):
    """onnxruntime's sequence of maps as the [N, C] tensor, columns in ``labels`` order."""
    return np.array([[row[label] for label in labels] for row in maps], np.float32)


@pytest.mark.parametrize("key, labels", [("classlabels_int64s", [10, 20, 30]),
                                         ("classlabels_strings", ["a", "b", "c"])])
def test_zip_map_keeps_the_probability_tensor_and_says_so(key, labels):
    model = zip_map_model(key, labels)
    feeds = ml_feeds([6, 4])
    label, maps = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    result = onnx_importer.convert(model)
    assert not result.summary.custom
    got = run_reference(result.load(), feeds)
    np.testing.assert_array_equal(got["label"], label)
    np.testing.assert_allclose(got["probabilities"], as_table(maps, labels), rtol=1e-6, atol=1e-7)
    note = (f"op 'probabilities' (ai.onnx.ml.ZipMap): its output 'probabilities' (a sequence of maps) is its input "
            f"tensor [6, 3], columns in {key} order: format v1 has no maps")
    assert result.summary.notes == [note] and f"  note: {note}" in result.summary.text("import")


def test_zip_map_of_one_row_is_one_map():
    model = ml_make([ml_node("ZipMap", ["x"], ["maps"], classlabels_int64s=[1, 2, 3])], {"x": (F, [3])}, {})
    model.graph.output.append(helper.make_value_info("maps", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TP.INT64, helper.make_tensor_type_proto(F, [])))))
    x = np.array([0.25, 0.5, 0.25], np.float32)
    (maps,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = run_reference(onnx_importer.convert(model).load(), {"x": x})
    np.testing.assert_array_equal(got["maps"], as_table(maps, [1, 2, 3]))
    assert got["maps"].shape == (1, 3)


def test_zip_map_whose_maps_are_read_is_refused_in_one_line():
    model = zip_map_model("classlabels_int64s", [10, 20, 30])
    model.graph.node.append(helper.make_node("Consume", ["probabilities"], ["c"], domain="example.maps"))
    model.opset_import.append(helper.make_opsetid("example.maps", 1))
    message = "(not mapped: its sequence of maps is read by another op)"
    with pytest.raises(GraphError, match=re.escape(message) + "$"):
        onnx_importer.convert(model)


def test_zip_map_of_the_wrong_label_count_is_a_one_line_error():
    with pytest.raises(GraphError, match=re.escape("(ai.onnx.ml.ZipMap): 2 class labels for an input of shape [6, 3]")):
        onnx_importer.convert(zip_map_model("classlabels_int64s", [10, 20]))


# ---------------------------------------------------------------- the models the onnxruntime wheel ships

ORT_DATASETS = Path(ort.__file__).parent / "datasets"


@pytest.mark.parametrize("name", ["mul_1", "sigmoid"])
def test_onnxruntime_dataset_models_import_without_custom_ops(name):
    model = onnx.load(str(ORT_DATASETS / f"{name}.onnx"))
    result = check(model)
    assert not result.summary.notes


def test_logreg_iris_imports_with_onnxruntimes_values():
    """Its input is [3, 2] but its 12 coefficients are 3 classes of 4 (iris)
    features: onnxruntime uses the first 6, and the import does, saying so; its
    ZipMap's maps are the probability tensor, and the summary says that too."""
    path = ORT_DATASETS / "logreg_iris.onnx"
    result = onnx_importer.convert(path)
    assert not result.summary.custom and result.summary.mapped == 3
    assert result.summary.notes == [
        "op 'LinearClassifier' (ai.onnx.ml.LinearClassifier): 12 coefficients for 3 classes x 2 features: the first "
        "6 are used, row-major, as onnxruntime does (onnx.reference rejects the model)",
        "op 'ZipMap' (ai.onnx.ml.ZipMap): its output 'probabilities' (a sequence of maps) is its input tensor [3, 3], "
        "columns in classlabels_int64s order: format v1 has no maps"]
    graph = result.load()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in range(5):
        x = ml_feeds([3, 2], seed=seed)["x"]
        label, maps = session.run(None, {"float_input": x})
        got = run_reference(graph, {"float_input": x})
        np.testing.assert_array_equal(got["label"], label)
        np.testing.assert_allclose(got["probabilities"], as_table(maps, [0, 1, 2]), rtol=1e-6, atol=1e-7)


def test_a_concat_drops_empty_operands_even_as_a_graph_output():
    """A concat left with one operand is a view of it that keeps the output's name, and
    the empty slice nothing reads any more is dropped."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Slice", ["x", "s", "e", "a"], ["empty"]),
             helper.make_node("Concat", ["r", "empty"], ["c"], axis=1),
             helper.make_node("Concat", ["empty", "x", "empty"], ["copy"], axis=1)]
    init = {"s": np.array([2], np.int64), "e": np.array([2], np.int64), "a": np.array([1], np.int64)}
    result = check(make(nodes, {"x": (F, [3, 4])}, {"c": (F, None), "copy": (F, None)}, 13, init))
    ops = {o["name"]: o for o in result.graph["ops"]}
    assert {name: (op["op"], op["inputs"]) for name, op in ops.items()} == \
        {"r": ("relu", ["x"]), "c": ("reshape", ["r"]), "copy": ("reshape", ["x"])}


def test_import_errors_name_the_file_at_fault(tmp_path, capsys):
    """An empty .onnx file (protobuf reads it as an empty model), a model with no
    output, and a write that fails (a full disk): each is one line naming the file,
    exit 2. They named ``<graph>`` and ``None``."""
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert cli.main(["import", str(empty), "-o", str(tmp_path / "e.yaml")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"{empty}: not an ONNX model (it holds no graph)")
    silent = tmp_path / "silent.onnx"
    onnx.save(make([], {"x": (F, [2, 4])}, {}), silent)
    assert cli.main(["import", str(silent), "-o", str(tmp_path / "s.yaml")]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (f"partition import: error: {silent}: 'outputs' is empty: "
                                                       "name at least one tensor to write")
    if Path("/dev/full").exists():
        relu = tmp_path / "relu.onnx"
        onnx.save(make([helper.make_node("Relu", ["x"], ["y"])], {"x": (F, [2, 4])}, {"y": (F, None)}), relu)
        full = tmp_path / "full.yaml"
        full.symlink_to("/dev/full")
        assert cli.main(["import", str(relu), "-o", str(full), "--force"]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (f"partition import: error: {full}: cannot write it: "
                                                           "No space left on device")


def _graph_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "bad", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _external_weight(location):
    weight = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    weight.data_location = TP.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", location
    weight.ClearField("raw_data")
    return weight


@pytest.mark.parametrize("model, message", [
    # each was an internal error (exit 1) before
    (lambda: _graph_model([helper.make_node("Relu", ["X"], ["Y"])], [value("X", F, [1 << 40, 2])],
                          [value("Y", F, [1 << 40, 2])]), "above the format's limit of 2^40 bytes"),
    # a Range of 1e30 elements, which ONNX's inference states as [0]: imported as a
    # custom op of 0 elements, silently (exit 0)
    (lambda: _graph_model([helper.make_node("Range", ["s", "l", "d"], ["Y"])], [], [value("Y", F, None)],
                          [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                           [("s", 0), ("l", 1e30), ("d", 1)]]),
     "op 'Y': float32[1000000015047466219876688855040] is 4e+30 bytes, above the format's limit of 2^40 bytes"),
    (lambda: _graph_model([helper.make_node("Relu", ["X"], ["Y"])], [value("X", F, [-3])], [value("Y", F, [-3])]),
     "-3 is less than the minimum of 0"),
    (lambda: _graph_model([helper.make_node("Relu", ["X"], [""])], [value("X", F, [2])], [value("", F, [2])]),
     "graph output 0 ('') is computed by no node"),
    (lambda: _graph_model([helper.make_node("Relu", ["X"], ["Y"])], [helper.make_tensor_value_info("X", F, None)],
                          [value("Y", F, [2])]), "input 'X' has no static shape"),
    (lambda: _graph_model([helper.make_node("MatMul", ["X", "w"], ["Y"])], [value("X", F, [2, 2])],
                          [value("Y", F, [2, 2])], [_external_weight("nothere.bin")]), "nothere.bin"),
    (lambda: _graph_model([helper.make_node("MatMul", ["X", "w"], ["Y"])], [value("X", F, [2, 2])],
                          [value("Y", F, [2, 2])], [_external_weight("../../../../etc/passwd")]),
     "points outside the directory"),
])
def test_a_model_the_format_cannot_hold_is_one_line_and_exit_2(tmp_path, capsys, model, message):
    path = tmp_path / "bad.onnx"
    onnx.save(model(), path)
    assert cli.main(["import", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and message in err, err
    assert not (tmp_path / "out.yaml").exists()


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_model_file_is_refused_before_it_fills_memory(tmp_path, capsys, monkeypatch):
    """A model linked to /dev/zero was read until memory ran out."""
    monkeypatch.setattr(onnx_importer, "MAX_MODEL_BYTES", 1 << 20)  # the rule, without writing 2 GiB
    endless, long = tmp_path / "endless.onnx", tmp_path / "long.onnx"
    endless.symlink_to("/dev/zero")
    long.write_bytes(bytes(1 << 20) + b"x")
    for path, problem in [(endless, "cannot read the file: it is a device, not a file"),
                          (long, "cannot read the file: longer than 1 MiB, protobuf's limit")]:
        assert cli.main(["import", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{path}: {problem}" in err, err


def test_a_dim_param_holding_an_equals_sign_binds_as_the_error_says(tmp_path, capsys):
    """The error said to bind 'n=2' with --dim n=2=VALUE, which then bound 'n' to '2=8'."""
    path = tmp_path / "m.onnx"
    x, y = value("x", F, ["n=2", 4]), value("y", F, ["n=2", 4])
    onnx.save(_graph_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]), path)
    out = tmp_path / "out.yaml"
    assert cli.main(["import", str(path), "-o", str(out)]) == 2
    assert "bind it with --dim n=2=VALUE" in capsys.readouterr().err
    assert cli.main(["import", str(path), "-o", str(out), "--dim", "n=2=8"]) == 0
    assert partitioner.load_graph(out).inputs["x"].shape == (8, 4)


@pytest.mark.parametrize("dims, message", [
    (["batch=99999999999999999999"], "an ONNX dimension takes an integer from 0 to 2^40"),  # overflowed int64
    (["batch=4", "batch=5"], "--dim batch is given twice (4 and 5)"),  # 5 was used without a word
])
def test_a_dim_out_of_range_or_given_twice_is_refused(tmp_path, capsys, dims, message):
    path = tmp_path / "m.onnx"
    onnx.save(dynamic_model(), path)
    args = [a for d in dims for a in ("--dim", d)]
    assert cli.main(["import", str(path), "-o", str(tmp_path / "out.yaml"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_graph_load_refuses_is_one_line_without_the_import_summary(tmp_path, capsys):
    """The summary came first, so two lines reached stderr for one error."""
    path = tmp_path / "dup.onnx"
    nodes = [helper.make_node("Relu", ["X"], ["Y"]), helper.make_node("Exp", ["X"], ["Y"])]
    onnx.save(_graph_model(nodes, [value("X", F, [2])], [value("Y", F, [2])]), path)
    assert cli.main(["import", str(path), "-o", str(tmp_path / "out.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "used twice" in err, err


def test_a_model_of_no_ops_writes_a_graph_file_that_reads_back(tmp_path, capsys):
    path, out = tmp_path / "ident.onnx", tmp_path / "ident.yaml"
    onnx.save(_graph_model([], [value("X", F, [2, 3])], [value("X", F, [2, 3])]), path)
    assert cli.main(["import", str(path), "-o", str(out)]) == 0
    assert "ops: []" in out.read_text()  # a bare "ops:" read back as null, which the loader refused
    assert partitioner.load_graph(out).outputs == ("X",)


def test_an_if_reads_the_tensors_its_branches_read_from_the_graph(tmp_path, capsys):
    """Its branches' reads of ``X`` were dropped: the plan read nothing of ``X``."""
    then = helper.make_graph([helper.make_node("Relu", ["X"], ["a"])], "then", [], [value("a", F, [4, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["X"], ["b"])], "else", [], [value("b", F, [4, 4])])
    node = helper.make_node("If", ["C"], ["Y"], then_branch=then, else_branch=other)
    path, out = tmp_path / "if.onnx", tmp_path / "if.yaml"
    onnx.save(_graph_model([node], [value("C", TP.BOOL, []), value("X", F, [4, 4])], [value("Y", F, [4, 4])]), path)
    assert cli.main(["import", str(path), "-o", str(out)]) == 0
    graph = partitioner.load_graph(out)
    assert graph.ops["Y"].inputs == ("C", "X") and "X" in graph.inputs
    assert partition(graph, "none").cost.bytes_read == 1 + 4 * 4 * 4


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stderr_never_stops_an_import(tmp_path):
    """The summary's failed print aborted the import (exit 1, nothing written)."""
    import subprocess
    import sys

    path, out = tmp_path / "m.onnx", tmp_path / "m.yaml"
    onnx.save(_graph_model([helper.make_node("Relu", ["X"], ["Y"])], [value("X", F, [2])], [value("Y", F, [2])]),
              path)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "partitioner.cli", "import", str(path), "-o", str(out)],
                              stderr=full, stdout=subprocess.PIPE, timeout=300)
    assert done.returncode == 0 and done.stdout == b"" and partitioner.load_graph(out).ops["Y"].kind == "relu"
