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
type as ``kind`` (``domain.OpType`` outside the default domain). Of the ai.onnx.ml
domain, the linear models, Normalizer, Scaler, Binarizer and ZipMap are mapped too,
where the specification's code and onnxruntime agree (the last section).
"""

from __future__ import annotations

import heapq
import math
import os
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from ..dtypes import cast_array, numpy_dtype
from ..errors import GraphError, InferenceError
from .. import onnx_semantics
from ..graph import Graph
from ..yamlio import read_bytes, read_error_message
from ..ops import broadcast_shapes, reshape_target
from . import GraphBuilder, ImportResult, Unmappable, batch_norm, conv1d, conv3d, group_norm, report, sanitize

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
#: The longest .onnx file read: protobuf's 2 GiB message limit (larger weights live
#: in external data files, read one tensor at a time).
MAX_MODEL_BYTES = 1 << 31
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
        data = read_bytes(path, MAX_MODEL_BYTES, "protobuf's limit for a model (larger weights are external data)")
    except FileNotFoundError:
        raise GraphError(f"{path}: no such file") from None
    except OSError as exc:
        raise GraphError(f"{path}: {read_error_message(exc)}") from None
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # noqa: BLE001 - protobuf raises several types for a file that is not ONNX
        raise GraphError(f"{path}: not an ONNX model ({type(exc).__name__}: {' '.join(str(exc).split())})") from None
    if not model.HasField("graph"):  # protobuf parses an empty file as an empty message
        raise GraphError(f"{path}: not an ONNX model (it holds no graph)")
    return model, str(path), str(path.parent)


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Tensors a subgraph (an ``If`` branch, a ``Loop`` body) reads from outside it."""
    produced = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads |= {i for i in node.input if i and i not in produced}
        reads |= _node_outer_reads(node) - produced
        produced |= {o for o in node.output if o}
    return reads


def _node_outer_reads(node: onnx.NodeProto) -> set[str]:
    """Tensors the subgraphs of ``node`` (its branches, its body) read from the graph
    that holds it: operands of the node as much as its inputs."""
    reads: set[str] = set()
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            reads |= _outer_reads(sub)
    return reads


def topologically_sorted(model: onnx.ModelProto, label: str) -> onnx.ModelProto:
    """``model`` with its graph's nodes in topological order (ONNX requires it, but
    onnxruntime also runs models that list a node before its producers): the model
    itself when they are, else a copy, each node as early as its inputs allow.

    Raises
    ------
    GraphError
        A node reads a tensor that no node produces and that is no graph input or
        initializer, or the nodes form a cycle.

    Examples
    --------
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    >>> nodes = [helper.make_node("Relu", ["t"], ["y"]), helper.make_node("Exp", ["x"], ["t"])]
    >>> model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    >>> [n.op_type for n in topologically_sorted(model, "<onnx>").graph.node]
    ['Exp', 'Relu']
    >>> cycle = [helper.make_node("Relu", ["t"], ["u"]), helper.make_node("Exp", ["u"], ["t"]),
    ...          helper.make_node("Neg", ["x"], ["y"])]
    >>> topologically_sorted(helper.make_model(helper.make_graph(cycle, "g", [x], [y])), "m.onnx")
    Traceback (most recent call last):
    ...
    partitioner.errors.GraphError: m.onnx: node 'u' (Relu) reads tensor 't', which is computed on a cycle of nodes
    """
    nodes = list(model.graph.node)
    given = {v.name for v in model.graph.input} | {t.name for t in model.graph.initializer} | {""}
    producer: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for out in node.output:
            if out:
                producer.setdefault(out, k)

    def label_of(k: int) -> str:
        node = nodes[k]
        return f"node '{node.name or next((o for o in node.output if o), str(k))}' ({node.op_type})"

    needs: list[set[int]] = []
    for k, node in enumerate(nodes):
        deps = set()
        for tensor in node.input:
            if tensor in given:
                continue
            if tensor not in producer:
                raise GraphError(f"{label}: {label_of(k)} reads tensor '{tensor}', which no node produces and which "
                                 f"is no graph input or initializer")
            deps.add(producer[tensor])
        # a subgraph's reads from this graph (outer scope) count as inputs
        deps |= {producer[t] for t in _node_outer_reads(node) if t in producer and t not in given}
        needs.append(deps)
    if all(d < k for k, deps in enumerate(needs) for d in deps):
        return model

    readers: dict[int, list[int]] = {k: [] for k in range(len(nodes))}
    for k, deps in enumerate(needs):
        for d in deps:
            readers[d].append(k)
    waiting = [len(deps) for deps in needs]
    ready = [k for k in range(len(nodes)) if not waiting[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for r in readers[k]:
            waiting[r] -= 1
            if not waiting[r]:
                heapq.heappush(ready, r)
    if len(order) < len(nodes):  # every node left waits on another one left: walk those waits into a cycle
        done, path, seen = set(order), [], {}
        k = min(k for k in range(len(nodes)) if k not in set(order))
        while k not in seen:
            seen[k] = len(path)
            path.append(k)
            k = min(d for d in needs[k] if d not in done)
        after = path[seen[k] + 1] if seen[k] + 1 < len(path) else k
        tensor = next((t for t in nodes[k].input if producer.get(t) == after),
                      next(o for o in nodes[after].output if o))
        raise GraphError(f"{label}: {label_of(k)} reads tensor '{tensor}', which is computed on a cycle of nodes")
    sorted_model = onnx.ModelProto()
    sorted_model.CopyFrom(model)
    del sorted_model.graph.node[:]
    sorted_model.graph.node.extend(nodes[k] for k in order)
    return sorted_model


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
    model = topologically_sorted(model, label)
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
    try:
        return _Converter(model, sanitize(name), source_text, label, base_dir, opset).run()
    except Unmappable as exc:  # raised outside any one node (a graph input, a weight): no op can stand in
        raise GraphError(f"{label}: {exc}") from None
    except onnx.checker.ValidationError as exc:  # a weight's external data: missing, or outside the model's folder
        raise GraphError(f"{label}: {' '.join(str(exc).split())}") from None


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
        self.b = GraphBuilder(name, source, label, reserved=self.names.values())
        self.types = self._onnx_types()
        self.env: dict[str, Any] = {}
        self.consumed = {i for n in self.graph.node for i in [*n.input, *_node_outer_reads(n)]} | {
            o.name for o in self.graph.output}

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
                if shape is None:
                    raise GraphError(f"{self.label}: input '{value.name}' has no static shape; format v1 needs one")
                self.env[value.name] = self.b.add_input(self.names[value.name], shape, self.dtype(value.name))
        for node in self.graph.node:
            self._node(node)
        unnamed = [k for k, o in enumerate(self.graph.output) if o.name not in self.env]
        if unnamed:  # ONNX names a missing optional tensor "": no node computes it
            name = self.graph.output[unnamed[0]].name
            raise GraphError(f"{self.label}: graph output {unnamed[0]} ('{name}') is computed by no node")
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
        mark, noted = self.b.mark(), len(self.b.summary.notes)
        try:
            converter = _CONVERTERS.get(("" if default else node.domain, node.op_type))
            if converter is None:
                raise Unmappable("")
            results = converter(self, node)
            self.env.update(zip(node.output, results if isinstance(results, list) else [results]))
            self.b.count("mapped")
        except GraphError:
            raise
        except Exception as why:  # noqa: BLE001 - any op the converter cannot handle becomes custom, never a crash
            self.b.rollback(mark)
            del self.b.summary.notes[noted:]  # a note on what the node would have become
            reason = str(why) if isinstance(why, Unmappable) else f"converter failed: {type(why).__name__}: {why}"
            self._custom(node, kind, reason)
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

    def _custom(self, node: onnx.NodeProto, kind: str, reason: str = "") -> None:
        """One ``custom`` op per output of ``node``, each keeping the node as its
        ``onnx`` attribute (``partitioner.onnx_semantics``) where onnx.reference can
        run it, so that a run computes its real result. ``reason`` (why the node is
        not mapped) ends the error for an output without a static shape."""
        # a branch or body (If, Loop, Scan) may read tensors of the enclosing graph by
        # name: they are operands too, or the plan would not read them
        outer = sorted(_node_outer_reads(node))
        inputs = list(dict.fromkeys(self.tensor(i) for i in [*node.input, *outer] if i))
        operands = [f"x{inputs.index(self.tensor(i))}" if i else None for i in node.input]
        types = [(self.b.type(t).shape, _ELEM_TYPES[self.b.type(t).dtype]) for t in inputs]
        calls = any((f.domain, f.name) == (node.domain, node.op_type) for f in self._functions)
        functions = self._functions if calls else []  # a model-local function, and those it may call
        for k, out in enumerate(node.output):
            if not out:
                continue
            shape, elem_type = self.types.get(out, (None, None))
            if shape is None:
                why = f" (not mapped: {reason})" if reason else ""
                raise GraphError(f"{self.label}: op '{node.name or out}' ({kind}): ONNX shape inference gives "
                                 f"no static shape for its output '{out}'; format v1 needs one for a custom op{why}")
            dtype = self.dtype(out, elem_type)
            # (a node reading outer tensors cannot run alone: a run draws its result)
            kept = None if _random(node) or outer else onnx_semantics.encode(
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
        shape, dtype = self.result_type(node, out)
        return self.b.op(self.names[node.output[out]], op, inputs, attrs, shape, dtype)

    def result_type(self, node: onnx.NodeProto, out: int = 0) -> tuple[Any, str | None]:
        """ONNX's shape and format dtype of output ``out`` of ``node`` (None where unknown)."""
        onnx_name = node.output[out]
        shape, elem_type = self.types.get(onnx_name, (None, None))
        return shape, self.dtype(onnx_name, elem_type) if elem_type else None

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


def _float_attr(node: onnx.NodeProto, key: str, default: float) -> float:
    """A float attribute; its default as ONNX states it, a float32 value (0.01 is
    0.009999999776482582), as a stated one is."""
    return float(_attr(node, key, np.float32(default)))


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
_CONVERTERS: dict[tuple[str, str], Converter] = {}  # (domain, "" for ONNX's own; op type) -> converter


def _register(*op_types: str, domain: str = ""):
    def wrap(fn: Converter) -> Converter:
        for op_type in op_types:
            _CONVERTERS[domain, op_type] = fn
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
    defines it). ``fmod=1``: C's fmod, the dividend's sign, of integers and floats."""
    return _elementwise("fmod" if _attr(node, "fmod", 0) else "remainder")(cx, node)


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
    """``leaky_relu`` (x where x > 0, else ``alpha * x``), the specification's x where
    x >= 0 for a finite alpha >= 0; another alpha would give zeros the wrong sign (or
    NaN), so it is ``where(x < 0, alpha * x, x)``."""
    x, alpha = cx.tensor(node.input[0]), _float_attr(node, "alpha", 0.01)
    if math.isfinite(alpha) and alpha >= 0:
        return cx.emit(node, "leaky_relu", [x], {"alpha": alpha})
    scaled = cx.helper(node, "scaled", "mul", [x, alpha])
    return cx.emit(node, "where", [cx.helper(node, "negative", "lt", [x, 0]), scaled, x])


@_register("Clip")
def _clip(cx: _Converter, node: onnx.NodeProto) -> str:
    """``clamp``; a bound computed at run time (opset 11 on) makes it ``maximum`` by
    the lower bound, then ``minimum`` by the upper (min > max gives max, as ONNX
    says). An absent bound of a float X is ``numeric_limits::lowest()`` or
    ``max()``, as the specification and onnxruntime have it, of X's dtype (before
    opset 11, of float32: the attributes' defaults): -inf becomes the largest
    negative float (onnx.reference leaves it, clipping nothing)."""
    x = cx.tensor(node.input[0])
    extremes = _extremes(cx.b.type(x).dtype)
    if extremes and cx.opset < 11:
        extremes = _extremes("float32")
    if cx.opset < 11:
        bounds = {"min": _attr(node, "min"), "max": _attr(node, "max")}
    else:
        present = [i < len(node.input) and bool(node.input[i]) for i in (1, 2)]
        try:
            bounds = {key: cx.static(node, i) for key, i in (("min", 1), ("max", 2))}
        except Unmappable:
            steps = [(op, cx.operand(node, i) if there else extremes[k])
                     for k, (op, i, there) in enumerate(zip(("maximum", "minimum"), (1, 2), present))
                     if there or extremes]
            for op, bound in steps[:-1]:
                x = cx.helper(node, op, op, [x, bound])
            return cx.emit(node, steps[-1][0], [x, steps[-1][1]])
        bounds = {k: (None if v is None else v.item()) for k, v in bounds.items()}
    if extremes:
        bounds = {k: extremes[i] if bounds[k] is None else bounds[k] for i, k in enumerate(("min", "max"))}
    return cx.emit(node, "clamp", [x], {k: v for k, v in bounds.items() if v is not None})


def _extremes(dtype: str) -> tuple[float, float] | None:
    """The finite extremes of a float dtype (``numeric_limits::lowest()``, ``max()``);
    None for integers, whose absent bounds clip nothing."""
    if dtype not in _FLOATS + ("float8_e4m3fn", "float8_e5m2"):
        return None
    info = ml_dtypes.finfo(numpy_dtype(dtype))
    return float(info.min), float(info.max)


# ---------------------------------------------------------------- activations and rounding
# Each as the specification's formula, in onnxruntime's order of operations where the
# formula leaves one open (exp(x) - 1, not expm1; the branches' edges and signed zeros
# as onnxruntime gives them, which is the specification's). Half-precision input is
# computed in float32 and rounded once, by the last op, as onnxruntime's kernels do.

_HALF = ("float16", "bfloat16")


def _staged(cx: _Converter, node: onnx.NodeProto, index: int = 0) -> str:
    """Operand ``index`` as a tensor, cast to float32 when it is float16 or bfloat16:
    a decomposition then computes in float32, and its last op, which states ONNX's
    dtype (``emit``), rounds once."""
    x = cx.tensor(node.input[index])
    if cx.b.type(x).dtype in _HALF:
        x = cx.helper(node, f"in{index}" if index else "in", "cast", [x], {"dtype": "float32"})
    return x


def _log1p(cx: _Converter, node: onnx.NodeProto, u: str, part: str) -> str:
    """``log(1 + u)`` for ``u >= 0`` to a few ulps where ``1 + u`` rounds (Goldberg's
    ``u * log(w) / (w - 1)``, ``w = 1 + u``; ``u`` itself where ``w`` rounds to 1),
    as Eigen's vectorised ``log1p``, which onnxruntime's kernels use."""
    w = cx.helper(node, f"{part}_w", "add", [u, 1.0])
    ratio = cx.helper(node, f"{part}_ratio", "div", [cx.helper(node, f"{part}_log", "log", [w]),
                                                    cx.helper(node, f"{part}_wm1", "sub", [w, 1.0])])
    rounded = cx.helper(node, f"{part}_one", "eq", [w, 1.0])
    return cx.helper(node, part, "where", [rounded, u, cx.helper(node, f"{part}_large", "mul", [u, ratio])])


def _softplus_terms(cx: _Converter, node: onnx.NodeProto, x: str) -> list[str]:
    """The two terms of ``log(1 + exp(x))`` without overflow, ``max(x, 0)`` and
    ``log1p(exp(-|x|))``: onnxruntime's ``x + log1p(exp(-x))`` for x > 0 and
    ``log1p(exp(x))`` otherwise (where the first term is 0)."""
    tail = cx.helper(node, "exp", "exp", [cx.helper(node, "nabs", "neg", [cx.helper(node, "abs", "abs", [x])])])
    return [cx.helper(node, "relu", "relu", [x]), _log1p(cx, node, tail, "log1p")]


@_register("PRelu")
def _prelu(cx: _Converter, node: onnx.NodeProto) -> str:
    """``slope * x`` where x < 0, else x (zeros keep their sign). The slope broadcasts
    to X (opset 7 on: unidirectionally); before opset 7 a slope of one element is
    shared and one of C elements is per channel (axis 1), as PyTorch exported it."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    slope = cx.operand(node, 1)
    if isinstance(slope, str):
        slope_shape = cx.b.type(slope).shape
        if cx.opset < 7 and math.prod(slope_shape) == 1:
            slope = cx.helper(node, "slope", "reshape", [slope], {"shape": []})
        elif cx.opset < 7:
            if len(shape) < 2 or slope_shape != (shape[1],):
                raise Unmappable(f"a slope of shape {list(slope_shape)} for X {list(shape)} before opset 7")
            slope = cx.helper(node, "slope", "reshape", [slope], {"shape": [shape[1]] + [1] * (len(shape) - 2)})
        elif len(slope_shape) > len(shape) or _broadcast(shape, slope_shape) != shape:
            raise Unmappable(f"slope {list(slope_shape)} does not broadcast to X {list(shape)}")
    scaled = cx.helper(node, "scaled", "mul", [x, slope])
    return cx.emit(node, "where", [cx.helper(node, "negative", "lt", [x, 0]), scaled, x])


@_register("Elu")
def _elu(cx: _Converter, node: onnx.NodeProto) -> str:
    """x where x >= 0, else ``alpha * (exp(x) - 1)``."""
    x = _staged(cx, node)
    em1 = cx.helper(node, "em1", "sub", [cx.helper(node, "exp", "exp", [x]), 1.0])
    below = cx.helper(node, "below", "mul", [em1, _float_attr(node, "alpha", 1.0)])
    return cx.emit(node, "where", [cx.helper(node, "nonneg", "ge", [x, 0.0]), x, below])


@_register("Selu")
def _selu(cx: _Converter, node: onnx.NodeProto) -> str:
    """``gamma * x`` where x > 0, else ``(gamma * alpha) * (exp(x) - 1)``, the product
    of the attributes taken first, in the computing dtype, as onnxruntime takes it
    (+0 at -0, the specification's ``gamma * (alpha * e^x - alpha)``)."""
    x = _staged(cx, node)
    alpha, gamma = _float_attr(node, "alpha", 1.6732632423543772), _float_attr(node, "gamma", 1.0507010221481323)
    wide = cx.b.type(x).dtype == "float64"
    scale = float(np.float64(alpha) * gamma) if wide else float(np.float32(alpha) * np.float32(gamma))
    em1 = cx.helper(node, "em1", "sub", [cx.helper(node, "exp", "exp", [x]), 1.0])
    return cx.emit(node, "where", [cx.helper(node, "pos", "gt", [x, 0.0]), cx.helper(node, "above", "mul", [x, gamma]),
                                   cx.helper(node, "below", "mul", [em1, scale])])


@_register("Celu")
def _celu(cx: _Converter, node: onnx.NodeProto) -> str:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    x = _staged(cx, node)
    alpha = _float_attr(node, "alpha", 1.0)
    em1 = cx.helper(node, "em1", "sub", [cx.helper(node, "exp", "exp", [cx.helper(node, "scaled", "div", [x, alpha])]),
                                         1.0])
    below = cx.helper(node, "below", "clamp", [cx.helper(node, "elu", "mul", [em1, alpha])], {"max": 0.0})
    return cx.emit(node, "add", [cx.helper(node, "relu", "relu", [x]), below])


@_register("Softplus")
def _softplus(cx: _Converter, node: onnx.NodeProto) -> str:
    """``log(exp(x) + 1)`` without its overflow (x beyond 88 is x, as onnxruntime
    gives it; onnx.reference's ``log(exp(x) + 1)`` is inf there)."""
    return cx.emit(node, "add", _softplus_terms(cx, node, _staged(cx, node)))


@_register("Softsign")
def _softsign(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x / (1 + |x|)``, a true division (onnxruntime 1.32 multiplies by a reciprocal
    estimate, an ulp off and above 1 at ±3.4e38)."""
    x = _staged(cx, node)
    return cx.emit(node, "div", [x, cx.helper(node, "den", "add", [cx.helper(node, "abs", "abs", [x]), 1.0])])


def _line(cx: _Converter, node: onnx.NodeProto, x: str, alpha: float, beta: float) -> str:
    """``alpha * x + beta``, which HardSigmoid clamps to [0, 1]."""
    return cx.helper(node, "line", "add", [cx.helper(node, "ax", "mul", [x, alpha]), beta])


@_register("HardSigmoid")
def _hard_sigmoid(cx: _Converter, node: onnx.NodeProto) -> str:
    """``max(0, min(1, alpha * x + beta))``; NaN stays NaN."""
    line = _line(cx, node, _staged(cx, node), _float_attr(node, "alpha", 0.2), _float_attr(node, "beta", 0.5))
    return cx.emit(node, "clamp", [line], {"min": 0.0, "max": 1.0})


@_register("HardSwish")
def _hard_swish(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x * max(0, min(1, x / 6 + 0.5))`` (HardSigmoid's alpha 1/6, beta 0.5)."""
    x = _staged(cx, node)
    line = _line(cx, node, x, float(np.float32(1 / 6)), 0.5)
    gate = cx.helper(node, "gate", "clamp", [line], {"min": 0.0, "max": 1.0})
    return cx.emit(node, "mul", [x, gate])


@_register("ThresholdedRelu")
def _thresholded_relu(cx: _Converter, node: onnx.NodeProto) -> str:
    """x where x > alpha, else 0 (NaN gives 0)."""
    x = cx.tensor(node.input[0])
    return cx.emit(node, "where", [cx.helper(node, "above", "gt", [x, _float_attr(node, "alpha", 1.0)]), x, 0.0])


@_register("Shrink")
def _shrink(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x + bias`` where x < -lambd, ``x - bias`` where x > lambd, else 0 (NaN gives 0).
    Float input only: of an integer X, onnxruntime adds the float bias in float32
    and truncates, onnx.reference in float64, and they disagree."""
    x = cx.tensor(node.input[0])
    dtype = cx.b.type(x).dtype
    if dtype not in _FLOATS:
        raise Unmappable(f"{dtype} input: onnxruntime adds the float bias in float32, onnx.reference in float64")
    lambd, bias = _float_attr(node, "lambd", 0.5), _float_attr(node, "bias", 0.0)
    above = cx.helper(node, "above", "where", [cx.helper(node, "gt", "gt", [x, lambd]),
                                               cx.helper(node, "minus", "sub", [x, bias]), 0.0])
    return cx.emit(node, "where", [cx.helper(node, "lt", "lt", [x, -lambd]), cx.helper(node, "plus", "add", [x, bias]),
                                   above])


@_register("Mish")
def _mish(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x * tanh(softplus(x))``, softplus as Softplus maps."""
    x = _staged(cx, node)
    softplus = cx.helper(node, "softplus", "add", _softplus_terms(cx, node, x))
    return cx.emit(node, "mul", [x, cx.helper(node, "tanh", "tanh", [softplus])])


@_register("Sign")
def _sign(cx: _Converter, node: onnx.NodeProto) -> str:
    """1 where x > 0, -1 where x < 0, else 0; of floats, NaN stays NaN and -0 gives +0
    (NumPy's sign, and onnxruntime's)."""
    x = cx.tensor(node.input[0])
    dtype = cx.b.type(x).dtype
    rest = x
    if dtype in _FLOATS + ("float8_e4m3fn", "float8_e5m2"):
        rest = cx.helper(node, "zero", "where", [cx.helper(node, "is_zero", "eq", [x, 0]), 0.0, x])
    if not dtype.startswith("uint"):
        rest = cx.helper(node, "negative", "where", [cx.helper(node, "lt", "lt", [x, 0]), -1, rest])
    return cx.emit(node, "where", [cx.helper(node, "gt", "gt", [x, 0]), 1, rest])


@_register("Floor", "Ceil")
def _floor_ceil(cx: _Converter, node: onnx.NodeProto) -> str:
    """``trunc(x)``, one less where x is below it (Floor) or one more where above it
    (Ceil). Exact: a value with a fraction is below 2^(mantissa bits), where its
    truncation +- 1 is exact; zeros keep their sign, inf and NaN themselves."""
    x = cx.tensor(node.input[0])
    t = cx.helper(node, "trunc", "trunc", [x])
    test, step = ("lt", "sub") if node.op_type == "Floor" else ("gt", "add")
    return cx.emit(node, "where", [cx.helper(node, "off", test, [x, t]), cx.helper(node, "step", step, [t, 1]), t])


@_register("Round")
def _round(cx: _Converter, node: onnx.NodeProto) -> str:
    """Half to even, exactly: ``t = trunc(x)`` moves one away from zero where the
    fraction ``|x - t|`` exceeds 1/2, or equals it and t is odd. The fraction, t and
    t +- 1 are exact; zeros keep their sign (-0.4 and -0.5 give -0), inf and NaN
    themselves."""
    x = cx.tensor(node.input[0])
    t = cx.helper(node, "trunc", "trunc", [x])
    frac = cx.helper(node, "frac", "abs", [cx.helper(node, "diff", "sub", [x, t])])
    odd = cx.helper(node, "odd", "ne", [cx.helper(node, "parity", "fmod", [t, 2]), 0])
    half_odd = cx.helper(node, "tie", "logical_and", [cx.helper(node, "half", "eq", [frac, 0.5]), odd])
    away = cx.helper(node, "away", "logical_or", [cx.helper(node, "above", "gt", [frac, 0.5]), half_odd])
    outward = cx.helper(node, "outward", "where", [cx.helper(node, "negative", "lt", [x, 0]),
                                                   cx.helper(node, "down", "sub", [t, 1]),
                                                   cx.helper(node, "up", "add", [t, 1])])
    return cx.emit(node, "where", [away, outward, t])


@_register("IsInf")
def _is_inf(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x == inf`` and/or ``x == -inf`` as ``detect_positive``/``detect_negative`` ask."""
    x = cx.tensor(node.input[0])
    positive, negative = _attr(node, "detect_positive", 1), _attr(node, "detect_negative", 1)
    if positive and negative:
        return cx.emit(node, "eq", [cx.helper(node, "abs", "abs", [x]), math.inf])
    if positive or negative:
        return cx.emit(node, "eq", [x, math.inf if positive else -math.inf])
    return cx.b.filled(cx.names[node.output[0]], cx.b.type(x).shape, "bool", False)


@_register("IsNaN")
def _is_nan(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x != x``: true for NaN alone."""
    x = cx.tensor(node.input[0])
    return cx.emit(node, "ne", [x, x])


@_register("Xor")
def _xor(cx: _Converter, node: onnx.NodeProto) -> str:
    """Of bools, ``a != b`` (broadcasting)."""
    return cx.emit(node, "ne", [cx.tensor(node.input[0]), cx.tensor(node.input[1])])


def _offsets(cx: _Converter, node: onnx.NodeProto, rows: int, cols: int) -> str:
    """``column - row`` of a [rows, cols] matrix (int64), from two ``arange`` views."""
    row = cx.helper(node, "row", "reshape", [cx.helper(node, "rows", "arange", [], {"start": 0, "limit": rows})],
                    {"shape": [rows, 1]})
    col = cx.helper(node, "col", "reshape", [cx.helper(node, "cols", "arange", [], {"start": 0, "limit": cols})],
                    {"shape": [1, cols]})
    return cx.helper(node, "offset", "sub", [col, row])


@_register("Trilu")
def _trilu(cx: _Converter, node: onnx.NodeProto) -> str:
    """The upper (``upper=1``) or lower triangle of the last two axes, from diagonal k
    (a known operand, default 0): X where column - row >= k (upper) or <= k (lower),
    else 0; the row and column indices are ``arange``s, so the mask is elementwise."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    if len(shape) < 2:
        raise Unmappable(f"Trilu needs rank 2 or more, got {list(shape)}")
    k = cx.static(node, 1)
    k = 0 if k is None else int(k.reshape(()))
    keep = cx.helper(node, "keep", "ge" if _attr(node, "upper", 1) else "le", [_offsets(cx, node, *shape[-2:]), k])
    if cx.b.type(x).dtype == "bool":
        return cx.emit(node, "logical_and", [x, keep])
    return cx.emit(node, "where", [keep, x, 0])


@_register("GatherElements")
def _gather_elements(cx: _Converter, node: onnx.NodeProto) -> str:
    """``data[..., indices[i], ...]`` along ``axis`` at every position i of
    ``indices``: one ``gather`` from data viewed flat, at the linear index
    ``sum(coordinate_k * stride_k)``, the coordinate along ``axis`` the index (a
    negative one counts from the end), the others ``arange``s over indices' axes.
    An index out of range fails the run, as in onnxruntime."""
    data, indices = cx.tensor(node.input[0]), cx.tensor(node.input[1])
    shape, where = cx.b.type(data).shape, cx.b.type(indices).shape
    rank = len(shape)
    if rank == 0 or len(where) != rank:
        raise Unmappable(f"indices {list(where)} of another rank than data {list(shape)}")
    axis = _attr(node, "axis", 0) % rank
    if any(w > d for k, (w, d) in enumerate(zip(where, shape)) if k != axis):
        raise Unmappable(f"indices {list(where)} exceed data {list(shape)} off axis {axis}")
    if cx.b.type(indices).dtype != "int64":
        indices = cx.helper(node, "i64", "cast", [indices], {"dtype": "int64"})
    negative = cx.helper(node, "negative", "lt", [indices, 0])
    total = cx.helper(node, "wrapped", "where", [negative, cx.helper(node, "up", "add", [indices, shape[axis]]),
                                                  indices])
    strides = [math.prod(shape[k + 1:]) for k in range(rank)]
    if strides[axis] != 1:
        total = cx.helper(node, "scaled", "mul", [total, strides[axis]])
    for k in range(rank):
        if k == axis or where[k] == 1:
            continue
        along = cx.helper(node, f"a{k}", "arange", [], {"start": 0, "limit": where[k] * strides[k],
                                                       "delta": strides[k]})
        view = [1] * rank
        view[k] = where[k]
        total = cx.helper(node, f"sum{k}", "add", [total, cx.helper(node, f"c{k}", "reshape", [along],
                                                                      {"shape": view})])
    # an index outside [-size, size) reads past the end, so that the run fails
    valid = cx.helper(node, "valid", "logical_and", [cx.helper(node, "above", "ge", [indices, -shape[axis]]),
                                                     cx.helper(node, "below", "lt", [indices, shape[axis]])])
    total = cx.helper(node, "index", "where", [valid, total, math.prod(shape)])
    flat = cx.helper(node, "flat", "reshape", [data], {"shape": [math.prod(shape)]})
    return cx.emit(node, "gather", [flat, total], {"axis": 0})


@_register("DepthToSpace", "SpaceToDepth")
def _depth_space(cx: _Converter, node: onnx.NodeProto) -> str:
    """Views and one transpose: DepthToSpace [N, C, H, W] -> [N, C/b², H·b, W·b]
    (``mode`` DCR: the depth as [b, b, C/b²]; CRD: as [C/b², b, b]); SpaceToDepth
    the inverse, of either mode (its ``mode``, opset 28)."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    b = _attr(node, "blocksize")
    if len(shape) != 4 or not b or b < 1:
        raise Unmappable(f"{node.op_type} of a {list(shape)} tensor, blocksize {b}")
    n, c, h, w = shape
    if node.op_type == "SpaceToDepth":
        if h % b or w % b:
            raise Unmappable(f"blocksize {b} does not divide {h} x {w}")
        perm = [0, 1, 3, 5, 2, 4] if _attr(node, "mode", "DCR") == "CRD" else [0, 3, 5, 1, 2, 4]
        split, out = [n, c, h // b, b, w // b, b], [n, c * b * b, h // b, w // b]
    else:
        if c % (b * b):
            raise Unmappable(f"blocksize {b} squared does not divide {c} channels")
        if _attr(node, "mode", "DCR") == "CRD":
            split, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
        else:
            split, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
        out = [n, c // (b * b), h * b, w * b]
    blocks = cx.helper(node, "blocks", "reshape", [x], {"shape": split})
    moved = cx.helper(node, "moved", "transpose", [blocks], {"perm": perm})
    return _reshape_to(cx, node, out, moved)


@_register("EyeLike")
def _eye_like(cx: _Converter, node: onnx.NodeProto) -> str:
    """Ones on diagonal k of a 2-D result of X's shape, zeros elsewhere (it reads X's
    static shape only): ``column - row == k`` of two ``arange``s, cast to the dtype."""
    shape = cx.shape(node.input[0])
    if len(shape) != 2:
        raise Unmappable(f"EyeLike of a rank-{len(shape)} tensor")
    diagonal = cx.helper(node, "diagonal", "eq", [_offsets(cx, node, *shape), _attr(node, "k", 0)])
    return cx.emit(node, "cast", [diagonal], {"dtype": cx.dtype(node.output[0])})


@_register("Swish")
def _swish(cx: _Converter, node: onnx.NodeProto) -> str:
    """``x * sigmoid(alpha * x)`` (opset 24)."""
    x = _staged(cx, node)
    alpha = _float_attr(node, "alpha", 1.0)
    scaled = x if alpha == 1.0 else cx.helper(node, "scaled", "mul", [x, alpha])
    return cx.emit(node, "mul", [x, cx.helper(node, "sigmoid", "sigmoid", [scaled])])


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


# ReduceL1 L2 SumSquare LogSum: the elementwise op before the sum and the one after it
_NORM_REDUCTIONS = {"ReduceL1": ("abs", None), "ReduceL2": ("square", "sqrt"), "ReduceSumSquare": ("square", None),
                    "ReduceLogSum": (None, "log")}


@_register(*_NORM_REDUCTIONS)
def _norm_reduce(cx: _Converter, node: onnx.NodeProto) -> str:
    """``reduce_sum`` between elementwise ops: of ``|x|`` (L1), of ``x * x`` and its
    ``sqrt`` (L2), of ``x * x`` (SumSquare), its ``log`` (LogSum); axes as ReduceSum
    takes them (an operand from opset 18). Half input is computed in float32 and
    rounded once; integer L2 and LogSum, and an empty ``axes`` with
    ``noop_with_empty_axes`` (whether X is still squared is not said), are custom."""
    before, after = _NORM_REDUCTIONS[node.op_type]
    x = _staged(cx, node)
    dtype = cx.b.type(x).dtype
    if after is not None and dtype not in _FLOATS:
        raise Unmappable(f"{node.op_type} of {dtype}")
    if cx.opset >= 18:
        axes = cx.static(node, 1)
        axes = None if axes is None else [int(a) for a in axes.ravel()]
    else:
        axes = _attr(node, "axes")
    if not axes and _attr(node, "noop_with_empty_axes", 0):
        raise Unmappable("noop_with_empty_axes with no axes")
    attrs = {"keepdims": bool(_attr(node, "keepdims", 1))}
    if axes:
        attrs["axes"] = list(axes)
    terms = cx.helper(node, before, before, [x]) if before else x
    if after is None:
        return cx.emit(node, "reduce_sum", [terms], attrs)
    return cx.emit(node, after, [cx.helper(node, "sum", "reduce_sum", [terms], attrs)])


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
    if len(xs) not in (3, 4, 5):
        raise Unmappable(f"only 1-D, 2-D and 3-D convolutions map to conv2d (input rank {len(xs)})")
    spatial = len(xs) - 2
    strides, dilations = list(_attr(node, "strides", [1] * spatial)), list(_attr(node, "dilations", [1] * spatial))
    pads = _same_pads(cx, node, xs[2:], list(ws[2:]), strides, dilations)
    bias = [cx.tensor(node.input[2])] if len(node.input) > 2 and node.input[2] else []
    if spatial != 2:
        lowering = conv1d if spatial == 1 else conv3d
        shape, dtype = cx.result_type(node)
        y = lowering(cx.b, cx.names[node.output[0]], x, w, bias[0] if bias else None, strides, pads, dilations,
                     _attr(node, "group", 1), dtype)
        if shape is not None and tuple(shape) != cx.b.type(y).shape:
            raise Unmappable(f"stated shape {list(shape)} disagrees with the inferred shape {list(cx.b.type(y).shape)}")
        return y
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "groups": _attr(node, "group", 1)}
    return cx.emit(node, "conv2d", [x, w, *bias], attrs)


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


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy's broadcast of two shapes, None where they do not broadcast."""
    try:
        return broadcast_shapes([tuple(a), tuple(b)])
    except InferenceError:
        return None


def _stated(cx: _Converter, node: onnx.NodeProto, why: Unmappable, out: int = 0) -> tuple[int, ...]:
    """ONNX's static shape of output ``out`` (inferred, or the model's stated one), for
    an op whose operand that gives its shape is computed at run time (``why``, raised
    again where there is none): the result's shape then fixes its value, as for
    Reshape, Unsqueeze, Squeeze, Expand, Tile, Split and ConstantOfShape."""
    shape = cx.types.get(node.output[out], (None,))[0]
    if shape is None:
        raise why
    return tuple(shape)


@_register("Unsqueeze")
def _unsqueeze(cx: _Converter, node: onnx.NodeProto) -> str:
    """Unsqueeze and Squeeze are views; axes computed at run time take the result's
    static shape."""
    shape = list(cx.shape(node.input[0]))
    try:
        axes = _axes_of(cx, node)
    except Unmappable as why:
        return _reshape_to(cx, node, list(_stated(cx, node, why)))
    rank = len(shape) + len(axes)
    for axis in sorted(a % rank for a in axes):
        shape.insert(axis, 1)
    return _reshape_to(cx, node, shape)


@_register("Squeeze")
def _squeeze(cx: _Converter, node: onnx.NodeProto) -> str:
    shape = cx.shape(node.input[0])
    try:
        axes = _axes_of(cx, node)
    except Unmappable as why:
        return _reshape_to(cx, node, list(_stated(cx, node, why)))
    drop = {i for i, d in enumerate(shape) if d == 1} if axes is None else {a % len(shape) for a in axes}
    return _reshape_to(cx, node, [d for i, d in enumerate(shape) if i not in drop])


@_register("Expand")
def _expand(cx: _Converter, node: onnx.NodeProto) -> str:
    """Bidirectional broadcasting: the result takes the larger size on every axis. A
    shape operand computed at run time takes ONNX's inferred (or the model's stated)
    result shape, as Reshape does: the result is X broadcast to it."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    try:
        target = broadcast_shapes([shape, tuple(int(d) for d in cx.static(node, 1))])
    except Unmappable as why:
        target = _stated(cx, node, why)
        if len(shape) > len(target) or _broadcast(shape, target) != target:
            raise Unmappable(f"X {list(shape)} does not broadcast to the stated result shape {list(target)}") from None
    if tuple(target) == tuple(shape):  # to its own shape: an alias, a view (as Identity)
        return _reshape_to(cx, node, list(target))
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
    """Constant padding is ``pad`` (negative pads crop: :func:`_pad_constant`).
    ``reflect``, ``edge`` and ``wrap`` (opset 19) are,
    axis by axis, a ``concat`` of X with slices of it: mirrored without the edge
    (a step of -1), the edge element broadcast, or the far end, each at most as long
    as the axis (longer reflections are custom); no arithmetic, so exact."""
    mode = _attr(node, "mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unmappable(f"Pad mode '{mode}'")
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    rank = len(shape)
    if cx.opset < 11:
        pads, value, axes = list(_attr(node, "pads")), _attr(node, "value", 0.0), None
    else:
        pads = [int(p) for p in cx.static(node, 1)]
        value = cx.static(node, 2) if mode == "constant" else None
        value = 0 if value is None else value.item()
        axes = cx.static(node, 3)
    if axes is not None:  # opset 18: pads for the listed axes only
        full = [0] * (2 * rank)
        for i, axis in enumerate(int(a) % rank for a in axes):
            full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
        pads = full
    if mode == "constant":
        return _pad_constant(cx, node, x, pads, value)
    if min(pads, default=0) < 0:
        raise Unmappable(f"negative pads {pads} in mode '{mode}'")
    padded = [a for a in range(rank) if pads[a] or pads[a + rank]]
    for k, axis in enumerate(padded):
        x = _pad_axis(cx, node, x, axis, pads[axis], pads[axis + rank], mode, k == len(padded) - 1)
    return x if padded else _reshape_to(cx, node, list(shape), x)


def _pad_constant(cx: _Converter, node: onnx.NodeProto, x: str, pads: list[int], value) -> str:
    """Constant padding: ``pad``, then a ``slice`` that crops where a pad is negative
    (as onnxruntime reads a negative pad, which may crop into the other side's
    padding; the format's pads are at least 0)."""
    if min(pads, default=0) >= 0:
        return cx.emit(node, "pad", [x], {"pads": pads, "value": value})
    rank = len(pads) // 2
    if max(pads) > 0:
        x = cx.helper(node, "padded", "pad", [x], {"pads": [max(p, 0) for p in pads], "value": value})
    shape = cx.b.type(x).shape
    axes = [a for a in range(rank) if min(pads[a], pads[a + rank]) < 0]
    return cx.emit(node, "slice", [x], {"starts": [max(-pads[a], 0) for a in axes],
                                        "ends": [shape[a] - max(-pads[a + rank], 0) for a in axes], "axes": axes})


def _pad_axis(cx: _Converter, node: onnx.NodeProto, x: str, axis: int, before: int, after: int, mode: str,
              last: bool) -> str:
    """``x`` padded along ``axis`` in ``mode`` (reflect, edge, wrap); ``last``: the
    node's result."""
    size = cx.b.type(x).shape[axis]
    longest = size - 1 if mode == "reflect" else size if mode == "wrap" else math.inf
    if size == 0 or max(before, after) > longest:
        raise Unmappable(f"{mode} padding of {max(before, after)} along an axis of {size}")

    def cut(part: str, start: int, end: int, step: int = 1) -> str:
        return cx.helper(node, f"{part}{axis}", "slice", [x], {"starts": [start], "ends": [end], "axes": [axis],
                                                               "steps": [step]})

    def edge(part: str, index: int, count: int) -> str:
        target = list(cx.b.type(x).shape)
        target[axis] = count
        return cx.helper(node, f"{part}{axis}", "broadcast_to", [cut(f"{part}_at", index, index + 1)],
                         {"shape": target})

    parts = [x]
    if before:
        parts.insert(0, cut("head", before, 0, -1) if mode == "reflect" else edge("head", 0, before) if mode == "edge"
                     else cut("head", size - before, size))
    if after:
        # a negative end past -size means "before index 0" for a step of -1
        end = size - 2 - after if size - 2 - after >= 0 else -size - 1
        parts.append(cut("tail", size - 2, end, -1) if mode == "reflect" else edge("tail", size - 1, after)
                     if mode == "edge" else cut("tail", 0, after))
    if last:
        return cx.emit(node, "concat", parts, {"axis": axis})
    return cx.helper(node, f"axis{axis}", "concat", parts, {"axis": axis})


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
    """A slice per output; sizes computed at run time are the outputs' static sizes
    along the axis."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    axis = _attr(node, "axis", 0) % len(shape)
    outputs = len(node.output)
    try:
        sizes = _attr(node, "split") if cx.opset < 13 else cx.static(node, 1)
    except Unmappable as why:
        sizes = [_stated(cx, node, why, i)[axis] for i in range(outputs)]
        if sum(sizes) != shape[axis]:
            raise Unmappable(f"the stated parts {sizes} do not add up to the axis' {shape[axis]}") from None
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
    merged into it: [a, b] by [2, 3] is [1, a, 1, b] -> [2, a, 3, b] -> [2a, 3b].
    Repeats computed at run time are the result's static shape over X's."""
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    try:
        repeats = [int(r) for r in cx.static(node, 1).ravel()]
    except Unmappable as why:
        out = _stated(cx, node, why)
        if len(out) != len(shape) or any(n and d % n for d, n in zip(out, shape)):
            raise Unmappable(f"the stated result {list(out)} is no tiling of X {list(shape)}") from None
        repeats = [d // n if n else 1 for d, n in zip(out, shape)]
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
    """A one-element constant broadcast to the static shape (a shape computed at run
    time: the result's static shape)."""
    try:
        shape = [int(d) for d in cx.static(node, 0).ravel()]
    except Unmappable as why:
        shape = list(_stated(cx, node, why))
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


# ---------------------------------------------------------------- ai.onnx.ml: linear models, preprocessing, ZipMap
# Each op as the ai.onnx.ml specification and its code (onnx.reference.ops.aionnxml)
# define it, where onnxruntime computes the same. Where the two disagree the op is
# custom (its kept node runs onnx.reference's code) and the summary says why;
# attributes that no runtime computes a defined result from are a one-line error.

def _malformed(cx: _Converter, node: onnx.NodeProto, problem: str) -> GraphError:
    """The one-line error for a node whose attributes define no result."""
    return GraphError(f"{cx.label}: op '{node.name or node.output[0]}' ({node.domain}.{node.op_type}): {problem}")


def _note(cx: _Converter, node: onnx.NodeProto, text: str) -> None:
    """One line in the import summary about what ``node`` became."""
    cx.b.summary.notes.append(f"op '{node.name or node.output[0]}' ({node.domain}.{node.op_type}): {text}")


def _ml_constant(cx: _Converter, node: onnx.NodeProto, part: str, values: np.ndarray) -> str:
    """Attribute values as a constant graph input named ``OUTPUT_part``."""
    return cx.b.add_input(cx.b.fresh(cx.names[node.output[0]], part), values.shape, str(values.dtype), values)


def _features(cx: _Converter, node: onnx.NodeProto, ranks: tuple[int, ...]) -> str:
    """X in float32, cast first as onnxruntime casts it (these ops compute and give float).

    Raises:
        Unmappable: X's rank is not one of ``ranks``.
    """
    x = cx.tensor(node.input[0])
    xt = cx.b.type(x)
    if len(xt.shape) not in ranks:
        raise Unmappable(f"input of rank {len(xt.shape)} (rank {' or '.join(map(str, ranks))} maps)")
    return x if xt.dtype == "float32" else cx.helper(node, "x", "cast", [x], {"dtype": "float32"})


def _coefficients(cx: _Converter, node: onnx.NodeProto, rows: int, features: int, what: str) -> str:
    """``coefficients`` as a [features, rows] constant: the first rows x features
    values, row-major, as onnxruntime's GEMM reads them. More values are ignored and
    the summary says so (onnx.reference rejects such a model); fewer are an error
    (onnxruntime would read past them)."""
    values = np.asarray(_attr(node, "coefficients", []), np.float32)
    size = rows * features
    if values.size < size:
        raise _malformed(cx, node, f"{values.size} coefficients for {rows} {what} x {features} features")
    if values.size > size:
        _note(cx, node, f"{values.size} coefficients for {rows} {what} x {features} features: the first {size} "
                        "are used, row-major, as onnxruntime does (onnx.reference rejects the model)")
    return _ml_constant(cx, node, "coefficients", np.ascontiguousarray(values[:size].reshape(rows, features).T))


def _linear(cx: _Converter, node: onnx.NodeProto, x: str, rows: int, intercepts: list[float], what: str,
            out: int | None) -> str:
    """``x @ coefficients^T + intercepts`` [N, rows]: output ``out`` of ``node``, or
    the intermediate ``OUTPUT_scores`` when ``out`` is None."""
    w = _coefficients(cx, node, rows, cx.b.type(x).shape[1], what)
    if intercepts:
        b = _ml_constant(cx, node, "intercepts", np.asarray(intercepts, np.float32))
        op, inputs = "add", [cx.helper(node, "mm", "matmul", [x, w]), b]
    else:
        op, inputs = "matmul", [x, w]
    return cx.helper(node, "scores", op, inputs) if out is None else cx.emit(node, op, inputs, out=out)


# post_transform -> the format op and attributes that compute it
_POST_TRANSFORMS = {"NONE": None, "LOGISTIC": ("sigmoid", {}), "SOFTMAX": ("softmax", {"axis": -1})}
# Why the others are custom: onnxruntime and onnx.reference compute them differently.
_DISPUTED_TRANSFORMS = {
    "SOFTMAX_ZERO": "onnxruntime and onnx.reference disagree on SOFTMAX_ZERO: its sum (near-zero scores left out "
                    "or not) and its label (the argmax of the raw or of the transformed scores)",
    "PROBIT": "onnxruntime and onnx.reference disagree on PROBIT: at a score of 0 or 1 (+-inf or 0) and on the "
              "label (onnx.reference takes the argmax of the NaN probits of scores outside (0, 1))",
}


@_register("LinearClassifier", domain="ai.onnx.ml")
def _linear_classifier(cx: _Converter, node: onnx.NodeProto) -> list[str]:
    """``scores = X @ coefficients^T + intercepts`` [N, classes] (onnxruntime's class
    count: the number of intercepts), the post_transform of them (NONE, LOGISTIC,
    SOFTMAX), and the label ``classlabels_ints[argmax]`` of the raw scores, as
    onnxruntime takes it (onnx.reference takes it after the transform: the same
    class unless the transform rounds two scores to one value, as LOGISTIC does
    above 17). One class score with two labels is the binary case: the scores are
    the pair ``[-s, s]``, as onnx.reference makes them (so the label is
    ``classlabels_ints[s > 0]``, onnxruntime's), mapped for LOGISTIC only, where
    onnxruntime's ``[1 - p, p]`` are the same probabilities."""
    post = _attr(node, "post_transform", "NONE")
    labels = list(_attr(node, "classlabels_ints", []))
    intercepts = list(_attr(node, "intercepts", []))
    classes = len(intercepts)
    if _attr(node, "classlabels_strings"):
        raise Unmappable("classlabels_strings: format v1 has no string tensors")
    if post not in _POST_TRANSFORMS:
        raise Unmappable(_DISPUTED_TRANSFORMS.get(post, f"post_transform '{post}'"))
    binary = classes == 1
    if binary and len(labels) != 2:
        raise Unmappable("one class score without two labels: onnxruntime and onnx.reference label it differently")
    if binary and post != "LOGISTIC":
        raise Unmappable(f"binary scores with post_transform {post}: onnxruntime gives [1 - s, s], "
                         "onnx.reference the transform of [-s, s]")
    if not binary and (not classes or len(labels) != classes):
        raise _malformed(cx, node, f"{len(labels)} class labels for {classes} intercepts")
    direct = post == "NONE"  # the scores are output Z
    scores = _linear(cx, node, _features(cx, node, (2,)), classes, intercepts, "classes", 1 if direct else None)
    if binary:
        scores = cx.helper(node, "pair", "concat", [cx.helper(node, "neg", "neg", [scores]), scores], {"axis": 1})
    z = scores
    if not direct:
        op, attrs = _POST_TRANSFORMS[post]
        z = cx.emit(node, op, [scores], attrs, out=1)
    return [_class_label(cx, node, scores, labels), z]


def _class_label(cx: _Converter, node: onnx.NodeProto, scores: str, labels: list[int]) -> str:
    """``labels[argmax(scores)]`` (the first of equal scores, as onnxruntime): the
    argmax itself where the labels are 0, 1, ..., else a gather from them."""
    attrs = {"axes": [1], "keepdims": False}
    if labels == list(range(len(labels))):
        return cx.emit(node, "argmax", [scores], attrs)
    index = cx.helper(node, "argmax", "argmax", [scores], attrs)
    return cx.emit(node, "gather", [_ml_constant(cx, node, "labels", np.asarray(labels, np.int64)), index], {"axis": 0})


@_register("LinearRegressor", domain="ai.onnx.ml")
def _linear_regressor(cx: _Converter, node: onnx.NodeProto) -> str:
    """``X @ coefficients^T + intercepts`` [N, targets]. Float input only
    (onnxruntime's only kernel; onnx.reference rounds the coefficients to an integer
    input's type), post_transform NONE only (the only one onnx.reference computes)."""
    post = _attr(node, "post_transform", "NONE")
    targets, intercepts = _attr(node, "targets", 1), list(_attr(node, "intercepts", []))
    if post != "NONE":
        raise Unmappable(f"post_transform {post}: onnx.reference computes only NONE")
    if intercepts and len(intercepts) != targets:
        raise Unmappable(f"{len(intercepts)} intercepts for {targets} targets: onnxruntime ignores them, "
                         "onnx.reference broadcasts them")
    dtype = cx.b.type(cx.tensor(node.input[0])).dtype
    if dtype != "float32":
        raise Unmappable(f"{dtype} input: onnxruntime runs LinearRegressor on float only")
    return _linear(cx, node, _features(cx, node, (2,)), targets, intercepts, "targets", 0)


# norm -> the reduction of each row and the op before it
_NORMS = {"MAX": ("reduce_max", None), "L1": ("reduce_sum", "abs"), "L2": ("reduce_sum", "square")}


@_register("Normalizer", domain="ai.onnx.ml")
def _normalizer(cx: _Converter, node: onnx.NodeProto) -> str:
    """Each row (the last axis of [N, C] or [C]) divided by its norm z: MAX the
    largest value (the specification's ``max(x_i)``, as onnxruntime; onnx.reference
    takes the largest magnitude), L1 the sum of magnitudes, L2 the square root of
    the sum of squares; a row whose z is 0 is kept (divided by 1), as onnxruntime
    keeps it. Integer L2 is custom: onnxruntime squares in the integer type."""
    norm = _attr(node, "norm", "MAX")
    if norm not in _NORMS:
        raise Unmappable(f"norm '{norm}'")
    dtype = cx.b.type(cx.tensor(node.input[0])).dtype
    if norm == "L2" and dtype not in _FLOATS:
        raise Unmappable(f"L2 of {dtype} input: onnxruntime squares it in {dtype}")
    x = _features(cx, node, (1, 2))
    reduction, before = _NORMS[norm]
    terms = x if before is None else cx.helper(node, before, before, [x])
    z = cx.helper(node, "norm", reduction, [terms], {"axes": [-1], "keepdims": True})
    divisor = cx.helper(node, "divisor", "where", [cx.helper(node, "zero", "eq", [z, 0]), 1.0, z])
    if norm == "L2":
        divisor = cx.helper(node, "root", "sqrt", [divisor])
    return cx.emit(node, "div", [x, divisor])


@_register("Scaler", domain="ai.onnx.ml")
def _scaler(cx: _Converter, node: onnx.NodeProto) -> str:
    """``(X - offset) * scale`` in float32, per feature (the last axis of [N, C] or
    [C]) or by one value each: the two lengths onnxruntime takes."""
    scale, offset = list(_attr(node, "scale", [])), list(_attr(node, "offset", []))
    x = _features(cx, node, (1, 2))
    features = cx.b.type(x).shape[-1]
    if len(scale) != len(offset) or len(scale) not in (1, features):
        raise _malformed(cx, node, f"{len(scale)} scales and {len(offset)} offsets for {features} features "
                                   f"(1 or {features} of each)")
    shifted = cx.helper(node, "shifted", "sub", [x, _ml_constant(cx, node, "offset", np.asarray(offset, np.float32))])
    return cx.emit(node, "mul", [shifted, _ml_constant(cx, node, "scale", np.asarray(scale, np.float32))])


@_register("Binarizer", domain="ai.onnx.ml")
def _binarizer(cx: _Converter, node: onnx.NodeProto) -> str:
    """1.0 where X > threshold (default 0), else 0.0; float input only (onnxruntime's
    only kernel). NaN gives 0, as onnx.reference (onnxruntime fails on it)."""
    x = cx.tensor(node.input[0])
    dtype = cx.b.type(x).dtype
    if dtype != "float32":
        raise Unmappable(f"{dtype} input: onnxruntime binarizes float only")
    above = cx.helper(node, "above", "gt", [x, float(_attr(node, "threshold", 0.0))])
    return cx.emit(node, "cast", [above], {"dtype": dtype})


@_register("ZipMap", domain="ai.onnx.ml")
def _zip_map(cx: _Converter, node: onnx.NodeProto) -> str:
    """Format v1 has no maps: ZipMap's sequence of maps ``{classlabels[j]: X[i, j]}``
    is kept as X itself, [N, C] (a [C] input is one map: [1, C]), a view named as
    ZipMap's output whose column j holds label j's values; the summary says so.
    Only where no op reads the maps (an op reading maps cannot read a tensor)."""
    out = node.output[0]
    if any(out in n.input for n in cx.graph.node):
        raise Unmappable("its sequence of maps is read by another op")
    key = "classlabels_int64s" if _attr(node, "classlabels_int64s") else "classlabels_strings"
    labels = _attr(node, key, [])
    x = cx.tensor(node.input[0])
    shape = cx.b.type(x).shape
    if not labels or len(shape) not in (1, 2) or shape[-1] != len(labels):
        raise _malformed(cx, node, f"{len(labels)} class labels for an input of shape {list(shape)}")
    rows = math.prod(shape) // len(labels)
    _note(cx, node, f"its output '{out}' (a sequence of maps) is its input tensor [{rows}, {len(labels)}], "
                    f"columns in {key} order: format v1 has no maps")
    return cx.b.op(cx.names[out], "reshape", [x], {"shape": [rows, len(labels)]})
