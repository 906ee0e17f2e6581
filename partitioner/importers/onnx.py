"""ONNX models -> graph format v1 (the ``onnx`` extra).

Shapes come from the model and ``onnx.shape_inference`` (with data propagation),
after every dynamic dimension has been bound (``dims``, the CLI's ``--dim``).
Values known at import time are folded: ``Constant``, ``Shape`` and ``Size`` of
static tensors, integer and scalar initializers, and any default-domain op whose
operands are all known and whose result is small (evaluated with
``onnx.reference``). A known scalar becomes a literal where the op allows one;
any other known tensor becomes a graph input like a weight. Float initializers
(weights) become graph inputs that keep their values.

An op that has no faithful format-v1 equivalent becomes ``custom`` with its op
type as ``kind`` (``domain.OpType`` outside the default domain).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from ..dtypes import cast_array
from ..errors import GraphError, InferenceError
from .. import onnx_semantics
from ..graph import Graph
from ..ops import broadcast_shapes, reshape_target
from . import GraphBuilder, ImportResult, Unmappable, batch_norm, group_norm, report, sanitize

DTYPES = {
    TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16", TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64", TensorProto.INT8: "int8", TensorProto.INT32: "int32",
    TensorProto.INT64: "int64", TensorProto.BOOL: "bool",
    # format 1.1
    TensorProto.UINT8: "uint8", TensorProto.INT16: "int16", TensorProto.UINT16: "uint16",
    TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64", TensorProto.FLOAT8E4M3FN: "float8_e4m3fn",
    TensorProto.FLOAT8E5M2: "float8_e5m2",
}

# format dtype -> ONNX element type
_ELEM_TYPES = {v: k for k, v in DTYPES.items()}

# Known values up to this many elements are folded at import time; larger results are computed by the graph.
FOLD_LIMIT = 1 << 16
_DEFAULT_DOMAINS = ("", "ai.onnx")


def read(source: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str, str | None]:
    """Read an ONNX model from a path, or take a ``ModelProto`` as it is.

    External tensor data is not loaded: weights' values are never needed.

    Parameters
    ----------
    source : str, os.PathLike or onnx.ModelProto
        A ``.onnx`` file or a loaded model.

    Returns
    -------
    tuple
        The model, its label for messages (the path, or ``<onnx>``), and the
        directory of its external data (``None`` for a ``ModelProto``).

    Raises
    ------
    GraphError
        The file is missing or is not an ONNX model.

    Examples
    --------
    >>> read("missing.onnx")
    Traceback (most recent call last):
    ...
    partitioner.errors.GraphError: missing.onnx: no such file
    """
    if isinstance(source, onnx.ModelProto):
        return source, "<onnx>", None
    path = Path(source)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise GraphError(f"{path}: no such file") from None
    except Exception as exc:  # noqa: BLE001 - protobuf raises several types for a file that is not ONNX
        raise GraphError(f"{path}: not an ONNX model ({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    return model, str(path), str(path.parent)


def bind_dims(model: onnx.ModelProto, dims: dict[str, int], label: str) -> onnx.ModelProto:
    """Bind every dynamic dimension of the graph inputs, in a copy of ``model``.

    Parameters
    ----------
    model : onnx.ModelProto
        The model; it is not changed.
    dims : dict of str to int
        A value for each named dynamic dimension.
    label : str
        Names the model in messages.

    Returns
    -------
    onnx.ModelProto
        The copy, its inputs' shapes static.

    Raises
    ------
    GraphError
        A dimension with a name ``dims`` does not bind, one without a name, or a
        name in ``dims`` that no input has.

    Examples
    --------
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    >>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y]))
    >>> bound = bind_dims(model, {"batch": 8}, "tiny.onnx")
    >>> [d.dim_value for d in bound.graph.input[0].type.tensor_type.shape.dim]
    [8, 16]
    >>> bind_dims(model, {}, "tiny.onnx")
    Traceback (most recent call last):
    ...
    partitioner.errors.GraphError: tiny.onnx: input 'x' has the dynamic dimension 'batch' (axis 0); bind it with --dim batch=VALUE
    """
    model = onnx.ModelProto.FromString(model.SerializeToString())
    initializers = {t.name for t in model.graph.initializer}
    used = set()
    for value in model.graph.input:
        if value.name in initializers:
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                continue
            if not dim.dim_param:
                raise GraphError(f"{label}: input '{value.name}' has a dynamic dimension without a name (axis {axis}); "
                                 "give the model a static or named dimension there")
            if dim.dim_param not in dims:
                raise GraphError(f"{label}: input '{value.name}' has the dynamic dimension '{dim.dim_param}' "
                                 f"(axis {axis}); bind it with --dim {dim.dim_param}=VALUE")
            used.add(dim.dim_param)
            dim.dim_value = int(dims[dim.dim_param])
    unknown = sorted(set(dims) - used)
    if unknown:
        raise GraphError(f"{label}: no input has a dynamic dimension named {', '.join(map(repr, unknown))}")
    return model


def convert(source: str | os.PathLike | onnx.ModelProto, dims: dict[str, int] | None = None,
            name: str | None = None) -> ImportResult:
    """Convert an ONNX model to a format-v1 graph dict (not yet loaded).

    Parameters
    ----------
    source : str, os.PathLike or onnx.ModelProto
        A ``.onnx`` file or a loaded model.
    dims : dict of str to int, optional
        Values for the model's named dynamic dimensions.
    name : str, optional
        The graph's name (default: the file's stem, or the ONNX graph's name).

    Returns
    -------
    ImportResult
        The graph dict (``.graph``) and the import summary (``.summary``).

    Raises
    ------
    GraphError
        An unreadable model, an unbound or unknown dimension, a tensor of a dtype
        format v1 lacks, or a custom op whose shape is unknown.

    Examples
    --------
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])
    >>> model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny", [x], [y]))
    >>> result = convert(model, {"batch": 8})
    >>> result.graph["ops"]
    [{'name': 'y', 'op': 'relu', 'inputs': ['x'], 'shape': [8, 16], 'dtype': 'float32'}]
    """
    model, label, base_dir = read(source)
    model = bind_dims(model, dict(dims or {}), label)
    try:
        model = shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises InferenceError and ValidationError
        raise GraphError(f"{label}: ONNX shape inference failed: {' '.join(str(exc).split())}") from None
    if name is None:
        name = Path(label).stem if base_dir is not None else (model.graph.name or "graph")
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 1)
    producer = f"{model.producer_name} {model.producer_version}".strip() or "unknown producer"
    source_text = f"ONNX opset {opset} ({producer})"
    if base_dir is not None:
        source_text = f"{Path(label).name}: {source_text}"
    return _Converter(model, sanitize(name), source_text, label, base_dir, opset).run()


def load(source: str | os.PathLike | onnx.ModelProto, dims: dict[str, int] | None = None, name: str | None = None,
         verbose: bool = True) -> Graph:
    """``partitioner.from_onnx``: convert, print the summary on stderr when
    ``verbose``, and load (raises GraphError)."""
    result = convert(source, dims, name)
    report(result, verbose)
    return result.load()


class _Known:
    """A tensor whose value is known at import time (``value`` is None for an
    initializer that is not read: a weight). ``name`` is set once it is a graph input."""

    def __init__(self, onnx_name: str, value: np.ndarray | None, initializer: TensorProto | None = None):
        self.onnx_name = onnx_name
        self.value = value
        self.initializer = initializer
        self.name: str | None = None


class _Converter:
    def __init__(self, model: onnx.ModelProto, name: str, source: str, label: str, base_dir: str | None, opset: int):
        self.graph = model.graph
        self._functions = list(model.functions)
        self.label = label
        self.base_dir = base_dir
        self.opset = opset
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.names = self._name_map()
        self.b = GraphBuilder(name, source, reserved=self.names.values())
        self.types = self._onnx_types()
        self.env: dict[str, Any] = {}
        self.consumed = {i for n in self.graph.node for i in n.input} | {o.name for o in self.graph.output}

    # ---------------------------------------------------------------- setup

    def _name_map(self) -> dict[str, str]:
        """ONNX tensor name -> a unique valid format-v1 name."""
        names: dict[str, str] = {}
        taken: set[str] = set()
        every = [v.name for v in self.graph.input] + [t.name for t in self.graph.initializer]
        every += [o for n in self.graph.node for o in n.output if o]
        for onnx_name in every:
            if onnx_name in names:
                continue
            clean, i = sanitize(onnx_name), 1
            while clean in taken:
                clean, i = f"{sanitize(onnx_name)}_{i}", i + 1
            names[onnx_name] = clean
            taken.add(clean)
        return names

    def _onnx_types(self) -> dict[str, tuple[tuple[int, ...] | None, int]]:
        """ONNX tensor name -> (static shape or None, element type) from the model and inference."""
        types = {}
        for value in [*self.graph.input, *self.graph.value_info, *self.graph.output]:
            tensor = value.type.tensor_type
            dims = tensor.shape.dim
            static = tensor.HasField("shape") and all(d.HasField("dim_value") for d in dims)
            types[value.name] = (tuple(d.dim_value for d in dims) if static else None, tensor.elem_type)
        for init in self.graph.initializer:
            types[init.name] = (tuple(init.dims), init.data_type)
        return types

    def dtype(self, onnx_name: str, elem_type: int | None = None) -> str:
        """The format-v1 dtype of an ONNX tensor (raises GraphError for one format v1 lacks)."""
        elem_type = self.types[onnx_name][1] if elem_type is None else elem_type
        if elem_type not in DTYPES:
            kind = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
            raise GraphError(f"{self.label}: tensor '{onnx_name}' is {kind}, which format v1 has no dtype for")
        return DTYPES[elem_type]

    # ---------------------------------------------------------------- driver

    def run(self) -> ImportResult:
        initializers = {t.name: t for t in self.graph.initializer}
        for init in initializers.values():
            self.env[init.name] = _Known(init.name, self._initializer_value(init), init)
        for value in self.graph.input:
            if value.name not in initializers and value.name in self.consumed:
                shape, _ = self.types[value.name]
                self.env[value.name] = self.b.add_input(self.names[value.name], shape, self.dtype(value.name))
        for node in self.graph.node:
            self._node(node)
        outputs = [self.tensor(o.name) for o in self.graph.output]
        renamed = {k: v for k, v in self.names.items() if k != v}
        return self.b.result(outputs, renamed)

    def _initializer_value(self, init: TensorProto) -> np.ndarray | None:
        """Integer, bool and one-element initializers are read (shapes, indices,
        scalars); weights are not."""
        small = math.prod(init.dims) <= FOLD_LIMIT
        shape_like = init.data_type in (TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL)
        if small and (shape_like or math.prod(init.dims) == 1):
            return numpy_helper.to_array(init, self.base_dir or "")
        return None

    def _node(self, node: onnx.NodeProto) -> None:
        default = node.domain in _DEFAULT_DOMAINS
        kind = node.op_type if default else f"{node.domain}.{node.op_type}"
        if default and self._fold(node):
            self.b.count("folded")
            return
        mark = self.b.mark()
        try:
            if not default or node.op_type not in _CONVERTERS:
                raise Unmappable("")
            results = _CONVERTERS[node.op_type](self, node)
            self.env.update(zip(node.output, results if isinstance(results, list) else [results]))
            self.b.count("mapped")
        except GraphError:
            raise
        except Exception as why:  # noqa: BLE001 - any op the converter cannot handle becomes custom, never a crash
            self.b.rollback(mark)
            self._custom(node, kind)
            reason = str(why) if isinstance(why, Unmappable) else f"converter failed: {type(why).__name__}: {why}"
            self.b.count("custom", kind, reason)

    def _fold(self, node: onnx.NodeProto) -> bool:
        """Evaluate ``node`` when every operand is known and every result is small."""
        if node.op_type in _NOT_FOLDED:
            return False
        if node.op_type in _STATIC:
            values = _STATIC[node.op_type](self, node)
        elif node.op_type == "CastLike" and self._known_cast_like(node):
            value, dtype = self.env[node.input[0]].value, DTYPES[self.types[node.input[1]][1]]
            bound = _saturation(node, dtype)
            values = [cast_array(value if bound is None else np.clip(value, -bound, bound), dtype)]
        else:
            inputs = [i for i in node.input if i]
            known = [self.env.get(i) for i in inputs]
            if not all(isinstance(k, _Known) and k.value is not None for k in known):
                return False
            if any(_folded_size(self, node, known, o) > FOLD_LIMIT for o in node.output if o):
                return False
            try:
                values = ReferenceEvaluator(node, opsets=self.opsets).run(None, {i: k.value for i, k in zip(inputs, known)})
            except Exception:  # noqa: BLE001 - an op onnx.reference cannot evaluate is converted like any other
                return False
        for out, value in zip(node.output, values):
            self.env[out] = _Known(out, np.asarray(value))
        return True

    def _known_cast_like(self, node: onnx.NodeProto) -> bool:
        """A known value cast like a run-time tensor of a statically known dtype (the
        scalars of ONNX's function bodies: ``CastLike(-inf, X)``) folds to a constant."""
        value = self.env.get(node.input[0])
        return (isinstance(value, _Known) and value.value is not None
                and self.types.get(node.input[1], (None, None))[1] in DTYPES)

    def _custom(self, node: onnx.NodeProto, kind: str) -> None:
        """One ``custom`` op per output of ``node``, each keeping the node as its
        ``onnx`` attribute (``partitioner.onnx_semantics``) where onnx.reference can
        run it, so that a run computes its real result."""
        inputs = list(dict.fromkeys(self.tensor(i) for i in node.input if i))
        operands = [f"x{inputs.index(self.tensor(i))}" if i else None for i in node.input]
        types = [(self.b.type(t).shape, _ELEM_TYPES[self.b.type(t).dtype]) for t in inputs]
        calls = any((f.domain, f.name) == (node.domain, node.op_type) for f in self._functions)
        functions = self._functions if calls else []  # a model-local function, and those it may call
        for k, out in enumerate(node.output):
            if not out:
                continue
            shape, elem_type = self.types.get(out, (None, None))
            if shape is None:
                raise GraphError(f"{self.label}: op '{node.name or out}' ({kind}): ONNX shape inference gives "
                                 f"no static shape for its output '{out}'; format v1 needs one for a custom op")
            dtype = self.dtype(out, elem_type)
            kept = None if _random(node) else onnx_semantics.encode(
                node, operands, types, k, (shape, _ELEM_TYPES[dtype]), self.opsets, functions)
            self.env[out] = self.b.custom(self.names[out], kind, inputs, shape, dtype,
                                          {onnx_semantics.ATTR: kept} if kept else None)

    # ---------------------------------------------------------------- values

    def tensor(self, onnx_name: str) -> str:
        """The graph tensor of an ONNX tensor; a known value (a weight, a folded
        tensor) becomes a graph input that keeps its value."""
        value = self.env[onnx_name]
        if not isinstance(value, _Known):
            return value
        if value.name not in self.b.types:  # not yet a graph input (or dropped by a rollback)
            if value.initializer is not None:
                shape, dtype = tuple(value.initializer.dims), self.dtype(onnx_name, value.initializer.data_type)
                data = value.value if value.value is not None else numpy_helper.to_array(value.initializer,
                                                                                          self.base_dir or "")
            else:
                # NumPy's (and ml_dtypes') names are the format's
                shape, dtype, data = value.value.shape, str(value.value.dtype), value.value
                if dtype not in DTYPES.values():
                    raise GraphError(f"{self.label}: tensor '{onnx_name}' is {dtype}, which format v1 has no dtype for")
            value.name = self.b.add_input(self.names[onnx_name], shape, dtype, data)
        return value.name

    def operand(self, node: onnx.NodeProto, index: int) -> str | int | float:
        """A tensor name, or a literal for a known one-element number whose rank does
        not exceed the other operands' (so that leaving it out changes no shape)."""
        onnx_name = node.input[index]
        value = self.env[onnx_name]
        if isinstance(value, _Known) and value.value is not None and value.value.size == 1 \
                and value.value.dtype.kind in "iuf":
            ranks = [len(self.shape(i)) for j, i in enumerate(node.input) if i and j != index]
            if ranks and value.value.ndim <= max(ranks):
                return value.value.item()
        return self.tensor(onnx_name)

    def static(self, node: onnx.NodeProto, index: int) -> np.ndarray | None:
        """The known value of operand ``index`` (None when the operand is absent).

        Raises:
            Unmappable: the operand is computed at run time.
        """
        if index >= len(node.input) or not node.input[index]:
            return None
        value = self.env[node.input[index]]
        if isinstance(value, _Known) and value.value is None and value.initializer is not None:
            value.value = numpy_helper.to_array(value.initializer, self.base_dir or "")
        if not isinstance(value, _Known):
            raise Unmappable(f"its operand '{node.input[index]}' is computed at run time, not known statically")
        return value.value

    def shape(self, onnx_name: str) -> tuple[int, ...]:
        """The static shape of a graph tensor or known value."""
        value = self.env[onnx_name]
        if isinstance(value, _Known):
            return tuple(value.initializer.dims) if value.value is None else value.value.shape
        return self.b.type(value).shape

    # ---------------------------------------------------------------- emitting

    def emit(self, node: onnx.NodeProto, op: str, inputs: list, attrs: dict | None = None, out: int = 0) -> str:
        """One op for output ``out`` of ``node``, stating ONNX's shape and dtype where known."""
        onnx_name = node.output[out]
        shape, elem_type = self.types.get(onnx_name, (None, None))
        dtype = self.dtype(onnx_name, elem_type) if elem_type else None
        return self.b.op(self.names[onnx_name], op, inputs, attrs, shape, dtype)

    def helper(self, node: onnx.NodeProto, part: str, op: str, inputs: list, attrs: dict | None = None) -> str:
        """An intermediate op of a decomposition, named ``OUTPUT_part``."""
        return self.b.op(self.b.fresh(self.names[node.output[0]], part), op, inputs, attrs)


def _random(node: onnx.NodeProto) -> bool:
    """A node whose result is random (a training-mode Dropout's mask, a random
    generator): it keeps no semantics, and a run draws its result."""
    return node.domain in _DEFAULT_DOMAINS and (node.op_type in _NOT_FOLDED or node.op_type == "Dropout")


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _attr(node: onnx.NodeProto, key: str, default: Any = None) -> Any:
    value = _attrs(node).get(key, default)
    return value.decode() if isinstance(value, bytes) else value


def _folded_size(cx: _Converter, node: onnx.NodeProto, known: list[_Known], out: str) -> float:
    """Elements of a result ``node`` would have if folded: ONNX inference's static
    shape, or for an op whose shape follows from its operands' values (which data
    propagation may not give), the size those values make; infinite when unknown, so
    that nothing unbounded is evaluated at import time."""
    shape = cx.types.get(out, (None,))[0]
    if shape is not None:
        return math.prod(shape)
    try:
        return _generated_size(node, [np.asarray(k.value) for k in known])
    except (ValueError, TypeError, OverflowError, IndexError):  # malformed operands: the converter says why
        return math.inf


def _generated_size(node: onnx.NodeProto, values: list[np.ndarray]) -> float:
    """Elements of the result of an op whose shape its operands' values give."""
    op_type = node.op_type
    if op_type == "ConstantOfShape":
        return math.prod(int(d) for d in values[0].ravel())
    if op_type == "Range":
        start, limit, delta = (float(v) for v in values)
        return max(0, math.ceil((limit - start) / delta)) if delta else math.inf
    if op_type == "Expand":
        return math.prod(np.broadcast_shapes(values[0].shape, tuple(int(d) for d in values[1].ravel())))
    if op_type == "Tile":
        return values[0].size * math.prod(int(r) for r in values[1].ravel())
    if op_type == "Pad" and not (len(node.input) > 3 and node.input[3]):  # pads of every axis
        pads = [int(p) for p in values[1].ravel()]
        rank = values[0].ndim
        if len(pads) == 2 * rank:
            return math.prod(d + pads[i] + pads[i + rank] for i, d in enumerate(values[0].shape))
    return math.inf


def _used(cx: _Converter, node: onnx.NodeProto, count: int) -> bool:
    """Whether an output beyond the first ``count`` is read by a node or is a graph
    output (exporters name outputs nothing reads, such as Dropout's mask)."""
    return any(o in cx.consumed for o in node.output[count:] if o)


# ---------------------------------------------------------------- static values (folded, never in the graph)


def _shape_of(cx: _Converter, node: onnx.NodeProto) -> list[np.ndarray]:
    shape = cx.shape(node.input[0])
    start, end = _attr(node, "start", 0), _attr(node, "end", None)
    if node.op_type == "Size":
        return [np.array(math.prod(shape), dtype=np.int64)]
    return [np.array(shape[start:end], dtype=np.int64)]


def _constant(cx: _Converter, node: onnx.NodeProto) -> list[np.ndarray]:
    attrs = _attrs(node)
    if "value" in attrs:
        return [numpy_helper.to_array(attrs["value"], cx.base_dir or "")]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return [np.array(attrs[key], dtype=dtype)]
    raise GraphError(f"{cx.label}: op '{node.name}' (Constant): only dense numeric constants are supported")


_STATIC: dict[str, Callable[[_Converter, onnx.NodeProto], list[np.ndarray]]] = {
    "Shape": _shape_of, "Size": _shape_of, "Constant": _constant,
}
# Ops never evaluated at import time: random ones (a value per run).
_NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


# ---------------------------------------------------------------- converters

Converter = Callable[[_Converter, onnx.NodeProto], Any]
_CONVERTERS: dict[str, Converter] = {}


def _register(*op_types: str):
    def wrap(fn: Converter) -> Converter:
        for op_type in op_types:
            _CONVERTERS[op_type] = fn
        return fn

    return wrap


def _elementwise(op: str) -> Converter:
    def convert(cx: _Converter, node: onnx.NodeProto) -> str:
        return cx.emit(node, op, [cx.operand(node, i) for i in range(len(node.input))])

    return convert


for _op_type, _op in {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Pow": "pow", "Equal": "eq", "Less": "lt", "Greater": "gt",
    "LessOrEqual": "le", "GreaterOrEqual": "ge", "And": "logical_and", "Or": "logical_or", "Not": "logical_not",
    "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Exp": "exp", "Log": "log", "Tanh": "tanh", "Sigmoid": "sigmoid",
    "Relu": "relu", "Erf": "erf", "Neg": "neg", "Abs": "abs", "Sin": "sin", "Cos": "cos", "Where": "where",
}.items():
    _register(_op_type)(_elementwise(_op))


@_register("Sum", "Mean", "Max", "Min")
def _variadic(cx: _Converter, node: onnx.NodeProto) -> str:
    """A chain over the operands in order, broadcasting as it goes; Mean divides the
    sum by their count. One operand is the identity (a view)."""
    operands = [i for i, name in enumerate(node.input) if name]
    if len(operands) == 1:
        return _reshape_to(cx, node, list(cx.shape(node.input[operands[0]])))
    op = {"Sum": "add", "Mean": "add", "Max": "maximum", "Min": "minimum"}[node.op_type]
    acc = cx.tensor(node.input[operands[0]])
    for i in operands[1:-1]:
        acc = cx.helper(node, f"{op}{i}", op, [acc, cx.operand(node, i)])
    if node.op_type != "Mean":
        return cx.emit(node, op, [acc, cx.operand(node, operands[-1])])
    total = cx.helper(node, "sum", op, [acc, cx.operand(node, operands[-1])])
    return cx.emit(node, "div", [total, len(operands)])


_FLOATS = ("float16", "bfloat16", "float32", "float64")


@_register("Div")
def _div(cx: _Converter, node: onnx.NodeProto) -> str:
    """Integer Div truncates toward zero: NumPy's floor division, plus one where the
    division is inexact and the operands' signs differ (exact in every integer dtype)."""
    if cx.dtype(node.output[0]) in _FLOATS:
        return _elementwise("div")(cx, node)
    a, b = cx.tensor(node.input[0]), cx.tensor(node.input[1])
    floor = cx.helper(node, "floor", "floor_divide", [a, b])
    rounded_down = _rounded_down(cx, node, a, cx.helper(node, "rem", "remainder", [a, b]))
    return cx.emit(node, "where", [rounded_down, cx.helper(node, "up", "add", [floor, 1]), floor])


def _rounded_down(cx: _Converter, node: onnx.NodeProto, a: str, remainder: str) -> str:
    """Where floor and truncation differ: a non-zero NumPy remainder (which has the
    divisor's sign) whose sign is not the dividend's."""
    inexact = cx.helper(node, "inexact", "ne", [remainder, 0])
    signs = cx.helper(node, "signs", "ne", [cx.helper(node, "rem_neg", "lt", [remainder, 0]),
                                             cx.helper(node, "a_neg", "lt", [a, 0])])
    return cx.helper(node, "rounded", "logical_and", [inexact, signs])


@_register("Mod")
def _mod(cx: _Converter, node: onnx.NodeProto) -> str:
    """``fmod=0``: NumPy's remainder, the divisor's sign (for floats as opset 28
    defines it). ``fmod=1``: C's fmod, the dividend's sign: for integers the
    remainder less the divisor where it was rounded down; for floats the remainder
    of the magnitudes, which is exact, with the dividend's sign."""
    if not _attr(node, "fmod", 0):
        return _elementwise("remainder")(cx, node)
    a, b = cx.tensor(node.input[0]), cx.tensor(node.input[1])
    if cx.dtype(node.output[0]) in _FLOATS:
        magnitude = cx.helper(node, "mag", "remainder", [cx.helper(node, "a_abs", "abs", [a]),
                                                         cx.helper(node, "b_abs", "abs", [b])])
        negative = cx.helper(node, "a_neg", "lt", [a, 0])
        return cx.emit(node, "where", [negative, cx.helper(node, "neg", "neg", [magnitude]), magnitude])
    remainder = cx.helper(node, "rem", "remainder", [a, b])
    corrected = cx.helper(node, "fix", "sub", [remainder, b])
    return cx.emit(node, "where", [_rounded_down(cx, node, a, remainder), corrected, remainder])


@_register("Identity", "Dropout")
def _identity(cx: _Converter, node: onnx.NodeProto) -> str:
    """An alias (Dropout at inference is one): a view, which moves no bytes."""
    if node.op_type == "Dropout":
        _check_inference_dropout(cx, node)
    return _reshape_to(cx, node, list(cx.shape(node.input[0])))


def _check_inference_dropout(cx: _Converter, node: onnx.NodeProto) -> None:
    """Raise Unmappable unless this Dropout is the identity: not in training mode
    (no ``training_mode`` operand, or a static false one; ``is_test`` before opset
    7), or a static ratio of 0; and its mask output read by nothing."""
    if _used(cx, node, 1):
        raise Unmappable("Dropout's mask output is used")
    training = _attr(node, "is_test", 0) == 0 if cx.opset < 7 else False
    if cx.opset >= 12 and len(node.input) > 2 and node.input[2]:
        mode = cx.static(node, 2)  # raises Unmappable when computed at run time
        training = bool(mode)
    if training:
        ratio = cx.static(node, 1) if cx.opset >= 12 else np.asarray(_attr(node, "ratio", 0.5))
        if ratio is None or float(ratio) != 0.0:
            raise Unmappable("training-mode Dropout draws a random mask on every run")


@_register("Gelu")
def _gelu(cx: _Converter, node: onnx.NodeProto) -> str:
    return cx.emit(node, "gelu", [cx.tensor(node.input[0])], {"approximate": _attr(node, "approximate", "none")})


@_register("LeakyRelu")
def _leaky_relu(cx: _Converter, node: onnx.NodeProto) -> str:
    return cx.emit(node, "leaky_relu", [cx.tensor(node.input[0])], {"alpha": _attr(node, "alpha", 0.01)})


@_register("Clip")
def _clip(cx: _Converter, node: onnx.NodeProto) -> str:
    if cx.opset < 11:
        bounds = {"min": _attr(node, "min"), "max": _attr(node, "max")}
    else:
        bounds = {key: cx.static(node, i) for key, i in (("min", 1), ("max", 2))}
        bounds = {k: (None if v is None else v.item()) for k, v in bounds.items()}
    return cx.emit(node, "clamp", [cx.tensor(node.input[0])], {k: v for k, v in bounds.items() if v is not None})


# The largest finite value of each 8-bit float (ml_dtypes' finfo): where ONNX's Cast saturates.
_FLOAT8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def _saturation(node: onnx.NodeProto, dtype: str) -> float | None:
    """The bound a Cast to an 8-bit float clamps to: ONNX's ``saturate`` (default 1)
    takes infinities and out-of-range values to the largest finite value, where the
    format's cast (ml_dtypes) gives NaN or inf."""
    return _FLOAT8_MAX[dtype] if dtype in _FLOAT8_MAX and _attr(node, "saturate", 1) else None


@_register("Cast", "CastLike")
def _cast(cx: _Converter, node: onnx.NodeProto) -> str:
    x = cx.tensor(node.input[0])
    dtype = cx.dtype(node.output[0])
    bound = _saturation(node, dtype)
    if bound is not None and cx.b.type(x).dtype in ("float16", "bfloat16", "float32", "float64"):
        x = cx.helper(node, "saturated", "clamp", [x], {"min": -bound, "max": bound})
    return cx.emit(node, "cast", [x], {"dtype": dtype})


# ---------------------------------------------------------------- reductions

# The opset from which each reduction takes its axes as an input rather than an attribute.
_AXES_INPUT_FROM = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18}


@_register(*_AXES_INPUT_FROM)
def _reduce(cx: _Converter, node: onnx.NodeProto) -> str:
    x = cx.tensor(node.input[0])
    if node.op_type == "ReduceMean" and cx.b.type(x).dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise Unmappable("integer ReduceMean truncates; format v1's reduce_mean of integers gives float32")
    if cx.opset >= _AXES_INPUT_FROM[node.op_type]:
        axes = cx.static(node, 1)
        axes = None if axes is None else [int(a) for a in axes]
    else:
        axes = _attr(node, "axes")
    keepdims = bool(_attr(node, "keepdims", 1))
    if not axes:
        if _attr(node, "noop_with_empty_axes", 0):
            return _reshape_to(cx, node, list(cx.b.type(x).shape), x)
        axes = None
    op = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
          "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod"}[node.op_type]
    return cx.emit(node, op, [x], {"keepdims": keepdims} if axes is None else {"axes": list(axes), "keepdims": keepdims})


@_register("ArgMax", "ArgMin")
def _arg_reduce(cx: _Converter, node: onnx.NodeProto) -> str:
    if _attr(node, "select_last_index", 0):
        raise Unmappable("select_last_index=1 picks the last extremum; format v1 picks the first")
    attrs = {"axes": [_attr(node, "axis", 0)], "keepdims": bool(_attr(node, "keepdims", 1))}
    return cx.emit(node, node.op_type.lower(), [cx.tensor(node.input[0])], attrs)


# ---------------------------------------------------------------- composites


@_register("Softmax", "LogSoftmax")
def _softmax(cx: _Converter, node: onnx.NodeProto) -> str:
    """From opset 13 over one axis (default -1); before, over the input flattened
    to 2-D at ``axis`` (default 1), which is a reshape around a last-axis softmax."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    op = "softmax" if node.op_type == "Softmax" else "log_softmax"
    if cx.opset >= 13:
        return cx.emit(node, op, [x], {"axis": _attr(node, "axis", -1)})
    axis = _attr(node, "axis", 1) % max(len(shape), 1)
    if axis == len(shape) - 1:
        return cx.emit(node, op, [x], {"axis": -1})
    flat = cx.helper(node, "2d", "reshape", [x], {"shape": [math.prod(shape[:axis]), math.prod(shape[axis:])]})
    return _reshape_to(cx, node, list(shape), cx.helper(node, op, op, [flat], {"axis": -1}))


@_register("LayerNormalization")
def _layer_norm(cx: _Converter, node: onnx.NodeProto) -> str:
    if _used(cx, node, 1):
        raise Unmappable("the Mean and InvStdDev outputs are used")
    x = cx.tensor(node.input[0])
    rank = len(cx.b.type(x).shape)
    axis = _attr(node, "axis", -1) % rank
    inputs = [x] + [cx.tensor(i) for i in node.input[1:] if i]
    attrs = {"axes": list(range(axis, rank)), "eps": _attr(node, "epsilon", 1e-5)}
    return cx.emit(node, "layer_norm", inputs, attrs)


@_register("BatchNormalization")
def _batch_norm(cx: _Converter, node: onnx.NodeProto) -> str:
    if _attr(node, "training_mode", 0) or _used(cx, node, 1):
        raise Unmappable("training-mode BatchNormalization (batch statistics)")
    x, scale, bias, mean, var = (cx.tensor(i) for i in node.input[:5])
    return batch_norm(cx.b, cx.names[node.output[0]], x, scale, bias, mean, var, _attr(node, "epsilon", 1e-5))


@_register("InstanceNormalization")
def _instance_norm(cx: _Converter, node: onnx.NodeProto) -> str:
    """Group normalisation with a group per channel."""
    x, scale, bias = (cx.tensor(i) for i in node.input[:3])
    channels = cx.b.type(x).shape[1]
    return group_norm(cx.b, cx.names[node.output[0]], x, scale, bias, channels, _attr(node, "epsilon", 1e-5))


@_register("GroupNormalization")
def _group_normalization(cx: _Converter, node: onnx.NodeProto) -> str:
    """Opset 21: the normalisation in ``stash_type`` (float32 by default), rounded to
    X's dtype, then scale and bias per channel in X's dtype. Opset 18: scale and bias
    per group, everything in X's dtype (float16 statistics as E[x^2] - E[x]^2, which
    the format's float32 normalisation does not reproduce: half input is refused)."""
    x, scale, bias = (cx.tensor(i) for i in node.input[:3])
    xt = cx.b.type(x)
    groups = _attr(node, "num_groups")
    if cx.opset >= 21:
        stash = DTYPES.get(_attr(node, "stash_type", TensorProto.FLOAT))
        if stash not in ("float32", "float64"):
            raise Unmappable(f"stash_type {_attr(node, 'stash_type')}: only float32 or float64 statistics map")
    elif xt.dtype in ("float16", "bfloat16"):
        raise Unmappable("opset 18 GroupNormalization computes its statistics in half precision")
    else:
        stash = xt.dtype
        scale = _per_channel(cx, node, scale, "s", groups, xt.shape[1])
        bias = _per_channel(cx, node, bias, "b", groups, xt.shape[1])
    stage = x if xt.dtype == stash else cx.helper(node, "stash", "cast", [x], {"dtype": stash})
    normalized = group_norm(cx.b, cx.b.fresh(cx.names[node.output[0]], "normalized"), stage, None, None, groups,
                            _attr(node, "epsilon", 1e-5))
    if stash != xt.dtype:
        normalized = cx.helper(node, "t", "cast", [normalized], {"dtype": xt.dtype})
    channel = {"shape": [xt.shape[1]] + [1] * (len(xt.shape) - 2)}
    scaled = cx.helper(node, "scaled", "mul", [normalized, cx.helper(node, "s_c", "reshape", [scale], channel)])
    return cx.emit(node, "add", [scaled, cx.helper(node, "b_c", "reshape", [bias], channel)])


def _per_channel(cx: _Converter, node: onnx.NodeProto, tensor: str, part: str, groups: int, channels: int) -> str:
    """A per-group [groups] tensor repeated for each channel of its group: [channels]."""
    if groups < 1 or channels % groups:
        raise Unmappable(f"{groups} groups do not divide {channels} channels")
    column = cx.helper(node, f"{part}_g", "reshape", [tensor], {"shape": [groups, 1]})
    spread = cx.helper(node, f"{part}_spread", "broadcast_to", [column], {"shape": [groups, channels // groups]})
    return cx.helper(node, f"{part}_ch", "reshape", [spread], {"shape": [channels]})


@_register("LRN")
def _lrn(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x / (bias + alpha / size * S) ** beta``, S the sum of x^2 over ``size``
    channels ((size - 1) // 2 before, size // 2 after, zeros past the ends): x^2
    padded with zeros along C, and the sum of its ``size`` shifted slices, all
    elementwise and layout ops that fuse into one kernel. Half input is computed in
    float32."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    if len(shape) < 2:
        raise Unmappable(f"LRN needs a channel axis (input rank {len(shape)})")
    size, channels = _attr(node, "size"), shape[1]
    if cx.b.type(x).dtype in ("float16", "bfloat16"):
        x = cx.helper(node, "in", "cast", [x], {"dtype": "float32"})
    pads = [0] * (2 * len(shape))
    pads[1], pads[1 + len(shape)] = (size - 1) // 2, size // 2
    padded = cx.helper(node, "pad", "pad", [cx.helper(node, "sq", "square", [x])], {"pads": pads})
    total = None
    for k in range(size):
        shifted = cx.helper(node, f"c{k}", "slice", [padded], {"starts": [k], "ends": [k + channels], "axes": [1]})
        total = shifted if total is None else cx.helper(node, f"sum{k}", "add", [total, shifted])
    weighted = cx.helper(node, "alpha", "mul", [total, _attr(node, "alpha", 1e-4) / size])
    scaled = cx.helper(node, "scaled", "add", [weighted, _attr(node, "bias", 1.0)])
    return cx.emit(node, "div", [x, cx.helper(node, "den", "pow", [scaled, _attr(node, "beta", 0.75)])])


# ---------------------------------------------------------------- contractions


@_register("MatMul")
def _matmul(cx: _Converter, node: onnx.NodeProto) -> str:
    return cx.emit(node, "matmul", [cx.tensor(node.input[0]), cx.tensor(node.input[1])])


@_register("Gemm")
def _gemm(cx: _Converter, node: onnx.NodeProto) -> str:
    """``alpha * A' @ B' + beta * C``, each transpose and scale only where needed."""
    a, b = cx.tensor(node.input[0]), cx.tensor(node.input[1])
    if _attr(node, "transA", 0):
        a = cx.helper(node, "a_t", "transpose", [a], {"perm": [1, 0]})
    if _attr(node, "transB", 0):
        b = cx.helper(node, "b_t", "transpose", [b], {"perm": [1, 0]})
    alpha, beta = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0)
    has_c = len(node.input) > 2 and node.input[2]
    if not has_c and alpha == 1.0:
        return cx.emit(node, "matmul", [a, b])
    y = cx.helper(node, "mm", "matmul", [a, b])
    if not has_c:
        return cx.emit(node, "mul", [y, alpha])
    if alpha != 1.0:
        y = cx.helper(node, "alpha", "mul", [y, alpha])
    c = cx.operand(node, 2)
    if beta != 1.0:
        c = cx.helper(node, "beta", "mul", [c, beta]) if isinstance(c, str) else c * beta
    return cx.emit(node, "add", [y, c])


def _same_pads(cx: _Converter, node: onnx.NodeProto, size: tuple[int, ...], kernel: list[int], strides: list[int],
               dilations: list[int]) -> list[int]:
    """ONNX ``pads`` (every axis' begin, then every axis' end: [top, left, bottom,
    right] in 2-D) for ``auto_pad``."""
    mode = _attr(node, "auto_pad", "NOTSET")
    if mode == "NOTSET":
        return list(_attr(node, "pads", [0] * (2 * len(size))))
    if mode == "VALID":
        return [0] * (2 * len(size))
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        total = max(0, (math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    return begins + ends


@_register("Conv")
def _conv(cx: _Converter, node: onnx.NodeProto) -> str:
    x, w = cx.tensor(node.input[0]), cx.tensor(node.input[1])
    xs, ws = cx.b.type(x).shape, cx.b.type(w).shape
    if len(xs) != 4:
        raise Unmappable(f"only 2-D convolutions map to conv2d (input rank {len(xs)})")
    strides, dilations = list(_attr(node, "strides", [1, 1])), list(_attr(node, "dilations", [1, 1]))
    attrs = {"strides": strides, "pads": _same_pads(cx, node, xs[2:], list(ws[2:]), strides, dilations),
             "dilations": dilations, "groups": _attr(node, "group", 1)}
    inputs = [x, w] + ([cx.tensor(node.input[2])] if len(node.input) > 2 and node.input[2] else [])
    return cx.emit(node, "conv2d", inputs, attrs)


@_register("MaxPool")
def _max_pool(cx: _Converter, node: onnx.NodeProto) -> str:
    """The values output only: ``storage_order`` orders the Indices output, which
    the format cannot give."""
    if _used(cx, node, 1):
        raise Unmappable("MaxPool's Indices output is used")
    return _pool(cx, node, "max_pool2d", {})


@_register("AveragePool")
def _average_pool(cx: _Converter, node: onnx.NodeProto) -> str:
    return _pool(cx, node, "avg_pool2d", {"count_include_pad": bool(_attr(node, "count_include_pad", 0))})


def _pool(cx: _Converter, node: onnx.NodeProto, op: str, extra: dict) -> str:
    """A 2-D pool maps as it is; a 1-D pool is a 2-D one over a view of height 1.
    ``auto_pad`` is resolved to pads as for Conv; ``ceil_mode`` and ``dilations``
    (opset 10; AveragePool's dilations from opset 19) default to off and 1."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    spatial = len(shape) - 2
    if spatial not in (1, 2):
        raise Unmappable(f"only 1-D and 2-D pools map to {op} (input rank {len(shape)})")
    kernel = list(_attr(node, "kernel_shape"))
    strides, dilations = list(_attr(node, "strides", [1] * spatial)), list(_attr(node, "dilations", [1] * spatial))
    pads = _same_pads(cx, node, shape[2:], kernel, strides, dilations)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations,
             "ceil_mode": bool(_attr(node, "ceil_mode", 0)), **extra}
    if spatial == 2:
        return cx.emit(node, op, [x], attrs)
    row = {"kernel_shape": [1, *kernel], "strides": [1, *strides], "pads": [0, pads[0], 0, pads[1]],
           "dilations": [1, *dilations]}
    view = cx.helper(node, "row", "reshape", [x], {"shape": [shape[0], shape[1], 1, shape[2]]})
    pooled = cx.helper(node, "2d", op, [view], {**attrs, **row})
    n, c, _, width = cx.b.type(pooled).shape
    return _reshape_to(cx, node, [n, c, width], pooled)


@_register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: _Converter, node: onnx.NodeProto) -> str:
    x = cx.tensor(node.input[0])
    op = "reduce_mean" if node.op_type == "GlobalAveragePool" else "reduce_max"
    return cx.emit(node, op, [x], {"axes": list(range(2, len(cx.b.type(x).shape))), "keepdims": True})


# ---------------------------------------------------------------- layout


@_register("Transpose")
def _transpose(cx: _Converter, node: onnx.NodeProto) -> str:
    perm = _attr(node, "perm")
    return cx.emit(node, "transpose", [cx.tensor(node.input[0])], {} if perm is None else {"perm": list(perm)})


def _reshape_to(cx: _Converter, node: onnx.NodeProto, shape: list[int], tensor: str | None = None) -> str:
    """A view of ``tensor`` (default: the node's first operand) with ``shape``."""
    tensor = cx.tensor(node.input[0]) if tensor is None else tensor
    return cx.emit(node, "reshape", [tensor], {"shape": [int(d) for d in shape]})


@_register("Reshape")
def _reshape(cx: _Converter, node: onnx.NodeProto) -> str:
    """The target from the shape operand (0 copies the input's size unless
    ``allowzero``), or ONNX's inferred shape when the operand is computed."""
    inferred = cx.types.get(node.output[0], (None,))[0]
    try:
        target = [int(d) for d in cx.static(node, 1)]
    except Unmappable:
        if inferred is None:
            raise
        return _reshape_to(cx, node, list(inferred))
    shape = cx.shape(node.input[0])
    if not _attr(node, "allowzero", 0):
        target = [shape[i] if d == 0 else d for i, d in enumerate(target)]
    try:
        return _reshape_to(cx, node, list(reshape_target(shape, target)))
    except InferenceError as exc:
        raise Unmappable(str(exc)) from None


@_register("Flatten")
def _flatten(cx: _Converter, node: onnx.NodeProto) -> str:
    shape = cx.shape(node.input[0])
    axis = _attr(node, "axis", 1)
    axis = axis + len(shape) if axis < 0 else axis  # ONNX: a negative axis counts from the rank
    return _reshape_to(cx, node, [math.prod(shape[:axis]), math.prod(shape[axis:])])


def _axes_of(cx: _Converter, node: onnx.NodeProto) -> list[int] | None:
    """Unsqueeze/Squeeze axes: an attribute before opset 13, the second operand after."""
    if cx.opset >= 13:
        axes = cx.static(node, 1)
        return None if axes is None else [int(a) for a in axes]
    return _attr(node, "axes")


@_register("Unsqueeze")
def _unsqueeze(cx: _Converter, node: onnx.NodeProto) -> str:
    shape = list(cx.shape(node.input[0]))
    axes = _axes_of(cx, node)
    rank = len(shape) + len(axes)
    for axis in sorted(a % rank for a in axes):
        shape.insert(axis, 1)
    return _reshape_to(cx, node, shape)


@_register("Squeeze")
def _squeeze(cx: _Converter, node: onnx.NodeProto) -> str:
    shape = cx.shape(node.input[0])
    axes = _axes_of(cx, node)
    drop = {i for i, d in enumerate(shape) if d == 1} if axes is None else {a % len(shape) for a in axes}
    return _reshape_to(cx, node, [d for i, d in enumerate(shape) if i not in drop])


@_register("Expand")
def _expand(cx: _Converter, node: onnx.NodeProto) -> str:
    """Bidirectional broadcasting: the result takes the larger size on every axis."""
    x = cx.tensor(node.input[0])
    target = broadcast_shapes([cx.b.type(x).shape, tuple(int(d) for d in cx.static(node, 1))])
    return cx.emit(node, "broadcast_to", [x], {"shape": list(target)})


@_register("Slice")
def _slice(cx: _Converter, node: onnx.NodeProto) -> str:
    """ONNX's own clamping and negative indices are the format's slice semantics."""
    if cx.opset < 10:
        starts, ends, axes, steps = _attr(node, "starts"), _attr(node, "ends"), _attr(node, "axes"), None
    else:
        starts, ends, axes, steps = (cx.static(node, i) for i in range(1, 5))
    attrs = {"starts": [int(v) for v in starts], "ends": [int(v) for v in ends]}
    if axes is not None:
        attrs["axes"] = [int(v) for v in axes]
    if steps is not None:
        attrs["steps"] = [int(v) for v in steps]
    return cx.emit(node, "slice", [cx.tensor(node.input[0])], attrs)


@_register("Concat")
def _concat(cx: _Converter, node: onnx.NodeProto) -> str:
    return cx.emit(node, "concat", [cx.tensor(i) for i in node.input], {"axis": _attr(node, "axis")})


@_register("Pad")
def _pad(cx: _Converter, node: onnx.NodeProto) -> str:
    mode = _attr(node, "mode", "constant")
    if mode != "constant":
        raise Unmappable(f"Pad mode '{mode}' (only constant padding maps to pad)")
    x = cx.tensor(node.input[0])
    rank = len(cx.b.type(x).shape)
    if cx.opset < 11:
        pads, value, axes = list(_attr(node, "pads")), _attr(node, "value", 0.0), None
    else:
        pads = [int(p) for p in cx.static(node, 1)]
        value = cx.static(node, 2)
        value = 0 if value is None else value.item()
        axes = cx.static(node, 3)
    if axes is not None:  # opset 18: pads for the listed axes only
        full = [0] * (2 * rank)
        for i, axis in enumerate(int(a) % rank for a in axes):
            full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
        pads = full
    return cx.emit(node, "pad", [x], {"pads": pads, "value": value})


@_register("Gather")
def _gather(cx: _Converter, node: onnx.NodeProto) -> str:
    """A known scalar index is a slice and a view; anything else is a gather."""
    axis = _attr(node, "axis", 0)
    value = cx.env[node.input[1]]
    if isinstance(value, _Known) and value.value is not None and value.value.ndim == 0:
        x = cx.tensor(node.input[0])
        shape = cx.b.type(x).shape
        axis %= len(shape)
        index = int(value.value) % shape[axis]
        picked = cx.helper(node, "slice", "slice", [x], {"starts": [index], "ends": [index + 1], "axes": [axis]})
        return _reshape_to(cx, node, list(shape[:axis] + shape[axis + 1:]), picked)
    return cx.emit(node, "gather", [cx.tensor(node.input[0]), cx.tensor(node.input[1])], {"axis": axis})


@_register("Split")
def _split(cx: _Converter, node: onnx.NodeProto) -> list[str]:
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    axis = _attr(node, "axis", 0) % len(shape)
    sizes = _attr(node, "split") if cx.opset < 13 else cx.static(node, 1)
    outputs = len(node.output)
    if sizes is None:  # equal parts, the last one smaller (opset 18's num_outputs)
        part = math.ceil(shape[axis] / outputs)
        sizes = [min(part, shape[axis] - i * part) for i in range(outputs)]
    starts = np.cumsum([0, *sizes])
    return [cx.emit(node, "slice", [x], {"starts": [int(starts[i])], "ends": [int(starts[i + 1])], "axes": [axis]},
                    out=i)
            for i in range(outputs)]


@_register("Tile")
def _tile(cx: _Converter, node: onnx.NodeProto) -> str:
    """A size-1 axis before each repeated axis, broadcast to the repeat count, then
    merged into it: [a, b] by [2, 3] is [1, a, 1, b] -> [2, a, 3, b] -> [2a, 3b]."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    repeats = [int(r) for r in cx.static(node, 1).ravel()]
    if len(repeats) != len(shape) or min(repeats, default=0) < 0:
        raise Unmappable(f"repeats {repeats} for a rank-{len(shape)} tensor")
    if all(r == 1 for r in repeats):
        return _reshape_to(cx, node, list(shape))
    split = [d for r, n in zip(repeats, shape) for d in ([1, n] if r != 1 else [n])]
    copies = [d for r, n in zip(repeats, shape) for d in ([r, n] if r != 1 else [n])]
    view = cx.helper(node, "split", "reshape", [x], {"shape": split})
    spread = cx.helper(node, "copies", "broadcast_to", [view], {"shape": copies})
    return _reshape_to(cx, node, [r * n for r, n in zip(repeats, shape)], spread)


# ---------------------------------------------------------------- generators and scans
# Generators reach a converter only when their result is too large to fold.


@_register("ConstantOfShape")
def _constant_of_shape(cx: _Converter, node: onnx.NodeProto) -> str:
    """A one-element constant broadcast to the static shape."""
    shape = [int(d) for d in cx.static(node, 0).ravel()]
    value = _attrs(node).get("value")
    fill = np.zeros((), np.float32) if value is None else numpy_helper.to_array(value).reshape(())
    return cx.b.filled(cx.names[node.output[0]], shape, cx.dtype(node.output[0]), fill)


@_register("Range")
def _range(cx: _Converter, node: onnx.NodeProto) -> str:
    """``start + i * delta`` for i below ceil((limit - start) / delta), in the
    operands' dtype (stated on the op)."""
    dtype = cx.dtype(node.output[0])
    bounds = [cx.static(node, i) for i in range(3)]
    if any(b is None or b.size != 1 for b in bounds):
        raise Unmappable("Range takes three scalars")
    start, limit, delta = (b.item() for b in bounds)
    return cx.emit(node, "arange", [], {"start": start, "limit": limit, "delta": delta, "dtype": dtype})


@_register("CumSum")
def _cumsum(cx: _Converter, node: onnx.NodeProto) -> str:
    """Integers accumulate in int64 in the format; the op states ONNX's dtype (the
    input's), so the loader converts the sums."""
    axis = cx.static(node, 1)
    if axis.size != 1:
        raise Unmappable(f"CumSum's axis must be one number, got {axis.tolist()}")
    attrs = {"axis": int(axis.item()), "exclusive": bool(_attr(node, "exclusive", 0)),
             "reverse": bool(_attr(node, "reverse", 0))}
    return cx.emit(node, "cumsum", [cx.tensor(node.input[0])], attrs)
