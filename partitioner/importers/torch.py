"""torch.export programs -> graph format v1 (the ``torch`` extra).

The program is lowered to core ATen (:func:`lower`) and walked node by node.
Every op states PyTorch's own shape and dtype (``node.meta["val"]``), so the
loader checks the format's inference against PyTorch's; an op the format cannot
express faithfully becomes ``custom`` with its ATen name as ``kind``. Only
``meta["val"]`` is read of an op, so programs exported from models on the
``meta`` device import the same way.

Graph inputs: parameters, buffers and lifted constants under their qualified
names (``layers.0.mlp.up.weight``), keeping their values unless they are on the
``meta`` device (format 1.1 constants: inline when small, else for the side
file), then the module's own inputs as ``input_0``, ``input_1``, ... in the order
torch.export flattens them. Inputs no op reads are left out.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import operator
import warnings
from typing import Any, Callable

import ml_dtypes
import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ..errors import GraphError
from ..exits import note
from ..graph import Graph
from ..ops import TensorType, broadcast_shapes
from . import GraphBuilder, ImportResult, Unmappable, batch_norm, conv1d, conv3d, group_norm, report, sanitize

DTYPES = {
    torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
    torch.int8: "int8", torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
    torch.uint8: "uint8", torch.int16: "int16", torch.uint16: "uint16", torch.uint32: "uint32",
    torch.uint64: "uint64", torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2",
}
# dtypes NumPy has no type of: their bits, viewed as ml_dtypes' type
_BITS = {torch.bfloat16: (torch.int16, ml_dtypes.bfloat16), torch.float8_e4m3fn: (torch.uint8, ml_dtypes.float8_e4m3fn),
         torch.float8_e5m2: (torch.uint8, ml_dtypes.float8_e5m2)}

_WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
SOURCE = f"torch.export core ATen (torch {torch.__version__})"


def program_of(source: ExportedProgram | torch.nn.Module, example_inputs=None) -> ExportedProgram:
    """Return ``source`` itself, or ``torch.export.export(source, tuple(example_inputs))`` for a module.

    Parameters
    ----------
    source : torch.export.ExportedProgram or torch.nn.Module
        The program, or the module to export.
    example_inputs : tuple of torch.Tensor, optional
        Required for a module.

    Returns
    -------
    torch.export.ExportedProgram
        The program.

    Raises
    ------
    GraphError
        A module without example inputs, or something else entirely.

    Examples
    --------
    >>> program = program_of(torch.nn.ReLU(), (torch.randn(4, 8),))
    >>> type(program).__name__
    'ExportedProgram'
    """
    if isinstance(source, ExportedProgram):
        return source
    if not isinstance(source, torch.nn.Module):
        raise GraphError(f"<torch>: expected an ExportedProgram or a torch.nn.Module, got {type(source).__name__}")
    if example_inputs is None:
        raise GraphError(f"<torch>: exporting {type(source).__name__} needs example inputs")
    with quiet():
        return torch.export.export(source, tuple(example_inputs))


def convert(program: ExportedProgram, name: str = "graph", source: str | None = None) -> ImportResult:
    """Convert an exported program to a format-v1 graph dict (not yet loaded).

    Parameters
    ----------
    program : torch.export.ExportedProgram
        From ``torch.export.export`` (or :func:`program_of`); it is lowered to core ATen here.
    name : str
        The graph's name.
    source : str, optional
        The graph's ``source`` text (default: :data:`SOURCE`).

    Returns
    -------
    ImportResult
        The graph dict (``.graph``) and the import summary (``.summary``).

    Raises
    ------
    GraphError
        A tensor whose dtype format v1 lacks (uint8, complex, ...), or a symbolic
        (dynamic) dimension.

    Examples
    --------
    >>> result = convert(program_of(torch.nn.Linear(64, 32), (torch.randn(8, 64),)), "linear")
    >>> [op["op"] for op in result.graph["ops"]], result.summary.custom
    (['transpose', 'matmul', 'add'], Counter())
    """
    return _Converter(lower(program), name, source or SOURCE).run()


def lower(program: ExportedProgram) -> ExportedProgram:
    """Lower a program to the core ATen ops that :func:`convert` reads.

    The imported graph's ops carry the lowered program's node names. Core ATen's
    decompositions all apply but that of ``scaled_dot_product_attention``,
    which :func:`convert` maps itself: torch's own one gives the attention's result
    other strides than the export recorded, so that a later ``view`` of the retraced
    program fails (GPT-2's default attention, torch 2.13).

    Parameters
    ----------
    program : torch.export.ExportedProgram
        From ``torch.export.export`` (or :func:`program_of`).

    Returns
    -------
    torch.export.ExportedProgram
        The lowered program.

    Examples
    --------
    >>> class Attend(torch.nn.Module):
    ...     def forward(self, q):
    ...         return torch.nn.functional.scaled_dot_product_attention(q, q, q)
    >>> lowered = lower(program_of(Attend(), (torch.randn(1, 2, 3, 4),)))
    >>> [str(n.target) for n in lowered.graph.nodes if n.op == "call_function"]
    ['aten.scaled_dot_product_attention.default']
    """
    table = torch.export.default_decompositions()
    del table[torch.ops.aten.scaled_dot_product_attention.default]
    with quiet():
        return program.run_decompositions(table)


@contextlib.contextmanager
def quiet():
    """Silence torch's own deprecation notice about its pytree internals and its
    logging (both about torch, not the user's model), and hold back what it prints
    on stderr until the body succeeds: a failed export dumps the traced graph there,
    a page before the one-line error the caller raises, which says what failed."""
    torch_log = logging.getLogger("torch")
    level, printed = torch_log.level, io.StringIO()
    torch_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(printed):
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            yield
    finally:
        torch_log.setLevel(level)
    if printed.getvalue():  # only after success: the warnings about the model
        note(printed.getvalue().rstrip("\n"))


def load(source: ExportedProgram | torch.nn.Module, example_inputs=None, name: str | None = None,
         verbose: bool = True) -> Graph:
    """``partitioner.from_torch``: export if needed, convert, print the summary on
    stderr when ``verbose``, and load (raises GraphError)."""
    name = name or (type(source).__name__ if isinstance(source, torch.nn.Module) else "exported_program")
    result = convert(program_of(source, example_inputs), name)
    report(result, verbose)
    return result.load()


class _Const:
    """A tensor every element of which is ``value`` (``aten.full`` and kin): a
    literal where the op allows one; where a tensor is needed, a one-element
    constant input (format 1.1), broadcast to the shape."""

    def __init__(self, node: Node, value: float | int | bool):
        self.node = node
        self.value = value
        self.name: str | None = None


class _Operand(int):
    """The position of a tensor operand among a custom hook's arrays."""


def _run_aten(target: Any, args: list, kwargs: dict, index: int | None, *arrays: np.ndarray) -> np.ndarray:
    """``target(*args, **kwargs)`` with each :class:`_Operand` replaced by its array
    as a tensor; the result (result ``index`` of several) as NumPy."""
    def value(arg: Any) -> Any:
        if isinstance(arg, _Operand):
            return _to_torch(arrays[arg])
        if isinstance(arg, (list, tuple)):
            return type(arg)(value(a) for a in arg)
        return arg

    with torch.no_grad():
        result = target(*value(args), **{k: value(v) for k, v in kwargs.items()})
    return _to_numpy(result if index is None else result[index])


def _to_torch(array: np.ndarray) -> torch.Tensor:
    array = np.ascontiguousarray(array)
    for dtype, (_, ml_type) in _BITS.items():
        if array.dtype == np.dtype(ml_type):  # through the bits: torch reads no ml_dtypes array
            return torch.from_numpy(array.view(f"uint{8 * array.itemsize}")).view(dtype)
    return torch.from_numpy(array)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype in _BITS:
        bits, ml_type = _BITS[tensor.dtype]
        return tensor.view(bits).numpy().view(ml_type)
    return tensor.numpy()


def _dtype(node: Node, val: Any) -> str:
    try:
        return DTYPES[val.dtype]
    except KeyError:
        raise GraphError(f"<torch>: op '{node.name}': dtype {val.dtype} has no format-v1 equivalent") from None


def _shape(node: Node, val: Any) -> list[int]:
    if all(isinstance(d, int) for d in val.shape):
        return list(val.shape)
    if free_unbacked_symbols(val.shape):  # a size that depends on the values, not on the export
        raise GraphError(f"<torch>: op '{node.name}': data-dependent shape {list(val.shape)} (its size depends on "
                         "the values, as a boolean mask's or nonzero's does); the format has static shapes only")
    raise GraphError(f"<torch>: op '{node.name}': symbolic shape {list(val.shape)}; "
                     "export with static shapes (no dynamic_shapes)")


def _literal(value: Any) -> int | float:
    """A Python scalar as a format-v1 literal (booleans as 0 and 1)."""
    return int(value) if isinstance(value, bool) else value


def _rounded(value: Any, dtype: torch.dtype) -> Any:
    """``value`` as a tensor of ``dtype`` holds it (0.3 is 0.300048828125 in float16),
    as a Python number; booleans and integers of an integer dtype are kept."""
    if isinstance(value, bool) or not dtype.is_floating_point and isinstance(value, int):
        return value
    return torch.tensor(value, dtype=torch.float64).to(dtype).item()


# ATen ops whose CPU kernels convert a wrapped Python number (and a one-element tensor)
# to the op's common dtype before computing (in float32 for half types): 0.3 is
# 0.30005 to a float16 add, remainder or comparison. ``mul``, ``div`` and
# ``floor_divide`` read the number in float32 (``opmath``), as the format's literals
# are read; ``where``, ``maximum``, ``minimum`` and ``clamp`` select, and give the same
# either way. (Float32 and float64 tensors and integer tensors promoted to float32:
# the common dtype is the format's compute dtype, so rounding there changes nothing.)
_ROUNDS_SCALARS = frozenset(
    {"aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar",
     "aten.rsub.Tensor", "aten.pow.Tensor_Scalar", "aten.pow.Scalar", "aten.pow.Tensor_Tensor",
     "aten.remainder.Tensor", "aten.remainder.Scalar", "aten.remainder.Scalar_Tensor",
     "aten.fmod.Tensor", "aten.fmod.Scalar",
     *(f"aten.{cmp}.{overload}" for cmp in ("eq", "ne", "lt", "le", "gt", "ge") for overload in ("Tensor", "Scalar"))})


def _common_dtype(node: Node) -> torch.dtype:
    """ATen's common dtype of a binary node's first two operands (a Python number is
    a weak scalar, a tensor keeps its dimension category)."""
    def example(arg: Any) -> Any:
        if isinstance(arg, Node):
            val = arg.meta["val"]
            return torch.empty([1] * val.dim(), dtype=val.dtype)
        return arg

    a, b = (example(x) for x in node.args[:2])
    return torch.result_type(a, b)


def _scalar_operand(value: Any, node: Node) -> int | float:
    """A Python number operand of ``node`` as a literal: rounded to the op's common
    dtype first where ATen's kernel does that (:data:`_ROUNDS_SCALARS`)."""
    if str(node.target) in _ROUNDS_SCALARS and not isinstance(value, bool) and len(node.args) >= 2 \
            and any(isinstance(a, Node) for a in node.args[:2]):
        value = _rounded(value, _common_dtype(node))
    return _literal(value)


class _Converter:
    def __init__(self, program: ExportedProgram, name: str, source: str):
        self.program = program
        nodes = list(program.graph.nodes)
        self.b = GraphBuilder(name, source, "<torch>", reserved=[n.name for n in nodes])
        self.env: dict[Node, Any] = {}

    # ---------------------------------------------------------------- driver

    def run(self) -> ImportResult:
        self._inputs()
        for node in self.program.graph.nodes:
            if node.op == "call_function":
                self._call(node)
        by_name = {n.name: n for n in self.program.graph.nodes}
        outputs = [self.tensor(by_name[spec.arg.name]) for spec in self.program.graph_signature.output_specs
                   if spec.kind == OutputKind.USER_OUTPUT and getattr(spec.arg, "name", None) in by_name]
        for value in self.env.values():
            if isinstance(value, _Const):
                self.b.count("mapped" if value.name in self.b.types else "folded")
        return self.b.result(outputs)

    def _inputs(self) -> None:
        signature = self.program.graph_signature
        user = 0
        placeholders = {n.name: n for n in self.program.graph.nodes if n.op == "placeholder"}
        for spec in signature.input_specs:
            node = placeholders[spec.arg.name]
            if spec.kind == InputKind.USER_INPUT:
                name, user = f"input_{user}", user + 1
            elif spec.kind in _WEIGHT_KINDS:
                name = sanitize(spec.target)
            else:
                continue
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor) and any(u.meta.get("val") is not None or u.op == "output"
                                                     for u in node.users):
                value = self._weight_value(spec.target) if spec.kind in _WEIGHT_KINDS else None
                self.env[node] = self.b.add_input(name, _shape(node, val), _dtype(node, val), value)

    def _weight_value(self, target: str) -> np.ndarray | None:
        """A parameter's, buffer's or lifted constant's data; None on the meta device."""
        tensor = self.program.state_dict.get(target, self.program.constants.get(target))
        if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
            return None
        return _to_numpy(tensor)

    def _call(self, node: Node) -> None:
        val = node.meta.get("val")
        if node.target is operator.getitem:
            parent = self.env.get(node.args[0])
            if parent is not None:
                self.env[node] = parent[node.args[1]]
            return
        if val is None and not node.users:  # _assert_tensor_metadata and other checks
            return
        kind = str(node.target)
        mark = self.b.mark()
        try:
            if kind not in _CONVERTERS:
                raise Unmappable("")
            self.env[node] = _CONVERTERS[kind](self, node)
            if not isinstance(self.env[node], _Const):  # counted at the end: a literal, or custom where a tensor
                self.b.count("mapped")
        except GraphError:
            raise
        except Exception as why:  # noqa: BLE001 - any op the converter cannot handle becomes custom, never a crash
            self.b.rollback(mark)
            self.env[node] = self._custom(node, kind)
            reason = str(why) if isinstance(why, Unmappable) else f"converter failed: {type(why).__name__}: {why}"
            self.b.count("custom", kind, reason)

    # ---------------------------------------------------------------- values

    def out(self, node: Node) -> tuple[list[int], str]:
        """PyTorch's shape and dtype of a single-result node."""
        val = node.meta["val"]
        return _shape(node, val), _dtype(node, val)

    def name(self, node: Node) -> str:
        """The node's own name, unless a graph input already has it."""
        return node.name if node.name not in self.b.types else self.b.fresh(node.name)

    def results(self, node: Node) -> dict[int, str]:
        """Names of the used results of a multi-result node: the node's name when one
        result is used, otherwise the names of the ``getitem`` nodes that take them."""
        taken = {}
        for user in node.users:
            if user.target is operator.getitem:
                taken.setdefault(user.args[1], user.name)
        if len(taken) == 1:
            return {index: self.name(node) for index in taken}
        return {index: (n if n not in self.b.types else self.b.fresh(n)) for index, n in taken.items()}

    def tensor(self, arg: Any) -> str:
        """The graph tensor of an fx argument (a constant becomes a ``custom`` op)."""
        value = self.env.get(arg) if isinstance(arg, Node) else None
        if value is None:
            raise Unmappable(f"operand {arg!r} is not a tensor")
        if isinstance(value, _Const):
            if value.name not in self.b.types:  # not yet a graph tensor (or dropped by a rollback)
                value.name = self.b.filled(self.name(value.node), *self.out(value.node), value.value)
            return value.name
        return value

    def operand(self, arg: Any, node: Node) -> str | int | float:
        """A tensor name or a literal: Python scalars, and constants that broadcast
        away in ``node`` (its other tensor operands alone give its shape). A constant
        stays a tensor when no other value operand is a tensor (``where(mask, full,
        scalar_tensor)``): literals alone would promote to float64, not PyTorch's dtype.
        The constant itself is no other operand, though an earlier use made it a tensor."""
        if not isinstance(arg, Node):
            return _scalar_operand(arg, node)
        value = self.env.get(arg)
        if isinstance(value, _Const):
            tensors = [a for a in node.args if isinstance(a, Node) and a is not arg and self._is_tensor(a)]
            values = [a for a in tensors if not (node.target is torch.ops.aten.where.self and a is node.args[0])]
            shapes = [self.b.type(self.tensor(a)).shape for a in tensors]
            if values and list(broadcast_shapes(shapes)) == self.out(node)[0]:
                # the filled tensor holds the value in its own dtype, then enters the op as a number would
                return _scalar_operand(_rounded(value.value, arg.meta["val"].dtype), node)
        return self.tensor(arg)

    def _is_tensor(self, arg: Node) -> bool:
        value = self.env.get(arg)
        return isinstance(value, str) or (isinstance(value, _Const) and value.name in self.b.types)

    def _custom(self, node: Node, kind: str) -> Any:
        inputs = []
        for arg in [*node.args, *node.kwargs.values()]:
            for item in arg if isinstance(arg, (list, tuple)) else [arg]:
                if isinstance(item, Node) and item in self.env:
                    inputs.append(self.tensor(item))
        inputs = list(dict.fromkeys(inputs))
        val = node.meta.get("val")
        if val is None:
            raise GraphError(f"<torch>: op '{node.name}' ({kind}): torch.export recorded no shape for its result")
        if isinstance(val, torch.Tensor):
            shape, dtype = self.out(node)
            name = self.b.custom(self.name(node), kind, inputs, shape, dtype)
            self.b.hooks[name] = self._hook(node, inputs, None)
            return name
        names = self.results(node)
        made = {i: self.b.custom(n, kind, inputs, _shape(node, val[i]), _dtype(node, val[i]))
                for i, n in names.items()}
        for i, name in made.items():
            self.b.hooks[name] = self._hook(node, inputs, i)
        return made

    def _hook(self, node: Node, inputs: list[str], index: int | None) -> Callable[..., np.ndarray]:
        """The semantics of a custom node: its ATen op itself, run on the values of the
        graph tensors ``inputs`` (in that order) with the node's other arguments."""
        position = {name: k for k, name in enumerate(inputs)}

        def place(arg: Any) -> Any:  # an operand's position among the hook's arrays, or the argument itself
            if isinstance(arg, Node) and arg in self.env:
                return _Operand(position[self.tensor(arg)])
            if isinstance(arg, (list, tuple)):
                return type(arg)(place(a) for a in arg)
            return arg

        args, kwargs = place(list(node.args)), {k: place(v) for k, v in node.kwargs.items()}
        return functools.partial(_run_aten, node.target, args, kwargs, index)

    # ---------------------------------------------------------------- emitting

    def emit(self, node: Node, op: str, inputs: list, attrs: dict | None = None) -> str:
        """One op for ``node`` stating PyTorch's shape and dtype."""
        shape, dtype = self.out(node)
        return self.b.op(self.name(node), op, inputs, attrs, shape, dtype)

    def helper(self, node: Node, part: str, op: str, inputs: list, attrs: dict | None = None) -> str:
        """An intermediate op of a decomposition, named ``NODE_part``."""
        return self.b.op(self.b.fresh(node.name, part), op, inputs, attrs)


# ---------------------------------------------------------------- converters

Converter = Callable[[_Converter, Node], Any]
_CONVERTERS: dict[str, Converter] = {}


def _register(*targets: str):
    def wrap(fn: Converter) -> Converter:
        for target in targets:
            _CONVERTERS[target] = fn
        return fn

    return wrap


def _arg(node: Node, index: int, key: str, default: Any = None) -> Any:
    """Argument ``index`` of ``node``, or its keyword ``key``, or ``default``."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(key, default)


def _axes(dims: Any, rank: int) -> list[int] | None:
    """Reduction dims as format-v1 ``axes``: ``None`` (all) for ATen's None or []."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [d % rank if rank else d for d in dims]


def _simple(op: str) -> Converter:
    def convert(cx: _Converter, node: Node) -> str:
        return cx.emit(node, op, [cx.operand(a, node) for a in node.args])

    return convert


for _target, _op in {
    "aten.abs.default": "abs", "aten.neg.default": "neg", "aten.exp.default": "exp", "aten.log.default": "log",
    "aten.sqrt.default": "sqrt", "aten.rsqrt.default": "rsqrt", "aten.reciprocal.default": "reciprocal",
    "aten.tanh.default": "tanh", "aten.sigmoid.default": "sigmoid", "aten.relu.default": "relu",
    "aten.erf.default": "erf", "aten.sin.default": "sin", "aten.cos.default": "cos", "aten.silu.default": "silu",
    "aten.logical_not.default": "logical_not", "aten.logical_and.default": "logical_and",
    "aten.logical_or.default": "logical_or", "aten.clone.default": "identity",
    "aten.lift_fresh_copy.default": "identity", "aten.mul.Tensor": "mul", "aten.mul.Scalar": "mul",
    "aten.div.Tensor": "div", "aten.div.Scalar": "div", "aten.pow.Tensor_Tensor": "pow",
    "aten.pow.Tensor_Scalar": "pow", "aten.pow.Scalar": "pow", "aten.maximum.default": "maximum",
    "aten.minimum.default": "minimum", "aten.where.self": "where", "aten.trunc.default": "trunc",
    **{f"aten.{cmp}.{overload}": cmp for cmp in ("eq", "ne", "lt", "le", "gt", "ge") for overload in ("Tensor", "Scalar")},
}.items():
    _register(_target)(_simple(_op))


@_register("aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar")
def _add_sub(cx: _Converter, node: Node) -> str:
    a, b = (cx.operand(x, node) for x in node.args[:2])
    alpha = _arg(node, 2, "alpha", 1)
    if alpha != 1:  # a + alpha * b
        b = cx.helper(node, "alpha", "mul", [b, _literal(alpha)]) if isinstance(b, str) else b * alpha
    return cx.emit(node, "add" if "add" in str(node.target) else "sub", [a, b])


_LOGICAL = {"aten.bitwise_and.Tensor": "logical_and", "aten.bitwise_or.Tensor": "logical_or",
            "aten.bitwise_not.default": "logical_not"}


@_register(*_LOGICAL)
def _bitwise(cx: _Converter, node: Node) -> str:
    if any(isinstance(a, Node) and a.meta["val"].dtype != torch.bool for a in node.args):
        raise Unmappable("bitwise ops on integers have no format-v1 equivalent")
    return cx.emit(node, _LOGICAL[str(node.target)], [cx.operand(a, node) for a in node.args])


@_register("aten.gelu.default")
def _gelu(cx: _Converter, node: Node) -> str:
    return cx.emit(node, "gelu", [cx.tensor(node.args[0])], {"approximate": _arg(node, 1, "approximate", "none")})


@_register("aten.leaky_relu.default")
def _leaky_relu(cx: _Converter, node: Node) -> str:
    return cx.emit(node, "leaky_relu", [cx.tensor(node.args[0])], {"alpha": _arg(node, 1, "negative_slope", 0.01)})


@_register("aten.clamp.default", "aten.hardtanh.default")
def _clamp(cx: _Converter, node: Node) -> str:
    low_default, high_default = (-1.0, 1.0) if "hardtanh" in str(node.target) else (None, None)
    attrs = {"min": _arg(node, 1, "min", low_default), "max": _arg(node, 2, "max", high_default)}
    return cx.emit(node, "clamp", [cx.tensor(node.args[0])], {k: v for k, v in attrs.items() if v is not None})


@_register("aten._to_copy.default")
def _to_copy(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    _, dtype = cx.out(node)
    if dtype == cx.b.type(x).dtype:  # .to() another device or layout: eager returns the tensor itself
        return cx.emit(node, "reshape", [x], {"shape": cx.out(node)[0]})
    return cx.emit(node, "cast", [x], {"dtype": dtype})


@_register("aten.full.default", "aten.scalar_tensor.default", "aten.full_like.default")
def _full(cx: _Converter, node: Node) -> _Const:
    return _Const(node, node.args[0] if "scalar_tensor" in str(node.target) else node.args[1])


# ---------------------------------------------------------------- reductions


def _reduce(op: str, has_dtype: bool = True) -> Converter:
    def convert(cx: _Converter, node: Node) -> str:
        x = cx.tensor(node.args[0])
        rank = len(cx.b.type(x).shape)
        axes = _axes(_arg(node, 1, "dim"), rank)
        keepdim = bool(_arg(node, 2, "keepdim", False))
        dtype = node.kwargs.get("dtype") if has_dtype else None
        if dtype is not None:
            x = cx.helper(node, "in", "cast", [x], {"dtype": DTYPES[dtype]})
        attrs = {"keepdims": keepdim} if axes is None else {"axes": axes, "keepdims": keepdim}
        return cx.emit(node, op, [x], attrs)

    return convert


for _target, _op in {"aten.sum.dim_IntList": "reduce_sum", "aten.mean.dim": "reduce_mean",
                     "aten.prod.dim_int": "reduce_prod"}.items():
    _register(_target)(_reduce(_op))
for _target, _op in {"aten.amax.default": "reduce_max", "aten.amin.default": "reduce_min",
                     "aten.argmax.default": "argmax", "aten.argmin.default": "argmin"}.items():
    _register(_target)(_reduce(_op, has_dtype=False))


_REDUCE_ALL = {"aten.sum.default": "reduce_sum", "aten.mean.default": "reduce_mean", "aten.prod.default": "reduce_prod"}


@_register(*_REDUCE_ALL)
def _reduce_all(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    if node.kwargs.get("dtype") is not None:
        x = cx.helper(node, "in", "cast", [x], {"dtype": DTYPES[node.kwargs["dtype"]]})
    return cx.emit(node, _REDUCE_ALL[str(node.target)], [x], {"keepdims": False})


@_register("aten.any.dim", "aten.any.dims", "aten.any.default")
def _any(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    if cx.b.type(x).dtype != "bool":  # any(x) = max(x != 0)
        x = cx.helper(node, "nonzero", "ne", [x, 0])
    axes = _axes(_arg(node, 1, "dim"), len(cx.b.type(x).shape))
    keepdim = bool(_arg(node, 2, "keepdim", False))
    return cx.emit(node, "reduce_max", [x], {"keepdims": keepdim} if axes is None else {"axes": axes, "keepdims": keepdim})


@_register("aten.max.dim", "aten.min.dim")
def _max_min_dim(cx: _Converter, node: Node) -> dict[int, str]:
    x = cx.tensor(node.args[0])
    axes = _axes(node.args[1], len(cx.b.type(x).shape))
    attrs = {"axes": axes, "keepdims": bool(_arg(node, 2, "keepdim", False))}
    ops = ("reduce_max", "argmax") if node.target.__name__.startswith("max") else ("reduce_min", "argmin")
    val = node.meta["val"]
    return {i: cx.b.op(n, ops[i], [x], attrs, _shape(node, val[i]), _dtype(node, val[i]))
            for i, n in cx.results(node).items()}


# ---------------------------------------------------------------- layout


@_register("aten.view.default", "aten._unsafe_view.default", "aten.unsqueeze.default", "aten.squeeze.dim",
           "aten.squeeze.dims", "aten.squeeze.default", "aten.alias.default")
def _view(cx: _Converter, node: Node) -> str:
    shape, _ = cx.out(node)
    return cx.emit(node, "reshape", [cx.tensor(node.args[0])], {"shape": shape})


@_register("aten.expand.default")
def _expand(cx: _Converter, node: Node) -> str:
    shape, _ = cx.out(node)
    x = cx.tensor(node.args[0])
    # an expand to the operand's own shape is an alias of it (a view of the same
    # elements, as aten.alias is): a copying broadcast would be a kernel of its own
    kind = "reshape" if tuple(cx.b.type(x).shape) == tuple(shape) else "broadcast_to"
    return cx.emit(node, kind, [x], {"shape": shape})


@_register("aten.permute.default")
def _permute(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    rank = len(cx.b.type(x).shape)
    return cx.emit(node, "transpose", [x], {"perm": [d % rank for d in node.args[1]]})


def _slice_attrs(dim: int, start: int, stop: int, step: int = 1) -> dict:
    return {"axes": [dim], "starts": [start], "ends": [stop], "steps": [step]}


@_register("aten.slice.Tensor")
def _slice(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    shape = cx.b.type(x).shape
    dim = _arg(node, 1, "dim", 0) % len(shape)
    start, stop, step = slice(_arg(node, 2, "start"), _arg(node, 3, "end"), _arg(node, 4, "step", 1)).indices(shape[dim])
    return cx.emit(node, "slice", [x], _slice_attrs(dim, start, stop, step))


@_register("aten.select.int")
def _select(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    shape = cx.b.type(x).shape
    dim, index = node.args[1] % len(shape), node.args[2] % shape[node.args[1]]
    picked = cx.helper(node, "slice", "slice", [x], _slice_attrs(dim, index, index + 1))
    return cx.emit(node, "reshape", [picked], {"shape": cx.out(node)[0]})


@_register("aten.split_with_sizes.default", "aten.split.Tensor")
def _split(cx: _Converter, node: Node) -> dict[int, str]:
    x = cx.tensor(node.args[0])
    shape = cx.b.type(x).shape
    dim = _arg(node, 2, "dim", 0) % len(shape)
    sizes = node.args[1]
    if isinstance(sizes, int):  # split.Tensor: pieces of that size, the last one shorter
        sizes = [min(sizes, shape[dim] - s) for s in range(0, shape[dim], sizes)]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    val = node.meta["val"]
    return {i: cx.b.op(n, "slice", [x], _slice_attrs(dim, starts[i], starts[i] + sizes[i]),
                       _shape(node, val[i]), _dtype(node, val[i]))
            for i, n in cx.results(node).items()}


@_register("aten.cat.default")
def _cat(cx: _Converter, node: Node) -> str:
    return cx.emit(node, "concat", [cx.tensor(t) for t in node.args[0]], {"axis": _arg(node, 1, "dim", 0)})


@_register("aten.constant_pad_nd.default")
def _pad(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    rank = len(cx.b.type(x).shape)
    pad = list(node.args[1])  # (last axis begin, last axis end, second-to-last begin, ...)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return cx.emit(node, "pad", [x], {"pads": begins + ends, "value": _literal(_arg(node, 2, "value", 0))})


@_register("aten.embedding.default")
def _embedding(cx: _Converter, node: Node) -> str:
    return cx.emit(node, "gather", [cx.tensor(node.args[0]), cx.tensor(node.args[1])], {"axis": 0})


@_register("aten.index_select.default")
def _index_select(cx: _Converter, node: Node) -> str:
    return cx.emit(node, "gather", [cx.tensor(node.args[0]), cx.tensor(node.args[2])], {"axis": node.args[1]})


# ---------------------------------------------------------------- contractions and composites


@_register("aten.mm.default", "aten.bmm.default")
def _mm(cx: _Converter, node: Node) -> str:
    return cx.emit(node, "matmul", [cx.tensor(node.args[0]), cx.tensor(node.args[1])])


@_register("aten.addmm.default")
def _addmm(cx: _Converter, node: Node) -> str:
    """``beta * bias + alpha * (m1 @ m2)``: a matmul, then the bias add as its epilogue."""
    bias, m1, m2 = (cx.tensor(a) for a in node.args[:3])
    beta, alpha = _arg(node, 3, "beta", 1), _arg(node, 4, "alpha", 1)
    _, dtype = cx.out(node)
    y = cx.helper(node, "mm", "matmul", [m1, m2])
    if alpha != 1:
        y = cx.helper(node, "alpha", "mul", [y, alpha])
    if beta != 1:
        bias = cx.helper(node, "beta", "mul", [bias, beta])
    return cx.emit(node, "add", [y, bias])


@_register("aten.convolution.default")
def _convolution(cx: _Converter, node: Node) -> str:
    x, w, bias, stride, padding, dilation, transposed, _, groups = node.args
    if transposed or len(stride) not in (1, 2, 3):
        raise Unmappable("only 1-D, 2-D and 3-D non-transposed convolutions map to conv2d")
    x, w = cx.tensor(x), cx.tensor(w)
    if len(stride) == 3:
        pads = [*padding, *padding]
        return conv3d(cx.b, cx.name(node), x, w, cx.tensor(bias) if bias is not None else None, stride, pads,
                      dilation, groups, cx.out(node)[1])
    if len(stride) == 1:  # a conv2d over [N, C, 1, L] with a [O, C/g, 1, K] kernel
        return conv1d(cx.b, cx.name(node), x, w, cx.tensor(bias) if bias is not None else None, stride,
                      [padding[0], padding[0]], dilation, groups, cx.out(node)[1])
    bias = [cx.tensor(bias)] if bias is not None else []
    attrs = {"strides": list(stride), "pads": [padding[0], padding[1], padding[0], padding[1]],
             "dilations": list(dilation), "groups": groups}
    return cx.emit(node, "conv2d", [x, w, *bias], attrs)


@_register("aten._softmax.default", "aten._log_softmax.default")
def _softmax(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    if node.args[2]:  # half_to_float: the softmax of the float32 input
        x = cx.helper(node, "in", "cast", [x], {"dtype": "float32"})
    op = "log_softmax" if "log" in str(node.target) else "softmax"
    return cx.emit(node, op, [x], {"axis": node.args[1]})


@_register("aten.scaled_dot_product_attention.default")
def _attention(cx: _Converter, node: Node) -> str:
    """``softmax(q·kᵀ·scale + bias)·v`` as torch's own decomposition computes it: q and
    k each scaled by √scale before their product (half-precision products stay in
    range), a boolean or causal mask as a bias of 0 and -inf, and probabilities of 0 in
    a row without a live key, as eager PyTorch gives (``_safe_softmax``). The
    partitioner finds the attention in these ops again."""
    if _arg(node, 4, "dropout_p", 0.0):
        raise Unmappable("attention dropout (random)")
    q, k, v = (cx.tensor(a) for a in node.args[:3])
    query = cx.b.type(q).shape
    if node.kwargs.get("enable_gqa"):  # torch requires the heads on dim -3
        k, v = _repeat_heads(cx, node, k, query[-3], "k"), _repeat_heads(cx, node, v, query[-3], "v")
    scale = node.kwargs.get("scale")
    root = math.sqrt(1 / math.sqrt(query[-1]) if scale is None else scale)
    if root != 1:
        q, k = cx.helper(node, "q", "mul", [q, root]), cx.helper(node, "k", "mul", [k, root])
    rank = len(cx.b.type(k).shape)
    keys = cx.helper(node, "kt", "transpose", [k], {"perm": [*range(rank - 2), rank - 1, rank - 2]})
    scores = cx.helper(node, "scores", "matmul", [q, keys])
    bias = _attention_bias(cx, node, cx.b.type(scores))
    if bias is not None:
        scores = cx.helper(node, "biased", "add", [scores, bias])
    probs = cx.helper(node, "probs", "softmax", [scores], {"axis": -1})
    alive = cx.helper(node, "alive", "ne", [scores, float("-inf")])
    live = cx.helper(node, "live", "reduce_max", [alive], {"axes": [len(cx.b.type(scores).shape) - 1],
                                                           "keepdims": True})
    return cx.emit(node, "matmul", [cx.helper(node, "safe", "where", [live, probs, 0.0]), v])


def _repeat_heads(cx: _Converter, node: Node, x: str, heads: int, part: str) -> str:
    """``x.repeat_interleave(heads // x.shape[-3], -3)`` (grouped-query attention: each
    key and value head serves that many adjacent query heads), by broadcasting."""
    shape = list(cx.b.type(x).shape)
    group = heads // shape[-3]
    if group == 1:
        return x
    spread = cx.helper(node, f"{part}_spread", "reshape", [x], {"shape": [*shape[:-2], 1, *shape[-2:]]})
    repeated = cx.helper(node, f"{part}_repeat", "broadcast_to", [spread],
                         {"shape": [*shape[:-2], group, *shape[-2:]]})
    return cx.helper(node, f"{part}_heads", "reshape", [repeated], {"shape": [*shape[:-3], heads, *shape[-2:]]})


def _attention_bias(cx: _Converter, node: Node, scores: TensorType) -> str | None:
    """The additive bias of the scores: a float mask itself; a boolean mask, or the causal
    one (key j ≤ query i), as 0 where a key is kept and -inf where it is masked."""
    mask = _arg(node, 3, "attn_mask")
    if _arg(node, 5, "is_causal", False):
        rows, cols = scores.shape[-2:]
        query = cx.helper(node, "query_pos", "arange", [], {"start": 0, "limit": rows, "dtype": "int64"})
        key = cx.helper(node, "key_pos", "arange", [], {"start": 0, "limit": cols, "dtype": "int64"})
        column = cx.helper(node, "query_col", "reshape", [query], {"shape": [rows, 1]})
        kept = cx.helper(node, "causal", "ge", [column, key])
    elif mask is None:
        return None
    elif cx.b.type(cx.tensor(mask)).dtype != "bool":
        return cx.tensor(mask)
    else:
        kept = cx.tensor(mask)
    zero = cx.b.add_input(cx.b.fresh(node.name, "zero"), [], scores.dtype, np.zeros(()))
    return cx.helper(node, "bias", "where", [kept, zero, float("-inf")])


@_register("aten.native_layer_norm.default")
def _layer_norm(cx: _Converter, node: Node) -> dict[int, str]:
    x, normalized, weight, bias, eps = node.args
    names = cx.results(node)
    if set(names) != {0}:
        raise Unmappable("the mean and rstd results of native_layer_norm are used")
    rank = len(cx.b.type(cx.tensor(x)).shape)
    inputs = [cx.tensor(x)] + [cx.tensor(t) for t in (weight, bias) if t is not None]
    if weight is None and bias is not None:
        raise Unmappable("layer_norm with a bias but no weight")
    val = node.meta["val"][0]
    attrs = {"axes": list(range(rank - len(normalized), rank)), "eps": eps}
    return {0: cx.b.op(names[0], "layer_norm", inputs, attrs, _shape(node, val), _dtype(node, val))}


@_register("aten._native_batch_norm_legit_no_training.default")
def _batch_norm(cx: _Converter, node: Node) -> dict[int, str]:
    x, weight, bias, mean, var, _, eps = node.args
    names = cx.results(node)
    if set(names) != {0}:
        raise Unmappable("the saved mean and invstd results of batch_norm are used")
    optional = [cx.tensor(t) if t is not None else None for t in (weight, bias)]
    return {0: batch_norm(cx.b, names[0], cx.tensor(x), *optional, cx.tensor(mean), cx.tensor(var), eps)}


# ---------------------------------------------------------------- format 1.1: index arithmetic, scans, pools


@_register("aten.arange.start_step", "aten.arange.start", "aten.arange.default")
def _arange(cx: _Converter, node: Node) -> str:
    bounds = list(node.args) + [None] * 3
    if str(node.target).endswith(".default"):
        start, end, step = 0, bounds[0], 1
    else:
        start, end, step = bounds[0], bounds[1], bounds[2] if bounds[2] is not None else 1
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)):
        raise Unmappable("arange bounds computed at run time")
    _, dtype = cx.out(node)
    return cx.emit(node, "arange", [], {"start": start, "limit": end, "delta": step, "dtype": dtype})


@_register("aten.cumsum.default")
def _cumsum(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    if node.kwargs.get("dtype") is not None:
        x = cx.helper(node, "in", "cast", [x], {"dtype": DTYPES[node.kwargs["dtype"]]})
    return cx.emit(node, "cumsum", [x], {"axis": node.args[1]})


@_register("aten.floor_divide.default", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def _floor_divide(cx: _Converter, node: Node) -> str:
    """``a // b``; ``div(rounding_mode="trunc")`` on floats is ``trunc`` of the
    quotient (:func:`_trunc_quotient`), on integers the floor quotient plus one where
    a non-zero remainder has the divisor's opposite sign."""
    a, b = (cx.operand(x, node) for x in node.args[:2])
    mode = node.kwargs.get("rounding_mode", "floor") if "mode" in str(node.target) else "floor"
    if mode is None:
        return cx.emit(node, "div", [a, b])
    if mode == "floor":
        return cx.emit(node, "floor_divide", [a, b])
    _, dtype = cx.out(node)
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        return cx.emit(node, "trunc", [_trunc_quotient(cx, node, a, b, dtype)])
    if dtype not in ("int8", "int32", "int64"):
        raise Unmappable(f"truncating division of {dtype}")
    quotient = cx.helper(node, "floor", "floor_divide", [a, b])
    return cx.emit(node, "add", [quotient, _sign_correction(cx, node, a, b)])


def _trunc_quotient(cx: _Converter, node: Node, a, b, dtype: str) -> str:
    """The quotient ATen's CPU kernel truncates: ``a / b`` rounded to ``dtype``
    (``std::trunc(a / b)``), except that a float16 or bfloat16 division by one value
    (a number, or a tensor of one element) divides in float32 and truncates that,
    rounding once; ``emit`` then rounds the float32 ``trunc`` with a ``cast``."""
    single = not isinstance(b, str) or math.prod(cx.b.type(b).shape) == 1
    if dtype not in ("float16", "bfloat16") or not single:
        return cx.helper(node, "quotient", "div", [a, b])
    return cx.helper(node, "quotient", "div", _in_dtype(cx, node, "float32", a, b))


def _in_dtype(cx: _Converter, node: Node, dtype: str, a, b) -> list:
    """Operands ``a`` and ``b`` as ``dtype``: tensors of another dtype through a ``cast``
    (``NODE_a_DTYPE``, ``NODE_b_DTYPE``), numbers as they are."""
    return [cx.helper(node, f"{k}_{dtype}", "cast", [v], {"dtype": dtype})
            if isinstance(v, str) and cx.b.type(v).dtype != dtype else v for k, v in (("a", a), ("b", b))]


def _sign_correction(cx: _Converter, node: Node, a, b) -> str:
    """1 where ``remainder(a, b)`` is non-zero and ``a``, ``b`` differ in sign, else 0
    (the step from a floor result to a truncating one), as an int64 tensor. One of
    ``a``, ``b`` is a tensor (torch folds two numbers)."""
    rest = cx.helper(node, "rest", "remainder", [a, b])
    nonzero = cx.helper(node, "nonzero", "ne", [rest, 0])
    negative = [cx.helper(node, f"{k}_neg", "lt", [v, 0]) if isinstance(v, str) else v < 0
                for k, v in (("a", a), ("b", b))]
    if all(isinstance(n, str) for n in negative):
        differ = cx.helper(node, "differ", "ne", negative)
    else:
        tensor = next(n for n in negative if isinstance(n, str))
        fixed = next(n for n in negative if not isinstance(n, str))
        differ = cx.helper(node, "differ", "logical_not", [tensor]) if fixed else tensor
    step = cx.helper(node, "step", "logical_and", [nonzero, differ])
    return cx.helper(node, "step_int", "cast", [step], {"dtype": "int64"})


@_register("aten.remainder.Tensor", "aten.remainder.Scalar", "aten.remainder.Scalar_Tensor")
def _remainder(cx: _Converter, node: Node) -> str:
    """Integer remainders are NumPy's (``remainder``; ATen agrees, and raises where a
    divisor is 0, where NumPy gives 0). A float one is ATen's CPU kernel's, signs of
    zero included (NumPy's gives ``remainder(-0.0, 1) = 0.0``, ATen -0.0):
    ``mod = fmod(a, b); mod != 0 and (b < 0) != (mod < 0) ? mod + b : mod``, computed
    in float32 for float16 and bfloat16 and rounded once (``emit`` states the dtype)."""
    a, b = (cx.operand(x, node) for x in node.args[:2])
    _, dtype = cx.out(node)
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        if isinstance(b, int) and b == 0:
            raise Unmappable("integer remainder by 0 (ATen raises)")
        return cx.emit(node, "remainder", [a, b])
    compute = "float32" if dtype in ("float16", "bfloat16") else dtype
    a, b = _in_dtype(cx, node, compute, a, b)
    mod = cx.helper(node, "fmod", "fmod", [a, b])
    nonzero = cx.helper(node, "nonzero", "ne", [mod, 0])
    mod_negative = cx.helper(node, "mod_neg", "lt", [mod, 0])
    if isinstance(b, str):
        differ = cx.helper(node, "differ", "ne", [cx.helper(node, "b_neg", "lt", [b, 0]), mod_negative])
    else:  # a number: its sign is known
        differ = cx.helper(node, "differ", "logical_not", [mod_negative]) if b < 0 else mod_negative
    step = cx.helper(node, "step", "logical_and", [nonzero, differ])
    return cx.emit(node, "where", [step, cx.helper(node, "shifted", "add", [mod, b]), mod])


@_register("aten.fmod.Tensor", "aten.fmod.Scalar")
def _fmod(cx: _Converter, node: Node) -> str:
    """C's fmod (the dividend's sign), of floats and integers alike: ``fmod``."""
    return cx.emit(node, "fmod", [cx.operand(x, node) for x in node.args[:2]])


def _pair(value: Any) -> list[int]:
    """An ATen 2-D size argument (one int, or one or two in a list) as two ints."""
    values = [value] if isinstance(value, int) else list(value)
    return values * 2 if len(values) == 1 else values


def _pool_attrs(kernel, stride, padding, dilation, ceil_mode) -> dict:
    kh, kw = _pair(kernel)
    ph, pw = _pair(padding)
    return {"kernel_shape": [kh, kw], "strides": _pair(stride) if stride else [kh, kw], "pads": [ph, pw, ph, pw],
            "dilations": _pair(dilation), "ceil_mode": bool(ceil_mode)}


@_register("aten.max_pool2d_with_indices.default", "aten.max_pool2d.default")
def _max_pool2d(cx: _Converter, node: Node) -> Any:
    x = cx.tensor(node.args[0])
    attrs = _pool_attrs(_arg(node, 1, "kernel_size"), _arg(node, 2, "stride", []), _arg(node, 3, "padding", 0),
                        _arg(node, 4, "dilation", 1), _arg(node, 5, "ceil_mode", False))
    if isinstance(node.meta["val"], torch.Tensor):
        return cx.emit(node, "max_pool2d", [x], attrs)
    names = cx.results(node)
    if set(names) != {0}:
        raise Unmappable("the indices of max_pool2d_with_indices are used")
    val = node.meta["val"][0]
    return {0: cx.b.op(names[0], "max_pool2d", [x], attrs, _shape(node, val), _dtype(node, val))}


@_register("aten.avg_pool2d.default")
def _avg_pool2d(cx: _Converter, node: Node) -> str:
    if _arg(node, 6, "divisor_override") is not None:
        raise Unmappable("avg_pool2d with a divisor_override")
    attrs = _pool_attrs(_arg(node, 1, "kernel_size"), _arg(node, 2, "stride", []), _arg(node, 3, "padding", 0), 1,
                        _arg(node, 4, "ceil_mode", False))
    attrs["count_include_pad"] = bool(_arg(node, 5, "count_include_pad", True))
    return cx.emit(node, "avg_pool2d", [cx.tensor(node.args[0])], attrs)


@_register("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(cx: _Converter, node: Node) -> str:
    """At output sizes that divide the input, an adaptive pool is a plain one (a 1x1
    output is a mean); other sizes have windows of varying size: custom."""
    x = cx.tensor(node.args[0])
    shape = cx.b.type(x).shape
    out = _pair(node.args[1])
    if len(shape) != 4 or shape[2] % out[0] or shape[3] % out[1]:
        raise Unmappable(f"adaptive pooling of {list(shape)} to {out}: windows of different sizes")
    if out == [1, 1]:
        return cx.emit(node, "reduce_mean", [x], {"axes": [2, 3], "keepdims": True})
    kernel = [shape[2] // out[0], shape[3] // out[1]]
    return cx.emit(node, "avg_pool2d", [x], {**_pool_attrs(kernel, kernel, 0, 1, False), "count_include_pad": False})


# ---------------------------------------------------------------- tensor indices as one gather


def _linear_index(cx: _Converter, node: Node, indices: list[tuple[str, int, int, bool]]) -> str:
    """``sum(index_k * stride_k)`` over ``(tensor, dim size, stride, wrap)``, broadcast
    (NumPy) to one int64 tensor; with ``wrap``, negative indices count from the end of
    their dim (PyTorch's indexing)."""
    total = None
    for k, (index, size, stride, wrap) in enumerate(indices):
        if cx.b.type(index).dtype != "int64":
            index = cx.helper(node, f"i{k}", "cast", [index], {"dtype": "int64"})
        if wrap and not _nonnegative(cx, index):
            negative = cx.helper(node, f"neg{k}", "lt", [index, 0])
            index = cx.helper(node, f"wrap{k}", "where",
                              [negative, cx.helper(node, f"up{k}", "add", [index, size]), index])
        term = index if stride == 1 else cx.helper(node, f"term{k}", "mul", [index, stride])
        total = term if total is None else cx.helper(node, f"sum{k}", "add", [total, term])
    return total


_VALUE_MOVES = frozenset({"reshape", "broadcast_to", "slice", "transpose", "cast"})


def _nonnegative(cx: _Converter, tensor: str) -> bool:
    """Whether every value of ``tensor`` is known to be >= 0 from how the graph makes
    it: an ``arange`` whose first and last values are, moved by layout ops or an
    integer cast, offset or scaled by numbers >= 0 (position tensors, as in every
    causal mask). Wrapping negative indices is then dead arithmetic."""
    made = {entry["name"]: entry for entry in cx.b.ops}
    while tensor in made:
        entry = made[tensor]
        if entry["op"] == "cast" and entry["attrs"]["dtype"] not in ("int32", "int64"):
            return False
        tensors = [i for i in entry["inputs"] if isinstance(i, str)]
        shifts = [i for i in entry["inputs"] if not isinstance(i, str)]
        # an offset or a scale by a number >= 0 (``arange + 0`` as exporters write it) keeps the sign
        kept = entry["op"] in _VALUE_MOVES or entry["op"] in ("add", "mul") and len(tensors) == 1 and \
            all(v >= 0 for v in shifts)
        if not kept:
            break
        tensor = tensors[0]
    entry = made.get(tensor)
    if entry is None or entry["op"] != "arange":
        return False
    attrs, count = entry["attrs"], cx.b.type(tensor).shape[0]
    return min(attrs["start"], attrs["start"] + max(count - 1, 0) * attrs.get("delta", 1)) >= 0


@_register("aten.index.Tensor")
def _index(cx: _Converter, node: Node) -> str:
    """``x[..., i, j, ...]`` with integer index tensors on adjacent dims: one gather
    from ``x`` with those dims merged, at the linear index of the broadcast indices
    (advanced indexing keeps the result dims in place when the indexed dims are adjacent)."""
    x = cx.tensor(node.args[0])
    shape = cx.b.type(x).shape
    given = list(node.args[1])
    dims = [d for d, i in enumerate(given) if i is not None]
    if not dims or dims != list(range(dims[0], dims[-1] + 1)):
        raise Unmappable("index tensors on dims that are not adjacent")
    tensors = [cx.tensor(given[d]) for d in dims]
    if any(cx.b.type(t).dtype == "bool" for t in tensors):
        raise Unmappable("a bool mask index (a data-dependent shape)")
    first, last = dims[0], dims[-1] + 1
    block = shape[first:last]
    strides = [math.prod(block[k + 1:]) for k in range(len(block))]
    linear = _linear_index(cx, node, [(t, block[k], strides[k], True) for k, t in enumerate(tensors)])
    merged = [*shape[:first], math.prod(block), *shape[last:]]
    flat = cx.helper(node, "merged", "reshape", [x], {"shape": merged})
    return cx.emit(node, "gather", [flat, linear], {"axis": first})


@_register("aten.gather.default")
def _gather_elements(cx: _Converter, node: Node) -> str:
    """``torch.gather(x, dim, index)``: ``out[..i_d..] = x[..index[..i_d..]..]`` as one
    gather from the flattened ``x``, at ``index * stride_dim`` plus every other dim's
    position (an ``arange``) times its stride."""
    x, dim, index = cx.tensor(node.args[0]), node.args[1], cx.tensor(node.args[2])
    shape = cx.b.type(x).shape
    index_shape = cx.b.type(index).shape
    rank = len(shape)
    dim %= rank
    strides = [math.prod(shape[k + 1:]) for k in range(rank)]
    terms = [(index, shape[dim], strides[dim], False)]  # torch.gather rejects negative indices
    for k, n in enumerate(index_shape):
        if k == dim or n == 1:
            continue
        position = cx.helper(node, f"pos{k}", "arange", [], {"start": 0, "limit": n, "dtype": "int64"})
        placed = [1] * rank
        placed[k] = n
        terms.append((cx.helper(node, f"at{k}", "reshape", [position], {"shape": placed}), shape[k], strides[k], False))
    linear = _linear_index(cx, node, terms)
    flat = cx.helper(node, "flat", "reshape", [x], {"shape": [math.prod(shape)]})
    return cx.emit(node, "gather", [flat, linear], {"axis": 0})


@_register("aten.isinf.default")
def _isinf(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    if cx.b.type(x).dtype not in ("float16", "bfloat16", "float32", "float64"):
        return cx.emit(node, "ne", [x, x])  # no integer is infinite: all false
    return cx.emit(node, "eq", [cx.helper(node, "abs", "abs", [x]), float("inf")])


@_register("aten.isnan.default")
def _isnan(cx: _Converter, node: Node) -> str:
    x = cx.tensor(node.args[0])
    return cx.emit(node, "ne", [x, x])  # NaN is the one value unequal to itself


@_register("aten.clamp.Tensor", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor")
def _clamp_tensor(cx: _Converter, node: Node) -> str:
    """Tensor bounds: ``minimum(maximum(x, low), high)``, NaN propagating as in PyTorch."""
    target = str(node.target)
    if target == "aten.clamp_min.Tensor":
        low, high = node.args[1], None
    elif target == "aten.clamp_max.Tensor":
        low, high = None, node.args[1]
    else:
        low, high = _arg(node, 1, "min"), _arg(node, 2, "max")
    y = cx.tensor(node.args[0])
    steps = [(op, bound) for op, bound in (("maximum", low), ("minimum", high)) if bound is not None]
    for k, (op, bound) in enumerate(steps):
        inputs = [y, cx.operand(bound, node)]
        y = cx.emit(node, op, inputs) if k == len(steps) - 1 else cx.helper(node, op, op, inputs)
    return y


@_register("aten.as_strided.default")
def _as_strided(cx: _Converter, node: Node) -> str:
    """A plain view (row-major strides, no offset) is a reshape; any other stride
    pattern reads memory in a way no op of the format describes."""
    x = cx.tensor(node.args[0])
    size, stride = list(node.args[1]), list(node.args[2])
    offset = _arg(node, 3, "storage_offset", 0) or 0
    source = node.args[0].meta["val"]  # as_strided reads the storage: its input must be laid out row-major
    if offset or source.storage_offset() or not source.is_contiguous() or not _row_major(size, stride) or \
            math.prod(size) != math.prod(cx.b.type(x).shape):
        raise Unmappable("as_strided with strides other than a reshape's")
    return cx.emit(node, "reshape", [x], {"shape": size})


def _row_major(size: list[int], stride: list[int]) -> bool:
    """Whether ``stride`` is the row-major layout of ``size`` (size-1 dims take any stride)."""
    return all(n == 1 or s == math.prod(size[k + 1:]) for k, (n, s) in enumerate(zip(size, stride)))


@_register("aten.native_group_norm.default")
def _group_norm(cx: _Converter, node: Node) -> dict[int, str]:
    x, weight, bias, _, _, _, groups, eps = node.args
    names = cx.results(node)
    if set(names) != {0}:
        raise Unmappable("the mean and rstd results of native_group_norm are used")
    optional = [cx.tensor(t) if t is not None else None for t in (weight, bias)]
    return {0: group_norm(cx.b, names[0], cx.tensor(x), *optional, groups, eps)}
