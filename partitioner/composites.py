"""Composite ops of format v1 and their expansion into primitives.

A composite ``NAME`` expands into primitives named ``NAME:part``; the last one is
named ``NAME`` itself, so later ops keep reading the composite's result by its
name. On float16/bfloat16 input the expansion casts the input to float32 first and
the result back at the end (``docs/graph-format.md``, *Numerics*), so a norm over
values whose squares overflow float16 stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .dtypes import FLOATS, HALFS, epsilon
from .errors import InferenceError
from .ops import Attr, TensorType


@dataclass(frozen=True)
class Primitive:
    """One op of an expansion: name, registry kind, operands and attributes."""

    name: str
    kind: str
    inputs: tuple
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CompositeSpec:
    """Operand count and attributes of a composite op."""

    min_inputs: int
    max_inputs: int
    attrs: dict[str, Attr]


COMPOSITES: dict[str, CompositeSpec] = {
    "softmax": CompositeSpec(1, 1, {"axis": Attr("int", default=-1)}),
    "log_softmax": CompositeSpec(1, 1, {"axis": Attr("int", default=-1)}),
    "layer_norm": CompositeSpec(1, 3, {"axes": Attr("ints", default=[-1]), "eps": Attr("number", default=1e-5)}),
    "rms_norm": CompositeSpec(1, 2, {"axes": Attr("ints", default=[-1]), "eps": Attr("number")}),
    "linear": CompositeSpec(2, 3, {}),
}


class _Builder:
    """Collects primitives named ``NAME:part`` and gives the last one ``NAME``."""

    def __init__(self, name: str, x_dtype: str):
        self.name = name
        self.ops: list[Primitive] = []
        self.cast_back = x_dtype if x_dtype in HALFS else None

    def add(self, part: str, kind: str, inputs: list, **attrs) -> str:
        op_name = f"{self.name}:{part}"
        self.ops.append(Primitive(op_name, kind, tuple(inputs), attrs))
        return op_name

    def upcast(self, x: str) -> str:
        return self.add("in", "cast", [x], dtype="float32") if self.cast_back else x

    def finish(self) -> list[Primitive]:
        if self.cast_back:
            self.add("out", "cast", [self.ops[-1].name], dtype=self.cast_back)
        last = self.ops[-1]
        self.ops[-1] = Primitive(self.name, last.kind, last.inputs, last.attrs)
        return self.ops


def _softmax(b: _Builder, inputs, attrs, log: bool) -> None:
    axes = [attrs["axis"]]
    x = b.upcast(inputs[0])
    peak = b.add("max", "reduce_max", [x], axes=axes, keepdims=True)
    shifted = b.add("shift", "sub", [x, peak])
    exp = b.add("exp", "exp", [shifted])
    total = b.add("sum", "reduce_sum", [exp], axes=axes, keepdims=True)
    if log:
        b.add("result", "sub", [shifted, b.add("log", "log", [total])])
    else:
        b.add("result", "div", [exp, total])


def _layer_norm(b: _Builder, inputs, attrs) -> None:
    axes = attrs["axes"]
    x = b.upcast(inputs[0])
    mean = b.add("mean", "reduce_mean", [x], axes=axes, keepdims=True)
    centered = b.add("centered", "sub", [x, mean])
    var = b.add("var", "reduce_mean", [b.add("sq", "mul", [centered, centered])], axes=axes, keepdims=True)
    inv = b.add("inv", "rsqrt", [b.add("var_eps", "add", [var, attrs["eps"]])])
    y = b.add("norm", "mul", [centered, inv])
    if len(inputs) > 1:
        y = b.add("scaled", "mul", [y, inputs[1]])
    if len(inputs) > 2:
        b.add("shifted", "add", [y, inputs[2]])


def _rms_norm(b: _Builder, inputs, attrs, x_dtype: str) -> None:
    eps = attrs["eps"]
    if eps is None:  # PyTorch's default: the machine epsilon of the (floating) input dtype
        eps = epsilon(x_dtype if x_dtype in FLOATS else "float32")
    x = b.upcast(inputs[0])
    mean_sq = b.add("mean_sq", "reduce_mean", [b.add("sq", "mul", [x, x])], axes=attrs["axes"], keepdims=True)
    inv = b.add("inv", "rsqrt", [b.add("ms_eps", "add", [mean_sq, eps])])
    y = b.add("norm", "mul", [x, inv])
    if len(inputs) > 1:
        b.add("scaled", "mul", [y, inputs[1]])


def _linear(b: _Builder, inputs, attrs, weight: TensorType) -> None:
    if len(weight.shape) != 2:
        raise InferenceError(f"linear weight must be [out, in], got {list(weight.shape)}")
    y = b.add("matmul", "matmul", [inputs[0], b.add("weight_t", "transpose", [inputs[1]], perm=[1, 0])])
    if len(inputs) > 2:
        b.add("bias", "add", [y, inputs[2]])


def expand(name: str, kind: str, inputs: list, types: list[TensorType], attrs: dict) -> list[Primitive]:
    """Primitives for composite ``kind`` named ``name``; the last is named ``name``.

    ``inputs`` are tensor names, ``types`` their shapes and dtypes, ``attrs`` the
    composite's attributes with defaults filled. Raises InferenceError.
    """
    x_dtype = types[0].dtype
    b = _Builder(name, x_dtype if kind != "linear" else "float32")
    if kind in ("softmax", "log_softmax"):
        _softmax(b, inputs, attrs, log=kind == "log_softmax")
    elif kind == "layer_norm":
        _layer_norm(b, inputs, attrs)
    elif kind == "rms_norm":
        _rms_norm(b, inputs, attrs, x_dtype)
    else:
        _linear(b, inputs, attrs, types[1])
    return b.finish()
