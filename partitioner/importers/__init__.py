"""Importers: ONNX models and torch.export programs -> graph format v1.

The framework-specific halves live in ``onnx.py`` and ``torch.py`` and import
their framework; this module does not, so it is cheap to import. What both share
is here: :class:`GraphBuilder` (which checks every op it is given against the
loader's own rules, so that an op the format cannot express faithfully becomes a
``custom`` op instead of a wrong one), the import summary, the batch-norm
decomposition, and the YAML writer that prints one op per line in flow style.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import yaml

from ..dtypes import cast_array, numpy_dtype
from ..errors import GraphError, SizeError
from ..exits import note
from ..graph import Graph
from ..loader import NAME_PATTERN, format_1_1_feature, load_graph
from ..ops import TensorType, conv_output_length
from ..values import INLINE_LIMIT, to_inline
from ..yamlio import parse_yaml

Operand = str | int | float


def extra(name: str):
    """Import the importer module of an optional extra, only now.

    So that ``import partitioner`` never imports a framework.

    Parameters
    ----------
    name : str
        ``onnx`` or ``torch``.

    Returns
    -------
    module
        :mod:`partitioner.importers.onnx` or :mod:`partitioner.importers.torch`.

    Raises
    ------
    ImportError
        The extra is not installed (the message says how to install it).

    Examples
    --------
    >>> extra("onnx").__name__
    'partitioner.importers.onnx'
    """
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise ImportError(f"importing from {name} needs the '{name}' extra: "
                          f"pip install 'fusion-partitioner[{name}]'") from None


class Unmappable(Exception):
    """A source op has no faithful format-v1 equivalent; it becomes ``custom``.

    ``str(error)`` says why (shown in the import summary).
    """


@dataclass
class Summary:
    """What one import did, counted over the source framework's ops.

    Attributes:
        source_ops: ops of the source graph that produce tensors (asserts and
            other side-effect-free bookkeeping are not counted).
        mapped: source ops that became format-v1 ops.
        folded: source ops evaluated at import time (values known statically).
        custom: source op kind -> how many became ``custom`` ops.
        reasons: source op kind -> why the first one of that kind is custom.
        graph_ops: ops in the written graph (composites counted once).
        notes: one line each where a mapped op's graph differs in form from the
            source (an ONNX ZipMap's maps kept as their tensor), said so that
            nothing changes silently.
    """

    source_ops: int = 0
    mapped: int = 0
    folded: int = 0
    custom: Counter = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    graph_ops: int = 0
    notes: list[str] = field(default_factory=list)

    def text(self, label: str) -> str:
        """The summary as printed by the importers: one line, then one line per custom
        kind, then one line per note."""
        customs = sum(self.custom.values())
        folded = f", {self.folded} folded" if self.folded else ""
        lines = [f"{label}: {self.source_ops} source ops, {self.mapped} mapped{folded}, {customs} custom; "
                 f"{self.graph_ops} ops in the graph"]
        for kind, count in sorted(self.custom.items(), key=lambda kv: (-kv[1], kv[0])):
            reason = self.reasons.get(kind)
            lines.append(f"  custom {kind} x{count}" + (f" ({reason})" if reason else ""))
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


@dataclass
class ImportResult:
    """A converted graph before loading.

    Attributes:
        graph: the format-v1 dict (what :func:`to_yaml` writes).
        summary: counts of mapped and custom ops.
        values: the values of graph inputs that are constants of the source
            (weights, and folded tensors too large to be literals) and too large
            to sit inline in the graph (``partitioner.values.INLINE_LIMIT``
            elements); smaller ones are the inputs' ``value`` in ``graph``. The
            import command writes these to the graph's ``.npz`` side file.
        renamed: source tensor name -> graph name, for the names that had to
            change to be valid format-v1 names.
        hooks: custom op name -> the source framework's semantics of it (see
            ``Graph.hooks``); in memory only, never written to a file.
    """

    graph: dict
    summary: Summary
    values: dict[str, np.ndarray] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)
    hooks: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Graph:
        """The graph through :func:`partitioner.load_graph`, holding every constant
        value and custom-op hook in memory (raises GraphError)."""
        graph = load_graph(self.graph)
        graph.values.update(self.values)
        graph.hooks.update(self.hooks)
        return graph


def report(result: ImportResult, verbose: bool = True) -> None:
    """Print ``result``'s summary on stderr (stdout stays free for data)."""
    if verbose:
        note(result.summary.text(f"import {result.graph['name']}"))


class GraphBuilder:
    """Collects inputs and ops of a format-v1 graph, checking each op as it comes.

    Every op goes through :func:`load_graph` on its own (operands as inputs), so it
    meets every rule of the loader, and a stated shape that disagrees with the
    format's inference is caught here, where the importer can still turn the
    source op into ``custom``; a result above the format's size limit raises
    :class:`SizeError` naming ``label`` instead, as no stated shape can stand in.
    """

    def __init__(self, name: str, source: str, label: str, reserved: Sequence[str] = ()):
        self.name = name
        self.source = source
        self.label = label  # what errors name: the source file, or <torch>
        self.inputs: list[dict] = []
        self.ops: list[dict] = []
        self.types: dict[str, TensorType] = {}
        self.values: dict[str, np.ndarray] = {}
        self.hooks: dict[str, Any] = {}
        self.summary = Summary()
        # Names the source graph uses; helper ops never take one of them.
        self._taken: set[str] = set(reserved)

    # ---------------------------------------------------------------- names

    def fresh(self, base: str, part: str = "") -> str:
        """An unused name ``base_part`` (``base`` alone when ``part`` is empty), with a
        numeric suffix where needed."""
        stem = f"{base}_{part}" if part else base
        name, i = stem, 1
        while name in self._taken or name in self.types:
            name, i = f"{stem}_{i}", i + 1
        self._taken.add(name)
        return name

    # ---------------------------------------------------------------- tensors

    def add_input(self, name: str, shape: Sequence[int], dtype: str, value: np.ndarray | None = None) -> str:
        """Declare a graph input (activation or weight) and return its name. A
        constant's ``value`` (any array of its shape, converted to ``dtype``) goes
        inline when small, else to the side file's values."""
        t = self.types[name] = TensorType(tuple(int(d) for d in shape), dtype)
        self._taken.add(name)
        entry = {"name": name, "shape": list(t.shape), "dtype": dtype}
        if value is not None:
            array = np.asarray(value)
            array = array if array.dtype == numpy_dtype(dtype) else cast_array(array, dtype)
            if array.size <= INLINE_LIMIT:
                entry["value"] = to_inline(array)
            else:
                self.values[name] = array
        self.inputs.append(entry)
        return name

    def filled(self, name: str, shape: Sequence[int], dtype: str, value: Any) -> str:
        """A tensor of ``shape`` every element of which is ``value``: a one-element
        constant input (``NAME_value``), broadcast, so a kernel reads one element."""
        if not len(shape):
            return self.add_input(name, [], dtype, np.asarray(value))
        element = self.add_input(self.fresh(name, "value"), [], dtype, np.asarray(value))
        return self.op(name, "broadcast_to", [element], {"shape": list(shape)}, shape, dtype)

    def type(self, name: str) -> TensorType:
        """Shape and dtype of a tensor already in the graph."""
        return self.types[name]

    def op(self, name: str, op: str, inputs: Sequence[Operand], attrs: dict | None = None,
           shape: Sequence[int] | None = None, dtype: str | None = None) -> str:
        """Add one op and return the name of its result.

        Every op states its shape and dtype: ``shape`` and ``dtype`` when given (the
        source's), otherwise the format's inference. When the format's promotion
        computes another dtype than ``dtype`` (float16 plus a float32 0-d tensor is
        float16 in PyTorch), the op states what it computes, under ``NAME_compute``,
        and an explicit ``cast`` named ``NAME`` rounds it to ``dtype``: an imported
        graph has no hidden conversion.

        A ``concat`` drops its zero-element operands, and one left with a single
        operand of its own type is a view of it (a ``reshape`` to its shape, which
        moves nothing and keeps the name): so XLA's algebraic simplifier does
        (``HandleConcatenate``), and PyTorch's partial RoPE exports
        ``cat(rotated, x[..., rotary_dim:])`` with an empty second part when the
        rotary dimension is the head's. Zero-element ops nothing reads are dropped by
        :meth:`result`.

        Raises:
            Unmappable: the loader rejects the op (its message says why), e.g. a
                stated shape that disagrees with the format's inference.
        """
        if op == "concat":
            op, inputs, attrs = self._nonempty(inputs, attrs, shape, dtype)
        entry: dict[str, Any] = {"name": name, "op": op, "inputs": list(inputs)}
        if attrs:
            entry["attrs"] = attrs
        if shape is not None:
            entry["shape"] = [int(d) for d in shape]
        if op == "custom":
            entry["dtype"] = dtype
        out = self._check(entry)
        if dtype is not None and out.dtype != dtype:
            computed = self.op(self.fresh(name, "compute"), op, inputs, attrs, shape)
            return self.op(name, "cast", [computed], {"dtype": dtype}, shape, dtype)
        entry.setdefault("shape", list(out.shape))
        entry["dtype"] = out.dtype
        self.types[name] = out
        self._taken.add(name)
        self.ops.append(entry)
        return name

    def _nonempty(self, inputs: Sequence[Operand], attrs: dict | None, shape: Sequence[int] | None,
                  dtype: str | None) -> tuple[str, list[Operand], dict | None]:
        """(op, operands, attributes) of a concat less its zero-element operands (all
        of them when every one is empty: the result may still have a shape of its
        own): a ``reshape`` view when one is left of the stated type."""
        kept = [i for i in inputs if not isinstance(i, str) or self.types[i].numel]
        if not kept:
            return "concat", list(inputs), attrs
        if len(kept) == 1 and isinstance(kept[0], str):
            t = self.types[kept[0]]
            if (shape is None or tuple(shape) == t.shape) and dtype in (None, t.dtype):
                return "reshape", kept, {"shape": list(t.shape)}
        return "concat", kept, attrs

    def custom(self, name: str, kind: str, inputs: Sequence[str], shape: Sequence[int], dtype: str,
               attrs: dict | None = None) -> str:
        """Add a ``custom`` op of source kind ``kind`` (with further custom ``attrs``,
        such as ONNX's kept node) and return its name."""
        return self.op(name, "custom", inputs, {"kind": kind, **(attrs or {})}, shape, dtype)

    def _check(self, entry: dict) -> TensorType:
        operands = list(dict.fromkeys(i for i in entry["inputs"] if isinstance(i, str)))
        single = {
            "inputs": [{"name": n, "shape": list(self.types[n].shape), "dtype": self.types[n].dtype}
                       for n in operands],
            "ops": [entry],
            "outputs": [entry["name"]],
        }
        try:
            graph = load_graph(single)
        except SizeError as exc:  # no custom op can stand in: its stated shape would hide the overflow
            raise SizeError(f"{self.label}: {str(exc).split(': ', 1)[-1]}") from None
        except GraphError as exc:
            # "<graph>: op 'NAME': problem" -> "problem"
            raise Unmappable(str(exc).split(": ", 2)[-1]) from None
        return graph.tensor(entry["name"])

    # ---------------------------------------------------------------- transactions

    def mark(self) -> tuple[int, int]:
        """A point to roll back to when a source op turns out to be unmappable."""
        return len(self.ops), len(self.inputs)

    def rollback(self, mark: tuple[int, int]) -> None:
        """Drop the ops and inputs added since ``mark``."""
        n_ops, n_inputs = mark
        for entry in self.ops[n_ops:] + self.inputs[n_inputs:]:
            del self.types[entry["name"]]
            self.values.pop(entry["name"], None)
            self.hooks.pop(entry["name"], None)
        del self.ops[n_ops:], self.inputs[n_inputs:]

    def count(self, outcome: str, kind: str = "", reason: str = "") -> None:
        """Count one source op by what it became: ``mapped``, ``folded`` or ``custom``
        (of kind ``kind``; the first ``reason`` per kind is kept)."""
        self.summary.source_ops += 1
        if outcome == "custom":
            self.summary.custom[kind] += 1
            self.summary.reasons.setdefault(kind, reason)
        elif outcome == "mapped":
            self.summary.mapped += 1
        else:
            self.summary.folded += 1

    # ---------------------------------------------------------------- result

    def result(self, outputs: Sequence[str], renamed: dict[str, str] | None = None) -> ImportResult:
        """The finished graph; ``outputs`` are tensor names (duplicates are dropped).
        It says format 1.1 where it uses what 1.1 adds (values, ops, dtypes)."""
        self._drop_unread_empty(outputs)
        graph = {"format": 1, "name": self.name, "source": self.source, "inputs": self.inputs,
                 "ops": self.ops, "outputs": list(dict.fromkeys(outputs))}
        if self.values or format_1_1_feature(graph) is not None:
            graph["format"] = 1.1
        self.summary.graph_ops = len(self.ops)
        return ImportResult(graph, self.summary, self.values, renamed or {}, self.hooks)

    def _drop_unread_empty(self, outputs: Sequence[str]) -> None:
        """Drops the ops with zero-element results that no op reads and that are no
        output (an empty slice whose concat dropped it), and the ops only they read:
        they compute and move nothing, and each would double the groups of its region.
        Ops the source itself leaves unread stay (the report names dead code)."""
        read, freed = set(outputs), set()  # read by a kept op; read only by dropped ones so far
        kept = []
        for entry in reversed(self.ops):
            name = entry["name"]
            if name not in read and (name in freed or not self.types[name].numel):
                del self.types[name]
                self.hooks.pop(name, None)
                freed.update(i for i in entry["inputs"] if isinstance(i, str))
                continue
            kept.append(entry)
            read.update(i for i in entry["inputs"] if isinstance(i, str))
        self.ops[:] = reversed(kept)


def sanitize(name: str) -> str:
    """``name`` made a valid format-v1 name: characters outside ``[A-Za-z0-9_./-]``
    become ``_`` (``:`` too, as it names composite parts), leading ``/`` are dropped
    and a name that would start with a digit, ``.`` or ``-`` gets a ``_`` prefix."""
    clean = re.sub(r"[^A-Za-z0-9_./-]", "_", name).lstrip("/")
    if not clean or not re.match(r"[A-Za-z_]", clean):
        clean = "_" + clean
    assert NAME_PATTERN.fullmatch(clean)
    return clean


def batch_norm(b: GraphBuilder, name: str, x: str, weight: str | None, bias: str | None, mean: str, var: str,
               eps: float) -> str:
    """Inference batch normalisation over axis 1 as primitives; returns ``name``.

    ``y = (x - mean) * rsqrt(var + eps) * weight + bias``, with the per-channel
    tensors reshaped (views) to ``[C, 1, ...]``. Half-precision input is computed
    in float32 and rounded once at the end, as PyTorch's and cuDNN's kernels do.
    """
    xt = b.type(x)
    channel = [xt.shape[1]] + [1] * (len(xt.shape) - 2)
    last = "shifted" if bias is not None else "scaled" if weight is not None else "xn"

    def per_channel(tensor: str, part: str) -> str:
        return b.op(b.fresh(name, part), "reshape", [tensor], {"shape": channel})

    def step(part: str, kind: str, inputs: list) -> str:
        if part == last:  # half input: computed in float32, then the builder's explicit cast back
            return b.op(name, kind, inputs, shape=xt.shape, dtype=xt.dtype)
        return b.op(b.fresh(name, part), kind, inputs)

    if xt.dtype in ("float16", "bfloat16"):
        x = b.op(b.fresh(name, "in"), "cast", [x], {"dtype": "float32"})
        var = b.op(b.fresh(name, "var32"), "cast", [var], {"dtype": "float32"})
    inv = b.op(b.fresh(name, "inv"), "rsqrt", [b.op(b.fresh(name, "ve"), "add", [per_channel(var, "var"), eps])])
    y = b.op(b.fresh(name, "xc"), "sub", [x, per_channel(mean, "mean")])
    y = step("xn", "mul", [y, inv])
    if weight is not None:
        y = step("scaled", "mul", [y, per_channel(weight, "w")])
    if bias is not None:
        y = step("shifted", "add", [y, per_channel(bias, "b")])
    return y


def group_norm(b: GraphBuilder, name: str, x: str, weight: str | None, bias: str | None, groups: int,
               eps: float) -> str:
    """Group normalisation of ``x`` [N, C, ...] as primitives; returns ``name``.

    The C channels form ``groups`` groups of C / groups; each instance's group is
    normalised over its channels and positions (a ``layer_norm`` over the last axis
    of an [N, groups, rest] view), then ``weight`` and ``bias`` [C] scale and shift
    per channel. ``groups`` = C is instance normalisation, 1 is a layer norm over
    everything but N. Half-precision input is computed in float32 and rounded once
    at the end, as :func:`batch_norm` does.

    Raises:
        Unmappable: ``x`` has no channel axis or ``groups`` does not divide C.
    """
    xt = b.type(x)
    if len(xt.shape) < 2 or groups < 1 or xt.shape[1] % groups:
        raise Unmappable(f"{groups} groups do not divide the channels of a {list(xt.shape)} tensor")
    channel = [xt.shape[1]] + [1] * (len(xt.shape) - 2)
    last = "shifted" if bias is not None else "scaled" if weight is not None else "xn"

    def step(part: str, kind: str, inputs: list, attrs: dict | None = None) -> str:
        if part == last:  # half input: computed in float32, then the builder's explicit cast back
            return b.op(name, kind, inputs, attrs, shape=xt.shape, dtype=xt.dtype)
        return b.op(b.fresh(name, part), kind, inputs, attrs)

    if xt.dtype in ("float16", "bfloat16"):
        x = b.op(b.fresh(name, "in"), "cast", [x], {"dtype": "float32"})
    rest = xt.shape[1] // groups * math.prod(xt.shape[2:])
    grouped = b.op(b.fresh(name, "grouped"), "reshape", [x], {"shape": [xt.shape[0], groups, rest]})
    norm = b.op(b.fresh(name, "norm"), "layer_norm", [grouped], {"axes": [-1], "eps": eps})
    y = step("xn", "reshape", [norm], {"shape": list(xt.shape)})
    if weight is not None:
        w = b.op(b.fresh(name, "w"), "reshape", [weight], {"shape": channel})
        y = step("scaled", "mul", [y, w])
    if bias is not None:
        y = step("shifted", "add", [y, b.op(b.fresh(name, "b"), "reshape", [bias], {"shape": channel})])
    return y


def conv1d(b: GraphBuilder, name: str, x: str, w: str, bias: str | None, strides: Sequence[int],
           pads: Sequence[int], dilations: Sequence[int], groups: int, dtype: str | None = None) -> str:
    """A 1-D convolution of ``x`` [N, C, L] by ``w`` [O, C/groups, K] as one
    ``conv2d`` over views of height 1; returns ``name``, the [N, O, Lo] result.

    ``x`` is viewed as [N, C, 1, L] and ``w`` as [O, C/groups, 1, K] (reshapes, which
    move no bytes), the conv2d has stride, padding and dilation 1, 0 and 1 along the
    height, and its [N, O, 1, Lo] result is viewed back as [N, O, Lo]: the products,
    sums and rounding are the 1-D convolution's. ``pads`` are ONNX's [begin, end];
    ``dtype`` is the source's result dtype (None: the format's).

    Raises:
        Unmappable: the shapes, strides or groups are inconsistent (the loader's
            message says how).
    """
    xs, ws = b.type(x).shape, b.type(w).shape
    if len(xs) != 3 or len(ws) != 3 or len(strides) != 1 or len(pads) != 2 or len(dilations) != 1:
        raise Unmappable(f"a 1-D convolution needs rank-3 input and weight, got {list(xs)} and {list(ws)}")
    row = b.op(b.fresh(name, "x2d"), "reshape", [x], {"shape": [xs[0], xs[1], 1, xs[2]]})
    kernel = b.op(b.fresh(name, "w2d"), "reshape", [w], {"shape": [ws[0], ws[1], 1, ws[2]]})
    attrs = {"strides": [1, strides[0]], "pads": [0, pads[0], 0, pads[1]], "dilations": [1, dilations[0]],
             "groups": groups}
    planes = b.op(b.fresh(name, "2d"), "conv2d", [row, kernel, *([bias] if bias else [])], attrs)
    n, o, _, length = b.type(planes).shape
    return b.op(name, "reshape", [planes], {"shape": [n, o, length]}, [n, o, length], dtype)


def conv3d(b: GraphBuilder, name: str, x: str, w: str, bias: str | None, strides: Sequence[int],
           pads: Sequence[int], dilations: Sequence[int], groups: int, dtype: str | None = None) -> str:
    """A 3-D convolution of ``x`` [N, C, D, H, W] by ``w`` [O, C/groups, kd, kh, kw]
    as one ``conv2d``; returns ``name``, the [N, O, Do, Ho, Wo] result.

    The depth axis becomes part of the GEMM, as an implicit GEMM of the 3-D
    convolution has it: ``M = N·Do·Ho·Wo`` and ``K = C/groups·kd·kh·kw``. Depth
    tap ``t`` of output depth ``d`` reads input depth ``d·sd + t·dd`` (of the input
    zero-padded in depth), so the ``kd`` strided depth slices, stacked, give each
    output depth its [C·kd, H, W] window, a conv2d input over the batch ``N·Do``
    with the taps ordered within each channel group as the weight's [O, kd·C/g,
    kh, kw] view orders them. Slices, concat, reshape and transpose are index
    arithmetic: they fuse into the conv2d's operand loads (its prologue). The
    conv2d's [N·Do, O, Ho, Wo] result is transposed to [N, O, Do, Ho, Wo]: a layout
    op, which fuses with the result's readers, not as the conv2d's epilogue. The
    products and the one rounding are the 3-D convolution's; only the order of the
    float sums over ``K`` differs.

    ``pads`` are ONNX's [d_begin, h_begin, w_begin, d_end, h_end, w_end]; ``dtype``
    is the source's result dtype (None: the format's).

    Raises:
        Unmappable: the ranks, shapes, strides, pads or groups are inconsistent.
    """
    xs, ws = b.type(x).shape, b.type(w).shape
    if len(xs) != 5 or len(ws) != 5 or len(strides) != 3 or len(pads) != 6 or len(dilations) != 3:
        raise Unmappable(f"a 3-D convolution needs rank-5 input and weight, got {list(xs)} and {list(ws)}")
    n, c, depth = xs[:3]
    o, ci, kd = ws[:3]
    if groups < 1 or c != ci * groups or o % groups or min(*strides, *dilations) < 1 or min(pads) < 0:
        raise Unmappable(f"input {list(xs)}, weight {list(ws)}, groups {groups}, strides {list(strides)}, "
                         f"dilations {list(dilations)} and pads {list(pads)} are inconsistent")
    (sd, sh, sw), (dd, dh, dw) = strides, dilations
    front, back = pads[0], pads[3]
    do = conv_output_length(depth, kd, sd, dd, front, back)
    if do < 1:
        raise Unmappable(f"the kernel's depth {kd} does not fit the padded input's depth {depth}")
    if front or back:
        x = b.op(b.fresh(name, "padded"), "pad", [x], {"pads": [0, 0, front, 0, 0, 0, 0, back, 0, 0]})
    taps = []
    for t in range(kd):
        tap = b.op(b.fresh(name, f"tap{t}"), "slice", [x],
                   {"starts": [t * dd], "ends": [t * dd + (do - 1) * sd + 1], "axes": [2], "steps": [sd]})
        taps.append(b.op(b.fresh(name, f"tap{t}_axis"), "reshape", [tap], {"shape": [n, c, 1, do, *xs[3:]]}))
    stacked = b.op(b.fresh(name, "taps"), "concat", taps, {"axis": 2}) if kd > 1 else taps[0]
    grouped = b.op(b.fresh(name, "grouped"), "reshape", [stacked], {"shape": [n, groups, ci, kd, do, *xs[3:]]})
    ordered = b.op(b.fresh(name, "ordered"), "transpose", [grouped], {"perm": [0, 4, 1, 3, 2, 5, 6]})
    windows = b.op(b.fresh(name, "windows"), "reshape", [ordered], {"shape": [n * do, c * kd, *xs[3:]]})
    kernel = b.op(b.fresh(name, "w_taps"), "transpose", [w], {"perm": [0, 2, 1, 3, 4]})
    kernel = b.op(b.fresh(name, "w2d"), "reshape", [kernel], {"shape": [o, kd * ci, *ws[3:]]})
    attrs = {"strides": [sh, sw], "pads": [pads[1], pads[2], pads[4], pads[5]], "dilations": [dh, dw],
             "groups": groups}
    planes = b.op(b.fresh(name, "2d"), "conv2d", [windows, kernel, *([bias] if bias else [])], attrs)
    ho, wo = b.type(planes).shape[2:]
    planes = b.op(b.fresh(name, "depths"), "reshape", [planes], {"shape": [n, do, o, ho, wo]})
    return b.op(name, "transpose", [planes], {"perm": [0, 2, 1, 3, 4]}, [n, o, do, ho, wo], dtype)


# ---------------------------------------------------------------- YAML


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_RESERVED = {"null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value) and value not in _RESERVED:
        return value
    return json.dumps(value)


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _header(key: str, value: Any) -> str:
    """``key: value`` with the value plain where it reads back unchanged (free text
    such as ``source`` stays readable), quoted otherwise."""
    line = f"{key}: {value}"
    try:
        if isinstance(value, str) and value == value.strip() and parse_yaml(line) == {key: value}:
            return line
    except yaml.YAMLError:
        pass  # e.g. "file.onnx: ..." reads as a nested mapping: quote it
    return f"{key}: {_scalar(value)}"


def to_yaml(graph: dict, comments: Sequence[str] = ()) -> str:
    """``graph`` as YAML in the style of ``graphs/``: header fields, then one input and
    one op per line in flow style. ``comments`` become ``#`` lines at the top."""
    lines = [f"# {c}" for c in comments]
    lines += [_header(key, graph[key]) for key in ("format", "name", "source", "dtype", "values") if key in graph]
    for key in ("inputs", "ops"):
        entries = graph.get(key, [])
        lines.append(f"{key}:" if entries else f"{key}: []")  # a bare "ops:" would read as null
        lines += [f"  - {_flow(entry)}" for entry in entries]
    lines.append(f"outputs: {_flow(graph['outputs'])}")
    return "\n".join(lines) + "\n"
