"""Window geometry of ``max_pool2d`` and ``avg_pool2d`` (format 1.1): output sizes,
which input rows and columns a window covers, and the divisor of an average.

The one definition the registry's inference and NumPy semantics and the CUDA
code generation share. It is PyTorch's (``aten/src/ATen/native/Pool.h``), which
ONNX's ``MaxPool``/``AveragePool`` follow for the same attributes:

- ``out = floor((in + pad_begin + pad_end - dilation*(k-1) - 1) / stride) + 1``,
  ``ceil`` instead of ``floor`` under ``ceil_mode``, and then one fewer when the
  last window would start past the input and its begin padding;
- a max pool ignores padding (a window of padding only gives ``-inf``, or the
  dtype's least value for integers);
- an average divides by the window's elements inside the input, or with
  ``count_include_pad`` by those inside the padded input (a ``ceil_mode`` window
  reaching past the end padding still counts only up to it); a window of
  padding only gives NaN without ``count_include_pad`` (0 / 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InferenceError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Axis:
    """One spatial axis of a pooling window: input size, kernel size, stride,
    dilation, begin and end padding, and the output size."""

    size: int
    kernel: int
    stride: int
    dilation: int
    begin: int
    end: int
    out: int

    def start(self, o: int) -> int:
        """Input coordinate of output ``o``'s first tap (may be negative: padding)."""
        return o * self.stride - self.begin

    def taps(self, o: int) -> list[int]:
        """Input coordinates of output ``o``'s window that lie inside the input."""
        first = self.start(o)
        return [first + t * self.dilation for t in range(self.kernel)
                if 0 <= first + t * self.dilation < self.size]

    def padded_count(self, o: int) -> int:
        """Taps of output ``o``'s window inside the padded input (``count_include_pad``)."""
        first = self.start(o)
        return sum(1 for t in range(self.kernel) if -self.begin <= first + t * self.dilation < self.size + self.end)


def _out_size(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int, ceil: bool) -> int:
    span = size + begin + end - dilation * (kernel - 1) - 1
    if span < 0:
        raise InferenceError(f"the window ({kernel} taps, dilation {dilation}) does not fit the padded input {size}")
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + begin:  # the last window would start in the end padding
        out -= 1
    return out


def geometry(shape: Shape, attrs: dict) -> tuple[Axis, Axis]:
    """The height and width axes of a pool over an NCHW ``shape``.

    Raises
    ------
    InferenceError
        Not rank 4, attribute lists of the wrong length, a kernel, stride or
        dilation below 1, negative pads, or a window that does not fit the
        padded input.
    """
    if len(shape) != 4:
        raise InferenceError(f"pooling needs an NCHW input of rank 4, got {list(shape)}")
    for key, length in (("kernel_shape", 2), ("strides", 2), ("pads", 4), ("dilations", 2)):
        if len(attrs[key]) != length:
            raise InferenceError(f"{key} must have {length} numbers, got {attrs[key]}")
    kh, kw = attrs["kernel_shape"]
    strides = attrs["strides"]
    if min(kh, kw, *strides, *attrs["dilations"]) < 1 or min(attrs["pads"]) < 0:
        raise InferenceError("kernel_shape, strides and dilations must be >= 1 and pads >= 0")
    pt, pl, pb, pr = attrs["pads"]
    axes = []
    for size, k, s, d, b, e in ((shape[2], kh, strides[0], attrs["dilations"][0], pt, pb),
                                (shape[3], kw, strides[1], attrs["dilations"][1], pl, pr)):
        axes.append(Axis(size, k, s, d, b, e, _out_size(size, k, s, d, b, e, bool(attrs["ceil_mode"]))))
    return axes[0], axes[1]


def output_shape(shape: Shape, attrs: dict) -> Shape:
    """NCHW output shape of a pool (see :func:`geometry` for the errors)."""
    h, w = geometry(shape, attrs)
    return (shape[0], shape[1], h.out, w.out)


def window_elements(attrs: dict) -> int:
    """Taps of one window (the work per output element)."""
    return math.prod(attrs["kernel_shape"])
