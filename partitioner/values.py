"""Constant tensors (format v1.1): graph inputs whose values the graph keeps.

Small values sit inline in the graph file, as an input's ``value`` (a number for
a scalar, nested lists otherwise). Large ones, such as weights, sit in a NumPy
``.npz`` side file that the graph names (``values: FILE.npz``, relative to the
graph file), one array per input name. NumPy's file format has no ``bfloat16``
or 8-bit floats, so those arrays are stored as their bit patterns (``uint16``,
``uint8``).

A graph stays usable without its side file: the inputs it would have given are
drawn at random, as for any input without a value, and the run report says so.
"""

from __future__ import annotations

import math
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import FLOATS, INTEGERS, cast_array, numpy_dtype
from .errors import GraphError
from .graph import Graph
from .ops import TensorType

#: Elements up to which a writer puts a constant inline; larger ones go to the side file.
INLINE_LIMIT = 1024

# how a dtype without a NumPy file type is stored in an .npz: as its bit pattern
_STORED_AS = {"bfloat16": np.dtype(np.uint16), "float8_e4m3fn": np.dtype(np.uint8), "float8_e5m2": np.dtype(np.uint8)}


def parse_inline(value: Any, t: TensorType) -> np.ndarray:
    """An input's inline ``value`` as an array of its shape and dtype.

    Raises
    ------
    ValueError
        The nesting is not the input's shape, an element is not a number (or a
        boolean, for ``bool``), or an integer does not fit the dtype.
    """
    if isinstance(value, np.ndarray):  # given through the Python API
        value = to_inline(value)
    array = np.array(value, dtype=object)
    if array.size == 0 and math.prod(t.shape) == 0 and array.shape != t.shape:
        array = np.empty(t.shape, dtype=object)  # an empty input's value is [] whatever its shape
    if array.shape != t.shape:
        raise ValueError(_ragged(value, t.shape) or
                         f"value has shape {list(array.shape)}, the input's shape is {list(t.shape)}")
    items = array.ravel().tolist()
    if t.dtype == "bool":
        if not all(isinstance(v, bool) for v in items):
            raise ValueError("a bool value holds true and false only")
        return np.array(items, dtype=bool).reshape(t.shape)
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
        raise ValueError("a value holds numbers only")
    if t.dtype in INTEGERS:
        info = np.iinfo(numpy_dtype(t.dtype))
        bad = next((v for v in items if not isinstance(v, int) or not info.min <= v <= info.max), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not an integer that {t.dtype} holds")
        return np.array(items, dtype=numpy_dtype(t.dtype)).reshape(t.shape)
    assert t.dtype in FLOATS
    return cast_array(np.array(items, dtype=np.float64).reshape(t.shape), t.dtype)


def _ragged(value: Any, shape: tuple[int, ...]) -> str | None:
    """Where the nested lists ``value``, of the right length, depart from ``shape``
    below the top (a list of another length, or one element where a list is due),
    or ``None``."""
    if not shape or not isinstance(value, (list, tuple)) or len(value) != shape[0]:
        return None
    stack = [("value", value, 0)]
    while stack:
        path, rows, depth = stack.pop()
        if depth + 1 == len(shape):
            continue
        want = shape[depth + 1]
        for i, row in enumerate(rows):
            where = f"{path}[{i}]"
            if not isinstance(row, (list, tuple)):
                return f"{where} is one element where the input's shape {list(shape)} has a list of {want}"
            if len(row) != want:
                return (f"{where} has {len(row)} element{'' if len(row) == 1 else 's'} where the input's shape "
                        f"{list(shape)} has {want}")
        stack += [(f"{path}[{i}]", row, depth + 1) for i, row in reversed(list(enumerate(rows)))]
    return None


def to_inline(array: np.ndarray) -> Any:
    """An array as an inline ``value``: nested lists of Python numbers. A float is
    written with the fewest digits that read back to the same value of its dtype
    (``0.1`` for float32's 0.1, not ``0.10000000149011612``)."""
    a = np.asarray(array)
    if a.ndim and not a.size:
        return []  # no elements, whatever the shape: parse_inline reads it back at the input's shape
    if a.dtype.kind == "b":
        return a.tolist()
    if a.dtype.kind in "iu":
        return a.tolist()  # Python ints, exact for uint64 too
    shortest = np.array([float(str(v)) for v in a.ravel()], dtype=np.float64)
    return shortest.reshape(a.shape).tolist()


def write_side_file(path: str | Path, values: dict[str, np.ndarray]) -> None:
    """Write ``values`` (input name -> array in the input's dtype) to an ``.npz``."""
    stored = {}
    for name, array in values.items():
        a = np.asarray(array)
        bits = next((b for d, b in _STORED_AS.items() if a.dtype == numpy_dtype(d)), None)
        stored[name] = a.view(bits) if bits is not None else a
    with open(path, "wb") as f:
        np.savez(f, **stored)


@dataclass
class Constants:
    """The values a graph gives its inputs, and where they came from.

    Attributes:
        values: input name -> array in the input's shape and dtype.
        inline: names whose value sits in the graph itself.
        from_file: names whose value came from the side file.
        missing: the side file the graph names, when it is not there.
    """

    values: dict[str, np.ndarray] = field(default_factory=dict)
    inline: tuple[str, ...] = ()
    from_file: tuple[str, ...] = ()
    missing: str | None = None


def provenance(graph: Graph) -> dict:
    """Where each input's value comes from in a run: ``inline`` and ``file`` (names
    given by the graph), ``seeded`` (the rest), and ``missing`` (the side file the
    graph names, when it is not there); and how each ``custom`` op's result is
    made: ``hooked`` (through a semantics hook: ``via`` names it per op,
    ``onnx.reference`` for an ONNX op's kept node, ``importer`` for one its
    importer attached in memory) or ``drawn`` (random data; ``no_onnx`` lists those
    whose kept ONNX node could run were onnx installed)."""
    found = constants(graph)
    customs = [name for name, op in graph.ops.items() if op.kind == "custom"]
    hooked = [c for c in customs if c in graph.hooks]
    drawn = [c for c in customs if c not in graph.hooks]
    return {"inline": list(found.inline), "file": list(found.from_file),
            "seeded": [n for n in graph.inputs if n not in found.values], "missing": found.missing,
            "hooked": hooked, "drawn": drawn,
            "via": {c: getattr(graph.hooks[c], "via", "importer") for c in hooked},
            "no_onnx": [c for c in drawn if graph.ops[c].attrs.get("onnx")]}


def _some(names: list[str]) -> str:
    """``a, b, c, ...``: the first three names."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def provenance_text(graph: Graph, seed: int) -> str:
    """The run report's lines on values: ``inputs    2 constant values in the
    graph, ...``, and ``custom    ...`` when the graph has custom ops, naming those
    run through a semantics hook and those whose results were drawn."""
    p = provenance(graph)
    parts = []
    if p["inline"]:
        parts.append(f"{len(p['inline'])} constant value(s) in the graph")
    if p["file"]:
        parts.append(f"{len(p['file'])} from {graph.values_file}")
    if p["seeded"]:
        parts.append(f"{len(p['seeded'])} drawn at random (seed {seed})")
    missing = f"; {p['missing']} is missing, so the values it holds were drawn at random" if p["missing"] else ""
    lines = [f"inputs    {', '.join(parts) or 'none'}{missing}"]
    if p["hooked"] or p["drawn"]:
        custom = []
        for via, what in (("onnx.reference", "run through onnx.reference (their ONNX node)"),
                          ("importer", "run by their importer's semantics")):
            names = [c for c in p["hooked"] if p["via"][c] == via]
            if names:
                custom.append(f"{len(names)} {what}: {_some(names)}")
        others = [c for c in p["hooked"] if p["via"][c] not in ("onnx.reference", "importer")]
        if others:
            custom.append(f"{len(others)} run by a semantics hook: {_some(others)}")
        if p["drawn"]:
            custom.append(f"{len(p['drawn'])} without semantics, whose results were drawn at random "
                          f"({_some(p['drawn'])})")
        if p["no_onnx"]:
            custom.append(f"{len(p['no_onnx'])} of them keep an ONNX node that runs once onnx is installed")
        lines.append(f"custom    {'; '.join(custom)}; the plan runs on those results")
    return "".join(line + "\n" for line in lines)


def read_side_file(path: Path, inputs: dict[str, TensorType]) -> dict[str, np.ndarray]:
    """The arrays of a side file, checked against the inputs they name.

    Raises
    ------
    GraphError
        The file is not an ``.npz``, or an array names no input, or has another
        shape or dtype than its input.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            stored = {name: archive[name] for name in archive.files}
    except OSError as exc:
        raise GraphError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (ValueError, zipfile.BadZipFile):  # NumPy's message would suggest unpickling: never
        raise GraphError(f"{path}: not a NumPy .npz file") from None
    except (zlib.error, EOFError, NotImplementedError, RuntimeError, struct.error, KeyError,
            UnicodeDecodeError, OverflowError, MemoryError) as exc:  # a member that does not decompress or parse
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise GraphError(f"{path}: not a NumPy .npz file: corrupt data ({detail})") from None
    values = {}
    for name, array in stored.items():
        if not isinstance(array, np.ndarray):  # NumPy hands back the bytes of a member that is no .npy
            raise GraphError(f"{path}: not a NumPy .npz file: member '{name}' is no .npy array")
        if name not in inputs:
            raise GraphError(f"{path}: array '{name}' names no graph input")
        t = inputs[name]
        want = _STORED_AS.get(t.dtype, numpy_dtype(t.dtype))
        if array.shape != t.shape or array.dtype != want:
            stored = f" (stored as {want})" if t.dtype in _STORED_AS else ""
            raise GraphError(f"{path}: array '{name}' is {array.dtype}{list(array.shape)}; its input is "
                             f"{t.dtype}{list(t.shape)}{stored}")
        values[name] = array.view(numpy_dtype(t.dtype)) if t.dtype in _STORED_AS else array
    return values


def side_file_path(graph_path: str | None, name: str) -> Path:
    """Where a graph's ``values`` file is: beside the graph file (or in the current
    folder for a graph that came from no file)."""
    return (Path(graph_path).parent if graph_path else Path.cwd()) / name


def constants(graph: Graph) -> Constants:
    """The values ``graph`` gives its inputs: inline ones, and the side file's when
    it is there (read once per graph).

    Raises
    ------
    GraphError
        The side file is unreadable, or an array in it does not match its input,
        or gives an input that also has an inline value.
    """
    if "constants" not in graph.cache:
        inline = dict(graph.values)
        found = Constants(inline, tuple(inline))
        if graph.values_file:
            path = side_file_path(graph.path, graph.values_file)
            if not path.is_file():
                found.missing = str(path)
            else:
                from_file = read_side_file(path, graph.inputs)
                twice = sorted(set(from_file) & set(inline))
                if twice:
                    raise GraphError(f"{path}: input '{twice[0]}' has a value in the graph file too")
                found.values.update(from_file)
                found.from_file = tuple(from_file)
        graph.cache["constants"] = found
    return graph.cache["constants"]
